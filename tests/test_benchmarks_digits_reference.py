"""benchmarks/digits_reference.py: offline supervised references beside Euclidean on digits."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("metric_learn")  # the bench extra (scripts/bootstrap.sh installs it)

from benchmarks.digits_reference import error_count, mlp_embedding, summarise, supervised_maps
from oahu.experiments.evaluation import evaluate
from oahu.learners.baselines.euclidean import Euclidean
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_dev_test


def test_error_count_is_the_evaluation_of_the_euclidean_metric_of_the_mapped_items() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    metric = Euclidean(ds.n_features)
    expected = round(evaluate(metric, ds.X, ds.y, dev, test, n_pairs=100).error * len(test))
    assert error_count(ds.X, ds.y, dev, test) == expected
    # A rotation keeps every Euclidean distance, and so every neighbour and error.
    rotation, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))
    assert error_count(ds.X @ rotation, ds.y, dev, test) == expected


def test_supervised_maps_are_linear_maps_fitted_to_the_labels() -> None:
    ds = load_digits()
    items = np.flatnonzero(ds.y < 3)[:150]
    X, y = ds.X[items].astype(np.float64), ds.y[items]
    maps = supervised_maps(X, y, seed=0)
    assert set(maps) == {"nca", "lmnn"}
    for name, m in maps.items():
        assert m.shape[1] == 64, name
        # Mapped, the classes stand further apart relative to their own spread than the raw
        # items do: the map was fitted to the labels.
        assert separation(X @ m.T, y) > separation(X, y), name


def test_mlp_embedding_is_a_seeded_unit_embedding_fitted_to_the_development_labels() -> None:
    ds = load_digits()
    items = np.flatnonzero(ds.y < 3)[:200]
    X, y = ds.X[items].astype(np.float64), ds.y[items]
    dev = np.arange(150)
    Z = mlp_embedding(X, y, dev, seed=0)
    assert Z.shape == (200, 64)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(Z, mlp_embedding(X, y, dev, seed=0))  # same seed, same net
    unit_raw = X / np.linalg.norm(X, axis=1, keepdims=True)
    assert separation(Z[dev], y[dev]) > separation(unit_raw[dev], y[dev])


def separation(Z: np.ndarray, y: np.ndarray) -> float:
    """Mean distance between class means over the mean distance of an item to its class mean."""
    classes = np.unique(y)
    means = np.stack([Z[y == c].mean(0) for c in classes])
    own_mean = means[np.searchsorted(classes, y)]
    within = np.linalg.norm(Z - own_mean, axis=1).mean()
    between = np.linalg.norm(means[:, None] - means[None], axis=-1)
    return float(between.sum() / (len(classes) * (len(classes) - 1)) / within)


def test_summarise_counts_seeds_below_equal_and_above_euclidean() -> None:
    runs = [
        {"errors": {"euclidean": 10, "lmnn": 8}},
        {"errors": {"euclidean": 12, "lmnn": 12}},
        {"errors": {"euclidean": 9, "lmnn": 11}},
    ]
    summary = summarise(runs)
    assert summary["lmnn"] == {"mean_errors": 31 / 3, "below": 1, "equal": 1, "above": 1}
    assert summary["euclidean"]["equal"] == 3
