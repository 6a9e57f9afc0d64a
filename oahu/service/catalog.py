"""The service's items: the item store, the labelled gallery, and the changes made to them
through the API, kept durable across restarts.

Both are :class:`~oahu.service.item_store.ItemStore` s. Base items come from files at start-up
(:func:`base_items`: ``--items`` and the stream file; ``--gallery``). Changes through
``POST/DELETE /v1/items`` are recorded in an overlay (``OVERLAY_FILE`` in the checkpoint
directory) that is written atomically (temp file, fsync, rename) before the request is answered,
and re-applied on start. The :class:`Catalog`'s ``version`` counts those changes; checkpoints
record it.

Both processes of the service hold a catalog: the serving process owns it and hands every change,
numbered by the version it produced, to ``on_change``; the learner process keeps a replica (the
consumer resolves item ids against it) that ``apply``s them in order.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oahu.checks import check_bool
from oahu.connectors.constraint import DEFAULT_MODALITY, MISSING_LABEL, DecodeError
from oahu.connectors.file_source import FileSource
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore, as_ids
from oahu.streams.atomic import atomic_open
from oahu.streams.stream_families import OtherStreamFamily

__all__ = ["OVERLAY_FILE", "Catalog", "ItemChange", "base_items"]

OVERLAY_FILE = "items-api.npz"  # the API's item changes, in the checkpoint directory


@dataclass(frozen=True)
class ItemChange:
    """One change to the items: ``X`` (and labels ``y``) to add, or None to remove ``ids``;
    ``version`` is the catalog version it produced; ``modality``: whose items they are (a
    cross-modal service's, :mod:`oahu.service.modal_catalog`)."""

    version: int
    ids: list[str]
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    gallery: bool = False
    modality: str = DEFAULT_MODALITY


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

    @property
    def image_shape(self) -> tuple[int, int] | None:
        """(height, width) of the items when they are greyscale images: the gallery's shape,
        else the item store's (from the files they were loaded from), else None.

        >>> cat = Catalog(ItemStore(dim=4), ItemStore(dim=4, image_shape=(2, 2)), Path("u.npz"))
        >>> cat.image_shape
        (2, 2)
        """
        for store in (self.gallery, self.items):
            if store.image_shape is not None and store.dim == self.dim:
                return store.image_shape
        return None

    def lookup(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Features of ``ids`` from the item store, or from the gallery for ids the store lacks
        (a gallery file's items are in no store), and a bool mask of the ids found (the rows of
        the others are zero): float32 (n, ``dim``), how queries resolve the ids they name.

        >>> cat = Catalog(ItemStore(dim=1), ItemStore(dim=1), Path("unused.npz"))
        >>> cat.items.add(["a"], [[1]]); cat.gallery.add(["a", "g"], [[2], [3]], y=[0, 0])
        >>> X, found = cat.lookup(["g", "zz", "a"])
        >>> X.tolist(), found.tolist()
        ([[3.0], [0.0], [1.0]], [True, False, True])
        """
        keys = as_ids(ids)
        dim = self.dim or 0
        X = np.zeros((len(keys), dim), dtype=np.float32)
        missing = np.arange(len(keys))
        for store in (self.items, self.gallery):
            if not len(missing) or store.dim != dim:
                continue
            found_X, found = store.get_many([keys[i] for i in missing.tolist()])
            X[missing[found]] = found_X[found]
            missing = missing[~found]
        found = np.ones(len(keys), dtype=bool)
        found[missing] = False
        return X, found

    # ------------------------------------------------------------------ changes
    def add(self, ids: Any, X: Any, y: Any = None, gallery: bool = False) -> int:
        """Add (or replace) items in the store and, with ``gallery``, in the gallery too;
        returns the version this change produced.

        Gallery items need labels. Raises ``DecodeError`` for bad features, ``ValueError`` for
        bad ids or labels; nothing changes on error.
        """
        keys = as_ids(ids)
        gallery = check_bool(gallery, "gallery")
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
    def overlay(self) -> bytes:
        """The overlay as it stands (what the overlay file holds): the API's changes at
        ``version``, as .npz bytes that :meth:`follow` applies elsewhere."""
        with self._lock:
            return self._overlay_bytes()

    def _overlay_bytes(self) -> bytes:
        ids = list(self._added)
        rows = [self._added[k] for k in ids]
        dim = self.dim or 0
        buffer = io.BytesIO()
        np.savez(
            buffer,
            version=np.int64(self.version),
            ids=np.array(ids, dtype=str),
            X=np.stack([r[0] for r in rows]) if rows else np.zeros((0, dim), np.float32),
            y=np.array([r[1] for r in rows], dtype=np.int64),
            in_gallery=np.array([r[2] for r in rows], dtype=bool),
            removed=np.array(sorted(self._removed), dtype=str),
        )
        return buffer.getvalue()

    def _commit(self) -> None:
        self.version += 1
        with atomic_open(self.overlay_path, "wb") as fh:
            fh.write(self._overlay_bytes())

    def _restore(self) -> None:
        self._apply_overlay(self.overlay_path.read_bytes(), self.items, self.gallery)

    def _apply_overlay(self, overlay: bytes, items: ItemStore, gallery: ItemStore) -> None:
        with np.load(io.BytesIO(overlay), allow_pickle=False) as npz:
            version = int(npz["version"])
            removed = npz["removed"].tolist()
            ids, X, y, in_gallery = (npz[k] for k in ("ids", "X", "y", "in_gallery"))
        for store in (items, gallery):
            known = [k for k in removed if k in store]
            if known:
                store.remove(known)
        if len(ids):
            items.add(ids, X, y)
            if in_gallery.any():
                gallery.add(ids[in_gallery], X[in_gallery], y[in_gallery])
        keys = ids.tolist()
        self.version = version
        self._removed = set(removed)
        self._added = {k: (X[i], int(y[i]), bool(in_gallery[i])) for i, k in enumerate(keys)}

    def follow(self, overlay: bytes, base: Callable[[], tuple[ItemStore, ItemStore]]) -> None:
        """Become ``base()``'s items and gallery with ``overlay`` (another catalog's
        :meth:`overlay`) applied, as a serving replica follows the learner service's items;
        nothing is written, and readers see the old items or the new."""
        items, gallery = base()
        with self._lock:
            self._apply_overlay(overlay, items, gallery)
            self.items.take(items)
            self.gallery.take(gallery)


def base_items(
    config: ServiceConfig, source: FileSource | None = None
) -> tuple[ItemStore, Path | None]:
    """The item store at start-up, before the API's changes: the items of ``--items``, then
    those of a stream file source (its constraints name its items by index), read from
    ``source`` when the caller has the file open already; and that stream file (None when the
    source carries no items: Kafka, or a file of messages), whose development items are the
    default gallery. The store keeps the ``image_shape`` of ``--items``, else the stream
    file's, so that the serving process knows when its items are images.

    Both processes assemble their item store with it, so the learner resolves the ids that
    queries name the same way. A cross-modal stream file (source or ``--items``) brings no items
    here: they are held by modality (:mod:`oahu.service.modal_items`).
    """
    items = ItemStore()
    if config.items:
        try:
            items = ItemStore.load(config.items)
        except OtherStreamFamily as refusal:
            if not refusal.cross_modal:
                raise  # a cross-modal file's items are held by modality: ModalItems
    if config.is_kafka:
        return items, None
    if source is None:
        source = FileSource(config.file_path())
    stream_items = source.items()
    if stream_items is None:
        return items, None
    items.add(*stream_items)
    if items.image_shape is None:  # an --items file that records its own shape keeps it
        items.image_shape = source.image_shape
    return items, Path(config.file_path())
