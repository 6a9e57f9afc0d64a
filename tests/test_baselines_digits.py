"""End to end on sklearn's digits: does each baseline's learned metric lower 5-NN error below
the Euclidean metric it starts from?

Protocol (the paper's, docs/algorithms.md, shrunk to test size): digits (1,797 items) shuffled with
seed 0 and split 1:1 into development and test halves; features standardised with statistics of the
development half and rows scaled to unit length, so that RDML's threshold 1 and OASIS's inner
product are well posed and Euclidean, cosine and OASIS-at-W0=I rank alike. Streams of 2,000 triplets
(anchor, a positive of its class, a negative of another class) are drawn from the development half,
one per seed in STREAM_SEEDS, since a single stream moves the error by a few items; OPML instead
makes its own one pass over the development half. The gallery is the development half, the queries
the test half.

Inputs are preprocessed here, so the learners take them as they are (preprocess="none").
Hyper-parameters were chosen on a split of the development half only: LEGO η = 0.1, RDML
λ = 0.1, OASIS C = 0.1 (the earlier class defaults; see the classes' docstrings for the current
ones, tuned on Fashion-MNIST); OPML's λ = 0.03 was picked the same way for this one-pass protocol
(dev-internal 5-NN error 0.067 against 0.071 at the paper's λ = 1e-3 and 0.074 Euclidean).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from oahu.learner import Learner
from oahu.learners.baselines.euclidean import Euclidean
from oahu.learners.baselines.lego import LEGO
from oahu.learners.baselines.oasis import OASIS
from oahu.learners.baselines.opml import OPML
from oahu.learners.baselines.rdml import RDML

K = 5
N_TRIPLETS = 2000
N_FEATURES = 64
STREAM_SEEDS = (1, 2, 3, 4, 5)
RAW = {"preprocess": "none"}  # the fixture already standardised the items and made them unit rows


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    half = len(x) // 2
    dev, test = order[:half], order[half:]
    scaler = StandardScaler().fit(x[dev])
    x_dev, x_test = scaler.transform(x[dev]), scaler.transform(x[test])
    x_dev /= np.linalg.norm(x_dev, axis=1, keepdims=True)
    x_test /= np.linalg.norm(x_test, axis=1, keepdims=True)
    return x_dev, y[dev], x_test, y[test]


def sample_triplets(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    anchors = rng.integers(0, len(x), n)
    positives = np.empty(n, dtype=int)
    negatives = np.empty(n, dtype=int)
    for t, i in enumerate(anchors):
        same = np.flatnonzero(y == y[i])
        positives[t] = rng.choice(same[same != i])
        negatives[t] = rng.choice(np.flatnonzero(y != y[i]))
    return x[anchors], x[positives], x[negatives]


def knn_error(learner: Learner, x_gallery, y_gallery, x_query, y_query) -> float:
    gallery = learner.embed(x_gallery, role="gallery")[0]
    queries = learner.embed(x_query, role="query")[0]
    if learner.metric == "l2":
        predicted = KNeighborsClassifier(n_neighbors=K).fit(gallery, y_gallery).predict(queries)
    else:  # inner product: the K most similar gallery items vote
        nearest = np.argsort(-(queries @ gallery.T), axis=1, kind="stable")[:, :K]
        predicted = np.array([np.bincount(votes).argmax() for votes in y_gallery[nearest]])
    return float((predicted != y_query).mean())


@pytest.fixture(scope="module")
def mistakes(digits) -> dict[str, list[int]]:
    """Test-half 5-NN mistakes (of 899) per learner, one entry per triplet stream."""
    x_dev, y_dev, x_test, y_test = digits
    near, far = LEGO.targets_from_sample(x_dev, seed=0)
    counts: dict[str, list[int]] = {}
    for seed in STREAM_SEEDS:
        triplets = sample_triplets(x_dev, y_dev, N_TRIPLETS, seed=seed)
        learners: dict[str, Learner] = {
            "euclidean": Euclidean(N_FEATURES),
            "lego": LEGO(N_FEATURES, **RAW, target_similar=near, target_dissimilar=far),
            "rdml": RDML(N_FEATURES, **RAW, learning_rate=0.1),
            "oasis": OASIS(N_FEATURES, **RAW, aggressiveness=0.1),
        }
        for name, learner in learners.items():
            learner.learn_triplets(*triplets)
            error = knn_error(learner, x_dev, y_dev, x_test, y_test)
            counts.setdefault(name, []).append(round(error * len(y_test)))
    opml = OPML(N_FEATURES, **RAW, regularization=0.03)  # one pass over the development half
    opml.learn_samples(x_dev, y_dev)
    counts["opml"] = [round(knn_error(opml, x_dev, y_dev, x_test, y_test) * len(y_test))]
    return counts


def test_euclidean_reference(mistakes):
    assert mistakes["euclidean"] == [32] * len(STREAM_SEEDS)  # error 0.0356


@pytest.mark.parametrize(
    ("name", "fewer_on_average", "measured"),
    [
        ("lego", 8, [22, 19, 24, 19, 25]),
        ("rdml", 4, [30, 26, 27, 28, 22]),
        ("opml", 8, [23]),  # its own single pass: one number
    ],
)
def test_learned_metric_beats_euclidean(mistakes, name, fewer_on_average, measured):
    euclidean = mistakes["euclidean"][0]
    assert max(mistakes[name]) < euclidean  # on every stream
    assert np.mean(mistakes[name]) <= euclidean - fewer_on_average
    np.testing.assert_allclose(mistakes[name], measured, atol=3)


def test_oasis_learns_triplets_but_not_a_better_knn_metric(digits, mistakes):
    """OASIS does not beat Euclidean kNN here on any stream, and no C tried on the development
    half did (C ∈ {0.001, 0.01, 0.1}).

    Its W is neither symmetric nor PSD, so S(q, g) = qᵀWg is not a distance: gallery items with
    a large ‖W g‖ become everyone's neighbours. What OASIS optimises, ranking a positive above a
    negative, does improve on held-out triplets, which this test checks instead.
    """
    assert min(mistakes["oasis"]) > mistakes["euclidean"][0]
    np.testing.assert_allclose(mistakes["oasis"], [50, 65, 41, 50, 58], atol=4)  # 0.046–0.072
    x_dev, y_dev, x_test, y_test = digits
    held_out = sample_triplets(x_test, y_test, 2000, seed=99)
    oasis = OASIS(N_FEATURES, **RAW, aggressiveness=0.1)
    before = triplet_accuracy(oasis, *held_out)
    oasis.learn_triplets(*sample_triplets(x_dev, y_dev, N_TRIPLETS, seed=1))
    after = triplet_accuracy(oasis, *held_out)
    assert before == pytest.approx(0.87, abs=0.02)
    assert after >= before + 0.04


def triplet_accuracy(oasis: OASIS, anchors, positives, negatives) -> float:
    queries = oasis.embed(anchors, role="query")[0]
    to_pos = (queries * oasis.embed(positives, role="gallery")[0]).sum(axis=1)
    to_neg = (queries * oasis.embed(negatives, role="gallery")[0]).sum(axis=1)
    return float((to_pos > to_neg).mean())
