"""Quadruplet streams: the graded label-hierarchy stream, its equal-item-reference triplet
stream, quadruplets in both file formats, noise on quadruplets, ``oahu make-stream --kind
quadruplet --hierarchy NAME``."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_support import assert_same_stream, round_trip_both_formats

from oahu.cli.main import main
from oahu.constraint_kinds import triplet_as_quadruplet
from oahu.streams import (
    NOISE_MODELS,
    Grouping,
    add_noise,
    build_hierarchy_stream,
    build_stream,
    grouping_for,
    hierarchy_distance,
    matched_triplet_count,
    matched_triplet_stream,
    split_dev_test,
)
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset
from oahu.streams.noise import _constraint_log_weights
from oahu.streams.stream_file import (
    ConstraintStream,
    iter_jsonl,
    load_stream,
    read_jsonl,
    write_jsonl,
)

# The groups of each class, written out by hand from the groupings' documentation.
GARMENT = {0: "tops", 2: "tops", 4: "tops", 6: "tops", 5: "footwear", 7: "footwear",
           9: "footwear", 1: "others", 3: "others", 8: "others"}  # fmt: skip
SHAPE = {0: "loop", 6: "loop", 8: "loop", 9: "loop", 1: "straight", 4: "straight",
         7: "straight", 2: "open", 3: "open", 5: "open"}  # fmt: skip
PARITY = {c: c % 2 for c in range(10)}
HAND = {"garment": GARMENT, "shape": SHAPE, "parity": PARITY}


@functools.cache
def _stream(dataset: str = "digits", hierarchy: str = "shape", n: int = 2000, seed: int = 3,
            fine_share: float = 0.5) -> ConstraintStream:  # fmt: skip
    return build_hierarchy_stream(dataset, n, seed, hierarchy, fine_share)


def _levels_by_hand(stream: ConstraintStream, hierarchy: str) -> np.ndarray:
    """(N,) "fine" or "coarse" where the quadruplet is one by the labels, "wrong" elsewhere."""
    group = HAND[hierarchy]
    out = []
    for a, b, c, d in stream.y[stream.constraints].tolist():
        if a == b and c != d and group[c] == group[d]:
            out.append("fine")
        elif a != b and group[a] == group[b] and group[c] != group[d]:
            out.append("coarse")
        else:
            out.append("wrong")
    return np.array(out)


# ---------------------------------------------------------------------------- the ordering
@pytest.mark.parametrize(
    ("dataset", "hierarchy"),
    [("digits", "shape"), ("digits", "parity"), ("fashion-mnist", "garment")],
)
def test_every_quadruplet_satisfies_the_hierarchy_by_the_labels(dataset, hierarchy):
    s = _stream(dataset, hierarchy)
    levels = _levels_by_hand(s, hierarchy)
    assert (levels != "wrong").all()
    assert (levels == "fine").sum() == (levels == "coarse").sum() == 1000
    c = s.constraints
    assert (c[:, 0] != c[:, 1]).all() and (c[:, 2] != c[:, 3]).all()  # two distinct items a pair
    assert np.isin(c, s.dev_idx).all()
    # hierarchy_distance agrees with the hand-written groups.
    g = grouping_for(dataset, hierarchy)
    near = hierarchy_distance(g, s.y[c[:, 0]], s.y[c[:, 1]])
    far = hierarchy_distance(g, s.y[c[:, 2]], s.y[c[:, 3]])
    np.testing.assert_array_equal(near, np.where(levels == "fine", 0, 1))
    np.testing.assert_array_equal(far, near + 1)


def test_hierarchy_distance_by_hand():
    garment = grouping_for("fashion-mnist", "garment")
    u, v = np.array([[6, 6], [1, 9]]), np.array([[6, 0], [8, 2]])  # any shape
    assert hierarchy_distance(garment, u, v).tolist() == [[0, 1], [1, 2]]
    with pytest.raises(ValueError, match=r"labels_u, labels_v: shapes differ, \(2,\) and \(3,\)"):
        hierarchy_distance(garment, np.zeros(2, int), np.zeros(3, int))
    with pytest.raises(ValueError, match="y: label 10 has no group in grouping 'garment'"):
        hierarchy_distance(garment, np.array([10]), np.array([0]))


def test_pairs_are_drawn_across_the_development_split():
    # The first item of a pair is uniform over the dev items that have a partner: over 40,000
    # pairs of each relation, every class's share of the first items is its share of the dev
    # items (all digits classes have partners of every relation).
    s = _stream("digits", "shape", n=40_000, seed=5)
    dev_share = np.bincount(s.y[s.dev_idx], minlength=10) / len(s.dev_idx)
    for role in (0, 2):
        share = np.bincount(s.y[s.constraints[:, role]], minlength=10) / len(s)
        np.testing.assert_allclose(share, dev_share, atol=0.01)
    assert len(np.unique(s.constraints)) > 0.99 * len(s.dev_idx)
    # The second item is another item of its relation, so a same-class pair is never one item.
    fine = s.y[s.constraints[:, 0]] == s.y[s.constraints[:, 1]]
    assert 0.45 < fine.mean() < 0.55


# ---------------------------------------------------------------------------- seeds and mix
def test_same_seed_same_stream_other_seed_other_stream():
    s = _stream()
    again = build_hierarchy_stream("digits", 2000, 3, grouping_for("digits", "shape"))
    assert_same_stream(s, again, meta=True)
    other = build_hierarchy_stream("digits", 2000, 4, "shape")
    assert (other.constraints != s.constraints).any(axis=1).mean() > 0.99
    # The split is the paper protocol's for the seed: that of build_stream.
    dev, test = split_dev_test(1797, 3)
    np.testing.assert_array_equal(s.dev_idx, dev)
    np.testing.assert_array_equal(s.test_idx, test)
    np.testing.assert_array_equal(s.dev_idx, build_stream("digits", 10, seed=3).dev_idx)


def test_meta_records_the_hierarchy_and_the_mix():
    s = _stream("digits", "parity", n=10, seed=2, fine_share=0.25)
    assert s.meta == {
        "format_version": 1,
        "dataset": "digits",
        "seed": 2,
        "protocol": "hierarchy",
        "n_constraints": 10,
        "n_seeds": 10,
        "hierarchy": "parity",
        "groups": {"even": [0, 2, 4, 6, 8], "odd": [1, 3, 5, 7, 9]},
        "mix": {"fine_share": 0.25, "fine": 2, "coarse": 8},  # round(2.5) == 2
    }
    assert s.kind == "quadruplet" and s.similar is None and s.constraints.shape == (10, 4)


@pytest.mark.parametrize(
    ("fine_share", "n", "fine"), [(0.5, 2000, 1000), (0.0, 50, 0), (1.0, 50, 50), (0.3, 101, 30)]
)
def test_the_mix_is_exact_and_spread_over_the_stream(fine_share, n, fine):
    s = _stream("digits", "shape", n=n, seed=1, fine_share=fine_share)
    levels = _levels_by_hand(s, "shape")
    assert (levels == "fine").sum() == s.meta["mix"]["fine"] == fine
    assert (levels == "coarse").sum() == s.meta["mix"]["coarse"] == n - fine
    if 0 < fine < n:  # at seeded random positions, not one level after the other
        is_fine = np.flatnonzero(levels == "fine")
        assert is_fine.min() < n / 4 and is_fine.max() > 3 * n / 4


def test_an_empty_stream():
    s = build_hierarchy_stream("digits", 0, 0, "shape")
    assert s.constraints.shape == (0, 4) and s.meta["mix"] == {"fine_share": 0.5, "fine": 0,
                                                              "coarse": 0}  # fmt: skip


# ---------------------------------------------------------------------------- equal references
@given(n=st.integers(0, 10**6))
def test_matched_triplet_count_is_ceil_4n_over_3(n):
    m = matched_triplet_count(n)
    assert m == math.ceil(4 * n / 3)
    assert 3 * m >= 4 * n > 3 * (m - 1) or n == m == 0
    assert 3 * m - 4 * n in (0, 1, 2)


def test_matched_triplet_stream_is_the_papers_stream_with_as_many_item_references():
    q = _stream("digits", "shape", n=300, seed=6)
    t = matched_triplet_stream("digits", 300, seed=6)
    assert len(t) == 400 and t.constraints.size == q.constraints.size == 1200
    assert_same_stream(t, build_stream("digits", 400, seed=6))
    assert t.meta == {**build_stream("digits", 400, seed=6).meta, "matched_quadruplets": 300}
    np.testing.assert_array_equal(t.dev_idx, q.dev_idx)  # both evaluated on the same test items
    r = matched_triplet_stream("digits", 10, seed=6, protocol="random")
    assert len(r) == 14 and r.meta["protocol"] == "random" and r.constraints.size == 42


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fine_share": 1.5}, r"fine_share: must be a number in \[0, 1\], got 1.5"),
        ({"fine_share": math.nan}, r"fine_share: must be a number in \[0, 1\], got nan"),
        ({"fine_share": True}, r"fine_share: .* got True"),
        ({"fine_share": "half"}, r"fine_share: .* got 'half'"),
        ({"n_constraints": -1}, "n_constraints: must be an integer >= 0, got -1"),
        ({"hierarchy": "season"}, "grouping: no grouping 'season' of the classes of 'digits'"),
        ({"hierarchy": 3}, "hierarchy: expected a grouping's name or a Grouping, got int"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    args = {"dataset": "digits", "n_constraints": 10, "seed": 0, "hierarchy": "shape", **kwargs}
    with pytest.raises(ValueError, match=message):
        build_hierarchy_stream(**args)


def test_hierarchies_that_cannot_give_a_level_are_refused():
    ds = Dataset("tiny", np.eye(12, dtype=np.float32), np.arange(12) % 4)
    flat = Grouping("flat", {f"g{c}": (c,) for c in range(4)})  # one class per group
    with pytest.raises(ValueError, match="hierarchy: no group of 'flat' holds development items "
                       "of two classes"):  # fmt: skip
        build_hierarchy_stream(ds, 4, 0, flat)
    one = Grouping("one", {"all": (0, 1, 2, 3)})
    with pytest.raises(ValueError, match="hierarchy: the development items all lie in one group"):
        build_hierarchy_stream(ds, 4, 0, one)
    # Each refusal concerns one level only: the other is still drawn.
    assert len(build_hierarchy_stream(ds, 4, 0, one, fine_share=1.0)) == 4
    singletons = Dataset("single", np.eye(8, dtype=np.float32), np.arange(8))
    pairs = Grouping("pairs", {f"g{k}": (2 * k, 2 * k + 1) for k in range(4)})
    with pytest.raises(ValueError, match="labels: no class has two development items"):
        build_hierarchy_stream(singletons, 4, 0, pairs)
    assert len(build_hierarchy_stream(singletons, 4, 0, pairs, fine_share=0.0)) == 4
    with pytest.raises(ValueError, match="dataset: no grouping of the classes of 'tiny'"):
        build_hierarchy_stream(ds, 4, 0, "garment")


# ---------------------------------------------------------------------------- the file formats
def _hand() -> ConstraintStream:
    return ConstraintStream(np.eye(5, dtype=np.float32), [0, 0, 1, 1, 2], [0, 1, 2, 3], [4],
                            "quadruplet", [[0, 1, 2, 3], [2, 3, 0, 2]], meta={"h": 1})  # fmt: skip


def test_quadruplet_streams_hold_four_roles():
    s = _hand()
    a, b, c, d = s.batch(0, 2)
    assert [x.argmax(1).tolist() for x in (a, b, c, d)] == [[0, 2], [1, 3], [2, 0], [3, 2]]
    assert s.features(1, 2).shape == (1, 4, 5)
    assert [len(batch) for batch in s.iter_batches(1)] == [4, 4]


def test_the_jsonl_encoding_of_quadruplets(tmp_path):
    write_jsonl(_hand(), tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert records[0]["kind"] == "quadruplet" and "fields" not in records[0]
    assert records[6:] == [
        {"type": "quadruplet", "a": 0, "b": 1, "c": 2, "d": 3},
        {"type": "quadruplet", "a": 2, "b": 3, "c": 0, "d": 2},
    ]
    assert_same_stream(_hand(), read_jsonl(tmp_path / "s.jsonl"), meta=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"constraints": [[0, 1, 2]]}, r"constraints: quadruplet streams need shape \(N, 4\), "
                                       r"got \(1, 3\)"),
        ({"constraints": [[0, 1, 2, 4]]}, "constraints: item 4 is not a development item"),
        ({"constraints": [[0, 1, 2, 9]]}, r"constraints: item indices must lie in \[0, 5\)"),
        ({"constraints": [[0.0, 1, 2, 3]]}, "constraints: expected integer item indices"),
        ({"similar": np.array([True])},
         "similar: quadruplet streams have no similar flags; pass None"),
    ],
)  # fmt: skip
def test_invalid_quadruplet_streams_name_the_field(kwargs, message):
    args = {"X": np.eye(5), "y": [0, 0, 1, 1, 2], "dev_idx": [0, 1, 2, 3], "test_idx": [4],
            "kind": "quadruplet", "constraints": [[0, 1, 2, 3]], **kwargs}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        ConstraintStream(**args)


_HEADER = {"type": "header", "version": 1, "kind": "quadruplet", "n_items": 3, "n_features": 1,
           "n_constraints": 1, "meta": {}}  # fmt: skip
_ITEMS = [{"type": "item", "id": i, "x": [0.0], "label": 0, "split": "dev"} for i in range(3)]
_QUAD = {"type": "quadruplet", "a": 0, "b": 1, "c": 2, "d": 0}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([_HEADER, *_ITEMS, {k: v for k, v in _QUAD.items() if k != "d"}],
         r"bad.jsonl:5: field 'd' is missing from the quadruplet record"),
        ([_HEADER, *_ITEMS, {**_QUAD, "c": "2"}], r":5: field 'c': expected an integer, got '2'"),
        ([_HEADER, *_ITEMS, {**_QUAD, "b": 7}],
         r":5: field 'b': item id 7 is outside \[0, 3\) \(n_items\)"),
        ([_HEADER, *_ITEMS[:2], {**_QUAD, "c": 2}],
         ":4: field 'c': item 2 has no item record before this line"),
        ([_HEADER, *_ITEMS, {"type": "triplet", "anchor": 0, "positive": 1, "negative": 2}],
         r":5: field 'type': expected item or quadruplet, got 'triplet'"),
        ([{**_HEADER, "kind": "quintuplet"}],
         r":1: field 'kind': expected one of triplet, pair, quadruplet, got 'quintuplet'"),
        ([_HEADER, *_ITEMS, {**_QUAD, "d": True}], r":5: field 'd': expected an integer, got True"),
    ],
)  # fmt: skip
def test_malformed_jsonl_quadruplets_name_the_line_and_field(tmp_path, records, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        list(iter_jsonl(path))


@st.composite
def _quadruplet_streams(draw) -> ConstraintStream:
    n = draw(st.integers(1, 10))
    order = draw(st.permutations(range(n)))
    n_dev = draw(st.integers(1, n))
    dev, test = order[:n_dev], order[n_dev:]
    quads = draw(st.lists(st.lists(st.sampled_from(dev), min_size=4, max_size=4), max_size=10))
    n_features = draw(st.integers(1, 3))
    values = st.floats(allow_nan=False, allow_infinity=False, width=32)
    X = draw(st.lists(values, min_size=n * n_features, max_size=n * n_features))
    flipped = draw(st.none() | st.lists(st.booleans(), min_size=len(quads), max_size=len(quads)))
    return ConstraintStream(
        X=np.array(X, dtype=np.float32).reshape(n, n_features),
        y=draw(st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n)),
        dev_idx=dev,
        test_idx=test,
        kind="quadruplet",
        constraints=np.array(quads, dtype=np.int64).reshape(-1, 4),
        meta={"seed": draw(st.integers(0, 9)), "text": draw(st.text(max_size=5))},
        start_idx=draw(st.none() | st.lists(st.sampled_from(dev), unique=True)),
        flipped=None if flipped is None else np.array(flipped, dtype=bool),
    )


@settings(max_examples=80, deadline=None)
@given(stream=_quadruplet_streams())
def test_quadruplet_streams_round_trip_both_formats(stream):
    for suffix, loaded in round_trip_both_formats(stream).items():
        # .npz records the format version in meta; JSON Lines in its header.
        version = {"format_version": 1} if suffix == ".npz" else {}
        assert loaded.meta == {**stream.meta, **version}


@pytest.mark.parametrize("suffix", ["npz", "jsonl"])
def test_a_hierarchy_stream_round_trips(tmp_path, suffix):
    s = add_noise(_stream("digits", "parity", n=300, seed=2), 0.1, "confusable")
    path = tmp_path / f"s.{suffix}"
    s.save(path) if suffix == "npz" else write_jsonl(s, path)
    assert_same_stream(s, load_stream(path), meta=True)


# ---------------------------------------------------------------------------- noise
@pytest.mark.parametrize("model", NOISE_MODELS)
def test_noise_swaps_the_two_pairs_of_a_quadruplet(model):
    clean = _stream("digits", "shape", n=1000, seed=3)
    noisy = add_noise(clean, 0.2, model)
    assert int(noisy.flipped.sum()) == noisy.meta["noise"]["flipped"] == 200
    np.testing.assert_array_equal(noisy.constraints[noisy.flipped],
                                  clean.constraints[noisy.flipped][:, [2, 3, 0, 1]])  # fmt: skip
    np.testing.assert_array_equal(noisy.constraints[~noisy.flipped],
                                  clean.constraints[~noisy.flipped])  # fmt: skip
    # Exactly the flipped quadruplets now say the farther pair in the hierarchy is the closer.
    g = grouping_for("digits", "shape")
    y = noisy.y[noisy.constraints]
    holds = hierarchy_distance(g, y[:, 0], y[:, 1]) < hierarchy_distance(g, y[:, 2], y[:, 3])
    np.testing.assert_array_equal(holds, ~noisy.flipped)
    assert clean.flipped is None and "noise" not in clean.meta  # the input stays as it was


def test_confusable_quadruplets_weigh_the_farther_pair_against_the_closer():
    s = _stream("digits", "shape", n=500, seed=3)
    # w(c, d) / w(a, b) = exp(-(d(c, d) - d(a, b)) / s), computed here from the definition.
    dev, y = s.dev_idx, s.y
    centroids = np.stack([s.X[dev[y[dev] == c]].astype(np.float64).mean(0) for c in range(10)])
    d = ((centroids[:, None] - centroids[None]) ** 2).sum(-1)
    scale = np.median(d[np.triu_indices(10, 1)])
    cls = y[s.constraints]
    expected = -(d[cls[:, 2], cls[:, 3]] - d[cls[:, 0], cls[:, 1]]) / scale
    np.testing.assert_allclose(_constraint_log_weights(s), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("model", NOISE_MODELS)
def test_noise_on_a_triplet_and_on_its_quadruplet_agree(model):
    # A triplet (anchor, positive, negative) is the quadruplet (anchor, positive, anchor,
    # negative): both get the same weight, the same choice, and the same wrong constraint.
    triplets = build_stream("digits", 400, seed=8)
    quads = ConstraintStream(triplets.X, triplets.y, triplets.dev_idx, triplets.test_idx,
                             "quadruplet", triplet_as_quadruplet(triplets.constraints),
                             meta=triplets.meta)  # fmt: skip
    np.testing.assert_allclose(_constraint_log_weights(quads), _constraint_log_weights(triplets))
    noisy_t, noisy_q = add_noise(triplets, 0.25, model), add_noise(quads, 0.25, model)
    np.testing.assert_array_equal(noisy_q.flipped, noisy_t.flipped)
    np.testing.assert_array_equal(noisy_q.constraints, triplet_as_quadruplet(noisy_t.constraints))


def test_confusable_noise_hits_look_alike_farther_pairs():
    # Fine quadruplets whose farther pair is two garments that look alike (a pullover and a
    # coat: w = 0.9) are flipped far more often than those whose farther pair looks apart (a
    # trouser and a bag: w = 0.19).
    s = _stream("fashion-mnist", "garment", n=6000, seed=1)
    noisy = add_noise(s, 0.1, "confusable")
    cls = s.y[s.constraints]
    fine = cls[:, 0] == cls[:, 1]
    pair = np.sort(cls[:, 2:], axis=1)
    look_alike = fine & (pair == [2, 4]).all(1)  # Pullover, Coat
    apart = fine & (pair == [1, 8]).all(1)  # Trouser, Bag
    assert look_alike.sum() > 100 and apart.sum() > 100
    assert noisy.flipped[look_alike].mean() > 3 * noisy.flipped[apart].mean()


# ---------------------------------------------------------------------------- the command
def test_make_stream_writes_a_garment_quadruplet_stream(tmp_path, capsys):
    path = tmp_path / "q.npz"
    args = ["make-stream", "--dataset", "fashion-mnist", "--kind", "quadruplet", "--hierarchy",
            "garment", "--constraints", "120", "--seed", "4", "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "wrote 120 quadruplet constraints over 70000 fashion-mnist items" in out
    assert "; hierarchy garment: 60 fine (same class < same group), 60 coarse" in out
    s = load_stream(path)
    assert_same_stream(build_hierarchy_stream("fashion-mnist", 120, 4, "garment"), s, meta=True)
    assert (_levels_by_hand(s, "garment") != "wrong").all()


@pytest.mark.parametrize("suffix", ["npz", "jsonl"])
def test_make_stream_writes_a_noisy_quadruplet_stream(tmp_path, capsys, suffix):
    path = tmp_path / f"q.{suffix}"
    args = ["make-stream", "--dataset", "digits", "--kind", "quadruplet", "--hierarchy",
            "parity", "--constraints", "100", "--seed", "2", "--noise", "0.1", "--noise-model",
            "confusable", "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hierarchy parity: 50 fine" in out and "confusable noise at rate 0.1, 10 of 100" in out
    expected = add_noise(build_hierarchy_stream("digits", 100, 2, "parity"), 0.1, "confusable")
    assert_same_stream(expected, load_stream(path), meta=True)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kind", "quadruplet"],
         "--hierarchy: required with --kind quadruplet; the groupings of digits's classes are "
         "shape, parity"),
        (["--hierarchy", "shape"], "--hierarchy: only with --kind quadruplet"),
        (["--kind", "pair", "--hierarchy", "shape"],
         "--hierarchy: only with --kind quadruplet (quadruplets are drawn from a label "
         "hierarchy), not with --kind pair"),
        (["--kind", "quadruplet", "--hierarchy", "garment"],
         "grouping: no grouping 'garment' of the classes of 'digits'"),
        (["--kind", "quadruplet", "--hierarchy", "shape", "--drift", "abrupt", "--drift-at", "5"],
         "--drift: not with --kind quadruplet (drifting streams are triplet or pair streams)"),
        (["--kind", "quadruplet", "--hierarchy", "shape", "--grouping", "parity"],
         "--grouping: not with --kind quadruplet"),
        (["--kind", "quadruplet", "--hierarchy", "shape", "--protocol", "random"],
         "--protocol: not with --kind quadruplet (quadruplets are all drawn, there is no "
         "closure), got random"),
        (["--kind", "quadruplet", "--hierarchy", "shape", "--drift-at", "3"],
         "--drift-at: not with --kind quadruplet"),
    ],
)  # fmt: skip
def test_make_stream_quadruplet_errors(tmp_path, capsys, extra, message):
    out = tmp_path / "q.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "20", *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_make_stream_protocol_still_defaults_to_closure(tmp_path):
    path = tmp_path / "t.npz"
    assert main(["make-stream", "--dataset", "digits", "--constraints", "30", "--out",
                 str(path)]) == 0  # fmt: skip
    assert_same_stream(build_stream("digits", 30, 0), load_stream(path), meta=True)
    assert load_stream(path).meta["protocol"] == "closure"


def test_make_stream_help_explains_quadruplets(capsys):
    with pytest.raises(SystemExit):
        main(["make-stream", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--kind {triplet,pair,quadruplet}" in text
    assert "quadruplets from a label hierarchy (needs --hierarchy)" in text
    assert "--hierarchy NAME --kind quadruplet only, and required there" in text
    assert "With --kind quadruplet --hierarchy NAME, the stream is instead N quadruplets" in text
    assert "quadruplets their two pairs swapped" in text
    assert "also the label hierarchies of --kind quadruplet, --hierarchy NAME" in text


def test_a_dataset_object_and_its_name_give_the_same_stream():
    by_name = _stream("digits", "shape", n=50, seed=9)
    by_object = build_hierarchy_stream(load_dataset("digits"), 50, 9, "shape")
    assert_same_stream(by_name, by_object, meta=True)
