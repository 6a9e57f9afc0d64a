"""benchmarks/drift.py: the outcomes it records are the ones the learner's drift watch sees, and
recording them changes nothing the learner does."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.drift import record_outcomes
from oahu.learners.oahu.learner import OAHU


def _learner(batch_size: int) -> OAHU:
    model = OAHU(6, hidden_width=8, preprocess="none", batch_size=batch_size, device="cpu")
    model.update_step.learned = 10_000  # past the ramp: updates of batch_size
    return model


def test_recorded_outcomes_are_the_watched_ones_and_change_nothing() -> None:
    triplets = np.random.default_rng(0).random((40, 3, 6), dtype=np.float32)
    for batch_size in (1, 8):  # a micro-batch hands its outcomes over as ranked together
        recorded, plain = _learner(batch_size), _learner(batch_size)
        outcomes = record_outcomes(recorded)
        for model in (recorded, plain):
            model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
        mistakes = np.concatenate(outcomes)
        assert mistakes.shape == (40,)
        assert recorded.prequential.seen == 40
        assert mistakes.mean() == pytest.approx(1.0 - recorded.prequential.combined)
        assert np.array_equal(recorded.alpha, plain.alpha)
        assert recorded.diagnostics() == plain.diagnostics()
