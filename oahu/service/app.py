"""Wiring and running the service: source, items, learner, checkpoint, threads, HTTP server.

Threads: the learner (``ConsumerLoop.run``), the snapshot builder, the query worker and the
uvicorn server; the main thread waits and turns SIGTERM/SIGINT into a clean stop (finish the
current run of updates, checkpoint, commit, exit 0).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from connectors.dead_letter import DeadLetter, DeadLetterFile, DeadLetterKafka, DeadLetterSink
from connectors.file_source import FileSource
from connectors.items import ItemStore
from connectors.kafka_source import Backoff
from oahu.learner import Learner
from oahu.registry import make_learner
from oahu.service.api import ServiceView, create_app
from oahu.service.catalog import Catalog
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.consumer import ConsumerLoop
from oahu.service.metrics import ServiceMetrics
from oahu.service.native_threads import use_native_threads
from oahu.service.queries import QueryEngine
from oahu.service.snapshot import SnapshotPublisher

log = logging.getLogger("oahu.service")

OVERLAY_FILE = "items-api.npz"
DEAD_LETTER_FILE = "dead-letters.jsonl"
DEAD_LETTER_SUFFIX = ".dead-letter"
SWITCH_INTERVAL_SECONDS = 0.0002


def default_stream(config: ServiceConfig) -> Path:
    """The bundled-digits stream ``oahu run`` learns from when given no source (built once)."""
    from streams.stream_file import build_stream

    path = Path(config.checkpoint_dir).resolve() / (
        f"digits-{config.default_constraints}-seed{config.seed}.npz"
    )
    if not path.exists():
        build_stream("digits", config.default_constraints, seed=config.seed).save(path)
    return path


def load_items(path: str | Path, dev_only: bool = False) -> ItemStore:
    """Items of a file: an .npz with ids/X[/y], or a stream file (ids are item indices; with
    ``dev_only`` only its development items, as a gallery)."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as npz:
            is_stream = "dev_idx" in npz.files
    else:
        is_stream = True  # JSON Lines stream files are the only other item files
    if not (dev_only and is_stream):
        return ItemStore.load(path)
    from streams.stream_file import ConstraintStream, read_jsonl

    stream = ConstraintStream.load(path) if path.suffix == ".npz" else read_jsonl(path)
    store = ItemStore(dim=stream.n_features)
    store.add(stream.dev_idx, stream.X[stream.dev_idx], stream.y[stream.dev_idx])
    return store


class LazyDeadLetterSink(DeadLetterSink):
    """Creates its sink on first use, retrying with backoff: a Kafka producer cannot be built
    while the broker is down, and the service must start (not ready) rather than crash-loop.
    Letters only arise from records just fetched, so the broker is normally up by then."""

    def __init__(self, factory: Callable[[], DeadLetterSink]) -> None:
        super().__init__()
        self._factory = factory
        self._sink: DeadLetterSink | None = None

    def _deliver(self, letter: DeadLetter) -> None:
        backoff = Backoff()
        while self._sink is None:
            try:
                self._sink = self._factory()
            except Exception as exc:  # the producer's connection errors vary by version
                delay = backoff.fail()
                log.warning("dead-letter sink unavailable (%r); retrying in %.1fs", exc, delay)
                time.sleep(delay)
        self._sink.write(letter)

    def flush(self) -> None:
        if self._sink is not None:
            self._sink.flush()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()


def kafka_options(options: dict[str, Any], client: type) -> dict[str, Any]:
    """The settings among ``options`` that ``client`` (KafkaConsumer or KafkaProducer) takes."""
    return {k: v for k, v in options.items() if k in client.DEFAULT_CONFIG}


class Service:
    """A configured, not yet started service; ``run()`` serves until stopped."""

    def __init__(self, config: ServiceConfig) -> None:
        # The learner, the query worker and the event loop share one GIL, and every torch or
        # faiss call gives it up and must win it back: with the default 5 ms switch interval a
        # query that makes ~30 such calls waits ~150 ms behind the learner (convoy effect).
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        use_native_threads(1)  # this thread embeds the gallery at start-up
        self.config = config
        self.stop_event = threading.Event()
        self.metrics = ServiceMetrics()
        state_dir = Path(config.checkpoint_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        for stale in state_dir.glob(".*.tmp"):  # left by a crash in the middle of a write
            stale.unlink(missing_ok=True)
        if config.source is None:
            config = self.config = config.replace(source=default_stream(config).as_uri())
        items = ItemStore.load(config.items) if config.items else ItemStore()
        self.source: Any = None
        if not config.is_kafka:
            self.source = FileSource(config.file_path(), items=items)
        gallery_file = config.gallery or (None if config.is_kafka else str(config.file_path()))
        gallery = load_items(gallery_file, dev_only=True) if gallery_file else ItemStore()
        self.catalog = Catalog(items, gallery, state_dir / OVERLAY_FILE)
        self.learner, progress = self._restore_or_create(checkpoint_path(state_dir))
        progress.source = config.source or ""
        self.publisher = SnapshotPublisher(
            self.catalog,
            self.metrics,
            config.reindex_every,
            config.reindex_interval,
            config.index,
            config.ivf_nprobe,
        )
        self.loop = ConsumerLoop(
            self.learner,
            None,
            self.catalog,
            self._dead_letter_sink(state_dir),
            self.publisher,
            self.metrics,
            checkpoint_path(state_dir),
            progress,
            checkpoint_every=config.checkpoint_every,
            checkpoint_interval=config.checkpoint_interval,
            poll_records=config.poll_records,
            poll_timeout=config.poll_timeout,
            exit_at_end=config.exit_at_end,
        )
        if config.is_kafka:
            self.source = self._kafka_source()
        self.loop.source = self.source
        self.engine = QueryEngine(self.publisher, max_batch_rows=max(config.max_batch_items, 1))
        self.trainer_error: BaseException | None = None
        self._trainer = threading.Thread(target=self._train, name="oahu-learner", daemon=True)
        self.app = create_app(self._view())

    # ------------------------------------------------------------------ construction
    def _restore_or_create(self, path: Path) -> tuple[Learner, Progress]:
        config = self.config
        restored = read_checkpoint(path)
        if restored is not None:
            learner, progress = restored
            if learner.name != config.learner:
                raise ValueError(
                    f"learner: {path} holds a {learner.name!r} model, not {config.learner!r}; "
                    "use another --checkpoint-dir or --learner"
                )
            log.info("restored %s: %d constraints consumed", path, progress.consumed)
            return learner, progress
        n_features = config.n_features or self.catalog.dim
        if n_features is None:
            raise ValueError(
                "n_features: unknown input dimension; give --n-features, --items or --gallery"
            )
        return make_learner(config.learner, n_features, **config.learner_params), Progress()

    def _dead_letter_sink(self, state_dir: Path) -> DeadLetterSink:
        config = self.config
        if config.is_kafka:
            from kafka import KafkaProducer

            bootstrap, topic, _ = config.kafka_target()
            return LazyDeadLetterSink(
                lambda: DeadLetterKafka(
                    config.dead_letter or topic + DEAD_LETTER_SUFFIX,
                    bootstrap,
                    config=kafka_options(config.kafka, KafkaProducer),
                )
            )
        return DeadLetterFile(config.dead_letter or state_dir / DEAD_LETTER_FILE)

    def _kafka_source(self) -> Any:
        from kafka import KafkaConsumer, KafkaProducer

        from connectors.kafka_source import KafkaSource

        unknown = (
            set(self.config.kafka)
            - set(KafkaConsumer.DEFAULT_CONFIG)
            - set(KafkaProducer.DEFAULT_CONFIG)
        )
        if unknown:
            raise ValueError(f"kafka: unknown kafka-python setting(s) {sorted(unknown)}")
        bootstrap, topic, group = self.config.kafka_target()
        return KafkaSource(
            topic,
            group,
            bootstrap,
            config=kafka_options(self.config.kafka, KafkaConsumer),
            on_assign=self.loop.on_assign,
            on_revoke=self.loop.on_revoke,
        )

    def _view(self) -> ServiceView:
        config = self.config
        return ServiceView(
            engine=self.engine,
            publisher=self.publisher,
            catalog=self.catalog,
            metrics=self.metrics,
            n_features=self.learner.n_features,
            k=config.k,
            max_batch_items=config.max_batch_items,
            max_request_bytes=config.max_request_bytes,
            auth_token=config.auth_token,
            status=lambda: {**self.loop.status, "source": config.source},
            readiness=self.readiness,
            healthy=lambda: self.trainer_error is None,
        )

    # ------------------------------------------------------------------ running
    def readiness(self) -> dict[str, bool]:
        return {
            "source": bool(self.source is not None and self.source.ready),
            "snapshot": self.publisher.current is not None,
            "learner": self._trainer.is_alive(),
        }

    def _train(self) -> None:
        use_native_threads(self.config.threads)
        try:
            self.loop.run(self.stop_event)
        except BaseException as exc:  # reported by /healthz and the exit code
            self.trainer_error = exc
            log.exception("the learner thread failed")

    def start(self) -> None:
        """Start the snapshot builder, the query worker and the learner (not the HTTP server)."""
        self.publisher.start()
        self.publisher.offer(self.learner, force=True)
        self.engine.start()
        self._trainer.start()

    def shutdown(self) -> None:
        """Stop learning (final checkpoint and commit), then the background threads."""
        self.stop_event.set()
        if self._trainer.is_alive():
            self._trainer.join()
        if self.source is not None:
            self.source.close()
        self.loop.dead_letters.close()
        self.engine.stop()
        self.publisher.stop()

    def run(self, install_signals: bool = True) -> int:
        """Serve HTTP and learn until SIGTERM/SIGINT (or the end of the file with
        ``exit_at_end``); returns the process exit code."""
        import uvicorn

        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop_event.set())
        host, port = self.config.http_host_port()
        server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host=host,
                port=port,
                log_level=self.config.log_level,
                access_log=False,
                lifespan="off",
            )
        )
        http = threading.Thread(target=server.run, name="oahu-http", daemon=True)
        http.start()
        while not server.started and http.is_alive():
            time.sleep(0.05)
        if not http.is_alive():
            log.error("the HTTP server did not start on %s", self.config.http)
            self.stop_event.set()
            return 1
        self._announce(host, server)
        self.start()
        while self._trainer.is_alive():
            self._trainer.join(timeout=0.2)
        self.shutdown()
        server.should_exit = True
        http.join(timeout=10)
        return 0 if self.trainer_error is None else 1

    def _announce(self, host: str, server: Any) -> None:
        port = server.servers[0].sockets[0].getsockname()[1] if server.servers else 0
        shown = f"[{host}]" if ":" in host else host
        base = f"http://{shown}:{port}"
        print(
            f"oahu run: {self.learner.name} learning from {self.config.source}\n"
            f"  API      {base}/v1/classify  (docs {base}/docs)\n"
            f"  model    {base}/v1/model\n"
            f"  metrics  {base}/metrics\n"
            f"  state    {Path(self.config.checkpoint_dir).resolve()}",
            flush=True,
        )
