"""What a constraint message decodes to, and the one error every decoding failure raises.

A constraint is one of the kinds of :mod:`oahu.constraint_kinds`: a triplet (anchor, positive,
negative), a labelled pair (left, right, similar) or a quadruplet (a, b, c, d), which says
D(a, b) < D(c, d). Its items are either all referenced by id (resolved later against an
``ItemStore``) or all carried inline as float32 vectors; the wire formats are described in
``connectors/MESSAGES.md``. Decoding a kind is the codecs' business; learning it is the learner's,
and a service whose learner does not learn a kind dead-letters it as ``unsupported_kind``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oahu.constraint_kinds import CONSTRAINT_KINDS, ROLES, ConstraintKind

__all__ = [
    "CONSTRAINT_KINDS",
    "INT64_MAX",
    "INT64_MIN",
    "MISSING_LABEL",
    "REASONS",
    "ROLES",
    "Constraint",
    "ConstraintBatch",
    "ConstraintKind",
    "DecodeError",
]

#: The range of the int64 ids and labels carry on the wire and in batches.
INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
#: Label value meaning "this item carries no label": a label is in (MISSING_LABEL, INT64_MAX].
MISSING_LABEL = INT64_MIN

#: Every reason a ``DecodeError`` may carry; dead letters and metrics are keyed by these.
REASONS = (
    "undecodable",  # not a message of any known format, malformed structure or truncated
    "unknown_version",  # a format version this code does not speak
    "bad_kind",  # a kind the codecs do not know (not one of CONSTRAINT_KINDS)
    "bad_dimension",  # empty, ragged or wrong-sized feature vectors
    "non_finite",  # NaN or infinity in a feature vector
    "unknown_item",  # an item id the item store does not hold
)


class DecodeError(ValueError):
    """A message that cannot become a usable constraint.

    ``reason`` is one of ``REASONS`` (stable, machine-readable); ``detail`` says what was wrong
    in words.

    >>> err = DecodeError("bad_kind", "kind='quad'")
    >>> err.reason, str(err)
    ('bad_kind', "bad_kind: kind='quad'")
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"reason: must be one of {REASONS}, got {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.reason, self.detail))


@dataclass(frozen=True, eq=False)
class Constraint:
    """One decoded constraint.

    Exactly one of ``ids`` (one str id per item) and ``x`` (float32, shape (n_items, dim)) is
    set. ``labels`` holds one optional int per item; ``similar`` is set for pairs only; ``ts``
    is seconds since the Unix epoch.

    >>> c = Constraint("triplet", ids=("17", "3", "8"))
    >>> c.roles, c.n_items, c.by_id
    (('anchor', 'positive', 'negative'), 3, True)
    >>> Constraint("pair", x=np.zeros((2, 4), np.float32), similar=True).dim
    4
    >>> Constraint("quadruplet", ids=("1", "2", "3", "4")).roles
    ('a', 'b', 'c', 'd')
    """

    kind: str
    ids: tuple[str, ...] | None = None
    x: np.ndarray | None = None
    labels: tuple[int | None, ...] | None = None
    similar: bool | None = None
    ts: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROLES:
            raise ValueError(f"kind: must be one of {tuple(ROLES)}, got {self.kind!r}")
        k = len(ROLES[self.kind])
        if (self.ids is None) == (self.x is None):
            raise ValueError("ids, x: exactly one must be given")
        if self.ids is not None and len(self.ids) != k:
            raise ValueError(f"ids: a {self.kind} has {k} items, got {len(self.ids)}")
        if self.x is not None and (self.x.ndim != 2 or self.x.shape[0] != k):
            raise ValueError(f"x: expected shape ({k}, dim), got {self.x.shape}")
        if self.labels is not None and len(self.labels) != k:
            raise ValueError(f"labels: expected {k} entries, got {len(self.labels)}")
        if (self.kind == "pair") != (self.similar is not None):
            raise ValueError("similar: required for pairs and only for pairs")

    @property
    def roles(self) -> tuple[str, ...]:
        return ROLES[self.kind]

    @property
    def n_items(self) -> int:
        return len(self.roles)

    @property
    def by_id(self) -> bool:
        return self.ids is not None

    @property
    def dim(self) -> int | None:
        """Feature dimension of inline items (None when items are referenced by id)."""
        return None if self.x is None else int(self.x.shape[1])


@dataclass(frozen=True, eq=False)
class ConstraintBatch:
    """Many constraints of one layout as arrays, rows in stream order.

    ``index`` gives each row's position in the decoded input, so errors and offsets can be
    matched back. ``ids`` has shape (n, n_items) — int64 from the binary format, str from JSON —
    or ``x`` has shape (n, n_items, dim) float32; n_items is 3 for triplets, 2 for pairs and 4
    for quadruplets, items in the order of ``ROLES[kind]``. ``labels`` is int64 (n, n_items) with
    ``MISSING_LABEL`` for absent labels; ``similar`` (n,) bool for pairs; ``ts`` (n,) float64.

    >>> b = ConstraintBatch("pair", index=np.arange(2), ids=np.array([[1, 2], [3, 4]]),
    ...                     similar=np.array([True, False]))
    >>> len(b), b.n_items, b.row(1).ids, b.row(1).similar
    (2, 2, ('3', '4'), False)
    """

    kind: str
    index: np.ndarray
    ids: np.ndarray | None = None
    x: np.ndarray | None = None
    labels: np.ndarray | None = None
    similar: np.ndarray | None = None
    ts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def n_items(self) -> int:
        return len(ROLES[self.kind])

    def take(self, rows: np.ndarray) -> ConstraintBatch:
        """The sub-batch of the given rows (a bool mask or integer positions)."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        return ConstraintBatch(
            self.kind,
            self.index[rows],
            pick(self.ids),
            pick(self.x),
            pick(self.labels),
            pick(self.similar),
            pick(self.ts),
        )

    def row(self, i: int) -> Constraint:
        """Row ``i`` as a ``Constraint`` (for inspection; the hot path stays in arrays)."""
        labels = None
        if self.labels is not None:
            labels = tuple(None if v == MISSING_LABEL else int(v) for v in self.labels[i])
        return Constraint(
            self.kind,
            ids=None if self.ids is None else tuple(str(v) for v in self.ids[i]),
            x=None if self.x is None else self.x[i],
            labels=labels,
            similar=None if self.similar is None else bool(self.similar[i]),
            ts=None if self.ts is None else float(self.ts[i]),
        )
