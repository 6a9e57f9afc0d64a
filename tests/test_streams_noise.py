"""Noisy constraint streams: which constraints are made wrong and how, the ``flipped`` field in
both file formats, ``oahu make-stream --noise``."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_support import assert_same_stream

from oahu.cli.main import main
from oahu.streams import NOISE_MODELS, add_noise, build_drift_stream, class_confusability
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.noise import _constraint_log_weights
from oahu.streams.stream_file import (
    ConstraintStream,
    iter_jsonl,
    load_stream,
    read_jsonl,
    write_jsonl,
)

FASHION = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]  # fmt: skip


@functools.cache
def _stream(kind: str = "triplet", n: int = 600, seed: int = 3) -> ConstraintStream:
    return build_stream("digits", n, seed=seed, kind=kind)


def _consistent(stream: ConstraintStream, labels: np.ndarray) -> np.ndarray:
    """(N,) bool: each constraint agrees with ``labels``."""
    c = labels[stream.constraints]
    if stream.kind == "triplet":
        return (c[:, 0] == c[:, 1]) & (c[:, 0] != c[:, 2])
    return (c[:, 0] == c[:, 1]) == stream.similar


def _centroid_weights(stream: ConstraintStream) -> np.ndarray:
    """w(a, b) = exp(-d / median d) over the class centroids of the development items, computed
    here independently of streams.noise."""
    dev, y = stream.dev_idx, stream.y
    classes = np.unique(y[dev])
    centroids = np.stack([stream.X[dev[y[dev] == c]].astype(np.float64).mean(0) for c in classes])
    d = ((centroids[:, None] - centroids[None]) ** 2).sum(-1)
    return np.exp(-d / np.median(d[np.triu_indices(len(classes), 1)]))


# ---------------------------------------------------------------------------- what is flipped
@pytest.mark.parametrize("model", NOISE_MODELS)
@pytest.mark.parametrize(("rate", "expected"), [(0.1, 60), (0.25, 150), (0.0125, 8), (0.5, 300)])
def test_exactly_round_rate_n_constraints_are_flipped(model, rate, expected):
    noisy = add_noise(_stream(), rate, model)
    assert noisy.flipped.dtype == np.bool_ and noisy.flipped.shape == (600,)
    assert int(noisy.flipped.sum()) == expected
    assert noisy.meta["noise"] == {"model": model, "rate": rate, "flipped": expected, "seed": 3}


@pytest.mark.parametrize("model", NOISE_MODELS)
def test_flipped_triplets_have_positive_and_negative_swapped(model):
    clean = _stream()
    noisy = add_noise(clean, 0.2, model, seed=11)
    f = noisy.flipped
    np.testing.assert_array_equal(noisy.constraints[f][:, 0], clean.constraints[f][:, 0])
    np.testing.assert_array_equal(noisy.constraints[f][:, 1], clean.constraints[f][:, 2])
    np.testing.assert_array_equal(noisy.constraints[f][:, 2], clean.constraints[f][:, 1])
    np.testing.assert_array_equal(noisy.constraints[~f], clean.constraints[~f])
    # The clean stream is label-consistent; exactly the flipped constraints no longer are.
    assert _consistent(clean, clean.y).all()
    np.testing.assert_array_equal(_consistent(noisy, noisy.y), ~f)
    # Everything else is the clean stream's.
    for name in ("X", "y", "dev_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(noisy, name), getattr(clean, name))
    assert noisy.similar is None and noisy.concepts is None
    assert {k: v for k, v in noisy.meta.items() if k != "noise"} == clean.meta


@pytest.mark.parametrize("model", NOISE_MODELS)
def test_pairs_get_similar_flipped_and_keep_their_items(model):
    clean = _stream("pair")
    noisy = add_noise(clean, 0.3, model, seed=5)
    assert int(noisy.flipped.sum()) == 180
    np.testing.assert_array_equal(noisy.constraints, clean.constraints)
    np.testing.assert_array_equal(noisy.similar, clean.similar ^ noisy.flipped)
    np.testing.assert_array_equal(_consistent(noisy, noisy.y), ~noisy.flipped)


def test_the_input_stream_is_not_mutated():
    clean = build_stream("digits", 200, seed=0, kind="pair")
    before = {name: getattr(clean, name).copy() for name in ("constraints", "similar")}
    meta = json.loads(json.dumps(clean.meta))
    noisy = add_noise(clean, 0.5, "confusable")
    noisy.meta["noise"]["rate"] = 0.9
    noisy.constraints[0] = noisy.constraints[1]
    noisy.similar[:] = True
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(clean, name), value)
    assert clean.flipped is None and clean.meta == meta


def test_rate_zero_is_an_equal_copy_with_nothing_flipped():
    clean = _stream()
    noisy = add_noise(clean, 0.0)
    assert noisy is not clean and noisy.constraints is not clean.constraints
    np.testing.assert_array_equal(noisy.constraints, clean.constraints)
    assert noisy.flipped.tolist() == [False] * 600
    assert noisy.meta["noise"] == {"model": "uniform", "rate": 0.0, "flipped": 0, "seed": 3}


def test_rounding_follows_python_round():
    clean = build_stream("digits", 10, seed=0)
    assert [int(add_noise(clean, r).flipped.sum()) for r in (0.04, 0.05, 0.15, 0.26, 0.99)] == [
        round(0.4), round(0.5), round(1.5), round(2.6), round(9.9)
    ] == [0, 0, 2, 3, 10]  # fmt: skip


@pytest.mark.parametrize("model", NOISE_MODELS)
def test_seeded_same_seed_same_stream_other_seed_other_choice(model):
    clean = _stream()
    a, b = add_noise(clean, 0.1, model, seed=7), add_noise(clean, 0.1, model, seed=7)
    assert_same_stream(a, b, meta=True)
    other = add_noise(clean, 0.1, model, seed=8)
    assert other.flipped.sum() == a.flipped.sum() == 60
    assert not np.array_equal(other.flipped, a.flipped)
    # The default seed is the stream's own.
    assert_same_stream(
        add_noise(clean, 0.1, model), add_noise(clean, 0.1, model, seed=3), meta=True
    )
    assert add_noise(clean, 0.1, model).meta["noise"]["seed"] == 3


def test_the_models_choose_differently():
    clean = _stream()
    uniform, confusable = (add_noise(clean, 0.1, m, seed=0) for m in NOISE_MODELS)
    assert not np.array_equal(uniform.flipped, confusable.flipped)


# ---------------------------------------------------------------------------- confusability
def test_class_confusability_on_hand_checkable_centroids():
    # Centroids 0, 1 and 3 along one axis: d = 1, 9, 4; the median is 4.
    X = np.array([[-1.0], [1.0], [1.0], [1.0], [2.0], [4.0]])
    y = np.array([5, 5, 7, 7, 9, 9])
    classes, W = class_confusability(X, y, np.arange(6))
    assert classes.tolist() == [5, 7, 9]
    np.testing.assert_allclose(
        W, np.exp(-np.array([[0, 1, 9], [1, 0, 4], [9, 4, 0]]) / 4.0), rtol=1e-12
    )
    # Only development items count; a single class, or centroids that coincide, weigh 1.
    classes, W = class_confusability(X, y, np.array([0, 1]))
    assert classes.tolist() == [5] and W.tolist() == [[1.0]]
    classes, W = class_confusability(np.zeros((4, 2)), [0, 0, 1, 1], np.arange(4))
    assert W.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_class_confusability_matches_the_definition_on_digits():
    s = _stream()
    classes, W = class_confusability(s.X, s.y, s.dev_idx)
    assert classes.tolist() == list(range(10))
    np.testing.assert_allclose(W, _centroid_weights(s), rtol=1e-9)


def test_confusable_noise_flips_confusable_classes_far_more_often_than_uniform():
    """Digits, 4,000 triplets, 10% noise, 5 seeds: the constraints whose (anchor, negative)
    classes are in the most confusable quarter are flipped at ~2.2x the rate of those in the
    least confusable quarter under confusable noise, ~1x under uniform noise."""
    s = build_stream("digits", 4000, seed=1)
    w = _centroid_weights(s)[s.y[s.constraints[:, 0]], s.y[s.constraints[:, 2]]]
    high, low = w >= np.quantile(w, 0.75), w <= np.quantile(w, 0.25)
    ratio = {}
    for model in NOISE_MODELS:
        flips = np.stack([add_noise(s, 0.1, model, seed=seed).flipped for seed in range(5)])
        ratio[model] = flips[:, high].mean() / flips[:, low].mean()
    assert 0.8 < ratio["uniform"] < 1.25
    assert ratio["confusable"] > 1.9
    assert ratio["confusable"] > 1.7 * ratio["uniform"]


def test_confusable_pair_noise_weighs_similar_pairs_by_their_closest_class():
    """Pairs (digits, 4,000, 10% noise, 5 seeds): a dissimilar pair weighs w(class(u),
    class(v)), so those of the most confusable quarter are flipped at ~2.2x the rate of the least
    confusable quarter (uniform: ~0.9x); a similar pair weighs the largest w(class(u), c) over
    the other classes, more than a typical dissimilar pair, so similar pairs are flipped ~1.5x as
    often as under uniform noise."""
    s = build_stream("digits", 4000, seed=1, kind="pair")
    w = _centroid_weights(s)[s.y[s.constraints[:, 0]], s.y[s.constraints[:, 1]]]
    dissimilar = w[~s.similar]
    close = ~s.similar & (w >= np.quantile(dissimilar, 0.75))
    far = ~s.similar & (w <= np.quantile(dissimilar, 0.25))
    rates = {}
    for model in NOISE_MODELS:
        flips = np.stack([add_noise(s, 0.1, model, seed=seed).flipped for seed in range(5)])
        rates[model] = (flips[:, close].mean() / flips[:, far].mean(), flips[:, s.similar].mean())
    assert 0.8 < rates["uniform"][0] < 1.25
    assert rates["confusable"][0] > 1.8
    assert rates["confusable"][1] > 1.3 * rates["uniform"][1]


def test_fashion_mnist_confusable_noise_hits_the_look_alike_classes():
    """On Fashion-MNIST the three most flipped class pairs (seed 0) are look-alikes, and each
    of them is flipped about twice as often as under uniform noise."""
    s = build_stream("fashion-mnist", 20000, seed=0)
    pairs = {}
    for model in NOISE_MODELS:
        c = s.constraints[add_noise(s, 0.1, model).flipped]
        a, b = s.y[c[:, 0]], s.y[c[:, 2]]
        counts = np.zeros((10, 10), dtype=np.int64)
        np.add.at(counts, (np.minimum(a, b), np.maximum(a, b)), 1)
        pairs[model] = counts
    iu = np.triu_indices(10, 1)
    top = np.argsort(-pairs["confusable"][iu], kind="stable")[:3]
    named = [f"{FASHION[iu[0][k]]}/{FASHION[iu[1][k]]}" for k in top]
    assert named == ["T-shirt/top/Shirt", "Sandal/Sneaker", "Pullover/Coat"]
    for k in top:
        assert pairs["confusable"][iu][k] > 1.6 * pairs["uniform"][iu][k]


# ---------------------------------------------------------------------------- drifting streams
@pytest.mark.parametrize(
    ("drift", "kind"),
    [("abrupt", "triplet"), ("gradual", "pair"), ("covariate", "triplet"), ("novel", "pair")],
)
@pytest.mark.parametrize("model", NOISE_MODELS)
def test_noise_on_drifting_streams(tmp_path, drift, kind, model):
    clean = build_drift_stream("digits", 300, seed=2, drift=drift, drift_at=120,
                               drift_width=100 if drift == "gradual" else 0, kind=kind)  # fmt: skip
    noisy = add_noise(clean, 0.2, model)
    assert int(noisy.flipped.sum()) == 60 and noisy.meta["noise"]["seed"] == 2
    assert noisy.meta["drift"] == clean.meta["drift"]
    for name in ("concepts", "concept_labels", "gallery_idx", "query_idx", "start_idx"):
        left, right = getattr(noisy, name), getattr(clean, name)
        assert (left is None) == (right is None)
        if left is not None:
            np.testing.assert_array_equal(left, right)
    # Each constraint agrees with its own concept's labels unless flipped.
    labels = clean.concept_labels[clean.concepts.astype(np.int64)[:, None], noisy.constraints]
    if kind == "triplet":
        agrees = (labels[:, 0] == labels[:, 1]) & (labels[:, 0] != labels[:, 2])
    else:
        agrees = (labels[:, 0] == labels[:, 1]) == noisy.similar
    np.testing.assert_array_equal(agrees, ~noisy.flipped)
    for name in ("s.npz", "s.jsonl"):
        noisy.save(tmp_path / name) if name.endswith("npz") else write_jsonl(noisy, tmp_path / name)
        assert_same_stream(noisy, load_stream(tmp_path / name), meta=True)


def test_confusable_noise_on_a_drift_weighs_each_constraint_under_its_concept():
    """Abrupt drift from the digits to their shape grouping (3 groups): a constraint before the
    drift weighs by the digits' centroids, one after it by the groups' centroids."""
    clean = build_drift_stream("digits", 400, seed=0, drift="abrupt", drift_at=150)
    log_w = _constraint_log_weights(clean)
    c = clean.constraints
    for concept, rows in ((0, np.arange(150)), (1, np.arange(150, 400))):
        labels = clean.concept_labels[concept]
        relabelled = dataclasses.replace(clean, y=labels, concepts=None, concept_labels=None)
        W = _centroid_weights(relabelled)
        classes = np.unique(labels[clean.dev_idx])
        a = np.searchsorted(classes, labels[c[rows, 0]])
        n = np.searchsorted(classes, labels[c[rows, 2]])
        np.testing.assert_allclose(np.exp(log_w[rows]), W[a, n], rtol=1e-9)
    assert len(np.unique(clean.concept_labels[1])) == 3
    noisy = add_noise(clean, 0.25, "confusable")
    assert int(noisy.flipped.sum()) == 100


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rate": 1.5}, ValueError, r"rate: must be a number in \[0, 1\), got 1.5"),
        ({"rate": 1}, ValueError, r"rate: must be a number in \[0, 1\), got 1"),
        ({"rate": -0.1}, ValueError, r"rate: must be a number in \[0, 1\), got -0.1"),
        ({"rate": math.nan}, ValueError, r"rate: must be finite, got nan"),
        ({"rate": True}, ValueError, r"rate: must be a number, got True"),
        ({"rate": "0.1"}, ValueError, r"rate: must be a number, got '0.1'"),
        ({"model": "gaussian"}, ValueError,
         "model: must be one of 'uniform', 'confusable', got 'gaussian'"),
        ({"seed": -1}, ValueError, "seed: expected a non-negative integer, got -1"),
        ({"seed": 1.5}, ValueError, "seed: expected a non-negative integer, got 1.5"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_field_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        add_noise(_stream(), **{"rate": 0.1, **kwargs})


def test_streams_that_cannot_be_noised():
    hand = ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]])
    with pytest.raises(ValueError, match="seed: the stream's meta has no seed to default to"):
        add_noise(hand, 0.5)
    assert add_noise(hand, 0.5, seed=0).constraints.tolist() == [[0, 1, 2]]  # round(0.5) = 0
    assert add_noise(hand, 0.6, seed=0).constraints.tolist() == [[0, 2, 1]]
    with pytest.raises(ValueError, match=r"stream: already has noise"):
        add_noise(add_noise(_stream(), 0.1), 0.1)
    with pytest.raises(TypeError, match="stream: expected a ConstraintStream, got list"):
        add_noise([[0, 1, 2]], 0.1)  # type: ignore[arg-type]


def test_an_empty_stream_takes_noise():
    s = build_stream("digits", 0, seed=0)
    for model in NOISE_MODELS:
        noisy = add_noise(s, 0.5, model)
        assert noisy.flipped.shape == (0,) and noisy.meta["noise"]["flipped"] == 0


# ---------------------------------------------------------------------------- property
@settings(max_examples=80, deadline=None)
@given(
    rate=st.floats(0, 1, exclude_max=True),
    seed=st.integers(0, 2**32),
    model=st.sampled_from(NOISE_MODELS),
    kind=st.sampled_from(["triplet", "pair"]),
)
def test_any_rate_and_seed_flip_round_rate_n_and_keep_each_constraints_items(
    rate, seed, model, kind
):
    clean = _stream(kind, n=250, seed=1)
    noisy = add_noise(clean, rate, model, seed=seed)
    assert int(noisy.flipped.sum()) == noisy.meta["noise"]["flipped"] == round(rate * 250)
    # Each constraint holds the same multiset of items, in place.
    np.testing.assert_array_equal(
        np.sort(noisy.constraints, axis=1), np.sort(clean.constraints, axis=1)
    )
    changed = (noisy.constraints != clean.constraints).any(axis=1)
    if kind == "pair":
        changed = noisy.similar != clean.similar
    np.testing.assert_array_equal(changed, noisy.flipped)


# ---------------------------------------------------------------------------- the file formats
@pytest.mark.parametrize("kind", ["triplet", "pair"])
def test_flipped_round_trips_both_formats(tmp_path, kind):
    noisy = add_noise(_stream(kind), 0.15, "confusable")
    noisy.save(tmp_path / "s.npz")
    write_jsonl(noisy, tmp_path / "s.jsonl")
    with zipfile.ZipFile(tmp_path / "s.npz") as z:
        assert "flipped.npy" in z.namelist()
    for name in ("s.npz", "s.jsonl"):
        loaded = load_stream(tmp_path / name)
        assert_same_stream(noisy, loaded, meta=True)
        assert loaded.meta["noise"] == {"model": "confusable", "rate": 0.15, "flipped": 90,
                                        "seed": 3}  # fmt: skip


def test_the_jsonl_encoding_of_flipped(tmp_path):
    path = tmp_path / "s.jsonl"
    hand = ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet",
                            [[0, 1, 2], [1, 0, 2]], flipped=np.array([False, True]))  # fmt: skip
    write_jsonl(hand, path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["fields"] == ["flipped"] and "n_concepts" not in records[0]
    assert all("flipped" not in r for r in records[1:4])
    assert [r["flipped"] for r in records[4:]] == [False, True]
    assert [r.get("flipped") for r in iter_jsonl(path)][4:] == [False, True]


def test_a_stream_without_noise_writes_no_flipped(tmp_path):
    s = _stream()
    s.save(tmp_path / "s.npz")
    with zipfile.ZipFile(tmp_path / "s.npz") as z:
        keys = sorted(name.removesuffix(".npy") for name in z.namelist())
    # no key of the noisy streams; digits are 8 x 8 images, which the stream records
    assert keys == ["X", "constraints", "dev_idx", "image_shape", "kind", "meta", "test_idx", "y"]
    write_jsonl(s, tmp_path / "s.jsonl")
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert "fields" not in records[0]
    assert all(set(r) == {"type", "anchor", "positive", "negative"} for r in records[1 + 1797 :])
    assert read_jsonl(tmp_path / "s.jsonl").flipped is None
    assert ConstraintStream.load(tmp_path / "s.npz").flipped is None


@pytest.mark.parametrize(
    ("flipped", "message"),
    [
        ([0, 1], r"flipped: expected a bool array of shape \(2,\) \(one per constraint\), got "
                 r"int64 \(2,\)"),
        (np.array([True]), r"flipped: expected a bool array of shape \(2,\) .* got bool \(1,\)"),
        (np.array([[True, False]]), r"got bool \(1, 2\)"),
    ],
)  # fmt: skip
def test_an_invalid_flipped_field_is_named(flipped, message):
    with pytest.raises(ValueError, match=message):
        ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2], [1, 0, 2]],
                         flipped=flipped)  # fmt: skip


def _jsonl(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


_HEADER = {"type": "header", "version": 1, "kind": "pair", "n_items": 2, "n_features": 1,
           "n_constraints": 1, "meta": {}, "fields": ["flipped"]}  # fmt: skip
_ITEMS = [{"type": "item", "id": i, "x": [0.0], "label": 0, "split": "dev"} for i in range(2)]
_PAIR = {"type": "pair", "u": 0, "v": 1, "similar": True}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([_HEADER, *_ITEMS, _PAIR],
         r"bad.jsonl:4: field 'flipped': expected true or false \(the header announced flipped\)"
         r", got None"),
        ([_HEADER, *_ITEMS, {**_PAIR, "flipped": 1}], r":4: field 'flipped': .* got 1"),
        ([_HEADER, *_ITEMS, {**_PAIR, "flipped": "yes"}], r":4: field 'flipped': .* got 'yes'"),
        ([{**_HEADER, "fields": ["flipped", "colour"]}],
         r":1: field 'fields': unknown optional field 'colour'; this reader knows .*flipped"),
    ],
)  # fmt: skip
def test_malformed_jsonl_flipped_names_the_line_and_field(tmp_path, records, message):
    with pytest.raises(ValueError, match=message):
        list(iter_jsonl(_jsonl(tmp_path, records)))


def test_jsonl_flipped_is_read_when_announced_and_ignored_otherwise(tmp_path):
    s = read_jsonl(_jsonl(tmp_path, [_HEADER, *_ITEMS, {**_PAIR, "flipped": True}]))
    assert s.flipped.tolist() == [True] and s.similar.tolist() == [True]
    plain = {k: v for k, v in _HEADER.items() if k != "fields"}
    s = read_jsonl(_jsonl(tmp_path, [plain, *_ITEMS, {**_PAIR, "flipped": True}]))
    assert s.flipped is None  # an unannounced field is an unknown one: ignored


# ---------------------------------------------------------------------------- the command
@pytest.mark.parametrize("suffix", ["npz", "jsonl"])
@pytest.mark.parametrize(
    ("extra", "model"), [([], "uniform"), (["--noise-model", "confusable"], "confusable")]
)
def test_make_stream_writes_a_noisy_stream(tmp_path, capsys, suffix, extra, model):
    path = tmp_path / f"s.{suffix}"
    args = ["make-stream", "--dataset", "digits", "--constraints", "200", "--seed", "4",
            "--noise", "0.15", *extra, "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"; {model} noise at rate 0.15, 30 of 200 constraints flipped" in out
    s = load_stream(path)
    assert s.meta["noise"] == {"model": model, "rate": 0.15, "flipped": 30, "seed": 4}
    assert_same_stream(add_noise(build_stream("digits", 200, 4), 0.15, model), s, meta=True)


def test_make_stream_noise_with_drift_and_pairs(tmp_path, capsys):
    path = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "100", "--kind", "pair",
            "--drift", "abrupt", "--drift-at", "40", "--noise", "0.1", "--noise-model",
            "confusable", "--out", str(path)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "abrupt drift at constraint 40" in out and "confusable noise at rate 0.1, 10 of" in out
    s = load_stream(path)
    expected = add_noise(build_drift_stream("digits", 100, 0, "abrupt", 40, kind="pair"), 0.1,
                         "confusable")  # fmt: skip
    assert_same_stream(expected, s, meta=True)


def test_make_stream_without_noise_is_unchanged(tmp_path, capsys):
    path = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "50", "--out", str(path)]
    assert main(args) == 0
    assert "noise at rate" not in capsys.readouterr().out
    s = load_stream(path)
    assert s.flipped is None and "noise" not in s.meta


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--noise-model", "confusable"], "--noise-model: only with --noise, got confusable"),
        (["--noise", "1.5"], r"--noise: must be a number in [0, 1), got 1.5"),
        (["--noise", "1"], r"--noise: must be a number in [0, 1), got 1.0"),
        (["--noise", "-0.2"], r"--noise: must be a number in [0, 1), got -0.2"),
        (["--noise", "nan"], r"--noise: must be finite, got nan"),
    ],
)
def test_make_stream_noise_errors(tmp_path, capsys, extra, message):
    out = tmp_path / "s.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "50", *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_make_stream_rejects_an_unknown_noise_model(tmp_path, capsys):
    args = ["make-stream", "--dataset", "digits", "--noise", "0.1", "--noise-model", "gaussian",
            "--out", str(tmp_path / "s.npz")]  # fmt: skip
    with pytest.raises(SystemExit):
        main(args)
    assert "invalid choice: 'gaussian' (choose from" in capsys.readouterr().err


def test_make_stream_help_explains_the_noise(capsys):
    with pytest.raises(SystemExit):
        main(["make-stream", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--noise RHO make round(RHO * N) constraints wrong, RHO in [0, 1)" in text
    assert "--noise-model {uniform,confusable} with --noise only" in text
    assert "uniform a uniform sample: every constraint equally likely to be wrong" in text
    assert "confusable more likely where the classes look alike (close class centroids)" in text
