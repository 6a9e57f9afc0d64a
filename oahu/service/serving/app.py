"""Wiring and running the service: the serving process and its learner process.

The serving process holds the item store and gallery (``Catalog``), the published snapshots, the
query worker and the uvicorn server; the learn loop runs in a child process
(:mod:`oahu.service.learning`) that sends it learners and status reports
(:mod:`oahu.service.messages`). The main thread waits and turns SIGTERM/SIGINT into a clean
stop: the learner finishes the current run of updates, checkpoints, commits and exits, then the
service exits 0.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from kafka import KafkaProducer

from oahu.learner import Learner
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.catalog import OVERLAY_FILE, Catalog, ItemChange, base_items
from oahu.service.checkpoints import (
    Progress,
    checkpoint_path,
    make_state_dir,
    outermost_missing,
    restore_checkpoint,
)
from oahu.service.config import ServiceConfig
from oahu.service.console.answer_sinks import answer_sink
from oahu.service.console.history import LearningHistory
from oahu.service.item_store import ItemStore
from oahu.service.learning.main import learner_main
from oahu.service.messages import Start
from oahu.service.metrics import LearningMetrics, ServiceMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.modal_items import (
    ModalItems,
    announces_cross_modal,
    cross_modal_stream,
    new_cross_modal_model,
)
from oahu.service.serving.api import ServiceView, create_app
from oahu.service.serving.collector import CollectorPauses
from oahu.service.serving.cross_modal import snapshot_builds
from oahu.service.serving.http_server import base_url, start_http
from oahu.service.serving.inputs import SUGGEST_STRATEGIES
from oahu.service.serving.model_publishing import ModelPublisher
from oahu.service.serving.process import LearnerProcess
from oahu.service.serving.queries import QueryEngine
from oahu.service.serving.snapshot import SnapshotPublisher
from oahu.service.serving.stalls import StallWatch
from oahu.service.serving.suggest import Suggester
from oahu.service.serving.suggestion_sink import SuggestionSink
from oahu.service.serving.supervisor import MAX_DELAY_SECONDS, LearnerSupervisor, RestartBackoff
from oahu.service.status import model_status
from oahu.threads import use_native_threads

log = logging.getLogger("oahu.service")
# The learner loop reports at least once a second while it runs (each idle poll forces one):
# this much silence means it is stuck, and the service is not ready.
READY_REPORT_AGE = 10.0

SWITCH_INTERVAL_SECONDS = 0.0002
ITEM_SYNC_TIMEOUT_SECONDS = 30.0


def default_stream(config: ServiceConfig) -> Path:
    """The bundled-digits stream ``oahu run`` learns from when given no source (built once;
    built again, identical but for the digits' image shape, when an earlier release wrote it
    without one, so that the console draws its items)."""
    from oahu.streams.benchmark_stream import build_stream
    from oahu.streams.stream_file import load_stream

    path = make_state_dir(config.checkpoint_dir).resolve() / (
        f"digits-{config.default_constraints}-seed{config.seed}.npz"
    )
    if not path.exists() or load_stream(path).image_shape is None:
        build_stream("digits", config.default_constraints, seed=config.seed).save(path)
    return path


def initial_items(config: ServiceConfig) -> tuple[ItemStore, ItemStore]:
    """The item store and the gallery at start-up: :func:`~oahu.service.catalog.base_items`
    and ``--gallery``, by default the development items of the stream file the source reads."""
    items, stream_file = base_items(config)
    gallery_file = config.gallery or stream_file
    if gallery_file is None or announces_cross_modal(gallery_file):
        return items, ItemStore()  # a cross-modal file's galleries are by modality: ModalItems
    return items, ItemStore.load(gallery_file, dev_only=True)


def check_cross_modal_config(config: ServiceConfig) -> None:
    """``ValueError`` naming the setting a cross-modal service does not take: its stream is
    learned by oahu's cross-modal model, with that model's defaults, in one learner process."""
    given = {
        "learner": config.learner != "oahu",
        "learner_params": bool(config.learner_params),
        "preset": config.preset is not None,
        "self_paced": config.self_paced,
        "learners": config.learners != 1,
        "suggest_topic": config.suggest_topic is not None,
    }
    for name, set_ in given.items():
        if set_:
            raise ValueError(
                f"{name}: {getattr(config, name)!r} is not taken with a cross-modal stream, "
                f"which oahu's cross-modal model ({CrossModalOAHU.name!r}) learns with its "
                "defaults, in one learner process, served by this process (docs/cross-modal.md)"
            )


class Service:
    """A configured, not yet started service; ``run()`` serves until stopped.

    ``status`` is the learner's latest report (what /v1/model shows), ``finished`` is set once
    the learner process has ended cleanly (a failed one is restarted, see
    :mod:`~oahu.service.serving.supervisor`) and ``learner_error`` says why the latest failed.
    """

    def __init__(self, config: ServiceConfig) -> None:
        # The query worker and the event loop share one GIL, and every torch or faiss call gives
        # it up and must win it back: with the default 5 ms switch interval a query that makes
        # ~30 such calls can wait ~150 ms behind the snapshot builder (convoy effect).
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        use_native_threads(1, faiss=True)  # this thread embeds the gallery at start-up
        self.config = config
        self.stop_event = threading.Event()
        self.metrics = ServiceMetrics(SUGGEST_STRATEGIES)
        # The embedded default stream is written into the state folder before the inputs are
        # checked: a refusal takes away the folders this start made, as it leaves no empty one.
        made = outermost_missing(config.checkpoint_dir) if config.source is None else None
        try:
            if config.source is None:
                config = self.config = config.replace(source=default_stream(config).as_uri())
            if config.is_kafka:
                config.check_kafka_options()
            items, gallery = initial_items(config)
            cross_modal = cross_modal_stream(config)
            if cross_modal is not None:
                check_cross_modal_config(config)
        except Exception:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            raise
        # Made once the inputs passed their checks: a refused command leaves no empty folder.
        state_dir = make_state_dir(config.checkpoint_dir)
        self.catalog = Catalog(items, gallery, state_dir / OVERLAY_FILE)
        # a cross-modal stream's items, by modality: the model is then a cross-modal one
        self.modal_catalog = None
        if cross_modal is not None:
            self.modal_catalog = ModalCatalog(ModalItems.from_stream(cross_modal), state_dir)
        self.learner, progress, fell_back = self._restore_or_create(checkpoint_path(state_dir))
        progress.source = config.source or ""
        self._show_checkpoint_metrics(self.learner, progress, fell_back)
        # --publish-model: every snapshot and item change also goes to Kafka, for replicas
        self.model_publisher = (
            None
            if config.publish_model is None
            else ModelPublisher(
                config.publish_model,
                self.modal_catalog or self.catalog,
                self.metrics,
                lambda: self.status,
                config.kafka_options(KafkaProducer),
            )
        )
        self.publisher = SnapshotPublisher(
            self.catalog,
            self.metrics,
            config.index,
            config.ivf_nprobe,
            index_device=config.index_device(),
            on_published=self.model_publisher and self.model_publisher.snapshot_published,
            **snapshot_builds(self.modal_catalog),
        )
        self.history = LearningHistory()  # the console's curve, from the checkpoint on
        first = self._learner_process(self.learner, progress, fell_back)
        delay = config.learner_restart_delay
        self.learning = LearnerSupervisor(
            first,
            self._restart_from_checkpoint,
            self.metrics,
            RestartBackoff(first=delay, most=max(MAX_DELAY_SECONDS, delay)),
        )
        # API item changes go to the learner process (before it runs, it reads the overlay file)
        self.catalog.on_change = self._item_changed
        if self.modal_catalog is not None:
            self.modal_catalog.on_change = self._item_changed
        self.metrics.learner_report_age.set_function(lambda: self.learning.report_age or 0.0)
        self.metrics.source_contact_age.set_function(self._source_contact_age)
        m = self.metrics
        self.stalls = StallWatch(m.event_loop_lag, m.serving_pause, m.serving_stalls)
        self.engine = QueryEngine(
            self.publisher, max_batch_rows=max(config.max_batch_items, 1), stalls=self.stalls
        )
        self.suggester = Suggester(
            self.publisher, self.catalog, SuggestionSink.of(config, self.metrics)
        )
        # the console's answers: made before the learner process starts, which reads the log
        # only once a torn line a crash left in it is cut off
        self.answers = answer_sink(config)
        self.app = create_app(self._view())
        self.gc_pauses = CollectorPauses(self.metrics.gc_pause_seconds)

    # ------------------------------------------------------------------ construction
    def _restore_or_create(self, path: Path) -> tuple[Learner, Progress, bool]:
        """The checkpointed learner and progress (or a new learner), and whether they come from
        an earlier checkpoint than the latest (``restore_checkpoint`` fell back)."""
        config = self.config
        restored = restore_checkpoint(path)
        expected = config.learner if self.modal_catalog is None else CrossModalOAHU.name
        if restored is not None:
            learner, progress = restored.learner, restored.progress
            if learner.name != expected:
                raise ValueError(
                    f"learner: {restored.path} holds a {learner.name!r} model, not "
                    f"{expected!r}; use another --checkpoint-dir or --learner"
                )
            log.info("restored %s: %d constraints consumed", restored.path, progress.consumed)
            return learner, progress, restored.fell_back
        if self.modal_catalog is not None:
            model = new_cross_modal_model(self.modal_catalog.items, config.seed)
            return model, Progress(), False
        n_features = config.n_features or self.catalog.dim
        if n_features is None:
            raise ValueError(
                "n_features: unknown input dimension; give --n-features, --items or --gallery"
            )
        learner = make_learner(config.learner, n_features, **config.learner_arguments())
        if learner.needs_prepare:
            # Preprocessing statistics (and OAHU's PCA-initialised E0) come from unlabelled
            # items, once, before the first constraint; they are checkpointed from then on.
            _, x, _ = self.catalog.gallery.snapshot()
            if len(x) == 0:
                _, x, _ = self.catalog.items.snapshot()
            if len(x) == 0:
                instead = " or --preset paper" if config.learner == "oahu" else ""
                raise ValueError(
                    f"{config.learner}: fits its preprocessing ({learner.input_scaler.spec!r}) or "
                    "initialisation on unlabelled items before the first constraint, and this "
                    "source brings none: give --gallery or --items (a stream file or an .npz of "
                    f"items), or --learner-param preprocess=none{instead}"
                )
            learner.prepare(x)
        return learner, Progress(), False

    def _learner_process(
        self, learner: Learner, progress: Progress, fell_back: bool
    ) -> LearnerProcess:
        """A learner process (not started) that continues ``learner`` from ``progress``."""
        status = {
            **model_status(
                learner, progress, progress, checkpoint_path(self.config.checkpoint_dir)
            ),
            "source_ready": False,
        }
        self.history.record(status)
        return LearnerProcess(
            learner_main,
            (self.config,),
            Start(learner_to_bytes(learner), progress.to_extra(), fell_back),
            status,
            self.publisher.submit,
            self.metrics.forward,
            self.history.record,
        )

    def _restart_from_checkpoint(self) -> LearnerProcess:
        """A new learner process after one failed, from the last checkpoint (where a restart of
        the whole service would continue), its metrics shown as they stood there."""
        learner, progress, fell_back = self._restore_or_create(
            checkpoint_path(self.config.checkpoint_dir)
        )
        progress.source = self.config.source or ""
        self._show_checkpoint_metrics(learner, progress, fell_back)
        return self._learner_process(learner, progress, fell_back)

    def _show_checkpoint_metrics(
        self, learner: Learner, progress: Progress, fell_back: bool
    ) -> None:
        """The learner process's metrics as they stood at ``progress``, until its first report
        replaces them: /metrics shows every series from the start, at the checkpoint's values
        or zero."""
        metrics = LearningMetrics.of(learner)
        metrics.restore(learner, progress, fell_back)
        metrics.set_model(learner)
        self.metrics.forward(metrics.families())

    def _item_changed(self, change: ItemChange) -> None:
        self.learning.forward(change)
        if self.model_publisher is not None:
            self.model_publisher.items_changed(change)

    def _view(self) -> ServiceView:
        config = self.config
        return ServiceView(
            config=config,
            n_features=0 if self.modal_catalog is not None else self.learner.n_features,
            engine=self.engine,
            suggester=self.suggester,
            publisher=self.publisher,
            catalog=self.catalog,
            metrics=self.metrics,
            status=lambda: {**self.status, "source": config.source},
            readiness=self.readiness,
            healthy=lambda: not self.engine.failed,
            learning=self.learning.state,
            items_synced=self._items_synced,
            history=self.history,
            answers=self.answers,
            modal_catalog=self.modal_catalog,
        )

    def _items_synced(self, version: int) -> None:
        if not self.learning.wait_items(version, ITEM_SYNC_TIMEOUT_SECONDS) and self.learning.alive:
            log.warning("the learner has not applied item change %d yet", version)

    # ------------------------------------------------------------------ state
    @property
    def status(self) -> dict[str, Any]:
        return self.learning.status

    @property
    def finished(self) -> threading.Event:
        return self.learning.finished

    @property
    def learner_error(self) -> str | None:
        return self.learning.error

    def _source_contact_age(self) -> float:
        """The source's silence as of the learner's last report, plus the time since it."""
        reported = float(self.status.get("source_contact_age_s", 0.0))
        return reported + (self.learning.report_age or 0.0)

    def readiness(self) -> dict[str, str | None]:
        """Each readiness check: None when it passes, else why not, in an operator's words.

        ``snapshot``: queries have a model to answer from. While a learner process runs,
        ``source`` follows its reports (a Kafka source is not ready within
        ``KafkaSource.stale_after`` seconds of the broker going silent) and
        ``learner_reporting`` catches a learner loop that stopped reporting, e.g. blocked in a
        call to a frozen broker, within ``READY_REPORT_AGE`` seconds. While a failed learner
        process waits to be restarted, and until the new one first reports, the service is
        ready to serve and not learning: only ``snapshot`` counts, and ``/readyz`` says so
        under ``learning``.
        """
        snapshot = None if self.publisher.current is not None else "no snapshot published yet"
        learning = self.learning
        if learning.down or (learning.restarts and learning.report_age is None):
            return {"snapshot": snapshot}
        status, age = self.status, learning.report_age
        reporting = None
        if age is None:
            reporting = "the learner process has not reported yet"
        elif age > READY_REPORT_AGE:
            reporting = f"no report from the learner process for {age:.0f} s"
        source = None
        if not status.get("source_ready"):
            source = status.get("source_not_ready") or "the source is not connected yet"
        return {"source": source, "snapshot": snapshot, "learner_reporting": reporting}

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Start the snapshot builder, the query worker and the learner process (not the HTTP
        server)."""
        if self.model_publisher is not None:
            self.model_publisher.start()
        self.publisher.start()
        self.publisher.submit(learner_to_bytes(self.learner, queries_only=True))
        self.engine.start()
        self.suggester.start()
        self.stalls.start()
        self.learning.start()

    def shutdown(self) -> None:
        """Stop learning (final checkpoint and commit), then the background threads."""
        self.stop_event.set()
        self.learning.stop()
        self.engine.stop()
        self.suggester.stop()
        self.answers.close()
        self.publisher.stop()
        if self.model_publisher is not None:
            self.model_publisher.stop()
        self.stalls.stop()
        self.gc_pauses.close()

    def run(self, install_signals: bool = True) -> int:
        """Serve HTTP and learn until SIGTERM/SIGINT (or the end of the file with
        ``exit_at_end``); returns the process exit code."""
        http = start_http(self.app, self.config, self.stalls, self.stop_event, install_signals)
        if http is None:
            return 1
        self.start()
        base = base_url(self.config, http)
        console = f"  console  {base}/\n" if self.modal_catalog is None else ""
        print(
            f"oahu run: {self.learner.name} learning from {self.config.source}\n"
            f"{console}"
            f"  API      {base}/v1/classify  (docs {base}/docs)\n"
            f"  model    {base}/v1/model\n"
            f"  metrics  {base}/metrics\n"
            f"  state    {Path(self.config.checkpoint_dir).resolve()}",
            flush=True,
        )
        while not (self.stop_event.is_set() or self.finished.is_set()):
            self.stop_event.wait(0.1)
            self.learning.poll()  # restarts a failed learner process, on this thread
        self.shutdown()
        http.stop()
        return 0
