"""Stream files: .npz and JSON Lines round trips, incremental reading, clear errors."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from oahu.streams.benchmark_stream import build_stream
from oahu.streams.dataset import Dataset
from oahu.streams.stream_file import (
    ConstraintStream,
    iter_jsonl,
    load_stream,
    read_jsonl,
    write_jsonl,
)


def _pair_stream() -> ConstraintStream:
    # Arbitrary float32 mantissas, tiny and huge magnitudes: all must survive the text format.
    X = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    X[0] = [np.float32(0.1), np.float32(1e-30), np.float32(3e38)]
    return ConstraintStream(
        X,
        y=[0, 0, 1, 1, 2, 2],
        dev_idx=[4, 0, 1, 2],
        test_idx=[5, 3],
        kind="pair",
        constraints=[[0, 1], [1, 2], [4, 0]],
        similar=np.array([True, False, False]),
        meta={"dataset": "hand", "note": "ünïcode"},
    )


def _assert_same(a: ConstraintStream, b: ConstraintStream) -> None:
    for name in ("X", "y", "dev_idx", "test_idx", "constraints"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype and left.shape == right.shape, name
        np.testing.assert_array_equal(left, right, err_msg=name)
    assert a.kind == b.kind
    assert (a.similar is None) == (b.similar is None)
    if a.similar is not None:
        assert a.similar.dtype == b.similar.dtype == np.bool_
        np.testing.assert_array_equal(a.similar, b.similar)


@pytest.fixture(scope="module")
def digits_stream() -> ConstraintStream:
    return build_stream("digits", n_constraints=300, seed=1)


# ---------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("which", ["digits", "pair"])
def test_npz_round_trip_is_exact(tmp_path, digits_stream, which):
    stream = digits_stream if which == "digits" else _pair_stream()
    stream.save(tmp_path / "s.npz")
    loaded = ConstraintStream.load(tmp_path / "s.npz")
    _assert_same(stream, loaded)
    assert loaded.meta == {**stream.meta, "format_version": 1}


@pytest.mark.parametrize("which", ["digits", "pair"])
def test_jsonl_round_trip_is_exact(tmp_path, digits_stream, which):
    stream = digits_stream if which == "digits" else _pair_stream()
    write_jsonl(stream, tmp_path / "s.jsonl")
    loaded = read_jsonl(tmp_path / "s.jsonl")
    _assert_same(stream, loaded)
    assert loaded.meta == stream.meta


def test_jsonl_records_follow_the_documented_schema(tmp_path):
    path = tmp_path / "s.jsonl"
    write_jsonl(_pair_stream(), path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {
        "type": "header",
        "version": 1,
        "kind": "pair",
        "n_items": 6,
        "n_features": 3,
        "n_constraints": 3,
        "meta": {"dataset": "hand", "note": "ünïcode"},
    }
    # Development items first, in dev_idx order, then test items.
    assert [(r["id"], r["split"], r["label"]) for r in lines[1:7]] == [
        (4, "dev", 2), (0, "dev", 0), (1, "dev", 0), (2, "dev", 1), (5, "test", 2), (3, "test", 1),
    ]  # fmt: skip
    assert lines[2]["x"] == [0.10000000149011612, 1.0000000031710769e-30, 3.0000000054977558e38]
    assert lines[7:] == [
        {"type": "pair", "u": 0, "v": 1, "similar": True},
        {"type": "pair", "u": 1, "v": 2, "similar": False},
        {"type": "pair", "u": 4, "v": 0, "similar": False},
    ]


def test_build_stream_protocols_and_meta():
    ds = Dataset("tiny", np.eye(8, dtype=np.float32), np.arange(8) % 2)
    closure = build_stream(ds, n_constraints=6, seed=0, kind="pair")
    assert closure.meta == {
        "format_version": 1,
        "dataset": "tiny",
        "seed": 0,
        "protocol": "closure",
        "n_constraints": 6,
        "n_seeds": closure.meta["n_seeds"],
    }
    assert 3 <= closure.meta["n_seeds"] <= 6 and len(closure) == 6
    random = build_stream(ds, n_constraints=5, seed=0, kind="triplet", protocol="random")
    assert random.meta["n_seeds"] == 5 and random.similar is None
    assert np.isin(random.constraints, random.dev_idx).all()
    with pytest.raises(ValueError, match="protocol: must be one of 'closure', 'random', got 'tr"):
        build_stream(ds, 4, seed=0, protocol="transitive")
    with pytest.raises(ValueError, match=r"kind: must be one of 'triplet', .*, got 'quintuplet'"):
        build_stream(ds, 4, seed=0, kind="quintuplet")
    # A known kind, but not one the paper's protocol draws: the error says where it comes from.
    with pytest.raises(ValueError, match=r"kind: the paper's protocol builds triplet or pair "
                       r"streams, got 'quadruplet'; .* label hierarchy"):  # fmt: skip
        build_stream(ds, 4, seed=0, kind="quadruplet")


# ---------------------------------------------------------------------------- access
def test_batch_returns_the_features_of_a_slice(digits_stream):
    anchors, positives, negatives = digits_stream.batch(10, 14)
    c = digits_stream.constraints[10:14]
    np.testing.assert_array_equal(anchors, digits_stream.X[c[:, 0]])
    np.testing.assert_array_equal(positives, digits_stream.X[c[:, 1]])
    np.testing.assert_array_equal(negatives, digits_stream.X[c[:, 2]])
    u, v, similar = _pair_stream().batch(1, 3)
    assert u.shape == v.shape == (2, 3) and similar.tolist() == [False, False]


def test_iter_batches_covers_the_stream_in_order(digits_stream):
    sizes = [len(b[0]) for b in digits_stream.iter_batches(128)]
    assert sizes == [128, 128, 44]
    first = np.concatenate([b[0] for b in digits_stream.iter_batches(128)])
    np.testing.assert_array_equal(first, digits_stream.X[digits_stream.constraints[:, 0]])
    with pytest.raises(ValueError, match="batch_size: must be an integer >= 1, got 0"):
        next(digits_stream.iter_batches(0))
    with pytest.raises(ValueError, match=r"batch_size: must be an integer >= 1, got 2\.5"):
        next(digits_stream.iter_batches(2.5))


# ---------------------------------------------------------------------------- incremental jsonl
def test_iter_jsonl_yields_records_up_to_a_corrupt_line(tmp_path, digits_stream):
    path = tmp_path / "s.jsonl"
    write_jsonl(digits_stream, path)
    n_lines = 1 + digits_stream.n_items + len(digits_stream)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"type": "triplet", "anchor": 1, "posi\n')
    # The first records read fine without touching the end of the file.
    header, first_item = itertools.islice(iter_jsonl(path), 2)
    assert header["n_constraints"] == 300 and first_item["id"] == digits_stream.dev_idx[0]
    assert first_item["x"].dtype == np.float32
    records = []
    with pytest.raises(ValueError, match=rf"s\.jsonl:{n_lines + 1}: not valid JSON"):
        for record in iter_jsonl(path):
            records.append(record)
    assert len(records) == n_lines
    last = records[-1]
    assert [last["anchor"], last["positive"], last["negative"]] == digits_stream.constraints[
        -1
    ].tolist()


def test_a_truncated_jsonl_file_is_reported(tmp_path):
    path = tmp_path / "s.jsonl"
    write_jsonl(_pair_stream(), path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")
    with pytest.raises(ValueError, match="header announced n_constraints=3, found 2"):
        read_jsonl(path)
    path.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no header record"):
        read_jsonl(path)


def _header(**changes) -> dict:
    header = {"type": "header", "version": 1, "kind": "triplet", "n_items": 3, "n_features": 2,
              "n_constraints": 1, "meta": {}}  # fmt: skip
    return {**header, **changes}


_ITEMS = [
    {"type": "item", "id": i, "x": [0.5, i], "label": i % 2, "split": "dev"} for i in range(3)
]
_TRIPLET = {"type": "triplet", "anchor": 0, "positive": 2, "negative": 1}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([_ITEMS[0]], r":1: field 'type': expected header, got 'item'"),
        ([_header(version=2)], r":1: field 'version': this reader reads 1, got 2"),
        ([_header(kind="quad")], r":1: field 'kind': expected one of triplet, pair"),
        ([_header(n_items=-1)], r":1: field 'n_items': expected a non-negative integer"),
        ([_header(), {**_ITEMS[0], "id": 3}], r":2: field 'id': item id 3 is outside \[0, 3\)"),
        ([_header(), {**_ITEMS[0], "id": "0"}], r":2: field 'id': expected an integer"),
        ([_header(), {**_ITEMS[0], "x": [1.0]}], r":2: field 'x': expected 2 values"),
        ([_header(), {**_ITEMS[0], "x": ["a", 1]}], r":2: field 'x': expected a list of finite"),
        ([_header(), {**_ITEMS[0], "x": [None, 1]}], r":2: field 'x': expected a list of finite"),
        ([_header(), {**_ITEMS[0], "x": [1e39, 1]}], r":2: field 'x': a value overflows float32"),
        ([_header(), {**_ITEMS[0], "split": "val"}], r":2: field 'split': expected one of dev"),
        ([_header(), _ITEMS[0], _ITEMS[0]], r":3: field 'id': item 0 is defined twice"),
        ([_header(), {"type": "item", "id": 0}], r":2: field 'x' is missing from the item"),
        ([_header(), *_ITEMS, {"type": "pair", "u": 0, "v": 1, "similar": True}],
         r":5: field 'type': expected item or triplet, got 'pair'"),
        ([_header(), *_ITEMS[:2], _TRIPLET], r":4: field 'positive': item 2 has no item record"),
        ([_header(), *_ITEMS, {**_TRIPLET, "negative": True}], r":5: field 'negative': expected"),
        ([_header(), *_ITEMS, [1, 2]], r":5: expected a JSON object"),
    ],
)  # fmt: skip
def test_malformed_records_name_the_line_and_field(tmp_path, records, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        list(iter_jsonl(path))


def test_blank_lines_and_unknown_fields_are_tolerated(tmp_path):
    path = tmp_path / "ok.jsonl"
    records = [_header(comment="hi"), *_ITEMS, {**_TRIPLET, "source": "clicks"}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    stream = read_jsonl(path)
    assert stream.constraints.tolist() == [[0, 2, 1]]
    np.testing.assert_array_equal(stream.X[:, 1], [0, 1, 2])


# ---------------------------------------------------------------------------- bad npz files
def _save_arrays(path: Path, **changes) -> Path:
    arrays = {
        "X": np.zeros((4, 2), np.float32),
        "y": np.array([0, 0, 1, 1]),
        "dev_idx": np.array([0, 1, 2]),
        "test_idx": np.array([3]),
        "kind": np.array("triplet"),
        "constraints": np.array([[0, 1, 2]]),
        "meta": np.array(json.dumps({"format_version": 1})),
        **changes,
    }
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"constraints": None}, r"missing field\(s\) constraints"),
        ({"meta": np.array(json.dumps({"format_version": 2}))}, "format_version: .* has 2"),
        ({"meta": np.array("{not json")}, "meta: .* holds no JSON object"),
        ({"constraints": np.array([[0, 1, 7]])}, r"constraints: item indices must lie in \[0, 4\)"),
        ({"constraints": np.array([[0, 1, 3]])}, "constraints: item 3 is not a development item"),
        ({"constraints": np.array([[0, 1]])}, r"constraints: triplet streams need shape \(N, 3\)"),
        ({"constraints": np.array([[0.0, 1, 2]])}, "constraints: expected integer item indices"),
        ({"test_idx": np.array([2, 3])}, "dev_idx/test_idx: must partition .* item 2 is listed 2"),
        ({"y": np.array([0, 1])}, r"y: expected 4 labels"),
        ({"kind": np.array("pair")}, r"constraints: pair streams need shape \(N, 2\)"),
        ({"similar": np.array([True])}, "similar: triplet streams have no similar flags"),
    ],
)  # fmt: skip
def test_invalid_npz_files_name_the_field(tmp_path, changes, message):
    path = _save_arrays(tmp_path / "bad.npz", **changes)
    with pytest.raises(ValueError, match=message):
        ConstraintStream.load(path)


def test_files_that_are_not_stream_files(tmp_path):
    text = tmp_path / "notes.npz"
    text.write_text("hello", encoding="utf-8")
    with pytest.raises(ValueError, match="not a stream file"):
        ConstraintStream.load(text)
    with pytest.raises(FileNotFoundError):
        ConstraintStream.load(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")


_HEADER_LINE = json.dumps({"type": "header", "version": 1, "kind": "triplet",
    "n_items": 1, "n_features": 1, "n_constraints": 0, "meta": {}}).encode() + b"\n"  # fmt: skip
# How a garbage file may start: as nothing known, as a zip archive, as JSON, as blank lines,
# as a whole JSON Lines header: each reaches another reader before the garbage.
_STARTS = [b"", b"PK\x03\x04", b"{", b"\n\n", b'  {"type": ', _HEADER_LINE]


@settings(max_examples=300, deadline=None)
@given(start=st.sampled_from(_STARTS), garbage=st.binary(max_size=400))
@example(start=b"", garbage=bytes([0x78, 0x8C, 0x01, 0x02]))
@example(start=_HEADER_LINE, garbage=b"\x8c\n")
def test_any_garbage_file_is_a_value_error_naming_the_file(start: bytes, garbage: bytes):
    """Garbage, however it starts, is a plain ValueError naming the file: never a
    UnicodeDecodeError (which names neither file nor format), a BadZipFile or a JSONDecodeError."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.npz"
        path.write_bytes(start + garbage)
        with pytest.raises(ValueError) as refused:
            load_stream(path)
    assert type(refused.value) is ValueError
    assert str(path) in str(refused.value)


def test_a_file_of_random_bytes_says_what_a_stream_file_is(tmp_path):
    path = tmp_path / "x.npz"
    path.write_bytes(bytes([0x78, 0x8C]) + bytes(range(40)))
    with pytest.raises(ValueError) as refused:
        load_stream(path)
    assert str(refused.value) == (
        f"{path}: not an oahu stream file (expected a .npz stream written by `oahu make-stream`, "
        "or JSON Lines); it starts with b'x\\x8c\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08\\t"
        "\\n\\x0b\\x0c\\r'…"
    )
    # JSON at first, then bytes that are no UTF-8: the reader's UnicodeDecodeError, made plain.
    path.write_bytes(_HEADER_LINE + b'{"type": "\x8c"}\n')
    with pytest.raises(ValueError) as refused:
        load_stream(path)
    assert type(refused.value) is ValueError
    assert str(refused.value) == (
        f"{path}: not an oahu stream file (expected a .npz stream written by `oahu make-stream`, "
        "or JSON Lines; JSON Lines is UTF-8 text, which this is not: invalid start byte); it "
        'starts with b\'{"type": "header\'…'
    )


def test_pair_streams_need_similar_flags():
    with pytest.raises(
        ValueError, match=r"similar: pair streams need a bool array of shape \(1,\)"
    ):
        ConstraintStream(np.eye(2), [0, 1], [0, 1], [], "pair", [[0, 1]])
    with pytest.raises(ValueError, match="meta: must be a JSON-serialisable dict"):
        ConstraintStream(np.eye(2), [0, 1], [0, 1], [], "pair", [[0, 1]], [False], {"x": {1j}})


def test_save_replaces_atomically_and_leaves_no_temp_files(tmp_path, digits_stream):
    path = tmp_path / "s.npz"
    _pair_stream().save(path)
    digits_stream.save(path)
    assert len(ConstraintStream.load(path)) == 300
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError):
        digits_stream.save(tmp_path / "taken")  # cannot replace a directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npz", "taken"]
