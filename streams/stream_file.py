"""Constraint streams in memory and on disk.

A :class:`ConstraintStream` stores the items' features and labels once and the constraints as
tuples of item indices, so a 10,000-triplet Fashion-MNIST stream costs one copy of the dataset
plus 240 kB of indices. See streams/FORMAT.md for both file formats.

Stream file (.npz, format version 1), written with ``np.savez_compressed`` and read with
``allow_pickle=False``:

=============  =========================  ===================================================
key            dtype, shape               meaning
=============  =========================  ===================================================
X              float32 (n, d)             item features
y              int64 (n,)                 item labels
dev_idx        int64 (n_dev,)             development items (constraints come from these)
test_idx       int64 (n_test,)            test items; dev_idx and test_idx partition range(n)
kind           str, 0-d                   "triplet", "pair" or "quadruplet"
constraints    int64 (N, 3), (N, 2) or    (anchor, positive, negative), (u, v) or (a, b, c, d):
               (N, 4)                     item indices, in stream order
similar        bool (N,)                  pairs only: True when u and v are similar
meta           str, 0-d                   JSON object; always holds "format_version": 1
concepts       int8 (N,)                  optional: the concept in force for each constraint
concept_labels int64 (C, n)               optional: each item's label under each concept
gallery_idx    int64 (n_gallery,)         optional: evaluation's kNN gallery (default dev_idx)
query_idx      int64 (n_query,)           optional: evaluation's queries (default test_idx)
start_idx      int64 (n_start,)           optional: dev items at the start (default dev_idx)
flipped        bool (N,)                  optional: True where the constraint was made wrong
image_shape    int64 (2,)                 optional: (height, width) of items that are images
=============  =========================  ===================================================

The optional keys are written only when the stream has them (drifting streams,
:mod:`streams.drift`; noisy streams, :mod:`streams.noise`; streams of an image dataset,
``image_shape``), so a stream without them is the same file as before they existed.

The JSON Lines interchange format lives in :mod:`streams.jsonl` and is re-exported here.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from oahu.checks import check_choice, check_int
from oahu.constraint_kinds import CONSTRAINT_KINDS, ROLES
from oahu.streams.atomic import atomic_open
from oahu.streams.image_shape import ImageShape, check_image_shape
from oahu.streams.jsonl import OPTIONAL_FIELDS, iter_jsonl, read_jsonl, write_jsonl
from oahu.streams.stream_families import CROSS_MODAL_FORMAT, cross_modal_refusal

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "OPTIONAL_FIELDS",
    "PROTOCOLS",
    "ConstraintStream",
    "check_meta",
    "iter_jsonl",
    "load_by_format",
    "load_stream",
    "read_jsonl",
    "read_npz_arrays",
    "write_jsonl",
]

FORMAT_VERSION = 1
KINDS: tuple[str, ...] = CONSTRAINT_KINDS
PROTOCOLS: tuple[str, ...] = ("closure", "random")
_ZIP_MAGIC = b"PK\x03\x04"  # how every .npz file starts
_SHOWN_BYTES = 16  # of a file that is not a stream, enough of its start to tell what it is
_MAX_CONCEPTS = int(np.iinfo(np.int8).max)  # concepts are stored as int8
T = TypeVar("T")  # what a reader of one stream family returns
_NPZ_KEYS = ("X", "y", "dev_idx", "test_idx", "kind", "constraints", "meta")
# OPTIONAL_FIELDS (defined in streams.jsonl, which cannot import this module): the optional
# fields of a stream, None when absent, written by both formats only when present.
# The optional item sets, each a subset of one split (evaluation's gallery are items a learner
# may have seen, its queries must be held out, the start set is what exists before the stream).
_ITEM_SETS = {"gallery_idx": "dev_idx", "query_idx": "test_idx", "start_idx": "dev_idx"}


def _index_array(value: Any, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected integer item indices, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _check_in_range(arr: np.ndarray, n_items: int, name: str) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= n_items):
        raise ValueError(
            f"{name}: item indices must lie in [0, {n_items}), got [{arr.min()}, {arr.max()}]"
        )


@dataclass
class ConstraintStream:
    """Items (features + labels, stored once) and a stream of index constraints over them.

    Constructing one validates and normalises every field (``ValueError`` naming the field).

    Optional fields (None when absent; drifting streams, :mod:`streams.drift`, set all but
    ``flipped``, which noisy streams, :mod:`streams.noise`, set): ``concepts`` int8 (N,), the
    concept in force for each constraint; ``concept_labels`` int64 (n_concepts, n_items), each
    item's label under each concept, whose last row (the final concept) must equal ``y``;
    ``gallery_idx`` (a subset of ``dev_idx``) and ``query_idx`` (of ``test_idx``), the items
    evaluation under the final concept uses as kNN gallery and queries; ``start_idx`` (of
    ``dev_idx``), the development items that exist when the stream starts. The three item sets
    are stored in split order (as their items appear in ``dev_idx``, then ``test_idx``);
    :attr:`eval_gallery_idx`, :attr:`eval_query_idx` and :attr:`prepare_idx` give them with
    their defaults filled in. ``flipped`` bool (N,): True where the constraint was made wrong on
    purpose (label noise: a triplet's positive and negative swapped, a pair's ``similar``
    flipped, a quadruplet's two pairs swapped). ``image_shape`` (height, width): the items are
    greyscale images, their features the pixels in row-major order (height * width ==
    ``n_features``); None when they are not (:mod:`streams.image_shape`).

    ``kind`` is one of :data:`KINDS`: a triplet (anchor, positive, negative) says the anchor is
    closer to the positive than to the negative, a pair (u, v) with its ``similar`` flag says
    whether u and v are similar, a quadruplet (a, b, c, d) says D(a, b) < D(c, d)
    (:mod:`oahu.constraint_kinds`; label-hierarchy streams, :mod:`streams.hierarchy`). Only
    pairs have ``similar``.

    >>> X = np.eye(4, dtype=np.float32); y = np.array([0, 0, 1, 1])
    >>> s = ConstraintStream(X, y, dev_idx=[0, 1, 2], test_idx=[3], kind="triplet",
    ...                      constraints=[[0, 1, 2], [1, 0, 2]])
    >>> len(s), s.n_features
    (2, 4)
    >>> anchors, positives, negatives = s.batch(0, 2)
    >>> anchors.argmax(axis=1).tolist(), negatives.argmax(axis=1).tolist()
    ([0, 1], [2, 2])
    >>> s.prepare_idx.tolist(), s.eval_query_idx.tolist()  # the defaults: dev_idx, test_idx
    ([0, 1, 2], [3])
    >>> s = ConstraintStream(X, y, [0, 1, 2], [3], "triplet", [[0, 1, 2]], start_idx=[1, 0])
    >>> s.prepare_idx.tolist()  # in split order
    [0, 1]
    >>> s = ConstraintStream(X, y, [0, 1, 2], [3], "triplet", [[0, 1, 2]], image_shape=[2, 2])
    >>> s.image_shape  # each item's 4 features are a 2x2 image, row-major
    (2, 2)
    """

    X: np.ndarray
    y: np.ndarray
    dev_idx: np.ndarray
    test_idx: np.ndarray
    kind: str
    constraints: np.ndarray
    similar: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    concepts: np.ndarray | None = None
    concept_labels: np.ndarray | None = None
    gallery_idx: np.ndarray | None = None
    query_idx: np.ndarray | None = None
    start_idx: np.ndarray | None = None
    flipped: np.ndarray | None = None
    image_shape: ImageShape | None = None

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float32)
        if self.X.ndim != 2:
            raise ValueError(f"X: expected shape (n_items, n_features), got {self.X.shape}")
        n = len(self.X)
        self.y = _index_array(self.y, "y", ndim=1)
        if len(self.y) != n:
            raise ValueError(f"y: expected {n} labels (one per row of X), got {len(self.y)}")
        self.dev_idx = _index_array(self.dev_idx, "dev_idx", ndim=1)
        self.test_idx = _index_array(self.test_idx, "test_idx", ndim=1)
        _check_in_range(self.dev_idx, n, "dev_idx")
        _check_in_range(self.test_idx, n, "test_idx")
        times_listed = np.bincount(np.concatenate([self.dev_idx, self.test_idx]), minlength=n)
        if np.any(times_listed != 1):
            raise ValueError(
                "dev_idx/test_idx: must partition range(n_items), but item "
                f"{int(np.flatnonzero(times_listed != 1)[0])} is listed "
                f"{int(times_listed[times_listed != 1][0])} times"
            )
        check_choice(self.kind, "kind", KINDS)
        self._check_constraints(n)
        self._check_concepts(n)
        self._check_item_sets(n)
        self._check_flipped()
        self.image_shape = check_image_shape(self.image_shape, self.n_features)
        check_meta(self.meta)

    def _check_constraints(self, n_items: int) -> None:
        width = len(ROLES[self.kind])
        c = _index_array(self.constraints, "constraints", ndim=2)
        if c.shape[1] != width:
            raise ValueError(
                f"constraints: {self.kind} streams need shape (N, {width}), got {c.shape}"
            )
        _check_in_range(c, n_items, "constraints")
        is_dev = np.zeros(n_items, dtype=bool)
        is_dev[self.dev_idx] = True
        if not is_dev[c].all():
            raise ValueError(
                f"constraints: item {int(c[~is_dev[c]][0])} is not a development item (dev_idx)"
            )
        self.constraints = c
        if self.kind != "pair":
            if self.similar is not None:
                raise ValueError(f"similar: {self.kind} streams have no similar flags; pass None")
            return
        sim = np.asarray(self.similar)
        if self.similar is None or sim.dtype != np.bool_ or sim.shape != (len(c),):
            raise ValueError(
                f"similar: pair streams need a bool array of shape ({len(c)},), got "
                f"{None if self.similar is None else f'{sim.dtype} {sim.shape}'}"
            )
        self.similar = sim

    def _check_concepts(self, n_items: int) -> None:
        if self.concept_labels is not None:
            labels = _index_array(self.concept_labels, "concept_labels", ndim=2)
            if labels.shape[1] != n_items or not 1 <= len(labels) <= _MAX_CONCEPTS:
                raise ValueError(
                    f"concept_labels: expected shape (n_concepts, {n_items}) with 1 <= n_concepts "
                    f"<= {_MAX_CONCEPTS}, got {labels.shape}"
                )
            # Replay and evaluation read y: it must be the labels of the concept in force at the
            # end of the stream.
            differs = np.flatnonzero(labels[-1] != self.y)
            if len(differs):
                i = int(differs[0])
                raise ValueError(
                    f"concept_labels: the last row (the final concept) must equal y, but item "
                    f"{i} has {int(labels[-1, i])} there and {int(self.y[i])} in y"
                )
            self.concept_labels = labels
        if self.concepts is None:
            return
        if self.concept_labels is None:
            raise ValueError(
                "concepts: a stream with concepts needs concept_labels (each item's label under "
                "each concept)"
            )
        concepts = _index_array(self.concepts, "concepts", ndim=1)
        if concepts.shape != (len(self),):
            raise ValueError(
                f"concepts: expected one per constraint, shape ({len(self)},), got {concepts.shape}"
            )
        n_concepts = len(self.concept_labels)
        if concepts.size and (concepts.min() < 0 or concepts.max() >= n_concepts):
            raise ValueError(
                f"concepts: must lie in [0, {n_concepts}) (rows of concept_labels), got "
                f"[{concepts.min()}, {concepts.max()}]"
            )
        self.concepts = concepts.astype(np.int8)

    def _check_flipped(self) -> None:
        if self.flipped is None:
            return
        flipped = np.asarray(self.flipped)
        if flipped.dtype != np.bool_ or flipped.shape != (len(self),):
            raise ValueError(
                f"flipped: expected a bool array of shape ({len(self)},) (one per constraint), "
                f"got {flipped.dtype} {flipped.shape}"
            )
        self.flipped = np.ascontiguousarray(flipped)

    def _check_item_sets(self, n_items: int) -> None:
        # Split order: the sets are sets; storing them in the order their items appear in
        # dev_idx, then test_idx, makes the JSON Lines membership flags round-trip exactly.
        split_order = np.concatenate([self.dev_idx, self.test_idx])
        for name, split in _ITEM_SETS.items():
            value = getattr(self, name)
            if value is None:
                continue
            idx = _index_array(value, name, ndim=1)
            _check_in_range(idx, n_items, name)
            times_listed = np.bincount(idx, minlength=n_items)
            if np.any(times_listed > 1):
                twice = int(np.flatnonzero(times_listed > 1)[0])
                raise ValueError(f"{name}: item {twice} is listed {int(times_listed[twice])} times")
            in_split = np.zeros(n_items, dtype=bool)
            in_split[getattr(self, split)] = True
            if not in_split[idx].all():
                raise ValueError(
                    f"{name}: item {int(idx[~in_split[idx]][0])} is not in {split}, which "
                    f"{name} must be a subset of"
                )
            setattr(self, name, split_order[times_listed[split_order] == 1])

    # ------------------------------------------------------------------ access
    @property
    def n_items(self) -> int:
        return len(self.X)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    def __len__(self) -> int:
        return len(self.constraints)

    @property
    def eval_gallery_idx(self) -> np.ndarray:
        """The kNN gallery of evaluation under the final concept: ``gallery_idx``, by default
        the development items; in a class-disjoint stream (``meta["split"] == "classes"``) the
        queries themselves, since their classes have no development items (evaluation then
        leaves each query out)."""
        if self.gallery_idx is not None:
            return self.gallery_idx
        return self.eval_query_idx if self.class_disjoint else self.dev_idx

    @property
    def class_disjoint(self) -> bool:
        """Whether the stream follows the class-disjoint protocol (``meta["split"] ==
        "classes"``): its test items' classes never occur among its development items."""
        return self.meta.get("split") == "classes"

    @property
    def eval_query_idx(self) -> np.ndarray:
        """The queries of evaluation under the final concept: ``query_idx``, by default the
        test items."""
        return self.test_idx if self.query_idx is None else self.query_idx

    @property
    def prepare_idx(self) -> np.ndarray:
        """The development items that exist when the stream starts (what a learner's
        ``prepare`` fits on): ``start_idx``, by default the development items."""
        return self.dev_idx if self.start_idx is None else self.start_idx

    def batch(self, start: int, stop: int) -> tuple[np.ndarray, ...]:
        """Features of constraints ``start:stop``: (anchors, positives, negatives) for triplets,
        (u, v, similar) for pairs, (a, b, c, d) for quadruplets."""
        c = self.constraints[start:stop]
        if self.kind != "pair":
            return tuple(self.X[c[:, role]] for role in range(c.shape[1]))
        assert self.similar is not None
        return self.X[c[:, 0]], self.X[c[:, 1]], self.similar[start:stop]

    def features(self, start: int, stop: int) -> np.ndarray:
        """Features of the items of constraints ``start:stop``, (n, n_roles, n_features), in
        role order (anchor, positive, negative; u, v; or a, b, c, d)."""
        return self.X[self.constraints[start:stop]]

    def iter_batches(self, batch_size: int = 1) -> Iterator[tuple[np.ndarray, ...]]:
        """:meth:`batch` over the whole stream in order, ``batch_size`` constraints at a time."""
        batch_size = check_int(batch_size, "batch_size")
        for start in range(0, len(self), batch_size):
            yield self.batch(start, start + batch_size)

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the stream to ``path`` (.npz, see the module docstring), atomically."""
        arrays = {
            "X": self.X,
            "y": self.y,
            "dev_idx": self.dev_idx,
            "test_idx": self.test_idx,
            "kind": np.array(self.kind),
            "constraints": self.constraints,
            "meta": np.array(json.dumps({**self.meta, "format_version": FORMAT_VERSION})),
        }
        if self.similar is not None:
            arrays["similar"] = self.similar
        for name in OPTIONAL_FIELDS:
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        if self.image_shape is not None:
            arrays["image_shape"] = np.array(self.image_shape, dtype=np.int64)
        with atomic_open(path, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ConstraintStream:
        """Read a stream written by :meth:`save`; ``ValueError`` naming the field if invalid."""
        arrays = read_npz_arrays(path)
        if "format" in arrays and str(arrays["format"]) == CROSS_MODAL_FORMAT:
            raise cross_modal_refusal(path)
        missing = [key for key in _NPZ_KEYS if key not in arrays]
        if missing:
            raise ValueError(f"{path}: missing field(s) {', '.join(missing)}")
        try:
            meta = json.loads(str(arrays["meta"][()]))
        except (json.JSONDecodeError, IndexError) as e:
            raise ValueError(f"meta: {path} holds no JSON object: {e}") from e
        if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"format_version: {path} has "
                f"{meta.get('format_version') if isinstance(meta, dict) else None!r}, "
                f"this version reads {FORMAT_VERSION}"
            )
        return cls(
            X=arrays["X"],
            y=arrays["y"],
            dev_idx=arrays["dev_idx"],
            test_idx=arrays["test_idx"],
            kind=str(arrays["kind"][()]),
            constraints=arrays["constraints"],
            similar=arrays.get("similar"),
            meta=meta,
            **{name: arrays.get(name) for name in OPTIONAL_FIELDS},
            image_shape=arrays.get("image_shape"),  # None in files written before it existed
        )


def check_meta(meta: Any) -> None:
    """A ``ValueError`` naming ``meta`` unless it is a dict that JSON can store, as both file
    formats of both stream families store it."""
    try:
        if not isinstance(meta, dict):
            raise TypeError(f"expected a dict, got {type(meta).__name__}")
        json.dumps(meta)
    except (TypeError, ValueError) as e:
        raise ValueError(f"meta: must be a JSON-serialisable dict: {e}") from e


def read_npz_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the .npz stream file ``path``, read without pickles (a file that is no
    .npz is a ``ValueError`` naming it); both stream families' files read so."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        raise ValueError(f"{path}: not a stream file (.npz): {e}") from e


def load_stream(path: str | os.PathLike[str]) -> ConstraintStream:
    """A stream file of either format: .npz (a zip archive) or JSON Lines, told by its first bytes.

    A file that is neither is a ``ValueError`` naming it, what was expected and how it starts.

    >>> import tempfile, pathlib
    >>> X = np.eye(3, dtype=np.float32)
    >>> s = ConstraintStream(X, [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]])
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> s.save(folder / "s.npz"); write_jsonl(s, folder / "s.jsonl")
    >>> [len(load_stream(folder / name)) for name in ("s.npz", "s.jsonl")]
    [1, 1]
    >>> _ = (folder / "x.npz").write_bytes(bytes([0x78, 0x8C, 0x01, 0x02]))
    >>> try:
    ...     load_stream(folder / "x.npz")
    ... except ValueError as e:
    ...     print(str(e).replace(str(folder), "DIR"))  # doctest: +ELLIPSIS
    DIR/x.npz: not an oahu stream file (expected ...); it starts with b'x\\x8c\\x01\\x02'
    """
    return load_by_format(path, ConstraintStream.load, read_jsonl)


def load_by_format(
    path: str | os.PathLike[str],
    load_npz: Callable[[str | os.PathLike[str]], T],
    read_lines: Callable[[str | os.PathLike[str]], T],
) -> T:
    """The stream in ``path`` read by ``load_npz`` if it is a zip archive (.npz), else by
    ``read_lines`` if it is JSON Lines, told by its first bytes; any other file is a
    ``ValueError`` naming it, what was expected and how it starts. Both stream families
    (:func:`load_stream`, :func:`oahu.streams.cross_modal.load_cross_modal_stream`) read so.
    """
    with open(path, "rb") as fh:
        start = fh.read(_SHOWN_BYTES + 1)
    if start.startswith(_ZIP_MAGIC):
        return load_npz(path)
    # JSON Lines opens with a JSON object, after blank lines at most; a file of nothing but
    # blanks is left to the reader, which says that it is empty.
    text = start.lstrip(b" \t\r\n")
    if text and not text.startswith(b"{"):
        raise ValueError(_not_a_stream(path, start))
    try:
        return read_lines(path)
    except UnicodeDecodeError as e:  # a ValueError too, but one that names neither file nor cause
        why = f"JSON Lines is UTF-8 text, which this is not: {e.reason}"
        raise ValueError(_not_a_stream(path, start, why)) from None


def _not_a_stream(path: str | os.PathLike[str], start: bytes, why: str = "") -> str:
    shown = repr(start[:_SHOWN_BYTES]) + ("…" if len(start) > _SHOWN_BYTES else "")
    return (
        f"{path}: not an oahu stream file (expected a .npz stream written by `oahu make-stream`, "
        f"or JSON Lines{'; ' + why if why else ''}); it starts with {shown}"
    )
