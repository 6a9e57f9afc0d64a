"""Publishing the learner service's snapshots and items to Kafka, for serving replicas
(``oahu run --publish-model kafka://HOST:PORT/TOPIC``; ``oahu serve`` follows them).

Each published snapshot goes to ``TOPIC`` as one blob (:mod:`oahu.connectors.blob_topic`): the
model as :mod:`oahu.persistence` bytes (what queries need only), with the snapshot's number and
update count, the catalog version its gallery was indexed at and the learner's status then. The
API's item changes go to ``TOPIC.items`` the same way, as the whole overlay
(:meth:`~oahu.service.catalog.Catalog.overlay`: every change since the base files, one blob),
so that a replica needs only the newest. Blob versions continue from the newest on each topic,
so replicas keep following across restarts of the learner service.

This is the parameter-sync pattern of real-time training systems (Monolith's training and
serving parameter servers): training publishes full snapshots at a bounded interval, serving
swaps them in whole; here the "parameter server" is a compacted Kafka topic.

A thread of its own does the sending, newest first: a snapshot or overlay superseded before it
was sent is skipped, and a broker that is down delays publication (retried with backoff, said
in the log and ``oahu_model_publish_failures_total``), never a build or a query.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from oahu.connectors.blob_topic import BlobReader, BlobWriter
from oahu.connectors.kafka_source import Backoff
from oahu.connectors.kafka_uri import parse_kafka_uri
from oahu.service.catalog import Catalog
from oahu.service.metrics import ServiceMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.serving.snapshot import Snapshot

__all__ = ["ModelPublisher", "items_topic", "latest_version"]

log = logging.getLogger(__name__)

CATCH_UP_SECONDS = 30.0


def items_topic(model_topic: str) -> str:
    """The topic of the item overlay beside a model topic.

    >>> items_topic("oahu-model")
    'oahu-model.items'
    """
    return model_topic + ".items"


def latest_version(bootstrap: str, topic: str, options: dict[str, Any] | None = None) -> int:
    """The newest blob version on ``topic`` (0 when it has none), read to its end."""
    reader = BlobReader(bootstrap, topic, options)
    try:
        latest, deadline = 0, time.monotonic() + CATCH_UP_SECONDS
        while not reader.end_reached:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its end within {CATCH_UP_SECONDS} s")
            for blob in reader.poll(0.2):
                latest = blob.version
        return max(latest, reader.newest_seen)
    finally:
        reader.close()


class ModelPublisher:
    """Sends each snapshot (``snapshot_published``) and the item overlay when it changes
    (``items_changed``) to the model topic ``uri`` and its items topic; see the module
    docstring. ``status`` gives the learner's latest status, sent with each snapshot."""

    def __init__(
        self,
        uri: str,
        catalog: Catalog | ModalCatalog,
        metrics: ServiceMetrics,
        status: Any,
        options: dict[str, Any] | None = None,
    ) -> None:
        target = parse_kafka_uri(uri, "publish_model", "kafka://HOST:PORT/TOPIC")
        self.bootstrap, self.topic = target.bootstrap, target.topic
        self.catalog = catalog
        self.metrics = metrics
        self.status = status
        self.options = options or {}
        self._cond = threading.Condition()
        self._model: tuple[Snapshot, bytes, int] | None = None
        self._items_changed = True  # the overlay goes first, as it stands at the start
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="oahu-model-publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Send what is waiting (up to ``timeout`` seconds), then stop."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)

    def snapshot_published(self, snapshot: Snapshot, state: bytes, items_version: int) -> None:
        with self._cond:
            self._model = (snapshot, state, items_version)
            self._cond.notify()

    def items_changed(self, _change: Any = None) -> None:
        with self._cond:
            self._items_changed = True
            self._cond.notify()

    # ------------------------------------------------------------------ the sending thread
    def _run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        writers: tuple[BlobWriter, BlobWriter] | None = None
        versions = [0, 0]  # the last blob version written to the model and items topics
        while True:
            with self._cond:
                while not (self._stop or self._model is not None or self._items_changed):
                    self._cond.wait()
                if self._stop and writers is None:
                    return
                model, self._model = self._model, None
                items, self._items_changed = self._items_changed, False
            try:
                if writers is None:
                    writers, versions = self._connect()
                if items:
                    versions[1] += 1
                    overlay = self.catalog.overlay()
                    writers[1].write(versions[1], overlay, {"items_version": self.catalog.version})
                if model is not None:
                    versions[0] += 1
                    self._send_model(writers[0], versions[0], *model)
                backoff.reset()
            except Exception as exc:  # the broker is down or refuses: keep the newest, retry
                with self._cond:
                    self._model = self._model or model
                    self._items_changed = self._items_changed or items
                self.metrics.model_publish_failures.inc()
                delay = backoff.fail()
                log.warning("could not publish to %s (%r); retrying in %.0f s", self.topic, exc,
                            delay)  # fmt: skip
                if writers is not None:
                    for writer in writers:
                        writer.close()
                    writers = None
                with self._cond:
                    if self._stop:
                        return
                    self._cond.wait(delay)
                continue
            if self._stop:
                for writer in writers:
                    writer.flush(5.0)
                    writer.close()
                return

    def _connect(self) -> tuple[tuple[BlobWriter, BlobWriter], list[int]]:
        topics = (self.topic, items_topic(self.topic))
        versions = [latest_version(self.bootstrap, t, self.options) for t in topics]
        writers = tuple(BlobWriter(self.bootstrap, t, self.options) for t in topics)
        log.info("publishing snapshots to %s and items to %s (after versions %s)", *topics,
                 versions)  # fmt: skip
        return (writers[0], writers[1]), versions

    def _send_model(
        self, writer: BlobWriter, version: int, snapshot: Snapshot, state: bytes, items: int
    ) -> None:
        meta = {
            **snapshot.meta(),
            "items_version": items,
            "created": snapshot.created,
            "status": self.status(),
        }

        def written(error: BaseException | None) -> None:
            if error is None:
                self.metrics.model_publications.inc()
            else:
                self.metrics.model_publish_failures.inc()

        writer.write(version, state, meta, written)
