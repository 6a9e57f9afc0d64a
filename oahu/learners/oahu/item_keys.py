"""How the learner recognises an item: by the feature row the stream gave, hashed to 64 bits.

The learner sees features, not ids, so two constraints that name the same row name the same
item. The key is taken from the row as given, not from its projection: a block's projection
rounds a row by how many rows it projects at once, and the same item must be one item in
every block (docs/algorithms.md, "Mining").
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["row_keys"]


def row_keys(rows: np.ndarray) -> np.ndarray:
    """A 64-bit key per float32 row (the last axis): equal rows get equal keys, and different
    rows collide with probability about 2^-64 (a random linear hash of the rows' bits).

    >>> rows = np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]], dtype=np.float32)
    >>> keys = row_keys(rows)
    >>> bool(keys[0] == keys[1]), bool(keys[0] == keys[2])
    (True, False)
    """
    bits = np.ascontiguousarray(rows, dtype=np.float32).view(np.uint32).astype(np.uint64)
    # A product in uint64 wraps modulo 2^64, where the sum's order does not matter.
    return (bits @ _multipliers(bits.shape[-1])).view(np.int64)


@functools.cache
def _multipliers(width: int) -> np.ndarray:
    # Fixed odd 64-bit multipliers: the same row gets the same key in every process and run.
    draw = np.random.default_rng(0x0A40).integers(0, 2**63, size=width, dtype=np.uint64)
    return draw * np.uint64(2) + np.uint64(1)
