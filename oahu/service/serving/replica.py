"""``oahu serve``: a serving replica, the serving process without a learner process.

It follows the snapshots and item changes an ``oahu run --publish-model`` sends to Kafka
(:mod:`oahu.service.serving.model_following`), builds each snapshot in the background as the
learner service does, and answers the same HTTP API from it: for one snapshot number, the same
model, the same gallery and so the same answers as the learner service and every other replica.
It takes no writes (``POST``/``DELETE /v1/items`` and the console's answers are a 403 naming the
learner service) and keeps nothing on disk: killed and started again, it reads the topics again.
Queries outgrow one process before constraints do: replicas behind a load balancer add query
capacity, one process (ideally one core) each.
"""

from __future__ import annotations

import logging
import sys
import threading

from kafka import KafkaConsumer

from oahu.service.catalog import OVERLAY_FILE, Catalog
from oahu.service.config import ServiceConfig
from oahu.service.console.answer_sinks import answer_sink
from oahu.service.console.history import LearningHistory
from oahu.service.item_store import ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.modal_items import ModalItems, cross_modal_stream
from oahu.service.serving.api import ServiceView, create_app
from oahu.service.serving.app import SWITCH_INTERVAL_SECONDS
from oahu.service.serving.collector import CollectorPauses
from oahu.service.serving.cross_modal import snapshot_builds
from oahu.service.serving.http_server import base_url, start_http
from oahu.service.serving.inputs import SUGGEST_STRATEGIES
from oahu.service.serving.model_following import ModelFollower
from oahu.service.serving.queries import QueryEngine
from oahu.service.serving.scratch import ScratchFolder
from oahu.service.serving.snapshot import REPLICA_BUILD_SHARE, SnapshotPublisher
from oahu.service.serving.stalls import StallWatch
from oahu.service.serving.suggest import Suggester
from oahu.threads import use_native_threads

__all__ = ["Replica", "replica_items"]

log = logging.getLogger("oahu.service")

READ_ONLY = (
    "this is a serving replica (oahu serve): it takes no writes; send item changes and answers "
    "to the learner service (oahu run --publish-model)"
)


def replica_items(config: ServiceConfig) -> tuple[ItemStore, ItemStore]:
    """The replica's base item store and gallery, as the learner service loads them:
    ``--gallery`` (a stream file's development items, or an .npz of ids, X, y) and ``--items``,
    by default every item of the gallery file (a learner service reading a stream file holds
    all its items)."""
    store = config.items or config.gallery
    items = ItemStore.load(store) if store else ItemStore()
    gallery = ItemStore.load(config.gallery, dev_only=True) if config.gallery else ItemStore()
    return items, gallery


class Replica:
    """A configured, not yet started replica of ``config.model_topic``; ``run()`` serves until
    SIGTERM/SIGINT."""

    def __init__(self, config: ServiceConfig) -> None:
        if config.model_topic is None:
            raise ValueError("model_topic: oahu serve needs --model-topic kafka://HOST:PORT/TOPIC")
        if config.gallery is None and config.items is None:
            raise ValueError(
                "gallery: oahu serve needs --gallery (or --items): the items the learner "
                "service was started with"
            )
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)  # as the learner service's serving
        use_native_threads(1, faiss=True)
        config.check_kafka_options()
        # Stateless: what the console and the catalog need on disk lives as long as the process,
        # and the folders of replicas killed before they could remove theirs go now.
        self._scratch_folder = ScratchFolder()
        scratch = self._scratch_folder.path
        config = self.config = config.replace(checkpoint_dir=str(scratch))
        self.stop_event = threading.Event()
        self.metrics = ServiceMetrics(SUGGEST_STRATEGIES)
        # a cross-modal learner service's replica holds the items of its cross-modal stream file
        cross_modal = cross_modal_stream(config)
        self.modal_catalog = None
        if cross_modal is None:
            items, gallery = replica_items(config)
            self.catalog = Catalog(items, gallery, scratch / OVERLAY_FILE)
            dim = self.catalog.dim
            if dim is None:
                raise ValueError("gallery: no items in --gallery or --items to tell the input size")
        else:
            self.catalog = Catalog(ItemStore(), ItemStore(), scratch / OVERLAY_FILE)
            dim = 0
            self.modal_catalog = ModalCatalog(ModalItems.from_stream(cross_modal), scratch)
        self.publisher = SnapshotPublisher(
            self.catalog,
            self.metrics,
            config.index,
            config.ivf_nprobe,
            index_device=config.index_device(),
            follow_gallery=False,
            build_share=REPLICA_BUILD_SHARE,
            **snapshot_builds(self.modal_catalog),
        )
        self.history = LearningHistory()
        self.follower = ModelFollower(
            config.model_topic,
            self.publisher,
            self.modal_catalog or self.catalog,
            (lambda: replica_items(config))
            if cross_modal is None
            else (lambda: ModalItems.from_stream(cross_modal)),
            self.history,
            config.kafka_options(KafkaConsumer),
        )
        self.metrics.replica_model_lag.set_function(self.follower.lag)
        m = self.metrics
        self.stalls = StallWatch(m.event_loop_lag, m.serving_pause, m.serving_stalls)
        self.engine = QueryEngine(
            self.publisher, max_batch_rows=max(config.max_batch_items, 1), stalls=self.stalls
        )
        self.suggester = Suggester(self.publisher, self.catalog, None)
        self.answers = answer_sink(config)  # never written to: the answers endpoints refuse
        self.app = create_app(
            ServiceView(
                config=config,
                n_features=dim,
                engine=self.engine,
                suggester=self.suggester,
                publisher=self.publisher,
                catalog=self.catalog,
                metrics=self.metrics,
                status=self.follower.status,
                readiness=self.readiness,
                healthy=lambda: not self.engine.failed,
                learning=lambda: {"running": False, **self.follower.replica_state()},
                items_synced=lambda _version: None,
                history=self.history,
                answers=self.answers,
                read_only=READ_ONLY,
                modal_catalog=self.modal_catalog,
            )
        )
        self.gc_pauses = CollectorPauses(self.metrics.gc_pause_seconds)

    def readiness(self) -> dict[str, str | None]:
        """``snapshot``: one was built from the topic; ``caught_up``: the topics were read to
        where they ended at the start (a restarted replica does not serve an older snapshot
        than the newest); ``model_lag``: the newest snapshot on the topic is served, or was read
        less than ``max_model_lag`` seconds ago."""
        follower, current = self.follower, self.publisher.current
        lag = follower.lag()
        return {
            "snapshot": None
            if current is not None
            else (follower.error or f"no snapshot from {self.config.model_topic} yet"),
            "caught_up": None
            if follower.caught_up
            else (follower.error or f"reading {self.config.model_topic} up to its end"),
            "model_lag": None
            if lag <= self.config.max_model_lag
            else f"the newest snapshot on the topic was read {lag:.0f} s ago and is not served yet",
        }

    def start(self) -> None:
        self.publisher.start()
        self.engine.start()
        self.suggester.start()
        self.stalls.start()
        self.follower.start()

    def shutdown(self) -> None:
        self.follower.stop()
        self.engine.stop()
        self.suggester.stop()
        self.publisher.stop()
        self.stalls.stop()
        self.gc_pauses.close()
        self.answers.close()
        self._scratch_folder.remove()

    def run(self, install_signals: bool = True) -> int:
        """Serve until SIGTERM/SIGINT; returns the process exit code."""
        http = start_http(self.app, self.config, self.stalls, self.stop_event, install_signals)
        if http is None:
            return 1
        self.start()
        base = base_url(self.config, http)
        console = f"  console  {base}/  (read-only)\n" if self.modal_catalog is None else ""
        print(
            f"oahu serve: a replica of {self.config.model_topic}\n"
            f"{console}"
            f"  API      {base}/v1/classify  (docs {base}/docs)\n"
            f"  ready    {base}/readyz\n"
            f"  metrics  {base}/metrics",
            flush=True,
        )
        self.stop_event.wait()
        self.shutdown()
        http.stop()
        return 0
