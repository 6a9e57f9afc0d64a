"""The learner process: its entry point, and the source, item replica, dead-letter sink and learn
loop it assembles from the service configuration.

The serving process spawns it (:class:`oahu.service.serving.process.LearnerProcess`) and sends
the learner to continue from as its first message (:mod:`oahu.service.messages`). It never
imports serving code: no faiss, no HTTP stack.
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

from oahu.connectors.answers_log import ANSWERS_FILE
from oahu.connectors.answers_source import WithAnswers
from oahu.connectors.dead_letter import (
    DeadLetter,
    DeadLetterFile,
    DeadLetterKafka,
    DeadLetterSink,
)
from oahu.connectors.file_source import FileSource
from oahu.connectors.kafka_source import Backoff
from oahu.connectors.source import Source
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes
from oahu.service.catalog import OVERLAY_FILE, Catalog, base_items
from oahu.service.checkpoints import Progress
from oahu.service.config import ServiceConfig, configure_logging
from oahu.service.item_store import ItemStore
from oahu.service.learning.consumer import ConsumerLoop
from oahu.service.learning.link import ParentLink, ReindexSchedule, listen
from oahu.service.messages import EXIT_ORPHANED, STOP_SIGNALS, Start
from oahu.service.metrics import LearningMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.modal_items import ModalItems, cross_modal_stream
from oahu.threads import use_native_threads

log = logging.getLogger("oahu.service")

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


def dead_letter_sink(config: ServiceConfig) -> DeadLetterSink:
    if config.is_kafka:
        from kafka import KafkaProducer

        bootstrap, topic, _ = config.kafka_target()
        return LazyDeadLetterSink(
            lambda: DeadLetterKafka(
                config.dead_letter or topic + DEAD_LETTER_SUFFIX,
                bootstrap,
                config=config.kafka_options(KafkaProducer),
                # what Kafka refuses, e.g. for its size, is still recorded, and the loop goes on
                fallback=DeadLetterFile(Path(config.checkpoint_dir) / DEAD_LETTER_FILE),
            )
        )
    return DeadLetterFile(config.dead_letter or Path(config.checkpoint_dir) / DEAD_LETTER_FILE)


def kafka_source(config: ServiceConfig) -> Source:
    from kafka import KafkaConsumer

    from oahu.connectors.kafka_source import KafkaSource

    bootstrap, topic, group = config.kafka_target()
    return KafkaSource(topic, group, bootstrap, config=config.kafka_options(KafkaConsumer))


def build_loop(
    config: ServiceConfig,
    learner: Learner,
    progress: Progress,
    link: ParentLink,
    fell_back: bool = False,
    start_state: bytes | None = None,
) -> ConsumerLoop:
    """The learn loop over the configured source, with an item replica (``loop.catalog``);
    ``fell_back``: the progress is an earlier checkpoint's than the latest, ``start_state`` the
    learner's bytes (both from ``Start``)."""
    source: Source
    cross_modal = None
    if config.is_kafka:
        source = kafka_source(config)
        items, _ = base_items(config)
        cross_modal = cross_modal_stream(config) if learner.capabilities.cross_modal else None
    else:
        stream = FileSource(config.file_path())
        items, _ = base_items(config, stream)  # the file is read once
        cross_modal = stream.cross_modal
        if cross_modal is None and learner.capabilities.cross_modal:
            cross_modal = cross_modal_stream(config)  # a file of messages, items in --items
        # people's answers (the console) arrive in a log of their own, beside the finished file
        source = WithAnswers(stream, Path(config.checkpoint_dir) / ANSWERS_FILE)
    # the API's changes go on top, from the overlay file(s) and then as they are made
    catalog: Catalog | ModalCatalog
    if learner.capabilities.cross_modal:
        if cross_modal is None:
            raise ValueError(
                f"learner: {learner.name!r} learns items by modality, from a cross-modal stream "
                f"file (the source's, or --items with Kafka), and {config.source} brings none"
            )
        catalog = ModalCatalog(ModalItems.from_stream(cross_modal), config.checkpoint_dir)
    else:
        catalog = Catalog(items, ItemStore(), Path(config.checkpoint_dir) / OVERLAY_FILE)
    metrics = LearningMetrics.of(learner)
    sink = dead_letter_sink(config)
    return ConsumerLoop(
        config,
        learner,
        source,
        catalog,
        sink,
        link,
        metrics,
        progress,
        fell_back,
        start_state,
    )


def learner_main(config: ServiceConfig, inbox: Connection, outbox: Connection) -> None:
    """Entry point of the learner process: learn from the learner and progress in the first
    message (the checkpoint or a new model, as the serving process read it) until stopped;
    with ``learners > 1``, as rank 0 of a learning group (:mod:`oahu.service.group`)."""
    if config.learners > 1:
        from oahu.service.group.members import leader_main

        leader_main(config, inbox, outbox)
        return
    stop = threading.Event()
    for sig in STOP_SIGNALS:  # Ctrl-C reaches the whole process group
        signal.signal(sig, lambda *_: stop.set())
    try:
        start = inbox.recv()
    except (EOFError, OSError):  # the serving process is gone already
        raise SystemExit(EXIT_ORPHANED) from None
    assert isinstance(start, Start), start
    configure_logging(config.log_level)
    os.nice(config.learner_nice)
    use_native_threads(config.threads)
    link = ParentLink(outbox, ReindexSchedule(config.reindex_every, config.reindex_interval))
    loop = None
    try:
        learner, _ = learner_from_bytes(start.learner)
        progress = Progress.from_extra(start.progress)
        if progress.group.get("members", 1) > 1 and not config.is_kafka:
            raise ValueError(
                f"learners: the checkpoint in {config.checkpoint_dir} was written by a group of "
                f"{progress.group['members']} learners over a stream file, whose offsets are per "
                f"member; continue it with --learners {progress.group['members']}"
            )
        loop = build_loop(config, learner, progress, link, start.fell_back, start.learner)
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
            loop.source.close()
            loop.dead_letters.close()
        outbox.close()
