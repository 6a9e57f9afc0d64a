"""Prequential ("test-then-train") accuracy of a metric learner: the stream-learning standard.

Before a constraint is learned, each depth of the metric either ranks it right (the positive
closer to the anchor than the negative) or not; so does the α-combined metric, whose distance is
Σ_l α(l) D(l) (the verification score of Eq. 26). Averaged over a rolling window of recent
constraints this is an unbiased, always-current estimate of how well the model ranks constraints
it has not learned yet, which is what an operator watches to know the model is getting better
(docs/algorithms.md, "Prequential accuracy").

The window is a ring buffer of outcomes, one column per depth and one for the combined metric,
written a block at a time: an update of B constraints records them with a few array operations
rather than one rolling mean per outcome (river's ``utils.Rolling``, which this replaces, cost a
micro-batch 6% of its time in Python calls). The means are the same: the share of right
rankings among the window's outcomes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class PrequentialAccuracy:
    """Rolling prequential accuracy of each depth and of the α-combined metric.

    >>> tracker = PrequentialAccuracy(n_depths=2, window=3)
    >>> tracker.update(np.array([[True, False], [True, True]]), np.array([True, True]))
    >>> tracker.combined, tracker.per_depth, tracker.seen
    (1.0, [1.0, 0.5], 2)
    """

    def __init__(self, n_depths: int, window: int) -> None:
        self.window = window
        self.n_depths = n_depths
        # Columns: the depths, then the combined metric; a ring of ``window`` rows.
        self._outcomes = np.zeros((window, n_depths + 1), dtype=bool)
        self._right = np.zeros(n_depths + 1, dtype=np.int64)  # right rankings in the window
        self._count = 0  # outcomes in the window
        self._next = 0  # the row the next outcome takes
        self.seen = 0  # constraints ranked so far

    def update(self, depth_correct: np.ndarray, combined_correct: np.ndarray) -> None:
        """Record constraints in stream order: ``depth_correct`` (n, n_depths) and
        ``combined_correct`` (n,), True where the metric ranked the constraint right."""
        n = len(combined_correct)
        self.seen += n
        if n == 1 and self._count == self.window:
            self._record_one(depth_correct, combined_correct)
        elif n:
            depths = np.asarray(depth_correct, bool).reshape(n, -1)
            self._record(np.concatenate([depths, np.asarray(combined_correct, bool)[:, None]], 1))

    def _record_one(self, depth_correct: np.ndarray, combined_correct: np.ndarray) -> None:
        """A strict step's one outcome into a full window, in Python scalars: the block path's
        dozen array operations took 4% of a strict step in a profile."""
        row = self._outcomes[self._next]
        outcome = [*np.asarray(depth_correct, bool).ravel().tolist(), bool(combined_correct[0])]
        right = self._right
        for column, (old, new) in enumerate(zip(row.tolist(), outcome, strict=True)):
            if old != new:
                right[column] += 1 if new else -1
        row[:] = outcome
        self._next = (self._next + 1) % self.window

    def _record(self, block: np.ndarray) -> None:
        n, window = len(block), self.window
        if n >= window:  # the block replaces the whole window: its last rows, oldest first
            self._outcomes[:] = block[n - window :]
            self._right = self._outcomes.sum(0)
            self._count, self._next = window, 0
            return
        order = np.arange(n)
        rows = (self._next + order) % window
        # The rows already holding an outcome: it leaves the window.
        full = self._count + order >= window
        self._right -= self._outcomes[rows[full]].sum(0)
        self._outcomes[rows] = block
        self._right += block.sum(0)
        self._count = min(window, self._count + n)
        self._next = (self._next + n) % window

    def _accuracy(self, column: int) -> float:
        return float(self._right[column] / self._count) if self._count else 0.0

    @property
    def combined(self) -> float:
        """Accuracy of the α-combined metric over the window (0.0 before any constraint)."""
        return self._accuracy(self.n_depths)

    @property
    def per_depth(self) -> list[float]:
        """Accuracy of each depth over the window."""
        return [self._accuracy(column) for column in range(self.n_depths)]

    def get_state(self) -> dict[str, Any]:
        # The windows' contents, oldest first: replaying them rebuilds the rolling means exactly.
        oldest_first = self._outcomes[
            (self._next - self._count + np.arange(self._count)) % self.window
        ]
        return {
            "depths": [oldest_first[:, column].tolist() for column in range(self.n_depths)],
            "combined": oldest_first[:, self.n_depths].tolist(),
            "seen": self.seen,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if len(state["depths"]) != self.n_depths:
            raise ValueError(
                f"prequential: expected {self.n_depths} depths, got {len(state['depths'])}"
            )
        columns = [*state["depths"], state["combined"]]
        held = len(state["combined"])
        if any(len(column) != held for column in columns):
            raise ValueError(
                f"prequential: every depth's window must hold {held} outcomes, as the combined one"
            )
        self._outcomes[:] = False
        self._right[:] = 0
        self._count = self._next = 0
        if held:
            self._record(np.array(columns, dtype=bool).reshape(self.n_depths + 1, held).T)
        self.seen = int(state["seen"])
