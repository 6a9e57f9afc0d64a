"""Prequential ("test-then-train") accuracy of a metric learner: the stream-learning standard.

Before a constraint is learned, each depth of the metric either ranks it right (the positive
closer to the anchor than the negative) or not; so does the α-combined metric, whose distance is
Σ_l α(l) D(l) (the verification score of Eq. 26). Averaged over a rolling window of recent
constraints this is an unbiased, always-current estimate of how well the model ranks constraints
it has not learned yet, which is what an operator watches to know the model is getting better
(docs/algorithms.md, "Prequential accuracy"). The rolling means are river's
(``river.utils.Rolling`` over ``river.metrics.Accuracy``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from river import metrics, utils


class PrequentialAccuracy:
    """Rolling prequential accuracy of each depth and of the α-combined metric.

    >>> tracker = PrequentialAccuracy(n_depths=2, window=3)
    >>> tracker.update(np.array([[True, False], [True, True]]), np.array([True, True]))
    >>> tracker.combined, tracker.per_depth, tracker.seen
    (1.0, [1.0, 0.5], 2)
    """

    def __init__(self, n_depths: int, window: int) -> None:
        self.window = window
        self._depths = [self._rolling() for _ in range(n_depths)]
        self._combined = self._rolling()
        self.seen = 0  # constraints ranked so far

    def _rolling(self) -> utils.Rolling:
        return utils.Rolling(metrics.Accuracy, window_size=self.window)

    def update(self, depth_correct: np.ndarray, combined_correct: np.ndarray) -> None:
        """Record constraints in stream order: ``depth_correct`` (n, n_depths) and
        ``combined_correct`` (n,), True where the metric ranked the constraint right."""
        for row, combined in zip(depth_correct.tolist(), combined_correct.tolist(), strict=True):
            for rolling, correct in zip(self._depths, row, strict=True):
                rolling.update(True, correct)
            self._combined.update(True, combined)
        self.seen += len(combined_correct)

    @property
    def combined(self) -> float:
        """Accuracy of the α-combined metric over the window (0.0 before any constraint)."""
        return float(self._combined.get())

    @property
    def per_depth(self) -> list[float]:
        """Accuracy of each depth over the window."""
        return [float(rolling.get()) for rolling in self._depths]

    def get_state(self) -> dict[str, Any]:
        # The windows' contents, oldest first: replaying them rebuilds the rolling means exactly.
        return {
            "depths": [[args[1] for args, _ in rolling.window] for rolling in self._depths],
            "combined": [args[1] for args, _ in self._combined.window],
            "seen": self.seen,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if len(state["depths"]) != len(self._depths):
            raise ValueError(
                f"prequential: expected {len(self._depths)} depths, got {len(state['depths'])}"
            )
        self._depths = [self._rolling() for _ in self._depths]
        self._combined = self._rolling()
        for rolling, outcomes in zip(self._depths, state["depths"], strict=True):
            for correct in outcomes:
                rolling.update(True, bool(correct))
        for correct in state["combined"]:
            self._combined.update(True, bool(correct))
        self.seen = int(state["seen"])
