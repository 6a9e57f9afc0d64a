"""A cross-modal service's items with the API's changes: one catalog per modality.

The items of each modality (:class:`~oahu.service.modal_items.ModalItems`, from the cross-modal
stream file) change through ``POST/DELETE /v1/items`` with a ``modality``, as a single-modality
service's do: each modality has a :class:`~oahu.service.catalog.Catalog` over its item store and
gallery, whose overlay (``items-api.<modality>.npz`` in the checkpoint directory) is written
before the request is answered and re-applied on start.

One version counts the changes of every modality (the sum of the catalogs' versions: each change
adds one to exactly one of them), so that the serving process can wait, as it does for one
modality, until the learner process has applied every change up to a version. Changes are made
under one lock and handed to ``on_change`` in that order, with that version and their modality;
the learner process's replica ``apply``s them in the same order.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from oahu.service.catalog import Catalog, ItemChange
from oahu.service.item_store import ItemStore
from oahu.service.modal_items import ModalItems

__all__ = ["ModalCatalog", "overlay_file"]

_OVERLAY_KEY = "overlay."  # then the modality: each modality's overlay in ModalCatalog.overlay


def overlay_file(modality: str) -> str:
    """The name of ``modality``'s overlay file in the checkpoint directory.

    >>> overlay_file("pix")
    'items-api.pix.npz'
    """
    return f"items-api.{modality}.npz"


class ModalCatalog:
    """The item stores and galleries of ``items`` by modality, with the API's durable changes.

    >>> import tempfile
    >>> from oahu.streams.cross_modal import PAIR, CrossModalStream
    >>> stream = CrossModalStream(
    ...     ("img", "txt"), (np.eye(3, dtype=np.float32), np.ones((3, 2), np.float32)),
    ...     y=[0, 0, 1], dev_idx=[0, 1], test_idx=[2], constraints=[[0, 1, -1]],
    ...     modality=[[0, 1, -1]], kinds=[PAIR], similar=[True])
    >>> state = Path(tempfile.mkdtemp())
    >>> catalog = ModalCatalog(ModalItems.from_stream(stream), state)
    >>> catalog.add("txt", ["new"], [[0.5, 0.5]], [1], gallery=True)  # the new version
    1
    >>> catalog.remove("img", ["0", "zz"])  # how many were known, the new version
    (1, 2)
    >>> again = ModalCatalog(ModalItems.from_stream(stream), state)  # after a restart
    >>> again.version, len(again.items.galleries["txt"]), "0" in again.items.stores["img"]
    (2, 3, False)
    """

    def __init__(
        self,
        items: ModalItems,
        state_dir: str | Path,
        on_change: Callable[[ItemChange], None] | None = None,
    ) -> None:
        self.items = items
        self.on_change = on_change
        self._lock = threading.RLock()
        self.catalogs = {
            m: Catalog(
                items.stores[m],
                items.galleries[m],
                Path(state_dir) / overlay_file(m),
                on_change=self._changed_in(m),
            )
            for m in items.modalities
        }

    @property
    def version(self) -> int:
        """Changes made so far, every modality's."""
        return sum(c.version for c in self.catalogs.values())

    @property
    def gallery_version(self) -> int:
        """Changes to any gallery (``ItemStore.version``), for the snapshot builder."""
        return sum(g.version for g in self.items.galleries.values())

    def _changed_in(self, modality: str) -> Callable[[ItemChange], None]:
        def changed(change: ItemChange) -> None:  # under the lock: in version order
            if self.on_change is not None:
                self.on_change(dataclasses.replace(change, version=self.version, modality=modality))

        return changed

    def catalog(self, modality: str) -> Catalog:
        if modality not in self.catalogs:
            raise ValueError(f"modality: one of {self.items.modalities}, got {modality!r}")
        return self.catalogs[modality]

    def add(self, modality: str, ids: Any, X: Any, y: Any = None, gallery: bool = False) -> int:
        """Add (or replace) items of ``modality`` in its store and, with ``gallery``, its
        gallery (:meth:`Catalog.add`); returns the version this change produced."""
        catalog = self.catalog(modality)
        with self._lock:
            catalog.add(ids, X, y, gallery)
            return self.version

    def remove(self, modality: str, ids: Any) -> tuple[int, int]:
        """Remove items of ``modality`` (:meth:`Catalog.remove`); returns how many were known
        and the version this change produced."""
        catalog = self.catalog(modality)
        with self._lock:
            known, _ = catalog.remove(ids)
            return known, self.version

    def apply(self, change: ItemChange) -> None:
        """Replay a change made by the owning catalog (a replica's side: nothing is written).
        Changes come in version order, each one more than the last in its modality; changes
        this replica already holds (restored from the overlays) are skipped."""
        with self._lock:
            if change.version <= self.version:
                return
            catalog = self.catalog(change.modality)
            catalog.apply(dataclasses.replace(change, version=catalog.version + 1))

    # ------------------------------------------------------------------ replicas
    def overlay(self) -> bytes:
        """Every modality's overlay as it stands (:meth:`Catalog.overlay`), in one .npz, what
        :meth:`follow` applies elsewhere (a serving replica, through Kafka)."""
        with self._lock:
            parts = {
                f"{_OVERLAY_KEY}{m}": np.frombuffer(c.overlay(), dtype=np.uint8)
                for m, c in self.catalogs.items()
            }
        buffer = io.BytesIO()
        np.savez(buffer, **parts)
        return buffer.getvalue()

    def follow(self, overlay: bytes, base: Callable[[], ModalItems]) -> None:
        """Become ``base()``'s items with ``overlay`` (another ModalCatalog's :meth:`overlay`)
        applied, modality by modality, as a serving replica follows the learner service's
        items; nothing is written, and readers see each modality's old items or its new.

        >>> import tempfile
        >>> from oahu.streams.cross_modal_protocol import build_cross_modal_stream
        >>> from oahu.streams.views import TwoViews
        >>> views = TwoViews(("img", "txt"), (np.eye(8), np.ones((8, 2))), np.arange(8) % 2)
        >>> stream = build_cross_modal_stream(views, n_constraints=2, seed=0)
        >>> owner = ModalCatalog(ModalItems.from_stream(stream), Path(tempfile.mkdtemp()))
        >>> owner.add("txt", ["new"], [[0.5, 0.5]], [1], gallery=True)
        1
        >>> replica = ModalCatalog(ModalItems.from_stream(stream), Path(tempfile.mkdtemp()))
        >>> replica.follow(owner.overlay(), lambda: ModalItems.from_stream(stream))
        >>> replica.version, "new" in replica.items.galleries["txt"]
        (1, True)
        """
        fresh = base()
        with np.load(io.BytesIO(overlay), allow_pickle=False) as npz:
            parts = {m: npz[f"{_OVERLAY_KEY}{m}"].tobytes() for m in self.catalogs}
        with self._lock:
            for m, catalog in self.catalogs.items():
                stores = (fresh.stores[m], fresh.galleries[m])
                catalog.follow(parts[m], lambda stores=stores: stores)

    def lookup(self, modality: str, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Features of ``ids`` in ``modality`` and a bool mask of the ids found."""
        return self.items.lookup(modality, ids)

    def gallery(self, modality: str) -> ItemStore:
        return self.items.galleries[modality]
