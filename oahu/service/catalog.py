"""The service's items: the item store (features by id), the labelled gallery, and the changes
made to them through the API, kept durable across restarts.

Constraints may reference items by id instead of carrying their vectors; an :class:`ItemStore`
maps ids (strings) to float32 feature rows and optional int labels. It is thread-safe (one lock
around every read and write) and counts changes in ``version`` so readers can tell when what
they cached went stale.

Base items come from files at start-up (``--items``, ``--gallery``, the stream file). Changes
through ``POST/DELETE /v1/items`` are recorded in an overlay (``OVERLAY_FILE`` in the checkpoint
directory) that is written atomically (temp file, fsync, rename) before the request is answered,
and re-applied on start. The :class:`Catalog`'s ``version`` counts those changes; checkpoints
record it.

Both processes of the service hold a catalog: the serving process owns it and hands every change,
numbered by the version it produced, to ``on_change``; the learner process keeps a replica (the
consumer resolves item ids against it) that ``apply``s them in order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from oahu.connectors.constraint import MISSING_LABEL, DecodeError
from oahu.streams.atomic import atomic_open
from oahu.streams.stream_file import load_stream

OVERLAY_FILE = "items-api.npz"  # the API's item changes, in the checkpoint directory


def _canonical_int(item_id: str) -> int | None:
    """The int an id spells in canonical decimal ("17", "-3"; not "017" or "+3"), else None."""
    try:
        value = int(item_id)
    except ValueError:
        return None
    return value if str(value) == item_id else None


def as_ids(ids: Any) -> list[str]:
    """Normalise one id or a sequence/array of ids (str or int) to a list of str."""
    if isinstance(ids, str | int | np.integer):
        return [str(ids)]
    if isinstance(ids, np.ndarray):
        return ids.astype(str).ravel().tolist()
    return [str(i) for i in ids]


class ItemStore:
    """Features (float32, fixed dimension) and optional labels of items, by str id.

    >>> store = ItemStore(dim=2)
    >>> store.add(["a", "b"], [[1, 0], [0, 1]], y=[3, 4])
    >>> store.get(["b", "a"]).tolist(), store.version, len(store)
    ([[0.0, 1.0], [1.0, 0.0]], 1, 2)
    >>> store.get(["zz"])
    Traceback (most recent call last):
    ...
    oahu.connectors.constraint.DecodeError: unknown_item: 1 unknown item id(s), e.g. 'zz'
    """

    def __init__(self, dim: int | None = None) -> None:
        if dim is not None and int(dim) < 1:
            raise ValueError(f"dim: must be a positive integer, got {dim!r}")
        self._dim = None if dim is None else int(dim)
        self._lock = threading.RLock()
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        # Same rows keyed by int for ids that are canonical integers, so int64 ids from binary
        # messages are looked up without converting each to str.
        self._int_row: dict[int, int] = {}
        self._X = np.zeros((0, self._dim or 0), dtype=np.float32)  # capacity >= len
        self._y = np.zeros(0, dtype=np.int64)
        self._version = 0

    # ------------------------------------------------------------------ reading
    @property
    def dim(self) -> int | None:
        """Feature dimension (None until the first ``add`` of a store made without one)."""
        return self._dim

    @property
    def version(self) -> int:
        """Incremented by every ``add`` and ``remove``."""
        return self._version

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item_id: object) -> bool:
        return str(item_id) in self._row

    def _lookup(self, ids: Any) -> tuple[np.ndarray, list]:
        """(row of each id, -1 where unknown; the ids as looked up). Call with the lock held."""
        if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu":
            keys: list = ids.ravel().tolist()
            table: dict = self._int_row
        else:
            keys, table = as_ids(ids), self._row
        rows = np.fromiter(map(table.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        return rows, keys

    def _rows(self, ids: Any) -> np.ndarray:
        rows, keys = self._lookup(ids)
        missing = rows < 0
        if missing.any():
            first = str(keys[int(np.argmax(missing))])
            raise DecodeError(
                "unknown_item", f"{int(missing.sum())} unknown item id(s), e.g. {first!r}"
            )
        return rows

    def get(self, ids: Any) -> np.ndarray:
        """Features of ``ids`` (float32, shape (n, dim), a copy); ``DecodeError("unknown_item")``
        if any id is unknown."""
        with self._lock:
            return self._X[self._rows(ids)]

    def get_many(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Features of ``ids`` and a bool mask of the ids found (rows of unknown ids are zero);
        for batches where one unknown id must not fail the others."""
        with self._lock:
            rows, _ = self._lookup(ids)
            found = rows >= 0
            X = self._X[np.where(found, rows, 0)] if len(self) else None
        if X is None:
            return np.zeros((len(rows), self._dim or 0), np.float32), found
        X[~found] = 0.0
        return X, found

    def labels(self, ids: Any) -> np.ndarray:
        """Labels of ``ids`` (int64; ``MISSING_LABEL`` where an item has none)."""
        with self._lock:
            return self._y[self._rows(ids)]

    def snapshot(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(ids, X, y) copies of everything, consistent with one ``version``."""
        with self._lock:
            n = len(self._ids)
            return list(self._ids), self._X[:n].copy(), self._y[:n].copy()

    # ------------------------------------------------------------------ writing
    def _check_features(self, X: Any, n: int) -> np.ndarray:
        arr = np.asarray(X, dtype=np.float32)
        if arr.ndim == 1 and n == 1:
            arr = arr[None, :]
        dim = self._dim if self._dim is not None else (arr.shape[-1] if arr.ndim == 2 else 0)
        if arr.ndim != 2 or arr.shape != (n, dim) or dim < 1:
            raise DecodeError(
                "bad_dimension", f"X: expected shape ({n}, {self._dim or 'dim'}), got {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise DecodeError("non_finite", "X: NaN or inf in item features")
        return arr

    def add(self, ids: Any, X: Any, y: Iterable[int] | None = None) -> None:
        """Add items, or replace the features and labels of ids already present."""
        keys = as_ids(ids)
        if len(set(keys)) != len(keys):
            raise ValueError("ids: duplicate ids in one add")
        with self._lock:
            arr = self._check_features(X, len(keys))
            labels = (
                np.full(len(keys), MISSING_LABEL, np.int64)
                if y is None
                else np.asarray(y, dtype=np.int64).ravel()
            )
            if labels.shape != (len(keys),):
                raise ValueError(f"y: expected {len(keys)} labels, got shape {labels.shape}")
            if self._dim is None:
                self._dim = arr.shape[1]
                self._X = np.zeros((0, self._dim), np.float32)
            rows, _ = self._lookup(keys)
            new = rows < 0
            n_old = len(self._ids)
            rows[new] = np.arange(n_old, n_old + int(new.sum()))
            self._reserve(n_old + int(new.sum()))
            self._X[rows] = arr
            self._y[rows] = labels
            for i in np.flatnonzero(new).tolist():
                self._index(keys[i], len(self._ids))
                self._ids.append(keys[i])
            self._version += 1

    def _index(self, item_id: str, row: int) -> None:
        self._row[item_id] = row
        as_int = _canonical_int(item_id)
        if as_int is not None:
            self._int_row[as_int] = row

    def _reserve(self, n: int) -> None:
        if n <= len(self._X):
            return
        capacity = max(n, 2 * len(self._X), 64)
        X = np.zeros((capacity, self._X.shape[1]), np.float32)
        y = np.full(capacity, MISSING_LABEL, np.int64)
        X[: len(self._ids)] = self._X[: len(self._ids)]
        y[: len(self._ids)] = self._y[: len(self._ids)]
        self._X, self._y = X, y

    def remove(self, ids: Any) -> None:
        """Remove items (all or none: ``DecodeError("unknown_item")`` if any id is unknown)."""
        keys = as_ids(ids)
        with self._lock:
            rows = self._rows(keys)
            keep = np.ones(len(self._ids), dtype=bool)
            keep[rows] = False
            n_keep = int(keep.sum())
            self._X[:n_keep] = self._X[: len(self._ids)][keep]
            self._y[:n_keep] = self._y[: len(self._ids)][keep]
            self._ids = [i for i, k in zip(self._ids, keep.tolist(), strict=True) if k]
            self._row, self._int_row = {}, {}
            for row, item_id in enumerate(self._ids):
                self._index(item_id, row)
            self._version += 1

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``ids``, ``X`` and ``y`` to an .npz file (``load`` reads it back)."""
        ids, X, y = self.snapshot()
        np.savez(path, ids=np.array(ids, dtype=str), X=X, y=y)

    @classmethod
    def load(cls, path: str | os.PathLike[str], dev_only: bool = False) -> ItemStore:
        """Items from an .npz with ``ids``, ``X`` and optional ``y``, or the items of a stream
        file (.npz or JSON Lines, see :mod:`oahu.streams.stream_file`; ids are the item
        indices), with ``dev_only`` only its development items (a gallery)."""
        path = Path(path)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                if "ids" in npz.files:
                    return cls.from_arrays(npz["ids"], npz["X"], npz.get("y"))
        stream = load_stream(path)
        rows = stream.dev_idx if dev_only else np.arange(stream.n_items)
        return cls.from_arrays(rows, stream.X[rows], stream.y[rows])

    @classmethod
    def from_arrays(cls, ids: Any, X: np.ndarray, y: np.ndarray | None = None) -> ItemStore:
        """A store holding ``ids`` with features ``X`` (n, d) and labels ``y``."""
        store = cls(dim=np.shape(X)[1] if np.ndim(X) == 2 else None)
        store.add(ids, X, y)
        return store


@dataclass(frozen=True)
class ItemChange:
    """One change to the items: ``X`` (and labels ``y``) to add, or None to remove ``ids``;
    ``version`` is the catalog version it produced."""

    version: int
    ids: list[str]
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    gallery: bool = False


class Catalog:
    """Item store and gallery with a durable overlay of API changes.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "items-api.npz"
    >>> cat = Catalog(ItemStore(dim=2), ItemStore(dim=2), path)
    >>> cat.add(["a", "b"], [[1, 0], [0, 1]], [0, 1], gallery=True)  # the new version
    1
    >>> cat.remove(["a"])  # how many were known, the new version
    (1, 2)
    >>> again = Catalog(ItemStore(dim=2), ItemStore(dim=2), path)
    >>> again.version, len(again.items), again.gallery.get(["b"]).tolist()
    (2, 1, [[0.0, 1.0]])
    >>> replica = Catalog(ItemStore(dim=2), ItemStore(dim=2), path.with_name("none.npz"))
    >>> replica.apply(ItemChange(1, ["c"], np.ones((1, 2), np.float32), np.array([5])))
    >>> replica.version, replica.items.get(["c"]).tolist()
    (1, [[1.0, 1.0]])
    """

    def __init__(
        self,
        items: ItemStore,
        gallery: ItemStore,
        overlay_path: str | os.PathLike[str],
        on_change: Callable[[ItemChange], None] | None = None,
    ) -> None:
        self.items = items
        self.gallery = gallery
        self.overlay_path = Path(overlay_path)
        self.on_change = on_change  # called in version order, under the lock
        self._lock = threading.Lock()
        self._added: dict[str, tuple[np.ndarray, int, bool]] = {}
        self._removed: set[str] = set()
        self.version = 0
        if self.overlay_path.exists():
            self._restore()

    @property
    def dim(self) -> int | None:
        return self.items.dim or self.gallery.dim

    # ------------------------------------------------------------------ changes
    def add(self, ids: Any, X: Any, y: Any = None, gallery: bool = False) -> int:
        """Add (or replace) items in the store and, with ``gallery``, in the gallery too;
        returns the version this change produced.

        Gallery items need labels. Raises ``DecodeError`` for bad features, ``ValueError`` for
        bad ids or labels; nothing changes on error.
        """
        keys = as_ids(ids)
        X = np.asarray(X, dtype=np.float32)
        labels = np.full(len(keys), MISSING_LABEL, np.int64) if y is None else np.asarray(y)
        if labels.shape != (len(keys),):
            raise ValueError(f"y: expected {len(keys)} labels, got shape {labels.shape}")
        if gallery and (labels == MISSING_LABEL).any():
            raise ValueError("label: gallery items need a label")
        with self._lock:
            self._check_dim(X, len(keys))
            self._add(keys, X, labels, gallery)
            self._commit()
            self._changed(ItemChange(self.version, keys, X, labels, gallery))
            return self.version

    def _add(self, keys: list[str], X: np.ndarray, labels: np.ndarray, gallery: bool) -> None:
        self.items.add(keys, X, labels)
        if gallery:
            self.gallery.add(keys, X, labels)
        for key, row, label in zip(keys, X, labels.tolist(), strict=True):
            self._added[key] = (row, int(label), gallery)
            self._removed.discard(key)

    def remove(self, ids: Any) -> tuple[int, int]:
        """Remove items from the store and the gallery; returns how many were known and the
        version this change produced.

        Raises ``DecodeError("unknown_item")`` when none of them is known.
        """
        keys = as_ids(ids)
        with self._lock:
            known = self._remove(keys)
            if not known:
                raise DecodeError("unknown_item", f"none of the ids is known, e.g. {keys[0]!r}")
            self._commit()
            self._changed(ItemChange(self.version, keys))
            return known, self.version

    def _remove(self, keys: list[str]) -> int:
        in_items = [k for k in keys if k in self.items]
        in_gallery = [k for k in keys if k in self.gallery]
        known = set(in_items) | set(in_gallery)
        if in_items:
            self.items.remove(in_items)
        if in_gallery:
            self.gallery.remove(in_gallery)
        for key in known:
            self._added.pop(key, None)
            self._removed.add(key)
        return len(known)

    def _changed(self, change: ItemChange) -> None:
        if self.on_change is not None:
            self.on_change(change)

    def apply(self, change: ItemChange) -> None:
        """Replay a change made by the owning catalog, without writing the overlay (the owner
        did). Changes this replica already holds (restored from the overlay) are skipped."""
        with self._lock:
            if change.version <= self.version:
                return
            if change.X is None:
                self._remove(change.ids)
            else:
                self._add(change.ids, change.X, change.y, change.gallery)
            self.version = change.version

    def _check_dim(self, X: np.ndarray, n: int) -> None:
        dim = self.dim
        if X.ndim != 2 or X.shape[0] != n or (dim is not None and X.shape[1] != dim):
            raise DecodeError("bad_dimension", f"x: expected shape ({n}, {dim}), got {X.shape}")
        if not np.isfinite(X).all():
            raise DecodeError("non_finite", "x: NaN or inf in item features")

    # ------------------------------------------------------------------ persistence
    def _commit(self) -> None:
        self.version += 1
        ids = list(self._added)
        rows = [self._added[k] for k in ids]
        dim = self.dim or 0
        with atomic_open(self.overlay_path, "wb") as fh:
            np.savez(
                fh,
                version=np.int64(self.version),
                ids=np.array(ids, dtype=str),
                X=np.stack([r[0] for r in rows]) if rows else np.zeros((0, dim), np.float32),
                y=np.array([r[1] for r in rows], dtype=np.int64),
                in_gallery=np.array([r[2] for r in rows], dtype=bool),
                removed=np.array(sorted(self._removed), dtype=str),
            )

    def _restore(self) -> None:
        with np.load(self.overlay_path, allow_pickle=False) as npz:
            self.version = int(npz["version"])
            removed = npz["removed"].tolist()
            ids, X, y, in_gallery = (npz[k] for k in ("ids", "X", "y", "in_gallery"))
        for store in (self.items, self.gallery):
            known = [k for k in removed if k in store]
            if known:
                store.remove(known)
        self._removed = set(removed)
        if len(ids):
            self.items.add(ids, X, y)
            if in_gallery.any():
                self.gallery.add(ids[in_gallery], X[in_gallery], y[in_gallery])
        keys = ids.tolist()
        self._added = {k: (X[i], int(y[i]), bool(in_gallery[i])) for i, k in enumerate(keys)}
