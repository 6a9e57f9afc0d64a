"""Cross-modal constraint streams: objects seen in two modalities, constraints across them.

Each object has a feature vector in modality A and one in modality B (:mod:`streams.views`:
two views of the same objects, rows aligned) and one class label; or (*linked* objects,
:mod:`streams.linked`) each modality has objects of its own, n_a and n_b of them, and a list of
links (i, j) says which object of A is linked to which of B. A constraint's items are
(object, modality) pairs, so a learner with one tower per modality can map both into one space:

* a *pair* (u, v) with a ``similar`` flag says whether u and v are linked (same class, or a
  given link), e.g. an image of a digit in A and the Fourier coefficients of a digit in B;
* a *triplet* (anchor, positive, negative) says the anchor is closer to the positive than to
  the negative (a relative preference).

:func:`streams.cross_modal_protocol.build_cross_modal_stream` draws them from class labels or
from links by the CSLP protocol (Zhen and Zha, AAAI 2015; streams/FORMAT.md, "Cross-modal
streams"); :class:`CrossModalStream` holds the objects once and the constraints as object
indices with the modality of each item.

Stream file (.npz), written with ``np.savez_compressed`` and read with ``allow_pickle=False``;
a stream of labelled objects is format version 1, one of linked objects version 2:

=============  =====================  ====================================================
key            dtype, shape           meaning
=============  =====================  ====================================================
format         str, 0-d               ``"oahu-cross-modal-stream"``
modalities     str (2,)               the two modalities' names, A then B
XA, XB         float32 (n, d_a/d_b)   each object's features in A and in B (version 2:
                                      (n_a, d_a) and (n_b, d_b))
y              int64 (n,)             object labels (version 2: empty, (0,))
dev_idx        int64 (n_dev,)         development objects (constraints come from these;
                                      version 2: A's)
test_idx       int64 (n_test,)        test objects; dev_idx and test_idx partition range(n)
                                      (version 2: range(n_a))
constraints    int64 (N, 3)           object indices; a pair uses columns 0, 1, -1 in 2
modality       int8 (N, 3)            0 (A) or 1 (B) per item; -1 in a pair's column 2
kinds          int8 (N,)              0: pair, 1: triplet (anchor, positive, negative)
similar        bool (N,)              a pair's linked flag; False for a triplet
meta           str, 0-d               JSON object with "format" and "format_version"
links          int64 (m, 2)           version 2 only: linked (object of A, object of B)
dev_idx_b      int64                  version 2 only: B's development objects
test_idx_b     int64                  version 2 only: B's test objects (with dev_idx_b, a
                                      partition of range(n_b))
=============  =====================  ====================================================

A version-2 file keeps every array of version 1, so that a reader of version 1 gets as far as
``format_version`` and refuses the file by its number.

The single-modality reader (:func:`oahu.streams.load_stream`) refuses this file by name, and
:meth:`CrossModalStream.load` a single-modality one (:mod:`streams.stream_families`). The
JSON Lines form is :mod:`streams.cross_modal_jsonl`, re-exported here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oahu.streams.atomic import atomic_open
from oahu.streams.cross_modal_jsonl import read_cross_modal_jsonl, write_cross_modal_jsonl
from oahu.streams.linked import (
    PerModality,
    check_links,
)
from oahu.streams.stream_families import CROSS_MODAL_FORMAT, single_modality_refusal
from oahu.streams.stream_file import check_meta, load_by_format, read_npz_arrays
from oahu.streams.views import check_two_names

__all__ = [
    "CONSTRAINT_KINDS",
    "CROSS_MODAL_FORMAT",
    "FORMAT_VERSION",
    "LINKED_FORMAT_VERSION",
    "PAIR",
    "PROTOCOL",
    "TRIPLET",
    "CrossModalStream",
    "load_cross_modal_stream",
    "read_cross_modal_jsonl",
    "write_cross_modal_jsonl",
]

#: The .npz format version of a stream of labelled objects, and of one of linked objects.
FORMAT_VERSION, LINKED_FORMAT_VERSION = 1, 2
#: The codes of ``kinds``: 0 a pair, 1 a triplet; CONSTRAINT_KINDS[code] is the kind's name.
PAIR, TRIPLET = 0, 1
CONSTRAINT_KINDS: tuple[str, str] = ("pair", "triplet")
PROTOCOL = "cslp"
_NPZ_KEYS = (
    "format",
    "modalities",
    "XA",
    "XB",
    "y",
    "dev_idx",
    "test_idx",
    "constraints",
    "modality",
    "kinds",
    "similar",
    "meta",
)
_LINKED_NPZ_KEYS = ("links", "dev_idx_b", "test_idx_b")  # version 2's, beside version 1's


def _integers(value: Any, name: str, shape: tuple[int | None, ...]) -> np.ndarray:
    """``value`` as int64 of ``shape`` (None: any length), or a ValueError naming ``name``."""
    arr = np.asarray(value)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected integers, got dtype {arr.dtype}")
    if arr.ndim != len(shape) or any(
        s is not None and s != a for s, a in zip(shape, arr.shape, strict=True)
    ):
        wanted = tuple("N" if s is None else s for s in shape)
        raise ValueError(f"{name}: expected shape {wanted}, got {arr.shape}".replace("'N'", "N"))
    return np.ascontiguousarray(arr, dtype=np.int64)


def _first(mask: np.ndarray) -> int:
    """The first row (constraint) where ``mask`` (N,) or (N, k) holds."""
    return int(np.argwhere(mask)[0][0])


@dataclass
class CrossModalStream(PerModality):
    """Objects in two modalities (features stored once per modality) and a stream of
    cross-modal constraints over them (the module docstring lists the fields).

    A stream of labelled objects has ``y`` and one split, ``dev_idx``/``test_idx``, of the
    objects both modalities share. A stream of *linked* objects has ``links`` instead of ``y``
    (None), objects of its own in each modality (``X[0]`` and ``X[1]`` may differ in length)
    and a split per modality: ``dev_idx``/``test_idx`` A's, ``dev_idx_b``/``test_idx_b`` B's.
    :meth:`dev_objects` and :meth:`test_objects` give either kind's split by modality.

    Constructing one validates and normalises every field (``ValueError`` naming the field and
    the bad value); the splits are kept sorted.

    >>> XA = np.eye(4, dtype=np.float32); XB = np.ones((4, 2), dtype=np.float32)
    >>> s = CrossModalStream(
    ...     ("img", "txt"), (XA, XB), y=[0, 0, 1, 1], dev_idx=[2, 0, 1], test_idx=[3],
    ...     constraints=[[0, 0, -1], [1, 0, 2]], modality=[[0, 1, -1], [1, 0, 0]],
    ...     kinds=[PAIR, TRIPLET], similar=[True, False])
    >>> len(s), s.n_objects, s.dims, s.dev_idx.tolist()
    (2, 4, (4, 2), [0, 1, 2])
    >>> CrossModalStream(("img", "txt"), (XA, XB), [0, 0, 1, 1], [0, 1, 2], [3],
    ...                  [[0, 3, -1]], [[0, 1, -1]], [PAIR], [False])
    Traceback (most recent call last):
    ...
    ValueError: constraints: object 3 (constraint 0) is not a development object (dev_idx)

    Linked objects: four of A, two of B, object 1 of B linked to A's 0 and 2.

    >>> s = CrossModalStream(
    ...     ("drug", "target"), (XA, XB[:2]), y=None, dev_idx=[0, 1], test_idx=[2, 3],
    ...     constraints=[[1, 0, -1], [0, 1, 0]], modality=[[1, 0, -1], [0, 1, 1]],
    ...     kinds=[PAIR, TRIPLET], similar=[False, False], links=[[0, 1], [2, 1]],
    ...     dev_idx_b=[0, 1], test_idx_b=[])
    >>> s.sizes, s.dev_links.tolist(), s.test_links.tolist(), s.dev_objects(1).tolist()
    ((4, 2), [[0, 1]], [], [0, 1])
    """

    modalities: tuple[str, str]
    X: tuple[np.ndarray, np.ndarray]
    y: np.ndarray | None
    dev_idx: np.ndarray
    test_idx: np.ndarray
    constraints: np.ndarray
    modality: np.ndarray
    kinds: np.ndarray
    similar: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    links: np.ndarray | None = None
    dev_idx_b: np.ndarray | None = None
    test_idx_b: np.ndarray | None = None

    def __post_init__(self) -> None:
        self._check_objects()
        self._check_split()
        self._check_constraints()
        check_meta(self.meta)

    def _check_objects(self) -> None:
        names = self.modalities = check_two_names(self.modalities, "modalities")
        if len(self.X) != 2:
            raise ValueError(f"X: expected one array per modality (2), got {len(self.X)}")
        X = tuple(np.ascontiguousarray(x, dtype=np.float32) for x in self.X)
        for name, x in zip(names, X, strict=True):
            if self.is_linked and x.ndim != 2:
                raise ValueError(
                    f"X: modality {name!r} must have shape (n_objects, d), got {x.shape}"
                )
            if not self.is_linked and (x.ndim != 2 or len(x) != len(X[0])):
                raise ValueError(
                    f"X: modality {name!r} must have shape (n_objects, d) with the "
                    f"{len(X[0])} rows of {names[0]!r}, got {x.shape}"
                )
        self.X = X  # type: ignore[assignment]
        if not self.is_linked:
            if self.y is None:
                raise ValueError("y: expected the objects' labels (or links, for linked objects)")
            self.y = _integers(self.y, "y", (self.n_objects,))
            return
        if self.y is not None:
            raise ValueError(
                "y: linked objects carry no class labels (their links say what is relevant); "
                f"expected None, got {type(self.y).__name__}"
            )
        try:
            self.links = check_links(self.links, self.sizes)
        except ValueError as e:
            raise ValueError(f"links: {e}") from None

    def _check_split(self) -> None:
        fields = (("dev_idx", "test_idx"), ("dev_idx_b", "test_idx_b"))
        if not self.is_linked:
            for name in fields[1]:
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: only for linked objects (links), whose modalities have "
                        "objects of their own"
                    )
        for m in (0, 1) if self.is_linked else (0,):
            n = self.sizes[m]
            for name in fields[m]:
                if getattr(self, name) is None:
                    raise ValueError(
                        f"{name}: linked objects are split per modality; expected "
                        f"{self.modalities[m]}'s objects, got None"
                    )
                idx = np.sort(_integers(getattr(self, name), name, (None,)))
                if idx.size and (idx[0] < 0 or idx[-1] >= n):
                    raise ValueError(
                        f"{name}: object indices must lie in [0, {n}), got [{idx[0]}, {idx[-1]}]"
                    )
                setattr(self, name, idx)
            times = np.bincount(
                np.concatenate([getattr(self, name) for name in fields[m]]), minlength=n
            )
            if np.any(times != 1):
                i = _first(times != 1)
                what = (
                    f"the {n} objects of {self.modalities[m]!r}"
                    if self.is_linked
                    else "range(n_objects)"
                )
                raise ValueError(
                    f"{'/'.join(fields[m])}: must partition {what}, but object {i} is listed "
                    f"{int(times[i])} times"
                )

    def _check_constraints(self) -> None:
        c = _integers(self.constraints, "constraints", (None, 3))
        n_constraints = len(c)
        kinds = _integers(self.kinds, "kinds", (n_constraints,))
        bad = (kinds != PAIR) & (kinds != TRIPLET)
        if bad.any():
            k = _first(bad)
            raise ValueError(
                f"kinds: expected {PAIR} (pair) or {TRIPLET} (triplet), got {kinds[k]} at "
                f"constraint {k}"
            )
        unused = np.zeros((n_constraints, 3), dtype=bool)
        unused[:, 2] = kinds == PAIR  # a pair's third slot
        if np.any(c[unused] != -1):
            k = _first(unused & (c != -1))
            raise ValueError(
                f"constraints: a pair holds -1 in column 2, constraint {k} holds {c[k, 2]}"
            )
        used = ~unused
        modality = _integers(self.modality, "modality", (n_constraints, 3))
        wrong = (used & (modality != 0) & (modality != 1)) | (unused & (modality != -1))
        if wrong.any():
            k = _first(wrong)
            raise ValueError(
                f"modality: expected 0 ({self.modalities[0]}) or 1 ({self.modalities[1]}) per "
                f"item and -1 in a pair's column 2, constraint {k} "
                f"({CONSTRAINT_KINDS[kinds[k]]}) holds {modality[k].tolist()}"
            )
        m = np.where(used, modality, 0)
        n = np.array(self.sizes)[m]
        out = used & ((c < 0) | (c >= n))
        if out.any():
            k, j = (int(i) for i in np.argwhere(out)[0])
            of = f" of {self.modalities[m[k, j]]!r}" if self.is_linked else ""
            raise ValueError(
                f"constraints: object indices{of} must lie in [0, {n[k, j]}), constraint {k} "
                f"holds {c[k].tolist()}"
            )
        dev = np.zeros_like(used)
        for code, size in enumerate(self.sizes):
            is_dev = np.zeros(size, dtype=bool)
            is_dev[self.dev_objects(code)] = True
            items = used & (m == code)
            dev[items] = is_dev[c[items]]
        not_dev = used & ~dev
        if not_dev.any():
            k, j = (int(i) for i in np.argwhere(not_dev)[0])
            split = ("dev_idx", "dev_idx_b")[m[k, j]] if self.is_linked else "dev_idx"
            of = f" of {self.modalities[m[k, j]]!r}" if self.is_linked else ""
            raise ValueError(
                f"constraints: object {c[k, j]}{of} (constraint {k}) is not a development "
                f"object ({split})"
            )
        similar = np.asarray(self.similar)
        if similar.dtype != np.bool_ or similar.shape != (n_constraints,):
            raise ValueError(
                f"similar: expected a bool array of shape ({n_constraints},), got "
                f"{similar.dtype} {similar.shape}"
            )
        if np.any(similar & (kinds == TRIPLET)):
            k = _first(similar & (kinds == TRIPLET))
            raise ValueError(f"similar: a triplet's flag is False, constraint {k} holds True")
        self.constraints = c
        self.kinds = kinds.astype(np.int8)
        self.modality = modality.astype(np.int8)
        self.similar = np.ascontiguousarray(similar)

    # ------------------------------------------------------------------ access
    @property
    def is_linked(self) -> bool:
        """Whether the objects are linked objects (``links``) rather than labelled ones."""
        return self.links is not None

    @property
    def n_objects(self) -> int:
        """The objects both modalities share; linked objects have :attr:`sizes` instead."""
        if self.is_linked:
            raise ValueError(
                f"n_objects: linked objects have objects of their own in each modality, "
                f"{self.sizes[0]} and {self.sizes[1]} (sizes)"
            )
        return len(self.X[0])

    def dev_objects(self, m: int) -> np.ndarray:
        """Modality ``m``'s development objects (0: A, 1: B)."""
        return self.dev_idx_b if self.is_linked and m == 1 else self.dev_idx  # type: ignore[return-value]

    def test_objects(self, m: int) -> np.ndarray:
        """Modality ``m``'s test objects (0: A, 1: B)."""
        return self.test_idx_b if self.is_linked and m == 1 else self.test_idx  # type: ignore[return-value]

    def _links_within(self, part: str) -> np.ndarray:
        if self.links is None:
            raise ValueError(f"{part}_links: a stream of labelled objects has no links")
        split = self.dev_objects if part == "dev" else self.test_objects
        inside = np.isin(self.links[:, 0], split(0)) & np.isin(self.links[:, 1], split(1))
        return self.links[inside]

    @property
    def dev_links(self) -> np.ndarray:
        """The links between two development objects, (k, 2): what constraints are drawn from."""
        return self._links_within("dev")

    @property
    def test_links(self) -> np.ndarray:
        """The links between two test objects, (k, 2): what the evaluation holds out."""
        return self._links_within("test")

    def __len__(self) -> int:
        return len(self.constraints)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the stream to ``path`` (.npz, see the module docstring), atomically."""
        version = LINKED_FORMAT_VERSION if self.is_linked else FORMAT_VERSION
        meta = {**self.meta, "format": CROSS_MODAL_FORMAT, "format_version": version}
        arrays = {
            "format": np.array(CROSS_MODAL_FORMAT),
            "modalities": np.array(self.modalities),
            "XA": self.X[0],
            "XB": self.X[1],
            "y": np.zeros(0, dtype=np.int64) if self.y is None else self.y,
            "dev_idx": self.dev_idx,
            "test_idx": self.test_idx,
            "constraints": self.constraints,
            "modality": self.modality,
            "kinds": self.kinds,
            "similar": self.similar,
            "meta": np.array(json.dumps(meta)),
        }
        if self.is_linked:
            arrays.update(links=self.links, dev_idx_b=self.dev_idx_b, test_idx_b=self.test_idx_b)
        with atomic_open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CrossModalStream:
        """Read a stream written by :meth:`save`; ``ValueError`` naming the field if invalid,
        and naming the reader of a single-modality stream file given instead."""
        arrays = read_npz_arrays(path)
        if "format" not in arrays and ("kind" in arrays or "X" in arrays):
            raise single_modality_refusal(path)
        _require(arrays, _NPZ_KEYS, path)
        announced = str(arrays["format"][()]) if arrays["format"].ndim == 0 else None
        if announced != CROSS_MODAL_FORMAT:
            raise ValueError(
                f"format: {path} announces {announced!r}, this reader reads {CROSS_MODAL_FORMAT!r}"
            )
        try:
            meta = json.loads(str(arrays["meta"][()]))
        except (json.JSONDecodeError, IndexError) as e:
            raise ValueError(f"meta: {path} holds no JSON object: {e}") from e
        version = meta.get("format_version") if isinstance(meta, dict) else None
        if version not in (FORMAT_VERSION, LINKED_FORMAT_VERSION):
            raise ValueError(
                f"format_version: {path} has {version!r}, this version reads {FORMAT_VERSION} "
                f"and {LINKED_FORMAT_VERSION}"
            )
        linked: dict[str, Any] = {}
        y: np.ndarray | None = arrays["y"]
        if version == LINKED_FORMAT_VERSION:
            _require(arrays, _LINKED_NPZ_KEYS, path)
            if arrays["y"].size:
                raise ValueError(
                    f"y: {path} is a stream of linked objects (format_version "
                    f"{LINKED_FORMAT_VERSION}), whose y is empty; it holds {arrays['y'].size}"
                )
            linked = {key: arrays[key] for key in _LINKED_NPZ_KEYS}
            y = None
        return cls(
            modalities=tuple(arrays["modalities"].tolist()),  # type: ignore[arg-type]
            X=(arrays["XA"], arrays["XB"]),
            y=y,
            dev_idx=arrays["dev_idx"],
            test_idx=arrays["test_idx"],
            constraints=arrays["constraints"],
            modality=arrays["modality"],
            kinds=arrays["kinds"],
            similar=arrays["similar"],
            meta=meta,
            **linked,
        )


def _require(arrays: dict[str, np.ndarray], keys: tuple[str, ...], path: Any) -> None:
    missing = [key for key in keys if key not in arrays]
    if missing:
        raise ValueError(f"{path}: missing field(s) {', '.join(missing)}")


def load_cross_modal_stream(path: str | os.PathLike[str]) -> CrossModalStream:
    """A cross-modal stream file of either format, .npz or JSON Lines, told by its first bytes
    (as :func:`oahu.streams.load_stream` tells a single-modality one)."""
    return load_by_format(path, CrossModalStream.load, read_cross_modal_jsonl)
