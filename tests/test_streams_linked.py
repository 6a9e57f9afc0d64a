"""Linked objects (streams/linked.py): the user's .npz of two modalities' objects and the links
between them, the CSLP protocol drawn from links, and the stream files of linked objects
(format version 2) beside those of labelled objects (version 1, unchanged)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_support import save_npz
from test_streams_cross_modal import ARRAYS, assert_a_corrupted_line_is_named, assert_same

from oahu.streams import cross_modal_jsonl
from oahu.streams.cross_modal import (
    PAIR,
    TRIPLET,
    CrossModalStream,
    load_cross_modal_stream,
    read_cross_modal_jsonl,
    write_cross_modal_jsonl,
)
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.jsonl import check_fields
from oahu.streams.linked import (
    LinkedObjects,
    draw_linked,
    load_cross_modal_data,
    load_linked,
    split_linked,
)
from oahu.streams.views import TwoViews

LINKED_ARRAYS = ("links", "dev_idx_b", "test_idx_b")


def grouped_links(
    sizes: tuple[int, int] = (120, 80),
    dims: tuple[int, int] = (10, 6),
    groups: int = 4,
    p: float = 0.5,
    seed: int = 0,
) -> LinkedObjects:
    """Objects of ``groups`` hidden groups in each modality (object i of a modality in group
    i % groups), each near its group's centre, and links only within a group, each pair of one
    group linked with probability ``p``: a structure a learner can find from the links."""
    rng = np.random.default_rng(seed)
    group = [np.arange(n) % groups for n in sizes]
    X = tuple(
        2 * rng.normal(size=(groups, d))[g] + rng.normal(size=(len(g), d))
        for g, d in zip(group, dims, strict=True)
    )
    links = np.argwhere((group[0][:, None] == group[1][None, :]) & (rng.random(sizes) < p))
    return LinkedObjects(("drug", "target"), X, links, dataset="grouped")  # type: ignore[arg-type]


def assert_same_linked(a: CrossModalStream, b: CrossModalStream) -> None:
    """Two streams of linked objects hold the same objects, links, splits and constraints."""
    assert a.y is None and b.y is None
    assert_same(a, b, (*ARRAYS[1:], *LINKED_ARRAYS))


# ---------------------------------------------------------------------- the loader
def test_load_linked_reads_each_modalitys_objects_and_the_links(tmp_path):
    XA, XB = np.arange(15.0).reshape(5, 3), np.arange(6.0).reshape(3, 2)
    links = np.array([[4, 0], [0, 2], [1, 2]], dtype=np.int32)
    path = save_npz(tmp_path / "drugs.npz", XA=XA, XB=XB, links=links,
                 names=np.array(["drug", "target"]))  # fmt: skip
    objects = load_linked(path)
    assert objects.names == ("drug", "target") and objects.dataset == "drugs"
    assert objects.sizes == (5, 3) and objects.dims == (3, 2) and objects.n_links == 3
    assert objects.links.dtype == np.int64 and objects.links.tolist() == [[4, 0], [0, 2], [1, 2]]
    np.testing.assert_array_equal(objects.X[0], XA.astype(np.float32))
    np.testing.assert_array_equal(objects.X[1], XB.astype(np.float32))
    unnamed = load_linked(save_npz(tmp_path / "u.npz", XA=XA, XB=XB, links=links))
    assert unnamed.names == ("a", "b")


_GOOD = {"XA": np.zeros((3, 2)), "XB": np.ones((4, 5)), "links": np.array([[0, 0], [2, 3]])}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"XB": None}, "missing array 'XB'; linked data needs XA and XB"),
        (
            {"links": None},
            "missing array 'links'; linked data needs XA and XB (the objects of each modality) "
            "and links",
        ),
        (
            {"XA": np.zeros(3)},
            "array 'XA': expected a 2-d array (n_objects, n_features), got shape (3,)",
        ),
        (
            {"links": np.array([0, 1, 2])},
            "array 'links': expected a 2-d array (n_links, 2) of (row of XA, row of XB), got "
            "shape (3,)",
        ),
        ({"links": np.zeros((2, 3), int)}, "array 'links': expected a 2-d array (n_links, 2)"),
        (
            {"links": np.array([[0.0, 0.0]])},
            "array 'links': expected integer rows of XA and XB, got dtype float64",
        ),
        (
            {"XB": np.array([[1.0] * 5, [1.0] * 5, [1, 1, np.nan, 1, 1], [1.0] * 5])},
            "array 'XB': non-finite value nan at row 2, column 2",
        ),
        (
            {"XA": np.array([[0.0, 0], [0, np.inf], [0, 0]])},
            "array 'XA': non-finite value inf at row 1, column 1",
        ),
        (
            {"links": np.array([[0, 0], [2, 3], [1, 4]])},
            "array 'links': link 2 (row 2), column 1: 4 is not a row of XB, which has rows [0, 4)",
        ),
        (
            {"links": np.array([[0, 0], [-1, 3]])},
            "array 'links': link 1 (row 1), column 0: -1 is not a row of XA, which has rows [0, 3)",
        ),
        (
            {"links": np.array([[0, 0], [2, 3], [1, 1], [2, 3]])},
            "array 'links': link 3 repeats link 1: (2, 3); each linked pair once",
        ),
        ({"links": np.zeros((0, 2), int)}, "array 'links': no links (shape (0, 2))"),
        (
            {"XB": np.ones((1, 5)), "links": np.array([[0, 0]])},
            "array 'XB': 1 object; the protocol splits each modality's objects 1:1 into "
            "development and test objects, which takes at least 2",
        ),
        ({"names": np.array(["a", "a"])}, "array 'names': expected the two views' names"),
        ({"y": np.array([0, 1, 0])}, "holds class labels (array 'y'): paired views"),
    ],
)
def test_load_linked_errors_name_the_file_the_array_and_the_place(tmp_path, change, message):
    arrays = {k: v for k, v in {**_GOOD, **change}.items() if v is not None}
    path = save_npz(tmp_path / "l.npz", **arrays)
    with pytest.raises(ValueError) as e:
        load_linked(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.tuples(st.integers(2, 6), st.integers(2, 6)),
    n_links=st.integers(1, 8),
    corrupt=st.sampled_from(["range", "negative", "repeat"]),
    where=st.tuples(st.integers(0, 7), st.integers(0, 1)),
    seed=st.integers(0, 1000),
)
def test_a_bad_link_is_named_by_its_row_and_column(sizes, n_links, corrupt, where, seed):
    rng = np.random.default_rng(seed)
    pairs = np.argwhere(np.ones(sizes, dtype=bool))
    links = pairs[rng.permutation(len(pairs))[: min(n_links, len(pairs))]]
    arrays = {"XA": rng.random((sizes[0], 3)), "XB": rng.random((sizes[1], 2)), "links": links}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "l.npz"
        np.savez(path, **arrays)
        np.testing.assert_array_equal(load_linked(path).links, links)  # the clean links load
        row, column = where[0] % len(links), where[1]
        bad = links.copy()
        if corrupt == "repeat":
            bad = np.concatenate([links, links[row : row + 1]])
            expected = (
                f"array 'links': link {len(links)} repeats link {row}: "
                f"({links[row, 0]}, {links[row, 1]})"
            )
        else:
            bad[row, column] = sizes[column] + row if corrupt == "range" else -1 - row
            # An earlier link is never bad: the message names the one corrupted.
            expected = (
                f"array 'links': link {row} (row {row}), column {column}: {bad[row, column]} is "
                f"not a row of {('XA', 'XB')[column]}, which has rows [0, {sizes[column]})"
            )
        np.savez(path, **{**arrays, "links": bad})
        with pytest.raises(ValueError) as e:
            load_linked(path)
        assert str(e.value).startswith(f"{path}: {expected}")


def test_either_kind_of_file_is_told_by_its_arrays(tmp_path):
    XA, XB = np.eye(4), np.ones((4, 2))
    views = load_cross_modal_data(save_npz(tmp_path / "v.npz", XA=XA, XB=XB, y=[0, 1, 0, 1]))
    assert isinstance(views, TwoViews) and views.y.tolist() == [0, 1, 0, 1]
    objects = load_cross_modal_data(save_npz(tmp_path / "l.npz", XA=XA, XB=XB[:3], links=[[1, 2]]))
    assert isinstance(objects, LinkedObjects) and objects.sizes == (4, 3)
    both = save_npz(tmp_path / "both.npz", XA=XA, XB=XB, y=[0, 1, 0, 1], links=[[0, 0]])
    with pytest.raises(ValueError, match=r"both.npz: holds both 'y' \(class labels\) and 'links'"):
        load_cross_modal_data(both)
    neither = save_npz(tmp_path / "neither.npz", XA=XA, XB=XB)
    with pytest.raises(ValueError, match=r"neither.npz: holds neither 'y' nor 'links'.*holds "
                                         r"'XA', 'XB'"):  # fmt: skip
        load_cross_modal_data(neither)
    with pytest.raises(ValueError, match=r"p.csv: expected a .npz archive of arrays XA, XB and y "
                                         r"or links"):  # fmt: skip
        load_cross_modal_data(tmp_path / "p.csv")


# ---------------------------------------------------------------------- the split
def test_a_one_to_one_linking_keeps_every_link_in_the_split():
    # Object i of A is linked to object 7 - i of B only (an image and its caption): B's split
    # follows A's, so every link joins two development or two test objects.
    links = np.stack([np.arange(8), 7 - np.arange(8)], axis=1)
    for seed in range(5):
        (dev_a, test_a), (dev_b, test_b) = split_linked((8, 8), links, seed)
        assert len(dev_a) == len(test_a) == len(dev_b) == len(test_b) == 4
        assert sorted((7 - dev_a).tolist()) == dev_b.tolist()
        assert sorted((7 - test_a).tolist()) == test_b.tolist()


def test_each_modality_is_split_1_to_1_the_development_part_getting_the_odd_object():
    objects = grouped_links(sizes=(9, 6))
    (dev_a, test_a), (dev_b, test_b) = split_linked(objects.sizes, objects.links, 3)
    assert (len(dev_a), len(test_a), len(dev_b), len(test_b)) == (5, 4, 3, 3)
    assert sorted(np.r_[dev_a, test_a].tolist()) == list(range(9))
    assert sorted(np.r_[dev_b, test_b].tolist()) == list(range(6))
    with pytest.raises(ValueError, match="XB: 1 object; the protocol splits each modality"):
        split_linked((3, 1), np.array([[0, 0]]), 0)


# ---------------------------------------------------------------------- the protocol
def _link_set(links: np.ndarray) -> set[tuple[int, int]]:
    return set(map(tuple, links.tolist()))


def _a_b(s: CrossModalStream, rows: np.ndarray, cols: tuple[int, int]) -> np.ndarray:
    """The (object of A, object of B) of columns ``cols`` of constraints ``rows``."""
    c, m = s.constraints[rows], s.modality[rows]
    first_in_a = m[:, cols[0]] == 0
    return np.where(
        first_in_a[:, None],
        np.stack([c[:, cols[0]], c[:, cols[1]]], 1),
        np.stack([c[:, cols[1]], c[:, cols[0]]], 1),
    )


def check_link_protocol(s: CrossModalStream) -> None:
    """Every constraint of ``s`` is drawn from its development links as the protocol says."""
    all_links, dev_links = _link_set(s.links), _link_set(s.dev_links)
    test_links = _link_set(s.test_links)
    pair, triplet = s.kinds == PAIR, s.kinds == TRIPLET
    m = s.modality
    assert np.all(m[:, 0] != m[:, 1]) and np.all(m[triplet, 1] == m[triplet, 2])
    assert np.all(s.constraints[pair, 2] == -1) and not s.similar[triplet].any()
    # Every item is a development object of its modality: test objects are never seen.
    for code in (0, 1):
        items = (m == code) & (s.constraints >= 0)
        assert np.isin(s.constraints[items], s.dev_objects(code)).all()
    linked_pairs = _link_set(_a_b(s, np.flatnonzero(pair & s.similar), (0, 1)))
    assert linked_pairs <= dev_links and not linked_pairs & test_links
    unlinked_pairs = _link_set(_a_b(s, np.flatnonzero(pair & ~s.similar), (0, 1)))
    assert not unlinked_pairs & all_links
    t = np.flatnonzero(triplet)
    assert _link_set(_a_b(s, t, (0, 1))) <= dev_links  # anchor and positive
    assert not _link_set(_a_b(s, t, (0, 2))) & all_links  # anchor and negative


def test_every_constraint_comes_from_the_development_links():
    objects = grouped_links()
    s = build_cross_modal_stream(objects, 3000, 4, pair_share=0.4)
    check_link_protocol(s)
    assert s.is_linked and s.y is None and s.sizes == (120, 80)
    assert (len(s.dev_idx), len(s.dev_idx_b)) == (60, 40)
    meta = s.meta
    assert meta["format_version"] == 2 and meta["relevance"] == "links"
    assert (meta["n_pairs"], meta["n_triplets"], meta["n_within"]) == (1200, 1800, 0)
    assert meta["n_linked"] == int(s.similar.sum())
    assert meta["n_links"] == objects.n_links == len(s.links)
    assert meta["n_dev_links"] == len(s.dev_links) and meta["n_test_links"] == len(s.test_links)
    assert meta["n_unused_links"] == objects.n_links - len(s.dev_links) - len(s.test_links)
    # Half the pairs linked (1200 pairs, sd 17), the first item in A half the time (sd 27).
    assert 540 < meta["n_linked"] < 660 and 1400 < (s.modality[:, 0] == 0).sum() < 1600


def test_with_two_development_links_every_constraint_is_forced():
    # Object i of A linked to object i of B alone, four of each: two development links, (a, a')
    # and (b, b'); a linked pair is one of them, an unlinked pair (a, b') or (b, a'), and a
    # triplet anchored at a has the positive a' and the negative b'.
    objects = LinkedObjects(("img", "txt"), (np.eye(4), np.eye(4)), np.c_[0:4, 0:4])
    s = build_cross_modal_stream(objects, 200, 1)
    dev = s.dev_idx.tolist()
    assert s.dev_idx_b.tolist() == dev and s.dev_links.tolist() == [[dev[0]] * 2, [dev[1]] * 2]
    other = {dev[0]: dev[1], dev[1]: dev[0]}
    c = s.constraints
    pair = s.kinds == PAIR
    assert np.all(c[pair & s.similar, 0] == c[pair & s.similar, 1])
    assert all(other[u] == v for u, v in c[pair & ~s.similar, :2].tolist())
    assert all(p == a and n == other[a] for a, p, n in c[~pair].tolist())
    assert set(np.unique(c[c >= 0]).tolist()) == set(dev)


def test_the_same_arguments_give_the_same_stream():
    objects = grouped_links(seed=2)
    a, b = (build_cross_modal_stream(objects, 500, 7, 0.3) for _ in range(2))
    assert_same_linked(a, b)
    c = build_cross_modal_stream(objects, 500, 8, 0.3)
    assert not np.array_equal(a.constraints, c.constraints)
    assert not np.array_equal(a.dev_idx, c.dev_idx)


def test_an_object_linked_to_every_development_object_is_never_an_anchor_without_a_negative():
    # A's object 0 is linked to all of B: every triplet anchored in A has another anchor.
    links = np.array([[0, j] for j in range(6)] + [[i, i] for i in range(1, 6)])
    objects = LinkedObjects(("a", "b"), (np.eye(6), np.eye(6)), links)
    for seed in range(6):
        try:
            s = build_cross_modal_stream(objects, 300, seed, pair_share=0.0)
        except ValueError as e:  # a split may leave no test link: that is said, not hidden
            assert "no link joins two test objects" in str(e) or "development" in str(e)
            continue
        check_link_protocol(s)
        anchors_in_a = s.constraints[s.modality[:, 0] == 0, 0]
        if 0 in s.dev_idx:
            assert 0 not in anchors_in_a


def test_the_one_object_not_linked_to_a_nearly_saturated_anchor_is_found():
    # A's object 0 is linked to 299 of B's 300 objects, all but 123: rejection mostly fails,
    # and the negative, or the unlinked partner, comes from the explicit list of the others.
    links = np.array([[0, j] for j in range(300) if j != 123])
    n = 50
    objects = draw_linked(
        links,
        (2, 300),
        (np.array([0]), np.arange(300)),
        is_pair=np.arange(n) < 20,
        linked=np.zeros(n, dtype=bool),
        first_modality=np.zeros(n, dtype=np.int64),
        rng=np.random.default_rng(0),
    )
    assert objects[:20].tolist() == [[0, 123, -1]] * 20  # unlinked pairs
    assert np.all(objects[20:, 0] == 0) and np.all(objects[20:, 2] == 123)  # triplets
    assert not np.isin(objects[20:, 1], [123]).any()


@pytest.mark.parametrize(
    ("links", "pair_share", "message"),
    [
        # Every development object of A is linked to every one of B: no unlinked pair, and no
        # anchor with a negative.
        (np.argwhere(np.ones((2, 2))), 1.0, "every development object of A is linked to every"),
        (
            np.argwhere(np.ones((2, 2))),
            0.0,
            "every development object of XA with a development link is linked to every "
            "development object of the other modality, so no triplet anchored in XA has a "
            "negative",
        ),
        # One link: it cannot be both a development and a test link.
        (np.array([[0, 0]]), 0.5, "links: "),
    ],
)
def test_links_the_protocol_cannot_draw_from_are_said(links, pair_share, message):
    objects = LinkedObjects(("a", "b"), (np.eye(2), np.eye(2)), links)
    with pytest.raises(ValueError) as e:
        build_cross_modal_stream(objects, 10, 0, pair_share)
    assert message in str(e.value)


def test_constraints_within_one_modality_are_refused_for_linked_objects():
    refusal = r"within_share: linked objects have no labels and links join objects of two"
    with pytest.raises(ValueError, match=refusal + r" modalities.*got 0.2"):
        build_cross_modal_stream(grouped_links(), 10, 0, within_share=0.2)


# ---------------------------------------------------------------------- the stream
def _linked() -> dict:
    XA, XB = np.eye(4, dtype=np.float32), np.ones((2, 3), dtype=np.float32)
    return {
        "modalities": ("drug", "target"),
        "X": (XA, XB),
        "y": None,
        "dev_idx": np.array([1, 0]),
        "test_idx": np.array([2, 3]),
        "constraints": np.array([[0, 1, -1], [1, 0, 1]]),
        "modality": np.array([[0, 1, -1], [1, 0, 0]]),
        "kinds": np.array([PAIR, TRIPLET]),
        "similar": np.array([True, False]),
        "links": np.array([[0, 1], [2, 0]]),
        "dev_idx_b": np.array([1]),
        "test_idx_b": np.array([0]),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"y": np.zeros(4, int)}, "y: linked objects carry no class labels"),
        ({"links": np.array([[0, 2]])}, "links: link 0 (row 0), column 1: 2 is not a row of XB"),
        ({"links": np.array([[0, 1], [0, 1]])}, "links: link 1 repeats link 0: (0, 1)"),
        (
            {"dev_idx_b": None},
            "dev_idx_b: linked objects are split per modality; expected target's objects, got None",
        ),
        (
            {"test_idx_b": np.array([0, 1])},
            "dev_idx_b/test_idx_b: must partition the 2 objects of 'target', but object 1 is "
            "listed 2 times",
        ),
        (
            {"dev_idx": np.array([0, 1, 2])},
            "dev_idx/test_idx: must partition the 4 objects of 'drug', but object 2 is listed 2",
        ),
        (
            {"constraints": np.array([[0, 2, -1], [1, 0, 1]])},
            "constraints: object indices of 'target' must lie in [0, 2), constraint 0 holds "
            "[0, 2, -1]",
        ),
        (
            {"constraints": np.array([[0, 0, -1], [1, 0, 1]])},
            "constraints: object 0 of 'target' (constraint 0) is not a development object "
            "(dev_idx_b)",
        ),
        (
            {"constraints": np.array([[2, 1, -1], [1, 0, 1]])},
            "constraints: object 2 of 'drug' (constraint 0) is not a development object (dev_idx)",
        ),
    ],
)
def test_a_linked_streams_validation_names_the_field_and_the_value(change, message):
    with pytest.raises(ValueError) as e:
        CrossModalStream(**{**_linked(), **change})
    assert str(e.value).startswith(message)


def test_a_labelled_stream_takes_no_split_of_b_and_a_linked_one_no_n_objects():
    labelled = {**_linked(), "X": (np.eye(4), np.eye(4)), "y": np.zeros(4, int), "links": None}
    with pytest.raises(ValueError, match="dev_idx_b: only for linked objects"):
        CrossModalStream(**labelled)
    s = CrossModalStream(**_linked())
    assert s.sizes == (4, 2) and s.dev_objects(1).tolist() == [1]
    assert s.dev_links.tolist() == [[0, 1]] and s.test_links.tolist() == [[2, 0]]
    with pytest.raises(ValueError, match="n_objects: linked objects have objects of their own"):
        _ = s.n_objects


# ---------------------------------------------------------------------- files
def test_npz_and_jsonl_round_trips_of_linked_objects_are_exact(tmp_path):
    s = build_cross_modal_stream(grouped_links(sizes=(30, 20)), 150, 2, 0.3)
    s.save(tmp_path / "s.npz")
    write_cross_modal_jsonl(s, tmp_path / "s.jsonl")
    for name in ("s.npz", "s.jsonl"):
        assert_same_linked(s, load_cross_modal_stream(tmp_path / name))
    with np.load(tmp_path / "s.npz") as z:
        assert z["y"].shape == (0,) and z["links"].shape == (len(s.links), 2)
        assert json.loads(str(z["meta"][()]))["format_version"] == 2
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert (header["version"], header["sizes"], header["n_objects"]) == (2, [30, 20], 50)
    assert header["n_links"] == len(s.links)
    items = [json.loads(line) for line in lines[1:51]]
    assert all(item["type"] == "item" and "label" not in item for item in items)
    assert [item["modality"] for item in items] == ["drug"] * 30 + ["target"] * 20
    assert json.loads(lines[51]) == {"type": "link", "a": int(s.links[0, 0]),
                                     "b": int(s.links[0, 1])}  # fmt: skip
    assert len(lines) == 1 + 50 + len(s.links) + 150


def test_a_labelled_stream_is_still_written_as_version_1():
    views = TwoViews(("a", "b"), (np.eye(6), np.ones((6, 2))), np.arange(6) % 2)
    s = build_cross_modal_stream(views, 20, 0)
    with tempfile.TemporaryDirectory() as folder:
        s.save(Path(folder) / "s.npz")
        write_cross_modal_jsonl(s, Path(folder) / "s.jsonl")
        with np.load(Path(folder) / "s.npz") as z:
            assert not set(z.files) & set(LINKED_ARRAYS)
            assert json.loads(str(z["meta"][()]))["format_version"] == 1
        header = json.loads((Path(folder) / "s.jsonl").read_text().splitlines()[0])
    assert header["version"] == 1 and "sizes" not in header


# A version-1 file as the version-1 writer wrote it: two objects of classes 0 and 1, one pair.
_V1_JSONL = """\
{"type": "header", "format": "oahu-cross-modal-stream", "version": 1, "modalities": ["a", "b"], \
"dims": [2, 1], "n_objects": 2, "n_constraints": 1, "meta": {"format": \
"oahu-cross-modal-stream", "format_version": 1, "dataset": "toy"}}
{"type": "item", "id": 1, "modality": "a", "x": [0.5, 1.0], "label": 1, "split": "dev"}
{"type": "item", "id": 1, "modality": "b", "x": [2.0], "label": 1, "split": "dev"}
{"type": "item", "id": 0, "modality": "a", "x": [0.0, 0.25], "label": 0, "split": "test"}
{"type": "item", "id": 0, "modality": "b", "x": [3.0], "label": 0, "split": "test"}
{"type": "pair", "u": 1, "u_modality": "a", "v": 1, "v_modality": "b", "similar": true}
"""


def test_version_1_files_still_load_unchanged(tmp_path):
    (tmp_path / "v1.jsonl").write_text(_V1_JSONL)
    from_lines = read_cross_modal_jsonl(tmp_path / "v1.jsonl")
    assert not from_lines.is_linked and from_lines.links is None and from_lines.dev_idx_b is None
    assert from_lines.y.tolist() == [0, 1] and from_lines.dev_idx.tolist() == [1]
    assert from_lines.X[0].tolist() == [[0.0, 0.25], [0.5, 1.0]] and from_lines.X[1].tolist() == [
        [3.0],
        [2.0],
    ]
    meta = json.dumps({"format": "oahu-cross-modal-stream", "format_version": 1, "dataset": "toy"})
    np.savez(  # the version-1 writer's arrays, exactly
        tmp_path / "v1.npz",
        format=np.array("oahu-cross-modal-stream"),
        modalities=np.array(["a", "b"]),
        XA=np.array([[0.0, 0.25], [0.5, 1.0]], np.float32),
        XB=np.array([[3.0], [2.0]], np.float32),
        y=np.array([0, 1]),
        dev_idx=np.array([1]),
        test_idx=np.array([0]),
        constraints=np.array([[1, 1, -1]]),
        modality=np.array([[0, 1, -1]], np.int8),
        kinds=np.array([PAIR], np.int8),
        similar=np.array([True]),
        meta=np.array(meta),
    )
    assert_same(from_lines, load_cross_modal_stream(tmp_path / "v1.npz"))


def test_a_version_1_reader_gets_as_far_as_the_version_of_a_linked_file(tmp_path):
    """What lets an older reader refuse a linked file by its version: the .npz keeps every
    array of version 1, and the JSON Lines header passes version 1's checks of its fields."""
    s = build_cross_modal_stream(grouped_links(sizes=(12, 8)), 20, 0)
    s.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        v1_keys = {"format", "modalities", "XA", "XB", "y", "dev_idx", "test_idx",
                   "constraints", "modality", "kinds", "similar", "meta"}  # fmt: skip
        assert v1_keys <= set(z.files)
    write_cross_modal_jsonl(s, tmp_path / "s.jsonl")
    header = json.loads((tmp_path / "s.jsonl").read_text().splitlines()[0])

    def fail(lineno, message):
        return ValueError(message)

    check_fields(header, 1, ("header",), cross_modal_jsonl._SCHEMA, fail)  # version 1's schema
    assert header["version"] == 2


def test_a_version_2_file_that_is_not_one_of_linked_objects_is_refused(tmp_path):
    s = build_cross_modal_stream(grouped_links(sizes=(12, 8)), 20, 0)
    s.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        arrays = dict(z)
    np.savez(tmp_path / "nolinks.npz", **{k: v for k, v in arrays.items() if k != "links"})
    with pytest.raises(ValueError, match=r"nolinks.npz: missing field\(s\) links"):
        CrossModalStream.load(tmp_path / "nolinks.npz")
    np.savez(tmp_path / "y.npz", **{**arrays, "y": np.zeros(12, np.int64)})
    refusal = r"y: .*y.npz is a stream of linked objects \(format_version 2\), whose y is empty"
    with pytest.raises(ValueError, match=refusal + "; it holds 12"):
        CrossModalStream.load(tmp_path / "y.npz")
    write_cross_modal_jsonl(s, tmp_path / "s.jsonl")
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    del header["sizes"]
    (tmp_path / "h.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"h.jsonl:1: field 'sizes' is missing from the header"):
        read_cross_modal_jsonl(tmp_path / "h.jsonl")


_STREAM = build_cross_modal_stream(grouped_links(sizes=(8, 6), p=0.8), 8, 0)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_corrupted_linked_jsonl_line_is_a_value_error_naming_it(data):
    assert_a_corrupted_line_is_named(_STREAM, data)
