"""The item store: features (float32, one fixed dimension) and optional labels of items, by id.

Constraints may reference items by id instead of carrying their vectors, and queries may name
stored items: an :class:`ItemStore` maps ids (strings) to feature rows and int labels. It is
thread-safe (one lock around every read and write) and counts changes in ``version`` so readers
can tell when what they cached went stale. A store of items that are greyscale images knows
their ``image_shape`` (height, width), from the file it was loaded from. The service's catalog
(:mod:`oahu.service.catalog`) holds two of them, the items and the gallery.
"""

from __future__ import annotations

import os
import threading
import zipfile
from collections.abc import Iterable
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from oahu.checks import check_int
from oahu.connectors.constraint import MISSING_LABEL, DecodeError
from oahu.streams.image_shape import ImageShape, check_image_shape
from oahu.streams.stream_file import load_stream

__all__ = ["ItemStore", "as_ids"]


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
    >>> store.get_labels(["b", "a"]).tolist()
    [4, 3]
    >>> ItemStore(dim=4, image_shape=(2, 2)).image_shape  # its items are 2x2 images
    (2, 2)
    """

    def __init__(self, dim: int | None = None, image_shape: Any = None) -> None:
        self._dim = None if dim is None else check_int(dim, "dim")
        self._image_shape = check_image_shape(image_shape, self._dim)
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
    def image_shape(self) -> ImageShape | None:
        """(height, width) when the items are greyscale images whose features are the pixels in
        row-major order, else None."""
        return self._image_shape

    @image_shape.setter
    def image_shape(self, value: Any) -> None:
        self._image_shape = check_image_shape(value, self._dim)

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

    def get_labels(self, ids: Any) -> np.ndarray:
        """Labels of ``ids`` (int64, ``MISSING_LABEL`` for an item without one);
        ``DecodeError("unknown_item")`` if any id is unknown."""
        with self._lock:
            return self._y[self._rows(ids)]

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
                check_image_shape(self._image_shape, arr.shape[1], "X")
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

    def take(self, other: ItemStore) -> None:
        """Become ``other`` (which the caller gives up): its items, dimension and image shape,
        in one step under the lock, as a new ``version`` (readers see the old or the new)."""
        with self._lock:
            version = self._version
            self.__dict__.update({k: v for k, v in other.__dict__.items() if k != "_lock"})
            self._version = max(version, other._version) + 1

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
        """Write ``ids``, ``X``, ``y`` and, for images, ``image_shape`` to an .npz file (``load``
        reads it back)."""
        ids, X, y = self.snapshot()
        shape = {} if self.image_shape is None else {"image_shape": np.array(self.image_shape)}
        np.savez(path, ids=np.array(ids, dtype=str), X=X, y=y, **shape)

    @classmethod
    def load(cls, path: str | os.PathLike[str], dev_only: bool = False) -> ItemStore:
        """Items from an .npz with ``ids``, ``X`` and optional ``y`` and ``image_shape``, or the
        items of a stream file (.npz or JSON Lines, see :mod:`oahu.streams.stream_file`; ids are
        the item indices; its ``image_shape``), with ``dev_only`` only its development items (a
        gallery)."""
        path = Path(path)
        # Only a zip archive is read here as one; any other file, whatever its name, goes to the
        # stream reader, which names the file and says how it starts.
        if path.suffix == ".npz" and zipfile.is_zipfile(path):
            with np.load(path, allow_pickle=False) as npz:
                if "ids" in npz.files:
                    shape = npz.get("image_shape")
                    return cls.from_arrays(npz["ids"], npz["X"], npz.get("y"), shape)
        stream = load_stream(path)
        rows = stream.dev_idx if dev_only else np.arange(stream.n_items)
        return cls.from_arrays(rows, stream.X[rows], stream.y[rows], stream.image_shape)

    @classmethod
    def from_arrays(
        cls, ids: Any, X: np.ndarray, y: np.ndarray | None = None, image_shape: Any = None
    ) -> ItemStore:
        """A store holding ``ids`` with features ``X`` (n, d), labels ``y`` and, for images,
        their ``image_shape`` (height, width)."""
        store = cls(dim=np.shape(X)[1] if np.ndim(X) == 2 else None)
        store.add(ids, X, y)
        store.image_shape = image_shape  # checked against the dimension, known now
        return store
