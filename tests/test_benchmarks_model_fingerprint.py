"""benchmarks/model_fingerprint.py: the same learning gives the same fingerprint, and any change
of the model changes it."""

from __future__ import annotations

import numpy as np

from benchmarks.model_fingerprint import fingerprint
from oahu.learners.oahu.learner import OAHU


def _learned(n: int, seed: int = 0) -> OAHU:
    rng = np.random.default_rng(0)
    items = rng.random((40, 8), dtype=np.float32)
    learner = OAHU(n_features=8, hidden_width=16, seed=seed, device="cpu")
    learner.prepare(items)
    learner.learn_triplets(items[:n], items[1 : n + 1], items[2 : n + 2])
    return learner


def test_the_same_learning_gives_the_same_fingerprint_and_a_different_model_another():
    assert fingerprint(_learned(20)) == fingerprint(_learned(20))
    assert fingerprint(_learned(20)) != fingerprint(_learned(21))
    assert fingerprint(_learned(20)) != fingerprint(_learned(20, seed=1))
    assert len(fingerprint(_learned(1))) == 16
