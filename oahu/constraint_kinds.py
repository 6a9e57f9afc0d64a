"""The kinds of similarity constraint, and the roles of their items, in one place.

A kind is what a learner declares it learns (:class:`oahu.learner.Capabilities`), what a stream
file holds (:mod:`oahu.streams.stream_file`) and what a message carries
(:mod:`oahu.connectors.constraint`). A new kind (say a quadruplet: two pairs, the first closer
than the second) is a new entry here, a codec for it, and a learner declaring it.

>>> CONSTRAINT_KINDS, ROLES["pair"]
(('triplet', 'pair'), ('left', 'right'))
"""

from __future__ import annotations

from typing import Literal, get_args

ConstraintKind = Literal["triplet", "pair"]

#: Every kind, in the order their codes were assigned.
CONSTRAINT_KINDS: tuple[ConstraintKind, ...] = get_args(ConstraintKind)

#: The roles of a constraint's items, in wire order: a triplet says the anchor is more similar
#: to the positive than to the negative; a labelled pair says whether left and right are similar.
ROLES: dict[str, tuple[str, ...]] = {
    "triplet": ("anchor", "positive", "negative"),
    "pair": ("left", "right"),
}
