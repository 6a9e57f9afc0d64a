"""Published snapshots: what queries read while the learner process keeps learning.

The learner process hands over a copy of the learner every ``reindex_every`` updates or
``reindex_interval`` seconds (:class:`oahu.service.learning.link.ReindexSchedule`); a background
thread of the serving process turns the latest one into a ``Snapshot`` (a private copy of the
learner plus the gallery embedded and indexed by it) and publishes it by swapping one reference. A
query takes the reference once and answers from it, so it never sees a half-updated model, and
training never waits for queries (a state replaces any older one not built yet). Gallery changes
through the API trigger a rebuild too.

Re-embedding a large gallery is the most expensive thing the serving process does (0.64 s for
35,000 Fashion-MNIST items with the default learner), so the builder takes at most
``MAX_BUILD_SHARE`` of a core: after a build of t seconds' work it waits t·(1/share − 1) before
the next, the newest state replacing older ones meanwhile. Within a build it embeds the gallery
``GALLERY_SLICE`` items at a time and rests as long as each slice took (``BURST_SHARE``): on two
cores shared with the learner, a rebuild taking a core for half a second at once held queries up
by 25-50 ms (the hypervisor stole CPU time meanwhile), in slices it did not (benchmarks/README.md,
"Serving latency"). Its thread also runs at
``BUILDER_NICENESS`` (as the learner process does): when the cores run short, queries come
first and the snapshot follows the model a little later.

A build that fails (a model that does not load, a gallery that does not fit in memory) leaves the
previous snapshot serving: the builder logs why, keeps the reason in ``error`` (shown by /readyz
and /v1/model) and tries the same state again after a backoff (``RETRY_FIRST_SECONDS``, doubling
up to ``RETRY_MAX_SECONDS``) unless a newer one arrives first. A failure is never final: without a
previous snapshot the service is unready only until a build succeeds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from oahu.inference import GalleryIndex, index_gallery
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes
from oahu.service.catalog import Catalog
from oahu.service.metrics import ServiceMetrics
from oahu.threads import lower_thread_priority, use_native_threads

log = logging.getLogger(__name__)

MAX_BUILD_SHARE = 0.1
# A serving replica has no learner process on its cores: its builder may take more, so that a
# snapshot published every 5 s is served within seconds.
REPLICA_BUILD_SHARE = 0.25
# While it builds, the builder works at most this share of the time, in slices of
# GALLERY_SLICE items: a rebuild's bursts of CPU stay short.
BURST_SHARE = 0.5
GALLERY_SLICE = 8192
BUILDER_NICENESS = 10
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0
GalleryArrays = tuple[int, list[str], np.ndarray, np.ndarray]  # version, ids, X, y
# (the model's bytes or the model, version, rest) -> a snapshot with Snapshot's common fields
SnapshotBuild = Callable[[Any, int, Callable[[float], None]], Any]


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the model and the gallery index built with it.

    ``version`` counts publications; ``updates`` is the model's update count when it was taken.
    ``index`` is None while the gallery is empty. ``gallery_ids`` is an object array of str: a
    fixed-width str array is as wide as its longest id for every item. ``embeddings`` are the
    gallery's (n_depths, n_items, dim), kept for a distance learner (``metric == "l2"``) so that
    ``POST /v1/suggest`` over the gallery reads them instead of embedding it again (None for a
    similarity learner, or an empty gallery).
    """

    learner: Learner
    alpha: np.ndarray
    index: GalleryIndex | None
    gallery_ids: np.ndarray
    gallery_version: int
    version: int
    updates: int
    created: float
    embeddings: np.ndarray | None = None

    def meta(self) -> dict[str, Any]:
        return {"snapshot": self.version, "updates": self.updates}


def gallery_arrays(catalog: Catalog, cached: GalleryArrays | None = None) -> GalleryArrays:
    """The gallery's (version, ids, X, y): ``cached`` while its version is current (copying a
    35,000 × 784 gallery costs half as much as embedding it)."""
    version = catalog.gallery.version  # read first: a change meanwhile makes it look stale
    if cached is not None and cached[0] == version:
        return cached
    return (version, *catalog.gallery.snapshot())


def embed_gallery(
    learner: Learner, x: np.ndarray, rest: Callable[[float], None] | None = None
) -> np.ndarray:
    """The gallery's embeddings, (n_depths, n, dim): with ``rest``, ``GALLERY_SLICE`` items at a
    time, calling ``rest(seconds the slice took)`` after each, so that the caller can pause
    between slices rather than take a core for the whole gallery at once.

    A slice is a multiple of OAHU's own embedding chunk and its preprocessing treats each row on
    its own, so OAHU's slices give the embeddings of one call to the bit.
    """
    if rest is None or len(x) <= GALLERY_SLICE:
        return learner.embed(x, role="gallery")
    out: np.ndarray | None = None
    for start in range(0, len(x), GALLERY_SLICE):
        started = time.perf_counter()
        part = learner.embed(x[start : start + GALLERY_SLICE], role="gallery")
        if out is None:
            out = np.empty((part.shape[0], len(x), part.shape[2]), dtype=part.dtype)
        out[:, start : start + part.shape[1]] = part
        rest(time.perf_counter() - started)
    assert out is not None
    return out


def build_snapshot(
    state: bytes | Learner,
    catalog: Catalog,
    version: int,
    index: str = "exact",
    nprobe: int = 16,
    gallery: GalleryArrays | None = None,
    rest: Callable[[float], None] | None = None,
    index_device: str = "cpu",
) -> Snapshot:
    """Read the model from ``state`` (or reuse an already read learner) and index the gallery
    (``gallery_arrays(catalog)`` unless given) with it: ``index`` is a kind of
    :func:`oahu.inference.make_index` ("exact": the paper's kNN; "ivf" with ``nprobe``), searching
    on ``index_device`` (:meth:`ServiceConfig.index_device
    <oahu.service.config.ServiceConfig.index_device>`: the learner's GPU, if it runs on one);
    ``rest`` paces the gallery's embedding (:func:`embed_gallery`).

    >>> from oahu.service.item_store import ItemStore
    >>> import tempfile, pathlib
    >>> from oahu.registry import make_learner
    >>> gallery = ItemStore(dim=2)
    >>> gallery.add(["a", "b"], [[1, 0], [0, 1]], y=[0, 1])
    >>> cat = Catalog(ItemStore(dim=2), gallery, pathlib.Path(tempfile.mkdtemp()) / "o.npz")
    >>> from oahu.persistence import learner_to_bytes
    >>> snap = build_snapshot(learner_to_bytes(make_learner("euclidean", 2)), cat, version=1)
    >>> snap.index.n_items, snap.gallery_ids.tolist(), snap.updates
    (2, ['a', 'b'], 0)
    """
    learner = state if isinstance(state, Learner) else learner_from_bytes(state)[0]
    gallery_version, ids, X, y = gallery or gallery_arrays(catalog)
    id_array = np.empty(len(ids), dtype=object)
    id_array[:] = ids
    indexed = (
        index_gallery(
            learner,
            X,
            y,
            id_array,
            index,
            nprobe,
            embed=lambda x: embed_gallery(learner, x, rest),
            device=index_device,
        )
        if ids
        else None
    )
    return Snapshot(
        learner,
        learner.alpha,
        None if indexed is None else indexed.index,
        id_array,
        gallery_version,
        version,
        learner.updates,
        time.time(),
        # One more copy of the embedded gallery (the index keeps its own layout): 56 MB for
        # 35,000 items at two depths of 200; a similarity learner's are of no use to suggest.
        indexed.embeddings if indexed is not None and learner.metric == "l2" else None,
    )


class SnapshotPublisher:
    """Builds and publishes snapshots in a background thread; ``current`` is the latest.

    ``submit(state)`` hands over a learner as :mod:`oahu.persistence` bytes (from the learner
    process, or :func:`~oahu.persistence.learner_to_bytes` of one at hand). ``error`` is why the
    latest build failed (None once one succeeds), ``failures`` how many failed in a row.

    ``on_published(snapshot, state, items_version)`` hears of each snapshot with the bytes of
    its model and the catalog version it was built at (``--publish-model`` sends them to the
    replicas). A serving replica numbers its snapshots as the learner service did
    (``submit(state, version)``) and builds one only for a new model (``follow_gallery`` off):
    one number, one model and one gallery everywhere. ``build_share``: the most of a core the
    builder takes between builds (``REPLICA_BUILD_SHARE`` on a replica). ``build(state or model,
    version, rest)``: how a snapshot is made, for a model whose galleries are not the catalog's
    (a cross-modal one, :mod:`oahu.service.serving.cross_modal`); default :func:`build_snapshot`.
    ``gallery_version()``: the version of the gallery such a build indexes (default the
    catalog's gallery's), which a snapshot's ``gallery_version`` records. ``index_device``: where
    :func:`build_snapshot` searches the gallery (the CPU unless the learner runs on a GPU).
    """

    def __init__(
        self,
        catalog: Catalog,
        metrics: ServiceMetrics,
        index: str = "exact",
        nprobe: int = 16,
        on_published: Callable[[Snapshot, bytes, int], None] | None = None,
        follow_gallery: bool = True,
        build_share: float = MAX_BUILD_SHARE,
        build: SnapshotBuild | None = None,
        gallery_version: Callable[[], int] | None = None,
        index_device: str = "cpu",
    ) -> None:
        self.catalog = catalog
        self.build = build
        self.gallery_version = gallery_version or (lambda: catalog.gallery.version)
        self.index, self.nprobe, self.index_device = index, nprobe, index_device
        self.metrics = metrics
        self.on_published = on_published
        self.follow_gallery = follow_gallery
        self.build_share = build_share
        self.current: Snapshot | None = None
        self._pending: tuple[bytes, int | None] | None = None
        self._state: bytes | None = None  # the current snapshot's model, as bytes
        self._cond = threading.Condition()
        self._stop = False
        self._gallery: GalleryArrays | None = None
        self._next_build_at = 0.0
        self._thread = threading.Thread(target=self._run, name="oahu-reindex", daemon=True)
        self.error: str | None = None
        self.failures = 0

    # ------------------------------------------------------------------ model side
    @property
    def model_state(self) -> bytes | None:
        """The bytes the current snapshot's model was read from (the object submitted)."""
        return self._state

    def submit(self, state: bytes, version: int | None = None) -> None:
        """Build a snapshot of ``state`` (a learner as :mod:`oahu.persistence` bytes) next,
        replacing any older one still waiting; numbered ``version`` (default: the next)."""
        with self._cond:
            self._pending = (state, version)
            self._cond.notify()

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
        return (
            self.follow_gallery
            and current is not None
            and current.gallery_version != self.gallery_version()
        )

    def _run(self) -> None:
        use_native_threads(1, faiss=True)
        lower_thread_priority(BUILDER_NICENESS)
        while True:
            with self._cond:
                while not self._stop:
                    due = self._pending is not None or self._stale_gallery()
                    pause = self._next_build_at - time.monotonic()
                    if due and pause <= 0:
                        break
                    self._cond.wait(timeout=pause if due else 1.0)
                if self._stop:
                    return
                state, self._pending = self._pending, None
            try:
                self._publish(state)
            except Exception as exc:  # MemoryError included: keep serving the previous snapshot
                self._failed(state, exc)

    def _failed(self, state: tuple[bytes, int | None] | None, exc: Exception) -> None:
        self.failures += 1
        delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (self.failures - 1))
        self.error = f"{type(exc).__name__}: {exc}"[:1000]
        with self._cond:
            if self._pending is None:  # a newer state, if one came meanwhile, is built instead
                self._pending = state
            self._next_build_at = time.monotonic() + delay
        current = self.current
        serving = f"snapshot {current.version}" if current else "no snapshot yet (not ready)"
        log.error(
            "snapshot build failed (%d in a row), still serving %s; retrying in %.0f s",
            self.failures,
            serving,
            delay,
            exc_info=exc,
        )

    def _publish(self, pending: tuple[bytes, int | None] | None) -> None:
        current = self.current
        source: bytes | Learner
        version = (current.version + 1) if current else 1
        if pending is not None:
            source, given = pending
            version = version if given is None else given
            state = source
        elif current is not None and self._state is not None:
            source, state = current.learner, self._state  # gallery change: same model, new index
        else:
            return
        started = time.perf_counter()
        rested = [0.0]

        def rest(worked: float) -> None:  # a burst of work, then as long again of rest
            pause = worked * (1 / BURST_SHARE - 1)
            time.sleep(pause)
            rested[0] += pause

        # Read before the gallery: a change in between is published again with the next build.
        items_version = self.catalog.version
        if self.build is not None:
            snapshot = self.build(source, version, rest)
        else:
            self._gallery = gallery_arrays(self.catalog, self._gallery)
            snapshot = build_snapshot(
                source,
                self.catalog,
                version,
                self.index,
                self.nprobe,
                self._gallery,
                rest,
                self.index_device,
            )
        self.current = snapshot  # one reference swap: readers see the old or the new one
        self._state = state
        if self.on_published is not None:
            self.on_published(snapshot, state, items_version)
        self.error, self.failures = None, 0
        took = time.perf_counter() - started - rested[0]
        self._next_build_at = time.monotonic() + took * (1 / self.build_share - 1)
        self.metrics.reindex_seconds.observe(took)
        self.metrics.reindex_time.set(snapshot.created)
        self.metrics.gallery_items.set(len(snapshot.gallery_ids))
        self.metrics.snapshot_updates.set(snapshot.updates)
