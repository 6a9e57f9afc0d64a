"""A serving replica's side of ``--publish-model``: following the learner service's snapshots
and items from Kafka (:mod:`oahu.service.serving.model_publishing` writes them).

A thread reads both topics from their start (compacted: little more than the newest blob of
each). The newest item overlay is applied to the replica's catalog over its base files
(:meth:`~oahu.service.catalog.Catalog.follow`); the newest model is handed to the snapshot
publisher under the learner service's own snapshot number, once the catalog has reached the
item version that snapshot was indexed at. So every replica, and the learner service, answer
from the same model and gallery under one number. A replica keeps nothing on disk: killed and
started again, it reads the topics again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oahu.connectors.blob_topic import Blob, BlobReader
from oahu.connectors.kafka_source import Backoff
from oahu.connectors.kafka_uri import parse_kafka_uri
from oahu.service.catalog import Catalog
from oahu.service.console.history import LearningHistory
from oahu.service.item_store import ItemStore
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.modal_items import ModalItems
from oahu.service.serving.model_publishing import items_topic
from oahu.service.serving.snapshot import SnapshotPublisher

__all__ = ["ModelFollower"]

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2


@dataclass(frozen=True)
class _Received:
    blob: Blob
    at: float  # time.monotonic() when it was read


class ModelFollower:
    """Follows the model topic ``uri`` and its items topic into ``publisher`` and ``catalog``
    (whose base items ``base()`` loads again when an overlay must be undone); see the module
    docstring. ``status()`` is the learner's status sent with the snapshot being served."""

    def __init__(
        self,
        uri: str,
        publisher: SnapshotPublisher,
        catalog: Catalog | ModalCatalog,
        base: Callable[[], tuple[ItemStore, ItemStore]] | Callable[[], ModalItems],
        history: LearningHistory,
        options: dict[str, Any] | None = None,
    ) -> None:
        target = parse_kafka_uri(uri, "model_topic", "kafka://HOST:PORT/TOPIC")
        self.uri = uri
        self.bootstrap, self.topic = target.bootstrap, target.topic
        self.publisher = publisher
        self.catalog = catalog
        self.base = base
        self.history = history
        self.options = options or {}
        self.caught_up = False  # both topics read to where they ended at the start
        self.error: str | None = None  # why the topics cannot be read, while they cannot
        self._newest: _Received | None = None
        self._submitted: _Received | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oahu-model-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ what it serves
    def status(self) -> dict[str, Any]:
        submitted = self._submitted
        learner = dict(submitted.blob.meta.get("status", {})) if submitted else {}
        return {**learner, "replica": self.replica_state()}

    def replica_state(self) -> dict[str, Any]:
        newest = self._newest
        return {
            "model_topic": self.uri,
            "caught_up": self.caught_up,
            "newest_published": None if newest is None else newest.blob.meta.get("snapshot"),
            "lag_seconds": self.lag(),
            "error": self.error,
        }

    def lag(self) -> float:
        """Seconds since the newest snapshot on the topic was read, while the replica does not
        serve it yet (0 when it does)."""
        newest = self._newest
        if newest is None or self.publisher.model_state is newest.blob.payload:
            return 0.0
        return time.monotonic() - newest.at

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        readers: tuple[BlobReader, BlobReader] | None = None
        while not self._stop.is_set():
            try:
                if readers is None:
                    readers = (
                        BlobReader(self.bootstrap, self.topic, self.options),
                        BlobReader(self.bootstrap, items_topic(self.topic), self.options),
                    )
                self._follow(*readers)
                self.error = None
                backoff.reset()
            except Exception as exc:  # the broker is down or refuses: read again from the start
                self.error = f"cannot read {self.uri}: {exc!r}"
                delay = backoff.fail()
                log.warning("%s; retrying in %.0f s", self.error, delay)
                if readers is not None:
                    for reader in readers:
                        reader.close()
                    readers = None
                self._stop.wait(delay)
        if readers is not None:
            for reader in readers:
                reader.close()

    def _follow(self, models: BlobReader, items: BlobReader) -> None:
        overlays = items.poll(0.0 if self._newest is None else POLL_SECONDS / 2)
        if overlays:
            overlay = overlays[-1]
            self.catalog.follow(overlay.payload, self.base)
            log.info("items at version %d", self.catalog.version)
        blobs = models.poll(POLL_SECONDS / 2)
        if blobs:
            self._newest = _Received(blobs[-1], time.monotonic())
        self.caught_up = self.caught_up or (models.end_reached and items.end_reached)
        newest = self._newest
        if newest is None or newest is self._submitted or not self.caught_up:
            return  # a new replica builds the newest snapshot first, not each on its way
        if int(newest.blob.meta.get("items_version", 0)) > self.catalog.version:
            return  # its gallery's items are not here yet: they follow on the items topic
        self._submitted = newest
        meta = newest.blob.meta
        log.info("building snapshot %s (%s updates) from %s", meta.get("snapshot"),
                 meta.get("updates"), self.topic)  # fmt: skip
        self.publisher.submit(newest.blob.payload, version=int(meta["snapshot"]))
        if "status" in meta:
            self.history.record(meta["status"])
