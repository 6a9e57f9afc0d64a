"""FileSource over the three kinds of file, and dead letters written to a file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oahu.connectors.dead_letter import DeadLetter, DeadLetterFile, read_dead_letters
from oahu.connectors.file_source import FileSource
from oahu.connectors.messages import Constraint, DecodeError, decode, decode_batch, encode_json
from oahu.connectors.source import Source
from oahu.streams.stream_file import ConstraintStream, write_jsonl


def pair_stream(n: int = 7) -> ConstraintStream:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(10, 3)).astype(np.float32)
    return ConstraintStream(
        X,
        y=np.arange(10) % 3,
        dev_idx=np.arange(8),
        test_idx=[8, 9],
        kind="pair",
        constraints=rng.integers(0, 8, (n, 2)),
        similar=rng.random(n) < 0.5,
    )


@pytest.fixture(params=[".npz", ".jsonl"])
def stream_path(request, tmp_path):
    path = tmp_path / f"pairs{request.param}"
    stream = pair_stream()
    stream.save(path) if request.param == ".npz" else write_jsonl(stream, path)
    return path, stream


def test_reads_a_stream_file_in_order(stream_path) -> None:
    path, stream = stream_path
    src = FileSource(path)
    assigned: list[list[int]] = []
    src.listen(assigned.append, on_revoke=lambda partitions: None)
    assert isinstance(src, Source) and src.ready and src.assignment == [0]
    first = src.poll(max_records=3)
    assert assigned == [[0]]  # announced once, at the first poll, like a Kafka assignment
    assert [r.offset for r in first] == [0, 1, 2] and not src.exhausted
    assert {(r.source, r.partition) for r in first} == {(str(path), 0)}
    rest = src.poll(max_records=100)
    assert [r.offset for r in rest] == [3, 4, 5, 6] and src.exhausted
    assert src.poll() == [] and src.lag() == {0: 0}
    (batch,) = decode_batch([r.value for r in first + rest]).batches
    np.testing.assert_array_equal(batch.ids, stream.constraints)
    np.testing.assert_array_equal(batch.similar, stream.similar)
    assert assigned == [[0]]
    # the stream's items, under their indices, for the store that resolves them
    ids, X, y = src.items()
    np.testing.assert_array_equal(ids, np.arange(10))
    np.testing.assert_array_equal(X, stream.X)
    np.testing.assert_array_equal(y, stream.y)


def test_seek_restarts_from_an_offset(stream_path) -> None:
    path, stream = stream_path
    src = FileSource(path)
    src.poll(max_records=100)
    src.seek(5)
    assert not src.exhausted and src.position == 5
    records = src.poll(max_records=100)
    assert [r.offset for r in records] == [5, 6]
    assert decode(records[0].value).ids == tuple(str(i) for i in stream.constraints[5])
    src.seek({0: 2})
    assert src.lag() == {0: 5}
    assert src.poll(max_records=1)[0].offset == 2
    src.seek(100)  # past the end: nothing left
    assert src.poll() == [] and src.exhausted
    with pytest.raises(ValueError):
        src.seek(-1)
    assert src.committed(0) is None
    assert src.commit({0: 3}) and src.committed(0) == 3
    src.close()


def test_message_per_line_file(tmp_path) -> None:
    msgs = [
        encode_json(Constraint("triplet", ids=("a", "b", "c"))),
        b'{"v": 1, "kind": "nope"}',
        encode_json(Constraint("pair", x=np.ones((2, 2), np.float32), similar=False)),
    ]
    path = tmp_path / "messages.jsonl"
    path.write_bytes(msgs[0] + b"\n\n" + msgs[1] + b"\n" + msgs[2] + b"\n")
    src = FileSource(path)
    assert src.items() is None  # messages carry no items of their own
    records = src.poll(max_records=10)
    assert [(r.offset, r.value) for r in records] == list(enumerate(msgs))
    assert src.exhausted and src.lag() == {0: 0}
    src.seek(2)
    assert [r.offset for r in src.poll()] == [2]
    with pytest.raises(DecodeError):
        decode(records[1].value)


def test_dead_letter_file_records(tmp_path) -> None:
    path = tmp_path / "dead.jsonl"
    sink = DeadLetterFile(path)
    src_records = FileSource(_bad_lines(tmp_path)).poll()
    for record in src_records:
        try:
            decode(record.value)
        except DecodeError as error:
            sink.write(DeadLetter.from_error(error, record, ts=10.0))
    sink.close()
    letters = read_dead_letters(path)
    assert [(d.reason, d.offset, d.value) for d in letters] == [
        ("bad_kind", 0, b'{"v":1,"kind":"quad"}'),
        ("unknown_version", 2, b'{"v":3}'),
        ("bad_kind", 3, b'{"v":1}'),
    ]
    assert sink.counts == {"bad_kind": 2, "unknown_version": 1}
    raw = json.loads(path.read_text().splitlines()[0])
    assert raw["value_b64"] == "eyJ2IjoxLCJraW5kIjoicXVhZCJ9" and raw["ts"] == 10.0
    assert raw["source"] == str(tmp_path / "bad.jsonl") and raw["partition"] == 0
    # appending: a second sink on the same file keeps the earlier letters
    again = DeadLetterFile(path)
    again.write(letters[0])
    again.close()
    assert len(read_dead_letters(path)) == 4


def _bad_lines(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = encode_json(Constraint("pair", ids=("1", "2"), similar=True))
    path.write_bytes(b'{"v":1,"kind":"quad"}\n' + good + b'\n{"v":3}\n{"v":1}\n')
    return path


@pytest.mark.parametrize("suffix", [".npz", ".jsonl"])
def test_a_cross_modal_stream_file_reads_as_version_2_messages_in_file_order(tmp_path, suffix):
    from oahu.streams.cross_modal import PAIR, write_cross_modal_jsonl
    from oahu.streams.cross_modal_protocol import build_cross_modal_stream
    from oahu.streams.views import TwoViews

    rng = np.random.default_rng(0)
    views = TwoViews(("img", "txt"), (rng.random((30, 4)), rng.random((30, 2))), np.arange(30) % 3)
    stream = build_cross_modal_stream(views, 25, seed=1, within_share=0.2)
    path = tmp_path / f"cross{suffix}"
    stream.save(path) if suffix == ".npz" else write_cross_modal_jsonl(stream, path)
    source = FileSource(path)
    assert source.items() is None and source.cross_modal is not None

    def rows(records):  # (kind, ids, modalities, similar) of each record, decoded one by one
        out = []
        for r in records:
            c = decode(r.value)
            out.append((c.kind, tuple(map(int, c.ids)), c.modalities, c.similar))
        return out

    read = []
    while not source.exhausted:
        read += source.poll(7)
    names = stream.modalities
    expected = []
    for i in range(len(stream)):
        pair = stream.kinds[i] == PAIR
        k = 2 if pair else 3
        expected.append((
            "pair" if pair else "triplet",
            tuple(int(o) for o in stream.constraints[i, :k]),
            tuple(names[m] for m in stream.modality[i, :k]),
            bool(stream.similar[i]) if pair else None,
        ))  # fmt: skip
    assert [r.offset for r in read] == list(range(25))
    assert rows(read) == expected
    assert all(decode_batch([r.value]).batches[0].modalities is not None for r in read)
    source.seek(11)
    assert rows(source.poll(100)) == expected[11:] and source.lag() == {0: 0}


@pytest.fixture(scope="module")
def skip_files(tmp_path_factory):
    """The same 9 triplets as a stream file (indexed) and as a file of JSON messages (read
    through)."""
    directory = tmp_path_factory.mktemp("skip")
    rows = [[i % 3, (i + 1) % 3, (i + 2) % 3] for i in range(9)]
    stream = ConstraintStream(np.eye(3), [0, 1, 2], [0, 1, 2], [], "triplet", rows)
    npz = directory / "s.npz"
    stream.save(npz)
    lines = directory / "messages.jsonl"
    lines.write_bytes(b"".join(encode_json(Constraint("triplet", ids=tuple(map(str, r)))) + b"\n"
                               for r in rows))  # fmt: skip
    return {"npz": npz, "lines": lines}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["npz", "lines"]), first=st.integers(0, 9), to=st.integers(0, 12))
def test_skipping_forward_hands_out_nothing_before_the_offset(skip_files, kind, first, to):
    source = FileSource(skip_files[kind])
    assert [r.offset for r in source.poll(first)] == list(range(first))
    source.skip_to(to)  # an offset behind the position changes nothing
    position = max(first, min(to, 9))
    assert source.position == position
    assert source.exhausted == (to > 9)  # only a skip past the end says the file ended there
    assert [r.offset for r in source.poll(20)] == list(range(position, 9))
    assert source.exhausted
    source.close()
