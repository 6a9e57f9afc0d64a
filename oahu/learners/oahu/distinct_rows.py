"""The distinct rows of an update's items (ours; docs/algorithms.md, "One update").

A micro-batch update sends its new, replayed and mined triplets through the network, and the
same item comes back many times among them: mining draws the nearest known-similar and
known-dissimilar items of random anchors, and a few items are nearest to many. Along a
Fashion-MNIST stream at B = 256 a quarter of an update's rows repeated another one
(benchmarks/README.md, "Learning at scale"). The network's rows are independent of each other,
so each distinct row needs to go through it once, and its outputs serve every row that repeats
it.

Rows are grouped by a fingerprint (their product with a fixed random vector) and a group is
taken as one row only after its rows are found equal, element by element: two rows that differ
in a last bit may share a fingerprint, and they stay two rows.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["distinct_rows"]


@cache
def _probe(width: int) -> np.ndarray:
    # Any fixed vector with no zero weight separates rows; a seeded one keeps runs alike.
    return np.random.default_rng(0).standard_normal(width).astype(np.float32)


def distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first, row_of)`` for the rows of ``x`` (m, d): ``first`` are the positions of the
    distinct rows, each at its first occurrence, in order, and ``row_of`` (m,) says which of them
    each row is, so that ``x[first][row_of]`` equals ``x``. None when every row is distinct, or
    when rows that share a fingerprint differ (or are not finite, which never compare equal).

    >>> x = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [5.0, 6.0], [3.0, 4.0]], np.float32)
    >>> first, row_of = distinct_rows(x)
    >>> first.tolist(), row_of.tolist()
    ([0, 1, 3], [0, 1, 0, 2, 1])
    >>> distinct_rows(x[:2]) is None
    True
    """
    _, first, group = np.unique(x @ _probe(x.shape[1]), return_index=True, return_inverse=True)
    if len(first) == len(x):
        return None
    # np.unique orders the groups by fingerprint; number them by first occurrence instead.
    order = np.argsort(first)
    number = np.empty_like(order)
    number[order] = np.arange(len(order))
    first, row_of = first[order], number[group.ravel()]
    repeats = np.flatnonzero(first[row_of] != np.arange(len(x)))
    if not (x[repeats] == x[first[row_of[repeats]]]).all():
        return None
    return first, row_of
