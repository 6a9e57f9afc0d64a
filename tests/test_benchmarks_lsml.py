"""benchmarks/lsml_reference.py: metric-learn's LSML on PCA-reduced items, from quadruplets, and
its adapter to oahu's evaluation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("metric_learn")  # the bench extra (scripts/bootstrap.sh installs it)

from benchmarks.lsml_reference import LSMLMetric, LSMLReference, fit_lsml
from oahu.experiments.evaluation import evaluate
from oahu.streams.datasets import load_digits
from oahu.streams.protocol import split_dev_test


def class_quadruplets(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """(n, 4) positions into ``labels``: (a, b) of one class, (c, d) of two different classes."""
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    _, start, count = np.unique(labels[order], return_index=True, return_counts=True)
    a = rng.integers(len(labels), size=n)
    cls = np.searchsorted(np.unique(labels), labels[a])
    b = order[start[cls] + rng.integers(count[cls])]
    c, d = rng.integers(len(labels), size=(2, n))
    same = labels[c] == labels[d]
    while same.any():  # redraw d until its class differs from c's
        d[same] = rng.integers(len(labels), size=int(same.sum()))
        same = labels[c] == labels[d]
    return np.stack([a, b, c, d], axis=1)


@pytest.fixture(scope="module")
def digits_fit() -> tuple[LSMLReference, np.ndarray, np.ndarray]:
    ds = load_digits()
    dev, _ = split_dev_test(ds.n_items, seed=0)
    quads = class_quadruplets(ds.y[dev], 400, seed=0)
    ref = fit_lsml(ds.X[dev], quads, n_components=20, seed=0, max_iter=100)
    return ref, dev, quads


def test_lsml_changes_the_metric_and_satisfies_more_quadruplets(digits_fit) -> None:
    ref, dev, _ = digits_fit
    assert ref.n_quadruplets == 400 and 1 <= ref.n_iter <= 100
    assert ref.projection.shape == (20, 64)
    # Not the PCA alone: LSML moved its factor away from the identity...
    assert not np.allclose(ref.lsml_components, np.eye(20), atol=1e-3)
    # ... towards the constraints: fewer of them violated than under the PCA's Euclidean metric.
    assert ref.violated_after < ref.violated_before
    # transform is the Mahalanobis metric: |L P (x − y)|² = (x − y)ᵀ Pᵀ M P (x − y).
    x = load_digits().X[dev[:5]].astype(np.float64)
    z = ref.transform(x)
    diff = (x[0] - x[1]) @ ref.pca_components.T
    m = ref.lsml_components.T @ ref.lsml_components
    assert np.sum((z[0] - z[1]) ** 2) == pytest.approx(diff @ m @ diff)


def test_the_adapter_is_evaluated_like_any_learner(digits_fit) -> None:
    ref, dev, _ = digits_fit
    ds = load_digits()
    _, test = split_dev_test(ds.n_items, seed=0)
    learner = LSMLMetric(ds.n_features, ref)
    lsml = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500)
    pca_alone = replace(ref, lsml_components=np.eye(20))
    pca = evaluate(LSMLMetric(ds.n_features, pca_alone), ds.X, ds.y, dev, test, n_pairs=500)
    assert np.isfinite(lsml.error) and 0.0 <= lsml.error <= 1.0
    # Measured: 13 of 898 wrong, as with the PCA alone and with Euclidean distances (LSML stops
    # after 2 steps here); far from chance (0.9).
    assert lsml.error < 0.05
    # The adapter embeds with LSML's metric, not the PCA's: the verification scores differ
    # (measured AUC 0.8717 against 0.8701).
    assert lsml.auc != pca.auc and lsml.depth_spread != pca.depth_spread
    # A fixed metric: a stream of quadruplets changes nothing.
    items = ds.X[dev[:8]].reshape(2, 4, -1)
    assert not learner.learn("quadruplet", items).any()
    assert learner.constraints_used == 0


def test_quadruplets_are_positions_or_items_and_degenerate_ones_drop() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 6))
    quads = rng.integers(0, 50, size=(30, 4))
    quads[:3, 3] = quads[:3, 2]  # c = d: LSML's gradient would divide by D(c, d) = 0
    by_position = fit_lsml(X, quads, n_components=4, max_iter=10)
    by_items = fit_lsml(X, X[quads], n_components=4, max_iter=10)
    assert by_position.n_quadruplets == by_items.n_quadruplets == 27
    np.testing.assert_allclose(by_position.projection, by_items.projection)
    with pytest.raises(ValueError, match="quadruplets"):
        fit_lsml(X, quads[:, :3], n_components=4)
    with pytest.raises(ValueError, match="n_components"):
        fit_lsml(X, quads, n_components=7)
    with pytest.raises(ValueError, match="reference"):
        LSMLMetric(5, by_items)
