"""Published snapshots: what queries read while the training thread keeps learning.

The training thread offers a copy of the learner's state every ``reindex_every`` updates or
``reindex_interval`` seconds; a background thread turns the latest offer into a ``Snapshot`` (a
private clone of the learner plus the gallery embedded and indexed by it) and publishes it by
swapping one reference. A query takes the reference once and answers from it, so it never sees a
half-updated model, and training never waits for queries (an offer replaces any older one that
was not built yet). Gallery changes through the API trigger a rebuild too.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from oahu.inference import GalleryIndex
from oahu.learner import Learner
from oahu.registry import learner_class
from oahu.service.catalog import Catalog
from oahu.service.ivf_index import IVFGalleryIndex
from oahu.service.metrics import ServiceMetrics
from oahu.service.native_threads import use_native_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the model and the gallery index built with it.

    ``version`` counts publications; ``updates`` is the model's update count when it was taken.
    ``index`` is None while the gallery is empty.
    """

    learner: Learner
    alpha: np.ndarray
    index: GalleryIndex | None
    gallery_ids: np.ndarray
    gallery_version: int
    version: int
    updates: int
    created: float

    def meta(self) -> dict[str, Any]:
        return {"snapshot": self.version, "updates": self.updates}


def learner_from_state(state: dict[str, Any]) -> Learner:
    """A fresh learner holding ``state`` (as produced by ``Learner.get_state``)."""
    learner = learner_class(state["learner"])(n_features=state["n_features"], **state["params"])
    learner.set_state(state)
    return learner


def build_snapshot(
    state: dict[str, Any] | Learner,
    catalog: Catalog,
    version: int,
    index: str = "exact",
    nprobe: int = 16,
) -> Snapshot:
    """Clone the model from ``state`` (or reuse an already cloned learner) and index the gallery
    (``index``: "exact", or "ivf" with ``nprobe``, see :mod:`oahu.service.ivf_index`).

    >>> from connectors.items import ItemStore
    >>> import tempfile, pathlib
    >>> from oahu.registry import make_learner
    >>> gallery = ItemStore(dim=2)
    >>> gallery.add(["a", "b"], [[1, 0], [0, 1]], y=[0, 1])
    >>> cat = Catalog(ItemStore(dim=2), gallery, pathlib.Path(tempfile.mkdtemp()) / "o.npz")
    >>> snap = build_snapshot(make_learner("euclidean", 2).get_state(), cat, version=1)
    >>> snap.index.n_items, snap.gallery_ids.tolist(), snap.updates
    (2, ['a', 'b'], 0)
    """
    learner = state if isinstance(state, Learner) else learner_from_state(state)
    version_before = catalog.gallery.version
    ids, X, y = catalog.gallery.snapshot()
    gallery_index = None
    if ids and index == "ivf":
        gallery_index = IVFGalleryIndex.from_learner(learner, X, y, np.asarray(ids), nprobe)
    elif ids:
        gallery_index = GalleryIndex.from_learner(learner, X, labels=y, ids=np.asarray(ids))
    return Snapshot(
        learner,
        learner.alpha,
        gallery_index,
        np.asarray(ids, dtype=str),
        version_before,
        version,
        learner.updates,
        time.time(),
    )


class SnapshotPublisher:
    """Builds and publishes snapshots in a background thread; ``current`` is the latest.

    The training thread calls ``offer(learner)`` after each run of updates; it is cheap unless
    a rebuild is due, when it copies the learner's state (the only moment it touches training).
    """

    def __init__(
        self,
        catalog: Catalog,
        metrics: ServiceMetrics,
        reindex_every: int = 1000,
        reindex_interval: float = 5.0,
        index: str = "exact",
        nprobe: int = 16,
    ) -> None:
        self.catalog = catalog
        self.index, self.nprobe = index, nprobe
        self.metrics = metrics
        self.reindex_every = reindex_every
        self.reindex_interval = reindex_interval
        self.current: Snapshot | None = None
        self._pending: dict[str, Any] | None = None
        self._offered_updates = -1
        self._offered_at = 0.0
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="oahu-reindex", daemon=True)
        self.error: str | None = None

    # ------------------------------------------------------------------ training side
    def offer(self, learner: Learner, force: bool = False) -> bool:
        """Hand over a copy of the learner's state if a rebuild is due; True if it was."""
        changed = learner.updates != self._offered_updates
        due = (
            learner.updates - self._offered_updates >= self.reindex_every
            or time.monotonic() - self._offered_at >= self.reindex_interval
        )
        if not (force or (changed and due)):
            return False
        state = copy.deepcopy(learner.get_state())
        with self._cond:
            self._pending = state
            self._offered_updates = learner.updates
            self._offered_at = time.monotonic()
            self._cond.notify()
        return True

    def gallery_changed(self) -> None:
        """Wake the builder: the gallery changed and must be re-indexed."""
        with self._cond:
            self._cond.notify()

    # ------------------------------------------------------------------ builder side
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=30)

    def wait_for(self, version: int, timeout: float) -> bool:
        """Block until a snapshot with at least ``version`` is published (tests, start-up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.current
            if current is not None and current.version >= version:
                return True
            time.sleep(0.01)
        return False

    def _stale_gallery(self) -> bool:
        current = self.current
        return current is not None and current.gallery_version != self.catalog.gallery.version

    def _run(self) -> None:
        use_native_threads(1)
        while True:
            with self._cond:
                while not self._stop and self._pending is None and not self._stale_gallery():
                    self._cond.wait(timeout=1.0)
                if self._stop:
                    return
                state, self._pending = self._pending, None
            try:
                self._publish(state)
            except Exception as exc:  # keep serving the previous snapshot
                self.error = repr(exc)
                log.exception("snapshot build failed; still serving the previous one")
                time.sleep(1.0)

    def _publish(self, state: dict[str, Any] | None) -> None:
        current = self.current
        source: dict[str, Any] | Learner
        if state is not None:
            source = state
        elif current is not None:
            source = current.learner  # gallery change only: same model, new index
        else:
            return
        started = time.perf_counter()
        version = (current.version + 1) if current else 1
        snapshot = build_snapshot(source, self.catalog, version, self.index, self.nprobe)
        self.current = snapshot  # one reference swap: readers see the old or the new one
        self.error = None
        self.metrics.reindex_seconds.observe(time.perf_counter() - started)
        self.metrics.reindex_time.set(snapshot.created)
        self.metrics.gallery_items.set(len(snapshot.gallery_ids))
        self.metrics.snapshot_updates.set(snapshot.updates)
