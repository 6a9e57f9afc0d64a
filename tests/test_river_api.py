"""The river interface: learn_one on constraints equals the learner on the same constraints, and
transform_one feeds river's distance-based models."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from river import neighbors

from oahu.adapters.river_api import MetricTransformer, Pair, Triplet
from oahu.learners.oahu.config import PRESETS, OAHUConfig
from oahu.learners.oahu.learner import OAHU

SMALL_OAHU = {"hidden_width": 8, "embedding_dim": 4, "device": "cpu"}


def as_item(row: np.ndarray) -> dict[str, float]:
    return {f"f{i}": float(v) for i, v in enumerate(row)}


ITEMS = np.random.default_rng(2).random((60, 5), dtype=np.float32)  # unlabelled, to prepare on


@pytest.mark.parametrize("preset", [None, "paper"])
def test_learn_one_equals_the_learner_on_the_same_triplets(preset):
    """OAHU's default learner, prepared on unlabelled items first, and the paper's."""
    rng = np.random.default_rng(0)
    triplets = rng.random((40, 3, 5), dtype=np.float32)
    params = {**SMALL_OAHU, "preset": preset}
    metric = MetricTransformer("oahu", params, items=[as_item(x) for x in ITEMS])
    for a, p, n in triplets:
        metric.learn_one(Triplet(as_item(a), as_item(p), as_item(n)))
    reference = OAHU(5, **params)
    if reference.needs_prepare:
        reference.prepare(ITEMS)
    reference.learn("triplet", triplets)
    assert metric.learner_.updates == reference.updates == 40
    np.testing.assert_array_equal(metric.learner_.alpha, reference.alpha)
    for name, value in reference.network.tensors().items():
        np.testing.assert_array_equal(metric.learner_.network.tensors()[name], value)
    point = metric.transform_one(as_item(triplets[0, 0]))
    depths = (PRESETS["paper"] if preset else OAHUConfig()).n_depths  # L + 1
    assert list(point) == list(range(depths * 4))  # depths of 4-d embeddings, side by side
    np.testing.assert_array_equal(list(point.values()), reference.transform(triplets[0, 0])[0])


def test_pairs_and_a_river_pipeline():
    rng = np.random.default_rng(1)
    centres = {"a": np.array([0.0, 0.0, 1.0]), "b": np.array([1.0, 0.0, 0.0])}
    metric = MetricTransformer("rdml", {"preprocess": "none"})
    model = metric | neighbors.KNNClassifier(n_neighbors=3)
    labels = rng.choice(["a", "b"], size=100)
    labelled = [(label, centres[label] + rng.normal(size=3) * 0.2) for label in labels]
    for (label, x), (other, y) in itertools.pairwise(labelled):
        metric.learn_one(Pair(as_item(x), as_item(y), similar=label == other))
        model.learn_one(as_item(x), label)  # the pipeline hands the transformer the item
    assert metric.learner_.constraints_seen == 99 and metric.learner_.updates > 0
    predictions = [model.predict_one(as_item(centres[label])) for label in "ab"]
    assert predictions == ["a", "b"]


def test_what_a_stream_cannot_give_is_refused():
    for params in (SMALL_OAHU, {**SMALL_OAHU, "preset": "paper", "preprocess": "center"}):
        with pytest.raises(ValueError, match=r"fits preprocessing or E0 on a batch.*items="):
            MetricTransformer("oahu", params).transform_one({"x": 1})
    with pytest.raises(ValueError, match="items: feature 'y' missing"):
        MetricTransformer("oahu", SMALL_OAHU, items=[{"x": 1.0}]).transform_one({"x": 1, "y": 2})
    with pytest.raises(ValueError, match="learns a similarity"):
        MetricTransformer("oasis", {"preprocess": "none"}).learn_one({"x": 1.0})
    metric = MetricTransformer("euclidean")
    metric.learn_one({"x": 1.0, "y": 2.0})
    with pytest.raises(ValueError, match="feature 'y' missing"):
        metric.transform_one({"x": 1.0})
