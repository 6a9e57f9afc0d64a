"""The kinds of similarity constraint, and the roles of their items, in one place.

A kind is what a learner declares it learns (:class:`oahu.capabilities.Capabilities`), what a
stream file holds (:mod:`oahu.streams.stream_file`) and what a message carries
(:mod:`oahu.connectors.constraint`). A new kind is a new entry here, a codec for it, and a
learner declaring it.

A quadruplet (a, b, c, d) says D(a, b) < D(c, d) (Law, Thome and Cord, "Learning a distance
metric from relative comparisons between quadruplets of images", IJCV 2016, Eq. 7); the other
kinds are special cases of it (their Section 3.1; :func:`triplet_as_quadruplet`): a triplet
(anchor, positive, negative) is (anchor, positive, anchor, negative), a similar pair (i, j) is
D(i, j) < u against an upper bound u and a dissimilar one D(i, j) > l against a lower bound l.

>>> CONSTRAINT_KINDS, ROLES["pair"], ROLES["quadruplet"]
(('triplet', 'pair', 'quadruplet'), ('left', 'right'), ('a', 'b', 'c', 'd'))
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

ConstraintKind = Literal["triplet", "pair", "quadruplet"]

#: Every kind, in the order their codes were assigned.
CONSTRAINT_KINDS: tuple[ConstraintKind, ...] = get_args(ConstraintKind)

#: The roles of a constraint's items, in wire order: a triplet says the anchor is more similar
#: to the positive than to the negative; a labelled pair says whether left and right are similar;
#: a quadruplet says a and b are more similar than c and d.
ROLES: dict[str, tuple[str, ...]] = {
    "triplet": ("anchor", "positive", "negative"),
    "pair": ("left", "right"),
    "quadruplet": ("a", "b", "c", "d"),
}

#: Where a triplet's items sit in its quadruplet (anchor, positive, anchor, negative).
TRIPLET_AS_QUADRUPLET: tuple[int, int, int, int] = (0, 1, 0, 2)


def triplet_as_quadruplet(triplets: np.ndarray) -> np.ndarray:
    """Triplets (n, 3, ...) as the quadruplets (n, 4, ...) that say the same.

    >>> triplet_as_quadruplet(np.array([[7, 3, 9]])).tolist()
    [[7, 3, 7, 9]]
    """
    return np.asarray(triplets)[:, TRIPLET_AS_QUADRUPLET]
