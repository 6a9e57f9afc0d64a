"""What a constraint message decodes to, and the one error every decoding failure raises.

A constraint is one of the kinds of :mod:`oahu.constraint_kinds`: a triplet (anchor, positive,
negative), a labelled pair (left, right, similar) or a quadruplet (a, b, c, d), which says
D(a, b) < D(c, d). Its items are either all referenced by id (resolved later against an
``ItemStore``) or all carried inline as float32 vectors; the wire formats are described in
``connectors/MESSAGES.md``. Decoding a kind is the codecs' business; learning it is the learner's,
and a service whose learner does not learn a kind dead-letters it as ``unsupported_kind``.

Each item may also name its modality (``"pix"`` for images, ``"fou"`` for texts: cross-modal
constraints, Zhen and Zha, AAAI 2015); ``modalities`` None means every item is in
``DEFAULT_MODALITY``. A service that learns one modality dead-letters constraints with items in
any other as ``unsupported_modality`` rather than learning them as if they were one modality; a
cross-modal service learns the modalities of its model and dead-letters the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from oahu.constraint_kinds import CONSTRAINT_KINDS, ROLES, ConstraintKind

__all__ = [
    "CONSTRAINT_KINDS",
    "DEFAULT_MODALITY",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_MODALITY_LENGTH",
    "MISSING_LABEL",
    "MODALITY_RULE",
    "REASONS",
    "ROLES",
    "Constraint",
    "ConstraintBatch",
    "ConstraintKind",
    "DecodeError",
    "check_modalities",
    "modality_problem",
    "split_modality",
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
    "bad_modality",  # an item modality that is not a valid name, or given for some items only
)

#: The modality of every item of a constraint that names none (``modalities`` None), and the one
#: modality a single-modality service learns: the one place this name is defined.
DEFAULT_MODALITY = "default"
#: The longest modality name, in characters (ASCII, so also in bytes on the wire).
MAX_MODALITY_LENGTH = 64
#: What a modality name is, in words for error messages.
MODALITY_RULE = f"1 to {MAX_MODALITY_LENGTH} letters, digits, '_', '-' or '.'"
_MODALITY_NAME = re.compile(rf"[A-Za-z0-9_.\-]{{1,{MAX_MODALITY_LENGTH}}}", re.ASCII)


def modality_problem(name: object) -> str | None:
    """Why ``name`` is not a modality name, or None when it is one.

    >>> modality_problem("pix") is None, modality_problem("pi x")
    (True, "expected 1 to 64 letters, digits, '_', '-' or '.', got 'pi x'")
    """
    if isinstance(name, str) and _MODALITY_NAME.fullmatch(name):
        return None
    try:
        text = repr(name)
    except (RecursionError, ValueError):  # a value nested about as deeply as JSON allows
        text = f"a {type(name).__name__}"
    return f"expected {MODALITY_RULE}, got {text if len(text) <= 80 else text[:77] + '...'}"


def check_modalities(modalities: object, n_items: int, field: str = "modalities") -> None:
    """``ValueError`` naming ``field`` unless ``modalities`` is one modality name per item.

    >>> check_modalities(("pix", "fou", "fou"), 3)
    >>> check_modalities(("pix", ""), 2)
    Traceback (most recent call last):
    ValueError: modalities[1]: expected 1 to 64 letters, digits, '_', '-' or '.', got ''
    """
    names = None if isinstance(modalities, str | bytes) else modalities
    if not isinstance(names, tuple | list | np.ndarray):
        raise ValueError(f"{field}: expected one modality name per item, got {modalities!r}")
    if len(names) != n_items:
        raise ValueError(f"{field}: expected {n_items} entries, got {len(names)}")
    for i, name in enumerate(names):
        problem = modality_problem(name)
        if problem is not None:
            raise ValueError(f"{field}[{i}]: {problem}")


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
    is seconds since the Unix epoch. ``modalities`` holds one modality name per item (see
    ``modality_problem``); None means every item is in ``DEFAULT_MODALITY``.

    >>> c = Constraint("triplet", ids=("17", "3", "8"))
    >>> c.roles, c.n_items, c.by_id
    (('anchor', 'positive', 'negative'), 3, True)
    >>> Constraint("pair", x=np.zeros((2, 4), np.float32), similar=True).dim
    4
    >>> Constraint("quadruplet", ids=("1", "2", "3", "4")).roles
    ('a', 'b', 'c', 'd')
    >>> Constraint("pair", ids=("1", "2"), similar=True, modalities=("pix", "fou")).modalities
    ('pix', 'fou')
    """

    kind: str
    ids: tuple[str, ...] | None = None
    x: np.ndarray | None = None
    labels: tuple[int | None, ...] | None = None
    similar: bool | None = None
    ts: float | None = None
    modalities: tuple[str, ...] | None = None

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
        if self.modalities is not None:
            check_modalities(self.modalities, k)
            object.__setattr__(self, "modalities", tuple(self.modalities))

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

    @property
    def item_modalities(self) -> tuple[str, ...]:
        """Each item's modality, ``DEFAULT_MODALITY`` for a constraint that names none."""
        return self.modalities or (DEFAULT_MODALITY,) * self.n_items


@dataclass(frozen=True, eq=False)
class ConstraintBatch:
    """Many constraints of one layout as arrays, rows in stream order.

    ``index`` gives each row's position in the decoded input, so errors and offsets can be
    matched back. ``ids`` has shape (n, n_items) — int64 from the binary format, str from JSON —
    or ``x`` has shape (n, n_items, dim) float32; n_items is 3 for triplets, 2 for pairs and 4
    for quadruplets, items in the order of ``ROLES[kind]``. ``labels`` is int64 (n, n_items) with
    ``MISSING_LABEL`` for absent labels; ``similar`` (n,) bool for pairs; ``ts`` (n,) float64;
    ``modalities`` a numpy str array (n, n_items) of modality names, or None when every item is in
    ``DEFAULT_MODALITY`` (a str array keeps ``batch.modalities == name`` one vectorised step).

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
    modalities: np.ndarray | None = None

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
            pick(self.modalities),
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
            modalities=None if self.modalities is None else tuple(map(str, self.modalities[i])),
        )


def split_modality(
    batch: ConstraintBatch, modality: str = DEFAULT_MODALITY
) -> tuple[ConstraintBatch | None, list[tuple[int, tuple[str, ...]]]]:
    """The rows of ``batch`` whose items are all in ``modality`` (None if there are none), and
    (input index, the row's modalities) for every other row, in order.

    >>> b = ConstraintBatch("pair", index=np.array([7, 8]), ids=np.array([[1, 2], [3, 4]]),
    ...                     similar=np.array([True, False]),
    ...                     modalities=np.array([["default", "default"], ["pix", "fou"]]))
    >>> kept, others = split_modality(b)
    >>> kept.index.tolist(), others
    ([7], [(8, ('pix', 'fou'))])
    """
    if batch.modalities is None:
        inside = np.full(len(batch), modality == DEFAULT_MODALITY)
        names = np.full((len(batch), batch.n_items), DEFAULT_MODALITY)
    else:
        inside, names = (batch.modalities == modality).all(axis=1), batch.modalities
    others = [(int(batch.index[r]), tuple(map(str, names[r]))) for r in np.flatnonzero(~inside)]
    if inside.all():
        return batch, others
    return (batch.take(inside) if inside.any() else None), others
