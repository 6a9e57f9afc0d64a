"""Publishing the questions of ``POST /v1/suggest`` to Kafka (``--suggest-topic``).

Every answer is published one JSON message per question (:func:`suggestion_messages`), for
annotation tools (docs/active-learning-service.md), by a thread of its own
(:class:`SuggestionSink`): a slow or absent broker never delays an answer; a message that cannot
be sent is logged and counted in ``oahu_suggestion_publish_failures_total``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any

from oahu.service.config import ServiceConfig
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.suggest import SuggestAnswer

__all__ = ["MESSAGE_VERSION", "SuggestionSink", "suggest_target", "suggestion_messages"]

log = logging.getLogger(__name__)

MAX_UNPUBLISHED = 100  # answers waiting for the broker; older ones are dropped beyond this
MESSAGE_VERSION = 1


def suggestion_messages(
    answer: SuggestAnswer, request_id: str, strategy: str, at: float | None = None
) -> list[tuple[bytes, bytes]]:
    """(key, value) of each question of ``answer`` as a Kafka record: JSON naming the items by
    id, keyed by ``request_id`` so that one answer's questions stay in order on one partition;
    its ``model`` is the snapshot's, as every answer of the service names it.

    A message is not a constraint (no ``positive``/``negative``): sent to the input topic by
    mistake it is dead-lettered, never learned.

    >>> from types import SimpleNamespace
    >>> from oahu.service.serving.suggest import Question
    >>> snap = SimpleNamespace(meta=lambda: {"snapshot": 3, "updates": 40})
    >>> answer = SuggestAnswer([Question("17", "4", "90", 0.5)], 898, snap, 0.1)
    >>> [(key, value)] = suggestion_messages(answer, "r1", "random", at=1.5)
    >>> key, json.loads(value)["anchor"], json.loads(value)["model"]
    (b'r1', {'id': '17'}, {'snapshot': 3, 'updates': 40})
    """
    at = time.time() if at is None else at
    model = answer.snapshot.meta()
    out = []
    for rank, q in enumerate(answer.questions):
        message = {
            "v": MESSAGE_VERSION,
            "type": "suggestion",
            "kind": "triplet",
            "request": request_id,
            "rank": rank,
            "of": len(answer.questions),
            "anchor": {"id": q.anchor},
            "first": {"id": q.first},
            "second": {"id": q.second},
            "score": q.score,
            "strategy": strategy,
            "model": model,
            "ts": at,
        }
        out.append((request_id.encode(), json.dumps(message).encode()))
    return out


def suggest_target(config: ServiceConfig) -> tuple[str, str] | None:
    """(bootstrap servers, topic) of ``--suggest-topic``: a bare topic is on the source's
    brokers; None when answers are not published.

    >>> suggest_target(ServiceConfig(suggest_topic="kafka://10.0.0.1:9093/questions"))
    ('10.0.0.1:9093', 'questions')
    """
    from oahu.connectors.kafka_uri import parse_kafka_uri

    topic = config.suggest_topic
    if topic is None:
        return None
    if topic.startswith("kafka://"):
        uri = parse_kafka_uri(topic, "suggest_topic", "kafka://HOST:PORT/TOPIC")
        return uri.bootstrap, uri.topic
    return config.kafka_target()[0], topic


class SuggestionSink:
    """Publishes the questions of answers to a Kafka topic from a thread of its own.

    The producer (:class:`oahu.connectors.kafka_sink.KafkaSink`, with the service's
    ``--kafka-option`` security settings) is made on first use and again after a failure, so
    a broker that is down at start-up or goes away only costs the answers of that time.

    >>> SuggestionSink.of(ServiceConfig(), ServiceMetrics()) is None  # no --suggest-topic
    True
    """

    def __init__(
        self,
        topic: str,
        bootstrap: str,
        metrics: ServiceMetrics,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        self.metrics = metrics
        self.options = dict(options or {})
        self._queue: queue.Queue[list[tuple[bytes, bytes]] | None] = queue.Queue(MAX_UNPUBLISHED)
        self._thread = threading.Thread(target=self._run, name="oahu-suggest-sink", daemon=True)
        self._sink: Any = None

    @classmethod
    def of(cls, config: ServiceConfig, metrics: ServiceMetrics) -> SuggestionSink | None:
        """The sink ``config`` asks for (``--suggest-topic``), or None."""
        target = suggest_target(config)
        if target is None:
            return None
        from kafka import KafkaProducer

        return cls(target[1], target[0], metrics, config.kafka_options(KafkaProducer))

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Send what is queued (within ``timeout``), then close the producer."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            log.warning("suggest: dropping unpublished answers at shutdown")
        self._thread.join(timeout=timeout)
        if self._sink is not None:
            try:
                self._sink.close(timeout=timeout)
            except Exception:  # closing must not fail the shutdown
                log.exception("suggest: closing the Kafka producer failed")

    def publish(self, messages: list[tuple[bytes, bytes]]) -> None:
        """Queue one answer's messages; never blocks (a full queue drops them, counted)."""
        try:
            self._queue.put_nowait(messages)
        except queue.Full:
            self._failed(len(messages), f"{MAX_UNPUBLISHED} answers already wait for the broker")

    def _failed(self, n: int, why: str) -> None:
        self.metrics.suggestion_publish_failures.inc(n)
        log.warning("suggest: %d question(s) not published to %s: %s", n, self.topic, why)

    def _producer(self) -> Any:
        if self._sink is None:
            from oahu.connectors.kafka_sink import KafkaSink

            self._sink = KafkaSink(self.topic, self.bootstrap, config=self.options)
        return self._sink

    def _run(self) -> None:
        while True:
            messages = self._queue.get()
            if messages is None:
                if self._sink is not None:
                    self._sink.flush(timeout=10)
                return
            handed = 0  # to the producer, which reports each one's fate through its future
            try:
                sink = self._producer()
                for key, value in messages:
                    future = sink.send(value, key=key)
                    handed += 1
                    future.add_callback(lambda _: self.metrics.suggestions_published.inc())
                    future.add_errback(lambda exc: self._failed(1, repr(exc)))
            except Exception as exc:  # no broker, or a producer that broke: try anew next time
                self._failed(len(messages) - handed, repr(exc))
                sink, self._sink = self._sink, None
                if sink is not None:
                    try:
                        sink.close(timeout=0)
                    except Exception:
                        pass
