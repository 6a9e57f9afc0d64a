"""What runs in the learner process: the source, the item replica, the dead-letter sink and the
learn loop, assembled from the service configuration (see :mod:`oahu.service.learner_process`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from oahu.connectors.dead_letter import DeadLetter, DeadLetterFile, DeadLetterKafka, DeadLetterSink
from oahu.connectors.file_source import FileSource
from oahu.connectors.items import ItemStore
from oahu.connectors.kafka_source import Backoff
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes
from oahu.service.catalog import Catalog
from oahu.service.checkpoints import Progress, checkpoint_path
from oahu.service.config import ServiceConfig, configure_logging
from oahu.service.consumer import ConsumerLoop
from oahu.service.learner_process import (
    EXIT_ORPHANED,
    START,
    STOP_SIGNALS,
    ParentLink,
    listen,
)
from oahu.service.metrics import LearningMetrics
from oahu.service.native_threads import use_native_threads
from oahu.service.snapshot import ReindexSchedule

log = logging.getLogger("oahu.service")

OVERLAY_FILE = "items-api.npz"
DEAD_LETTER_FILE = "dead-letters.jsonl"
DEAD_LETTER_SUFFIX = ".dead-letter"


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


def check_kafka_options(config: ServiceConfig) -> None:
    """Raise ``ValueError`` naming any ``--kafka-option`` kafka-python does not know."""
    from kafka import KafkaConsumer, KafkaProducer

    unknown = (
        set(config.kafka) - set(KafkaConsumer.DEFAULT_CONFIG) - set(KafkaProducer.DEFAULT_CONFIG)
    )
    if unknown:
        raise ValueError(f"kafka: unknown kafka-python setting(s) {sorted(unknown)}")


def dead_letter_sink(config: ServiceConfig) -> DeadLetterSink:
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
    return DeadLetterFile(config.dead_letter or Path(config.checkpoint_dir) / DEAD_LETTER_FILE)


def kafka_source(config: ServiceConfig, loop: ConsumerLoop) -> Any:
    from kafka import KafkaConsumer

    from oahu.connectors.kafka_source import KafkaSource

    check_kafka_options(config)
    bootstrap, topic, group = config.kafka_target()
    return KafkaSource(
        topic,
        group,
        bootstrap,
        config=kafka_options(config.kafka, KafkaConsumer),
        on_assign=loop.on_assign,
        on_revoke=loop.on_revoke,
    )


def build_loop(
    config: ServiceConfig, learner: Learner, progress: Progress, link: ParentLink
) -> ConsumerLoop:
    """The learn loop over the configured source, with an item replica (``loop.catalog``)."""
    state_dir = Path(config.checkpoint_dir)
    items = ItemStore.load(config.items) if config.items else ItemStore()
    # a file source adds the stream's items to the store; the API overlay goes on top
    source = None if config.is_kafka else FileSource(config.file_path(), items=items)
    catalog = Catalog(items, ItemStore(), state_dir / OVERLAY_FILE)
    loop = ConsumerLoop(
        learner,
        source,
        catalog,
        dead_letter_sink(config),
        link,
        link.metrics,
        checkpoint_path(state_dir),
        progress,
        reporter=link.report,
        checkpoint_every=config.checkpoint_every,
        checkpoint_interval=config.checkpoint_interval,
        poll_records=config.poll_records,
        poll_timeout=config.poll_timeout,
        exit_at_end=config.exit_at_end,
    )
    if config.is_kafka:
        loop.source = kafka_source(config, loop)
    return loop


def learner_main(config: ServiceConfig, inbox: Connection, outbox: Connection) -> None:
    """Entry point of the learner process: learn from the state and progress in the first
    message (the checkpoint or a new model, as the serving process read it) until stopped."""
    stop = threading.Event()
    for sig in STOP_SIGNALS:  # Ctrl-C reaches the whole process group
        signal.signal(sig, lambda *_: stop.set())
    try:
        kind, (state, progress) = inbox.recv()
    except (EOFError, OSError):  # the serving process is gone already
        raise SystemExit(EXIT_ORPHANED) from None
    assert kind == START, kind
    configure_logging(config.log_level)
    os.nice(config.learner_nice)
    use_native_threads(config.threads)
    link = ParentLink(
        outbox, ReindexSchedule(config.reindex_every, config.reindex_interval), LearningMetrics()
    )
    loop = None
    try:
        loop = build_loop(config, learner_from_bytes(state)[0], Progress.from_extra(progress), link)
        reader = threading.Thread(
            target=listen, args=(inbox, loop.catalog.apply, link, stop), daemon=True
        )
        reader.start()
        loop.run(stop)
    except BaseException:
        link.fail(traceback.format_exc())
        raise SystemExit(1) from None
    finally:
        if loop is not None:
            if loop.source is not None:
                loop.source.close()
            loop.dead_letters.close()
        outbox.close()
