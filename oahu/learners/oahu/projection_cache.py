"""The preprocessed rows of items an update has seen before (ours; docs/algorithms.md,
"Projections of known items").

An update preprocesses its triplets' items: a (3B, d) × (d, K) product onto the principal
axes, an eighth of a default strict step's time on Fashion-MNIST (d = 784, K = 200), where the
weights are read from memory for three rows, and still about a tenth of a B = 256 update's. A
stream names the same items again and again (10^6 constraints over 35,000 items name each ~86
times), so :class:`ProjectionCache` keeps the rows it was given, by the items' row keys
(:mod:`oahu.learners.oahu.item_keys`), up to a memory budget, first in first out. An update
takes the rows of the items it keeps and projects the others (a strict update: its whole block,
see ``UpdateStep.project``), adding the rows it did not know.

A kept row is the one a block computed when the item was first seen. BLAS kernels round each
row of a product of a few rows on its own (checked for OpenBLAS's, whatever the row's neighbours
and position), so in a strict update the rows are the ones projecting again would give, and the
model is the same. A block of another size may round a row otherwise, in its last bit (a
micro-batch's, or a row alone, which takes the matrix-vector kernel): deterministically, so the
same seed still gives the same model. The cache is not checkpointed: a restored learner projects
items again as it meets them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["ProjectionCache"]

# Bytes of kept rows at most: 65,536 rows of 201 floats (the default on Fashion-MNIST) fit.
MEMORY_BUDGET = 64 * 2**20
_MAX_ROWS = 65_536
_FIRST_ROWS = 1024  # the arrays grow by doubling up to the budget


class ProjectionCache:
    """Preprocessed rows of ``width`` floats by 64-bit item key, at most ``MEMORY_BUDGET``
    bytes of them (and 65,536 rows), the oldest forgotten first.

    >>> cache = ProjectionCache(width=2)
    >>> keys = np.array([11, 12, 13])
    >>> cache.lookup(keys)[1].tolist()
    [True, True, True]
    >>> cache.add(keys, np.arange(6, dtype=np.float32).reshape(3, 2))
    >>> rows, missing = cache.lookup(np.array([13, 14, 11]))
    >>> rows.tolist(), missing.tolist()
    ([[4.0, 5.0], [0.0, 0.0], [0.0, 1.0]], [False, True, False])
    >>> cache.hits, cache.misses, len(cache)
    (2, 4, 3)
    """

    def __init__(self, width: int, budget: int = MEMORY_BUDGET) -> None:
        self.width = width
        self.capacity = max(1, min(_MAX_ROWS, budget // (4 * width)))
        self.rows = np.zeros((min(_FIRST_ROWS, self.capacity), width), np.float32)
        self.keys = np.zeros(len(self.rows), np.int64)
        self.slot_of: dict[int, int] = {}
        self.added = 0  # rows ever added: the next slot is added % capacity
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.slot_of)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The kept rows of ``keys`` (n, width), a copy with zeros where a key is not kept, and
        which keys are not kept (n,); ``hits`` and ``misses`` count the keys."""
        slot_of = self.slot_of
        slots = np.fromiter((slot_of.get(key, -1) for key in keys.tolist()), np.int64, len(keys))
        missing = slots < 0
        n_missing = int(missing.sum())
        self.hits += len(keys) - n_missing
        self.misses += n_missing
        rows = self.rows[slots]
        rows[missing] = 0.0
        return rows, missing

    def rows_of(
        self,
        items: np.ndarray,
        keys: np.ndarray,
        project: Callable[[np.ndarray], np.ndarray],
        whole_block: bool = False,
    ) -> np.ndarray:
        """The rows of ``items`` (n, d) by ``keys`` (n,): the kept ones, and ``project`` of the
        others in one block (of all of them, with ``whole_block``, when one is not kept), which
        are then kept.

        >>> cache = ProjectionCache(width=1)
        >>> twice = lambda items: 2 * items
        >>> cache.rows_of(np.array([[1.0], [2.0]], np.float32), np.array([7, 8]), twice).tolist()
        [[2.0], [4.0]]
        >>> cache.rows_of(np.array([[5.0], [2.0]], np.float32), np.array([9, 8]), twice).tolist()
        [[10.0], [4.0]]
        """
        rows, missing = self.lookup(keys)
        if missing.any():
            if whole_block:
                missing[:] = True
            fresh = project(items[missing])
            rows[missing] = fresh
            self.add(keys[missing], fresh)
        return rows

    def add(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Keep ``rows`` (n, width) under ``keys`` (n,), those not kept yet; the oldest kept
        rows make room."""
        slot_of = self.slot_of
        for key, row in zip(keys.tolist(), rows, strict=True):
            if key in slot_of:
                continue
            index = self.added
            self.added += 1
            slot = index % self.capacity
            if index >= self.capacity:  # every slot taken: this one holds the oldest row
                del slot_of[int(self.keys[slot])]
            elif slot == len(self.rows):  # the arrays are full: grow, up to the capacity
                self._grow()
            self.rows[slot] = row
            self.keys[slot] = key
            slot_of[key] = slot

    def _grow(self) -> None:
        size = min(2 * len(self.rows), self.capacity)
        rows = np.zeros((size, self.width), np.float32)
        rows[: len(self.rows)] = self.rows
        keys = np.zeros(size, np.int64)
        keys[: len(self.keys)] = self.keys
        self.rows, self.keys = rows, keys
