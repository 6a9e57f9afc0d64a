"""A bounded reservoir of past constraints (triplets or quadruplets) that OAHU's updates replay
(ours, docs/algorithms.md).

One pass over a stream sees each constraint once; an update that also learns a few constraints
drawn from a uniform sample of the past (Vitter's reservoir sampling, "Algorithm R") gets more out
of every label, at a memory cost fixed by ``capacity``, however long the stream runs. The triplets
are kept as the preprocessed rows the learner trains on, so a replayed one costs no lookup.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from oahu.checks import check_int

__all__ = ["ReplayReservoir", "last_write_of_each_slot"]


class ReplayReservoir:
    """A uniform sample of at most ``capacity`` of the constraints added so far, each kept as
    its ``n_roles`` rows (3 for triplets, 4 for quadruplets).

    ``rng`` is the learner's generator: sharing it keeps one seeded sequence of draws per
    learner, so the same seed and stream give the same replays.

    >>> rng = np.random.default_rng(0)
    >>> memory = ReplayReservoir(capacity=2, n_features=1, rng=rng)
    >>> memory.add(np.arange(9, dtype=np.float32).reshape(3, 3, 1))
    >>> memory.size, memory.seen, memory.sample(4).shape
    (2, 3, (4, 3, 1))
    >>> ReplayReservoir(2, 1, rng).sample(4).shape  # nothing to replay yet
    (0, 3, 1)
    """

    def __init__(
        self, capacity: int, n_features: int, rng: np.random.Generator, n_roles: int = 3
    ) -> None:
        self.capacity = check_int(capacity, "capacity")
        self.rng = rng
        self.rows = np.zeros((capacity, n_roles, n_features), dtype=np.float32)
        self.size = 0  # constraints held
        self.seen = 0  # constraints ever offered
        # Changes with every write, so that a copy kept elsewhere (a device's) knows it is stale.
        self.revision = 0

    def add(self, triplets: np.ndarray) -> None:
        """Offer constraints (n, n_roles, d) in stream order; each of the first ``capacity`` is
        kept, and the i-th after them replaces a random held one with probability capacity / i."""
        if len(triplets) == 1 and self.size == self.capacity:  # the strict step's, no arrays
            self.revision += 1
            self.seen += 1
            slot = int(self.rng.integers(0, self.seen))
            if slot < self.capacity:
                self.rows[slot] = triplets[0]
            return
        self.place(triplets, self.draw_slots(len(triplets)))

    def draw_slots(self, n: int, size: int | None = None, seen: int | None = None) -> np.ndarray:
        """The slots of Algorithm R for ``n`` constraints offered in stream order to a reservoir
        that holds ``size`` of the ``seen`` offered so far (default: this one, now): the free
        slots while it fills, then for the i-th offered a uniform draw below i, which keeps it
        where it is below ``capacity``.

        >>> memory = ReplayReservoir(capacity=2, n_features=1, rng=np.random.default_rng(0))
        >>> slots = memory.draw_slots(5)
        >>> slots[:2].tolist(), bool((slots[2:] < [3, 4, 5]).all())
        ([0, 1], True)
        """
        size = self.size if size is None else size
        seen = self.seen if seen is None else seen
        fill = min(n, self.capacity - size)
        slots = np.empty(n, np.int64)
        slots[:fill] = np.arange(size, size + fill)
        if n > fill:
            slots[fill:] = self.rng.integers(0, np.arange(seen + fill + 1, seen + n + 1))
        return slots

    def place(self, constraints: np.ndarray, slots: np.ndarray) -> None:
        """Offer constraints (n, n_roles, d) in stream order whose slots were drawn already
        (:meth:`draw_slots`; ``slots[i] >= capacity``: not kept): while the reservoir fills, each
        is appended whatever its slot says.

        >>> memory = ReplayReservoir(capacity=2, n_features=1, rng=np.random.default_rng(0))
        >>> memory.place(np.arange(12, dtype=np.float32).reshape(4, 3, 1), np.array([0, 1, 0, 2]))
        >>> memory.rows[:, 0, 0].tolist(), memory.size, memory.seen
        ([6.0, 3.0], 2, 4)
        """
        self.revision += 1
        fill = min(len(constraints), self.capacity - self.size)
        self.rows[self.size : self.size + fill] = constraints[:fill]
        self.size += fill
        keep = slots[fill:] < self.capacity
        # Duplicate slots: numpy assigns in order, so the later constraint wins, as in sequence.
        self.rows[slots[fill:][keep]] = constraints[fill:][keep]
        self.seen += len(constraints)

    def sample(self, k: int) -> np.ndarray:
        """``k`` constraints drawn uniformly (with replacement) from the reservoir: (k, n_roles,
        d), or (0, n_roles, d) while it is empty."""
        if not self.size or k < 1:
            return self.rows[:0]
        if k == 1:  # a strict step's: the scalar draw is the same draw, without the array's cost
            slot = int(self.rng.integers(0, self.size))
            return self.rows[slot : slot + 1].copy()
        return self.rows[self.rng.integers(0, self.size, size=k)]

    def get_state(self) -> dict[str, Any]:
        return {
            "rows": torch.from_numpy(self.rows[: self.size].copy()),
            "seen": self.seen,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        rows = state["rows"].numpy()
        if rows.ndim != 3 or rows.shape[1:] != self.rows.shape[1:] or len(rows) > self.capacity:
            raise ValueError(
                f"replay memory: expected at most {self.capacity} rows of shape "
                f"{self.rows.shape[1:]}, got {tuple(rows.shape)}"
            )
        self.size = len(rows)
        self.rows[: self.size] = rows
        self.revision += 1
        self.seen = int(state["seen"])


def last_write_of_each_slot(slots: np.ndarray, groups: np.ndarray, spare: int) -> np.ndarray:
    """Reservoir ``slots`` (drawn by :meth:`ReplayReservoir.draw_slots`) of constraints written
    a group at a time (``groups``: each one's group, in stream order), with every write but the
    last of one group to one slot sent to the ``spare`` row. Algorithm R keeps the later of two
    constraints drawn into one slot; a device writes a group's rows at once (the rows of one
    update), where the order of duplicate writes is not defined.

    >>> last_write_of_each_slot(np.array([3, 3, 5, 3]), np.array([0, 0, 0, 1]), spare=9).tolist()
    [9, 3, 5, 3]
    """
    pairs = np.stack([groups, slots], 1)[::-1]
    _, last_from_end = np.unique(pairs, axis=0, return_index=True)
    keep = np.zeros(len(slots), bool)
    keep[len(slots) - 1 - last_from_end] = True
    return np.where(keep | (slots >= spare), slots, spare)
