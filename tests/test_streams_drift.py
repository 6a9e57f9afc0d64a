"""Drifting benchmark streams: groupings, the four kinds of drift, the optional stream fields in
both file formats, and ``oahu make-stream --drift``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_support import assert_same_stream, round_trip_both_formats

from oahu.cli.main import main
from oahu.streams import build_drift_stream
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset, load_digits
from oahu.streams.drift import drift_mask, novel_classes, rotate90
from oahu.streams.groupings import (
    DRIFT_GROUPINGS,
    GROUPINGS,
    Grouping,
    coarse_labels,
    grouping_for,
)
from oahu.streams.stream_file import (
    ConstraintStream,
    iter_jsonl,
    load_stream,
    read_jsonl,
    write_jsonl,
)

N, M, W = 600, 250, 200
N_DIGITS = 1797
OPTIONAL = ("concepts", "concept_labels", "gallery_idx", "query_idx", "start_idx")


def _consistent(stream: ConstraintStream) -> np.ndarray:
    """(N,) bool: each constraint agrees with the labels of its own concept."""
    labels = stream.concept_labels[stream.concepts.astype(np.int64)[:, None], stream.constraints]
    if stream.kind == "triplet":
        return (labels[:, 0] == labels[:, 1]) & (labels[:, 0] != labels[:, 2])
    return (labels[:, 0] == labels[:, 1]) == stream.similar


def _class_consistent(stream: ConstraintStream, y: np.ndarray) -> np.ndarray:
    c = stream.constraints
    return (y[c[:, 0]] == y[c[:, 1]]) & (y[c[:, 0]] != y[c[:, 2]])


@pytest.fixture(scope="module")
def streams() -> dict[str, ConstraintStream]:
    return {
        drift: build_drift_stream("digits", N, seed=3, drift=drift, drift_at=M,
                                  drift_width=W if drift == "gradual" else 0)
        for drift in ("abrupt", "gradual", "covariate", "novel")
    }  # fmt: skip


def _tiny(n_per_class: int = 6) -> tuple[Dataset, Grouping]:
    """4 classes of 2x2 "images" (item i is i at its top-left pixel), grouped in halves."""
    n = 4 * n_per_class
    X = np.zeros((n, 4), dtype=np.float32)
    X[:, 0] = np.arange(n)
    X[:, 1] = 1000 + np.arange(n)
    return Dataset("tiny", X, np.arange(n) % 4), Grouping("halves", {"low": (0, 1), "high": (2, 3)})


# ---------------------------------------------------------------------------- groupings
def test_the_documented_groupings():
    assert {d: list(named) for d, named in GROUPINGS.items()} == {
        "fashion-mnist": ["garment", "season"], "digits": ["shape", "parity"],
    }  # fmt: skip
    assert DRIFT_GROUPINGS == {"fashion-mnist": "season", "digits": "shape"}
    for named in GROUPINGS.values():
        assert all(g.name == name and g.n_classes == 10 for name, g in named.items())
    garment = GROUPINGS["fashion-mnist"]["garment"]
    assert garment.group_names == ("tops", "footwear", "others")
    assert garment.group_of.tolist() == [0, 2, 0, 2, 0, 1, 0, 1, 2, 1]
    assert dict(garment.groups)["footwear"] == (5, 7, 9)
    assert grouping_for("fashion-mnist", "garment") is garment
    digits = grouping_for("digits")  # the drift default
    assert digits.name == "shape" and digits is GROUPINGS["digits"]["shape"]
    assert digits.group_names == ("closed loops", "straight strokes", "open curves")
    assert digits.group_of.tolist() == [0, 1, 2, 2, 1, 2, 0, 1, 0, 0]
    y = np.array([[9, 8], [7, 2]])
    assert coarse_labels("digits", y).tolist() == [[0, 0], [1, 2]]
    assert coarse_labels("digits", y).dtype == np.int64
    assert coarse_labels("digits", y, "shape").tolist() == [[0, 0], [1, 2]]


def test_the_season_grouping_is_an_exact_partition():
    season = grouping_for("fashion-mnist")  # the drift default
    assert season is GROUPINGS["fashion-mnist"]["season"] and season.name == "season"
    assert season.group_names == ("summer", "winter", "all-year")
    assert {k: list(v) for k, v in season.groups.items()} == {
        "summer": [0, 3, 5], "winter": [2, 4, 9], "all-year": [1, 6, 7, 8],
    }  # fmt: skip
    # 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat, 5 Sandal, 6 Shirt, 7 Sneaker,
    # 8 Bag, 9 Ankle boot
    assert season.group_of.tolist() == [0, 2, 1, 0, 1, 0, 2, 2, 2, 1]
    assert coarse_labels("fashion-mnist", np.array([0, 5, 9, 8])).tolist() == [0, 0, 1, 2]
    assert coarse_labels("fashion-mnist", np.array([0, 5]), "garment").tolist() == [0, 1]


def test_the_parity_grouping_is_an_exact_partition():
    parity = grouping_for("digits", "parity")
    assert parity is GROUPINGS["digits"]["parity"] and parity.group_names == ("even", "odd")
    assert parity.n_groups == 2 and parity.n_classes == 10
    assert parity.group_of.tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    assert coarse_labels("digits", np.array([7, 4, 0]), "parity").tolist() == [1, 0, 0]


def test_grouping_errors_name_the_field():
    with pytest.raises(ValueError, match="dataset: no grouping of the classes of 'mnist'"):
        grouping_for("mnist")
    with pytest.raises(ValueError, match="dataset: no grouping of the classes of 'mnist'"):
        grouping_for("mnist", "shape")
    with pytest.raises(
        ValueError,
        match="grouping: no grouping 'season' of the classes of 'digits'; its groupings are "
        "shape, parity",
    ):
        grouping_for("digits", "season")
    with pytest.raises(ValueError, match=r"grouping: .* its groupings are garment, season"):
        coarse_labels("fashion-mnist", np.array([0]), "colour")
    with pytest.raises(ValueError, match="y: label 10 has no group in grouping 'shape'"):
        coarse_labels("digits", np.array([1, 10]))
    with pytest.raises(ValueError, match="y: label 10 has no group in grouping 'parity'"):
        coarse_labels("digits", np.array([10]), "parity")
    with pytest.raises(ValueError, match="y: expected integer class labels"):
        coarse_labels("digits", np.array([1.5]))
    with pytest.raises(ValueError, match=r"groups: the groups must partition the classes 0\.\.3"):
        Grouping("bad", {"a": (0, 1), "b": (1, 3)})
    with pytest.raises(ValueError, match="groups: every group needs at least one class"):
        Grouping("bad", {"a": (0,), "b": ()})
    with pytest.raises(TypeError):
        GROUPINGS["digits"]["shape"].groups["new"] = (10,)  # shared constants are read-only


# ---------------------------------------------------------------------------- building blocks
def test_drift_mask_abrupt_and_gradual():
    assert drift_mask(5, 2).tolist() == [False, False, True, True, True]
    assert not drift_mask(5, 5).any() and drift_mask(5, 0).all()
    assert drift_mask(0, 0).shape == (0,)
    m = drift_mask(5000, drift_at=1000, drift_width=2000, seed=1)
    assert not m[:1001].any() and m[3000:].all()
    quarters = [m[1000 + k * 500 : 1500 + k * 500].mean() for k in range(4)]
    # Expected shares 0.125, 0.375, 0.625, 0.875.
    np.testing.assert_allclose(quarters, [0.125, 0.375, 0.625, 0.875], atol=0.06)
    assert np.array_equal(m, drift_mask(5000, 1000, 2000, seed=1))
    assert not np.array_equal(m, drift_mask(5000, 1000, 2000, seed=2))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 11), r"drift_at: the drift must come at a constraint in \[0, 10\]"),
        ((10, -1), r"drift_at: .* got -1"),
        ((10, 2, -3), "drift_width: must be an integer >= 0, got -3"),
        ((-1, 0), "n_constraints: must be an integer >= 0"),
    ],
)
def test_drift_mask_errors(args, message):
    with pytest.raises(ValueError, match=message):
        drift_mask(*args)


def test_rotate90_turns_each_row_as_a_square_image():
    X = np.arange(18, dtype=np.float32).reshape(2, 9)
    rotated = rotate90(X)
    assert rotated.dtype == np.float32 and rotated.shape == (2, 9)
    assert rotated[0].reshape(3, 3).tolist() == [[2, 5, 8], [1, 4, 7], [0, 3, 6]]
    for row, turned in zip(X, rotated, strict=True):
        np.testing.assert_array_equal(turned, np.rot90(row.reshape(3, 3)).ravel())
    np.testing.assert_array_equal(rotate90(rotate90(rotate90(rotate90(X)))), X)
    with pytest.raises(ValueError, match="X: rotating needs square images, but 10 features"):
        rotate90(np.zeros((2, 10)))


def test_novel_classes_are_a_seeded_30_percent():
    chosen = novel_classes(np.arange(100) % 10, seed=0)
    assert chosen.dtype == np.int64 and len(chosen) == 3
    assert chosen.tolist() == sorted(set(chosen.tolist())) and set(chosen) <= set(range(10))
    assert np.array_equal(chosen, novel_classes(np.arange(100) % 10, seed=0))
    assert len({tuple(novel_classes(np.arange(10), s)) for s in range(10)}) > 1
    assert len(novel_classes(np.arange(4), seed=0)) == 2  # ceil(1.2) = 2 = C - 2
    assert len(novel_classes(np.arange(3), seed=0)) == 1  # capped at C - 2
    with pytest.raises(ValueError, match="labels: novel drift needs at least 3 classes"):
        novel_classes(np.array([0, 1, 1]), seed=0)


# ---------------------------------------------------------------------------- a hand example
def test_abrupt_drift_on_a_hand_checkable_dataset():
    ds, halves = _tiny()
    s = build_drift_stream(ds, 40, seed=0, drift="abrupt", drift_at=15, grouping=halves)
    assert len(s) == 40 and s.concepts.dtype == np.int8
    assert s.concepts.tolist() == [0] * 15 + [1] * 25
    np.testing.assert_array_equal(s.concept_labels[0], ds.y)
    np.testing.assert_array_equal(s.concept_labels[1], ds.y // 2)  # classes 0,1 -> 0; 2,3 -> 1
    np.testing.assert_array_equal(s.y, ds.y // 2)
    c = s.constraints
    before, after = c[:15], c[15:]
    assert (ds.y[before[:, 0]] == ds.y[before[:, 1]]).all()
    assert (ds.y[before[:, 0]] != ds.y[before[:, 2]]).all()
    # After the drift: same half for the positive, the other half for the negative.
    assert (ds.y[after[:, 0]] // 2 == ds.y[after[:, 1]] // 2).all()
    assert (ds.y[after[:, 0]] // 2 != ds.y[after[:, 2]] // 2).all()
    assert (ds.y[after[:, 0]] != ds.y[after[:, 1]]).any()  # e.g. a 0 with a 1: no longer apart
    assert s.meta["drift"] == {
        "kind": "abrupt", "at": 15, "width": 0, "concepts": ["class", "grouping:halves"],
        "groups": {"low": [0, 1], "high": [2, 3]},
    }  # fmt: skip
    with pytest.raises(ValueError, match="dataset: no grouping of the classes of 'tiny'"):
        build_drift_stream(ds, 40, seed=0, drift="abrupt", drift_at=15)


def test_covariate_drift_on_a_hand_checkable_dataset():
    ds, _ = _tiny()
    n = ds.n_items
    s = build_drift_stream(ds, 30, seed=0, drift="covariate", drift_at=10)
    assert s.n_items == 2 * n
    # Item i is i at the top-left pixel; rotated counter-clockwise, that pixel goes bottom-left.
    np.testing.assert_array_equal(s.X[n:, 2], np.arange(n))
    np.testing.assert_array_equal(s.X[n:, 0], 1000 + np.arange(n))
    assert (s.constraints[:10] < n).all() and (s.constraints[10:] >= n).all()
    assert _consistent(s).all()


# ---------------------------------------------------------------------------- digits, per kind
@pytest.mark.parametrize("drift", ["abrupt", "gradual", "covariate", "novel"])
def test_every_kind_is_a_consistent_stream_of_the_final_concept(streams, drift):
    s = streams[drift]
    assert len(s) == N and s.kind == "triplet" and s.concepts.shape == (N,)
    assert s.concept_labels.shape == (2, s.n_items) and s.concept_labels.dtype == np.int64
    np.testing.assert_array_equal(s.y, s.concept_labels[-1])
    assert _consistent(s).all()
    assert np.isin(s.constraints, s.dev_idx).all()
    expected = drift_mask(N, M, W if drift == "gradual" else 0, seed=3)
    np.testing.assert_array_equal(s.concepts, expected)
    assert s.meta["drift"]["kind"] == drift and s.meta["drift"]["at"] == M
    assert {k: s.meta[k] for k in ("dataset", "seed", "protocol", "n_constraints")} == {
        "dataset": "digits", "seed": 3, "protocol": "closure", "n_constraints": N,
    }  # fmt: skip
    # Each concept's closure stream is half seeds.
    assert s.meta["n_seeds"] == (N - expected.sum() + 1) // 2 + (expected.sum() + 1) // 2
    # The split is the plain stream's.
    plain = build_stream("digits", 10, seed=3)
    np.testing.assert_array_equal(s.dev_idx[: len(plain.dev_idx)], plain.dev_idx)


def test_abrupt_drift_merges_the_classes_of_a_group(streams):
    s, y = streams["abrupt"], load_digits().y
    assert _class_consistent(s, y)[:M].all()
    after = s.constraints[M:]
    merged = y[after[:, 0]] != y[after[:, 1]]  # a positive of another class of the same group
    assert merged.sum() > 50
    group = GROUPINGS["digits"]["shape"].group_of
    assert (group[y[after[merged, 0]]] == group[y[after[merged, 1]]]).all()
    assert sorted(set(s.y.tolist())) == [0, 1, 2]
    assert s.meta["drift"]["concepts"] == ["class", "grouping:shape"]
    assert s.gallery_idx is s.query_idx is s.start_idx is None
    assert s.eval_gallery_idx is s.dev_idx and s.eval_query_idx is s.test_idx
    assert s.prepare_idx is s.dev_idx


def test_gradual_drift_phases_the_new_concept_in(streams):
    s, y = streams["gradual"], load_digits().y
    new = s.concepts.astype(bool)
    assert not new[:M].any() and new[M + W :].all()
    first, second = new[M : M + W // 2].mean(), new[M + W // 2 : M + W].mean()
    assert 0.1 < first < second < 0.9
    assert s.meta["drift"]["width"] == W
    # Old-concept constraints keep class identity inside the transition too.
    assert _class_consistent(s, y)[~new].all()
    assert not _class_consistent(s, y)[new].all()


def test_covariate_drift_rotates_the_items(streams):
    s, ds = streams["covariate"], load_digits()
    n = ds.n_items
    assert s.n_items == 2 * n
    np.testing.assert_array_equal(s.X[:n], ds.X)
    for i in (0, 17, n - 1):
        np.testing.assert_array_equal(s.X[n + i], np.rot90(ds.X[i].reshape(8, 8)).ravel())
    assert (s.constraints[:M] < n).all() and (s.constraints[M:] >= n).all()
    np.testing.assert_array_equal(s.y, np.concatenate([ds.y, ds.y]))
    dev, test = s.dev_idx[: len(s.dev_idx) // 2], s.test_idx[: len(s.test_idx) // 2]
    np.testing.assert_array_equal(s.dev_idx, np.concatenate([dev, dev + n]))
    np.testing.assert_array_equal(s.test_idx, np.concatenate([test, test + n]))
    assert sorted(np.concatenate([s.dev_idx, s.test_idx]).tolist()) == list(range(2 * n))
    np.testing.assert_array_equal(s.prepare_idx, dev)
    np.testing.assert_array_equal(s.eval_gallery_idx, dev + n)
    np.testing.assert_array_equal(s.eval_query_idx, test + n)
    assert s.meta["drift"]["shift"] == "rotate90"


def test_novel_classes_appear_only_after_the_drift(streams):
    s, y = streams["novel"], load_digits().y
    novel = s.meta["drift"]["novel_classes"]
    assert len(novel) == 3 and novel == novel_classes(y, seed=3).tolist()
    is_novel = np.isin(y[s.constraints], novel)
    assert not is_novel[:M].any()
    assert is_novel[M:].any(axis=1).mean() > 0.3
    assert not np.isin(y[s.prepare_idx], novel).any()
    np.testing.assert_array_equal(s.prepare_idx, s.dev_idx[~np.isin(y[s.dev_idx], novel)])
    assert s.eval_gallery_idx is s.dev_idx and s.eval_query_idx is s.test_idx
    np.testing.assert_array_equal(s.y, y)


@pytest.mark.parametrize("drift", ["abrupt", "gradual", "covariate", "novel"])
@pytest.mark.parametrize("protocol", ["closure", "random"])
def test_pair_streams_and_the_random_protocol(drift, protocol):
    s = build_drift_stream("digits", 300, seed=1, drift=drift, drift_at=100,
                           drift_width=100 if drift == "gradual" else 0, kind="pair",
                           protocol=protocol)  # fmt: skip
    assert len(s) == 300 and s.similar.dtype == np.bool_
    assert _consistent(s).all()
    assert s.concepts[:100].sum() == 0 and s.concepts[200:].all()
    if protocol == "random":
        assert s.meta["n_seeds"] == 300


@pytest.mark.parametrize("drift", ["abrupt", "gradual", "covariate", "novel"])
def test_streams_are_deterministic_per_seed(drift):
    width = 50 if drift == "gradual" else 0
    a = build_drift_stream("digits", 200, 5, drift, 80, width)
    b = build_drift_stream("digits", 200, 5, drift, 80, width)
    assert_same_stream(a, b)
    assert a.meta == b.meta
    c = build_drift_stream("digits", 200, 6, drift, 80, width)
    assert not np.array_equal(a.constraints, c.constraints)
    assert not np.array_equal(a.dev_idx, c.dev_idx)


# ---------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("drift", ["abrupt", "covariate", "novel"])
def test_drift_at_the_start_and_at_the_end(drift):
    first = build_drift_stream("digits", 50, 0, drift, drift_at=0)
    assert first.concepts.all() and _consistent(first).all()
    last = build_drift_stream("digits", 50, 0, drift, drift_at=50)
    assert not last.concepts.any() and _consistent(last).all()
    # Drift at the very end: no constraint of the new concept, yet the stream ends under it.
    np.testing.assert_array_equal(last.y, last.concept_labels[1])
    if drift == "covariate":
        assert (last.constraints < N_DIGITS).all() and (last.eval_query_idx >= N_DIGITS).all()


def test_empty_streams():
    s = build_drift_stream("digits", 0, 0, "gradual", drift_at=0, drift_width=10)
    assert len(s) == 0 and s.constraints.shape == (0, 3) and s.concepts.shape == (0,)
    p = build_drift_stream("digits", 0, 0, "novel", drift_at=0, kind="pair")
    assert p.constraints.shape == (0, 2) and p.similar.shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"drift_at": 101}, r"drift_at: the drift must come at a constraint in \[0, 100\]"),
        ({"drift": "sudden"}, "drift: must be one of .*'abrupt'"),
        ({"drift": "gradual"}, "drift_width: gradual drift needs a width > 0, got 0"),
        ({"drift_width": 5}, "drift_width: only gradual drift has a width; abrupt drift takes 0"),
        (
            {"kind": "quadruplet"},
            "kind: drifting streams are triplet or pair streams .*, got 'quadruplet'",
        ),
        ({"kind": "quintuplet"}, "kind: drifting streams are triplet or pair streams"),
        ({"protocol": "transitive"}, "protocol: must be one of"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    args = {"dataset": "digits", "n_constraints": 100, "seed": 0, "drift": "abrupt",
            "drift_at": 50, **kwargs}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        build_drift_stream(**args)


def test_covariate_drift_needs_square_items():
    ds = Dataset("wide", np.zeros((20, 6), np.float32), np.arange(20) % 3)
    with pytest.raises(ValueError, match="X: rotating needs square images, but 6 features"):
        build_drift_stream(ds, 10, 0, "covariate", drift_at=5)


@pytest.fixture(scope="module")
def fashion_y() -> np.ndarray:
    return load_dataset("fashion-mnist").y


def test_fashion_mnist_abrupt_drift_defaults_to_the_season_grouping(fashion_y):
    s = build_drift_stream("fashion-mnist", 200, 0, "abrupt", drift_at=100)
    assert s.meta["drift"]["concepts"] == ["class", "grouping:season"]
    assert s.meta["drift"]["groups"] == {
        "summer": [0, 3, 5], "winter": [2, 4, 9], "all-year": [1, 6, 7, 8],
    }  # fmt: skip
    np.testing.assert_array_equal(s.concept_labels[0], fashion_y)
    assert _consistent(s).all()
    assert _class_consistent(s, fashion_y)[:100].all()
    classes = fashion_y[s.constraints[100:]]  # (100, 3): anchor, positive, negative classes
    season = np.array([0, 2, 1, 0, 1, 0, 2, 2, 2, 1])  # checked by hand, as above
    garment = np.array([0, 2, 0, 2, 0, 1, 0, 1, 2, 1])
    assert (season[classes[:, 0]] == season[classes[:, 1]]).all()
    assert (season[classes[:, 0]] != season[classes[:, 2]]).all()
    # Across appearance: e.g. a T-shirt with a Sandal, of another class and garment type.
    across = (classes[:, 0] != classes[:, 1]) & (garment[classes[:, 0]] != garment[classes[:, 1]])
    assert across.any()


def test_an_explicit_grouping_is_the_new_concept():
    parity = grouping_for("digits", "parity")
    s = build_drift_stream("digits", 200, 0, "gradual", drift_at=50, drift_width=50,
                           grouping=parity)  # fmt: skip
    assert s.meta["drift"]["concepts"] == ["class", "grouping:parity"]
    assert s.meta["drift"]["groups"] == {"even": [0, 2, 4, 6, 8], "odd": [1, 3, 5, 7, 9]}
    np.testing.assert_array_equal(s.y, load_digits().y % 2)
    assert _consistent(s).all()


# ---------------------------------------------------------------------------- the stream fields
def _hand_stream(**changes) -> ConstraintStream:
    fields = {
        "X": np.eye(5, dtype=np.float32), "y": [0, 0, 1, 1, 1], "dev_idx": [0, 1, 2, 3],
        "test_idx": [4], "kind": "triplet", "constraints": [[0, 1, 2], [2, 3, 0]],
        "concepts": [0, 1], "concept_labels": [[0, 1, 2, 2, 3], [0, 0, 1, 1, 1]],
        **changes,
    }  # fmt: skip
    return ConstraintStream(**fields)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concept_labels": None}, "concepts: a stream with concepts needs concept_labels"),
        ({"concepts": [0]}, r"concepts: expected one per constraint, shape \(2,\), got \(1,\)"),
        ({"concepts": [0, 2]}, r"concepts: must lie in \[0, 2\) .* got \[0, 2\]"),
        ({"concepts": [0.0, 1.0]}, "concepts: expected integer item indices"),
        ({"concept_labels": [0, 0, 1, 1, 1]}, "concept_labels: expected a 2-d array"),
        ({"concept_labels": [[0, 0, 1, 1]]}, r"concept_labels: expected shape \(n_concepts, 5\)"),
        ({"concept_labels": [[0, 0, 1, 1, 1], [0, 0, 1, 1, 2]]},
         "concept_labels: the last row .* must equal y, but item 4 has 2 there and 1 in y"),
        ({"gallery_idx": [0, 4]}, "gallery_idx: item 4 is not in dev_idx"),
        ({"query_idx": [0]}, "query_idx: item 0 is not in test_idx"),
        ({"start_idx": [1, 1]}, "start_idx: item 1 is listed 2 times"),
        ({"start_idx": [7]}, r"start_idx: item indices must lie in \[0, 5\)"),
        ({"start_idx": [[0]]}, "start_idx: expected a 1-d array"),
    ],
)  # fmt: skip
def test_invalid_optional_fields_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        _hand_stream(**changes)


def test_item_sets_are_kept_in_split_order():
    s = _hand_stream(dev_idx=[3, 1, 0, 2], gallery_idx=[2, 3, 1], start_idx=[0, 3])
    assert s.gallery_idx.tolist() == [3, 1, 2] and s.start_idx.tolist() == [3, 0]
    assert s.gallery_idx.dtype == np.int64
    assert s.prepare_idx.tolist() == [3, 0] and s.eval_query_idx.tolist() == [4]
    assert _hand_stream(concepts=None, concept_labels=None).concepts is None


def test_a_stream_without_drift_writes_no_new_keys(tmp_path):
    s = build_stream("digits", 20, seed=0)
    s.save(tmp_path / "s.npz")
    with zipfile.ZipFile(tmp_path / "s.npz") as z:
        keys = sorted(name.removesuffix(".npy") for name in z.namelist())
    # no key of the drift streams; digits are 8 x 8 images, which the stream records
    assert keys == ["X", "constraints", "dev_idx", "image_shape", "kind", "meta", "test_idx", "y"]
    write_jsonl(s, tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert "fields" not in records[0] and "n_concepts" not in records[0]
    assert all(set(r) <= {"type", "id", "x", "label", "split"} for r in records[1:1798])
    assert all("concept" not in r for r in records[1798:])
    assert_same_stream(s, read_jsonl(tmp_path / "s.jsonl"))


@pytest.mark.parametrize("drift", ["abrupt", "gradual", "covariate", "novel"])
def test_drift_streams_round_trip_both_formats(tmp_path, drift):
    s = build_drift_stream("digits", 120, seed=2, drift=drift, drift_at=40,
                           drift_width=50 if drift == "gradual" else 0, kind="pair")  # fmt: skip
    s.save(tmp_path / "s.npz")
    write_jsonl(s, tmp_path / "s.jsonl")
    for name in ("s.npz", "s.jsonl"):
        loaded = load_stream(tmp_path / name)
        assert_same_stream(s, loaded)
        assert loaded.meta["drift"] == s.meta["drift"]


def test_the_jsonl_encoding_of_the_optional_fields(tmp_path):
    path = tmp_path / "s.jsonl"
    write_jsonl(_hand_stream(gallery_idx=[1, 2], query_idx=[4], start_idx=[0, 1]), path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["fields"] == list(OPTIONAL) and records[0]["n_concepts"] == 2
    items = {r["id"]: r for r in records[1:6]}
    assert items[0]["labels"] == [0, 0] and items[4]["labels"] == [3, 1]
    assert [items[i].get("in") for i in range(5)] == [
        ["start"], ["gallery", "start"], ["gallery"], None, ["query"],
    ]  # fmt: skip
    assert [r["concept"] for r in records[6:]] == [0, 1]
    # A reader goes through them record by record.
    assert [r.get("concept") for r in iter_jsonl(path)][6:] == [0, 1]


def _jsonl(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


_HEADER = {"type": "header", "version": 1, "kind": "triplet", "n_items": 3, "n_features": 1,
           "n_constraints": 1, "meta": {}, "fields": ["concepts", "concept_labels", "start_idx"],
           "n_concepts": 2}  # fmt: skip
_ITEM = {"type": "item", "id": 0, "x": [0.0], "label": 0, "split": "dev", "labels": [5, 0]}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{**_HEADER, "fields": ["colour"]}], r":1: field 'fields': unknown optional field 'col"),
        ([{**_HEADER, "fields": "concepts"}], r":1: field 'fields': expected a list of distinct"),
        ([{**_HEADER, "n_concepts": 0}], r":1: field 'n_concepts': a header announcing"),
        ([{**_HEADER, "fields": ["concepts"]}], r":1: field 'fields': concepts needs concept_lab"),
        ([_HEADER, {**_ITEM, "labels": [0]}], r":2: field 'labels': expected 2 integers"),
        ([_HEADER, {**_ITEM, "labels": [0, 1]}], r":2: field 'labels': the last .* must equal"),
        ([_HEADER, {**_ITEM, "in": ["gallery"]}], r":2: field 'in': 'gallery' is not an item set"),
        ([_HEADER, {**_ITEM, "in": ["start", "start"]}], r":2: field 'in': expected a list of"),
        ([_HEADER, *({**_ITEM, "id": i} for i in range(3)),
          {"type": "triplet", "anchor": 0, "positive": 1, "negative": 2, "concept": 2}],
         r":5: field 'concept': expected an integer in \[0, 2\)"),
        ([_HEADER, *({**_ITEM, "id": i} for i in range(3)),
          {"type": "triplet", "anchor": 0, "positive": 1, "negative": 2}],
         r":5: field 'concept': expected an integer .* got None"),
    ],
)  # fmt: skip
def test_malformed_optional_jsonl_fields_name_the_line_and_field(tmp_path, records, message):
    with pytest.raises(ValueError, match=message):
        list(iter_jsonl(_jsonl(tmp_path, records)))


@st.composite
def _streams(draw) -> ConstraintStream:
    n = draw(st.integers(2, 12))
    kind = draw(st.sampled_from(["triplet", "pair", "quadruplet"]))
    order = draw(st.permutations(range(n)))
    n_dev = draw(st.integers(1, n))
    dev, test = order[:n_dev], order[n_dev:]
    n_concepts = draw(st.integers(1, 3))
    labels = draw(st.lists(st.lists(st.integers(-5, 5), min_size=n, max_size=n),
                           min_size=n_concepts, max_size=n_concepts))  # fmt: skip
    width = {"triplet": 3, "pair": 2, "quadruplet": 4}[kind]
    constraints = draw(st.lists(st.lists(st.sampled_from(dev), min_size=width, max_size=width),
                                max_size=8))  # fmt: skip
    subset = lambda pool: st.none() | st.lists(st.sampled_from(pool), unique=True)  # noqa: E731
    has = draw(st.fixed_dictionaries({f: st.booleans() for f in ("concepts", "labels")}))
    return ConstraintStream(
        X=np.array(draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=n, max_size=n)),
                   dtype=np.float32).reshape(n, 1),
        y=labels[-1],
        dev_idx=dev,
        test_idx=test,
        kind=kind,
        constraints=np.array(constraints, dtype=np.int64).reshape(-1, width),
        similar=np.array(draw(st.lists(st.booleans(), min_size=len(constraints),
                                       max_size=len(constraints))), dtype=bool)
        if kind == "pair" else None,
        meta={"n": n},
        concepts=[draw(st.integers(0, n_concepts - 1)) for _ in constraints]
        if has["concepts"] and has["labels"] else None,
        concept_labels=labels if has["labels"] else None,
        gallery_idx=draw(subset(dev)),
        query_idx=draw(subset(test)) if test else None,
        start_idx=draw(subset(dev)),
    )  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(stream=_streams())
def test_every_field_round_trips_both_formats(stream):
    for loaded in round_trip_both_formats(stream).values():
        assert loaded.meta["n"] == stream.meta["n"]


# ---------------------------------------------------------------------------- the command
@pytest.mark.parametrize(
    ("drift", "extra", "words"),
    [
        ("abrupt", [], "abrupt drift at constraint 60, class -> grouping:shape (90 constraints"),
        ("gradual", ["--drift-width", "40"], "gradual drift at constraint 60 over 40 constraints"),
        ("covariate", [], "3594 digits items"),
        ("novel", [], "novel drift at constraint 60, class:known -> class"),
    ],
)
def test_make_stream_writes_drifting_streams(tmp_path, capsys, drift, extra, words):
    written = {}
    for suffix in ("npz", "jsonl"):
        path = tmp_path / f"s.{suffix}"
        args = ["make-stream", "--dataset", "digits", "--constraints", "150", "--seed", "4",
                "--drift", drift, "--drift-at", "60", *extra, "--out", str(path)]  # fmt: skip
        assert main(args) == 0
        assert words in capsys.readouterr().out
        written[suffix] = load_stream(path)
    expected = build_drift_stream("digits", 150, 4, drift, 60, 40 if drift == "gradual" else 0)
    for stream in written.values():
        assert_same_stream(expected, stream)
        assert stream.meta["drift"] == expected.meta["drift"]


def test_make_stream_drift_with_pairs_and_the_random_protocol(tmp_path):
    path = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "80", "--kind", "pair",
            "--protocol", "random", "--drift", "novel", "--drift-at", "30",
            "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    s = load_stream(path)
    assert s.kind == "pair" and s.meta["protocol"] == "random" and _consistent(s).all()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--drift", "abrupt"], "--drift-at: required with --drift abrupt"),
        (["--drift", "gradual", "--drift-at", "5"], "--drift-width: required with --drift grad"),
        (["--drift-at", "5"], "--drift-at: only with --drift, got 5"),
        (["--drift-width", "5"], "--drift-width: only with --drift, got 5"),
        (["--drift", "novel", "--drift-at", "5", "--drift-width", "3"],
         "drift_width: only gradual drift has a width; novel drift takes 0, got 3"),
        (["--drift", "abrupt", "--drift-at", "51"], "drift_at: the drift must come at"),
        (["--drift", "abrupt", "--drift-at", "5", "--grouping", "season"],
         "grouping: no grouping 'season' of the classes of 'digits'; its groupings are shape, "
         "parity"),
        (["--drift", "covariate", "--drift-at", "5", "--grouping", "shape"],
         "--grouping: only with --drift abrupt or gradual (the new concept is a grouping of the "
         "classes), not with --drift covariate"),
        (["--drift", "novel", "--drift-at", "5", "--grouping", "shape"],
         "--grouping: only with --drift abrupt or gradual"),
        (["--grouping", "shape"], "--grouping: only with --drift, got shape"),
    ],
)  # fmt: skip
def test_make_stream_drift_errors(tmp_path, capsys, extra, message):
    out = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "50", *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("dataset", "grouping", "drift", "extra"),
    [
        ("fashion-mnist", "garment", "abrupt", []),
        ("digits", "parity", "gradual", ["--drift-width", "20"]),
        ("digits", None, "abrupt", []),
    ],
)
def test_make_stream_grouping(tmp_path, capsys, dataset, grouping, drift, extra):
    path = tmp_path / "s.npz"
    named = [] if grouping is None else ["--grouping", grouping]
    args = ["make-stream", "--dataset", dataset, "--constraints", "60", "--drift", drift,
            "--drift-at", "30", *extra, *named, "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    name = grouping or DRIFT_GROUPINGS[dataset]
    assert f"class -> grouping:{name}" in capsys.readouterr().out
    s = load_stream(path)
    assert s.meta["drift"]["concepts"] == ["class", f"grouping:{name}"]
    expected = build_drift_stream(dataset, 60, 0, drift, 30, 20 if extra else 0,
                                  grouping=grouping_for(dataset, grouping))  # fmt: skip
    assert_same_stream(expected, s)


def test_make_stream_help_explains_each_kind(capsys):
    with pytest.raises(SystemExit):
        main(["make-stream", "--help"])
    text = capsys.readouterr().out
    for line in ("abrupt     from M on", "gradual    the same, phased in",
                 "covariate  same classes", "novel      30% of the classes"):  # fmt: skip
        assert line in text
    assert "fashion-mnist  garment, season (default)" in text
    assert "digits         shape (default), parity" in text
    assert "the default is a drift the class metric does not already imply" in text
