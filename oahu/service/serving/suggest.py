"""Active learning in the serving process: the questions of ``POST /v1/suggest``.

The service proposes triplet questions, "is item a more similar to b or to c?", whose answers
would teach the current model most; :mod:`oahu.active` chooses them among the points of a pool
in the learner's Euclidean space (``Learner.transform``: each depth's embedding scaled by √α,
the depths side by side). The answers come back as ordinary triplet messages on the input
stream and are learned like any other (docs/active-learning-service.md).

Choosing questions over a large pool takes far longer than a query, so it has a thread of its
own (:class:`Suggester`): not the query thread, where every classification would wait behind
it, nor the event loop. It runs one request at a time with at most ``MAX_WAITING`` behind it
(more are refused with 503), at the snapshot builder's niceness, so that queries get the cores
first. A request reads the published snapshot once: the pool's points, the gallery's ids and
the model version in the answer all come from one model, while the learner process goes on
learning. The time is bounded by the pool: at most ``MAX_POOL`` items (the gallery is sampled
down to that), the gallery read from the snapshot's embeddings rather than embedded again.

With ``--suggest-topic`` every answer is also published, one JSON message per question
(:func:`suggestion_messages`), by a thread of its own (:class:`SuggestionSink`): a slow or absent
broker never delays an answer; a message that cannot be sent is logged and counted in
``oahu_suggestion_publish_failures_total``.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from oahu.active import distinct_questions, suggest_from_embeddings
from oahu.learner import depths_side_by_side
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.inputs import MAX_POOL, MIN_POOL
from oahu.service.serving.queries import NotReady
from oahu.service.serving.snapshot import Snapshot, SnapshotPublisher
from oahu.threads import lower_thread_priority, use_native_threads

log = logging.getLogger(__name__)

MAX_WAITING = 4  # requests queued behind the one being answered; more get 503
SUGGEST_NICENESS = 10  # as the snapshot builder: queries come first when the cores run short
MAX_REPORTED = 10  # unknown or unembeddable ids named in one 422
MAX_UNPUBLISHED = 100  # answers waiting for the broker; older ones are dropped beyond this
MESSAGE_VERSION = 1


class PoolError(ValueError):
    """A request the current service cannot answer, as 422 errors: ``(loc, msg, input)`` each,
    ``loc`` under the body (``("pool", 3)``)."""

    def __init__(self, errors: list[tuple[tuple[Any, ...], str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg, _ in errors))
        self.errors = errors


def refused(loc: tuple[Any, ...], msg: str, value: Any = None) -> PoolError:
    """A :class:`PoolError` of one error."""
    return PoolError([(loc, msg, value)])


class Busy(RuntimeError):
    """Too many suggestion requests are waiting already (503)."""


@dataclass(frozen=True)
class SuggestRequest:
    """One validated request: ``pool`` holds item ids (store keys), None for the gallery."""

    pool: list[str] | None
    batch: int
    strategy: str
    seed: int


@dataclass(frozen=True)
class Question:
    """Is ``anchor`` more similar to ``first`` or to ``second``? (item ids)"""

    anchor: str
    first: str
    second: str
    score: float


@dataclass(frozen=True)
class SuggestAnswer:
    """The questions chosen for one request, from ``pool_items`` items of ``snapshot``;
    ``seconds``: the time to resolve and embed the pool and choose them."""

    questions: list[Question]
    pool_items: int
    snapshot: Snapshot
    seconds: float


def gallery_points(snapshot: Snapshot, seed: int) -> tuple[list[str], np.ndarray]:
    """The ids and points of the snapshot's gallery, from the embeddings the snapshot holds (a
    seeded sample of ``MAX_POOL`` items when it has more); items whose embedding is not finite
    are left out."""
    emb = snapshot.embeddings
    if emb is None or emb.shape[1] == 0:
        msg = "the gallery is empty: add labelled items with POST /v1/items, or give ids"
        raise refused(("pool",), msg, "gallery")
    n = emb.shape[1]
    rows = None
    if n > MAX_POOL:
        rows = np.sort(np.random.default_rng(seed).choice(n, MAX_POOL, replace=False))
        emb = emb[:, rows]
    points = depths_side_by_side(emb, snapshot.alpha)
    finite = np.isfinite(points).all(axis=1)
    ids = snapshot.gallery_ids if rows is None else snapshot.gallery_ids[rows]
    if not finite.all():
        log.warning("suggest: %d gallery items have non-finite embeddings", int((~finite).sum()))
        points, ids = points[finite], ids[finite]
    return ids.tolist(), points


def pool_points(snapshot: Snapshot, catalog: Catalog, ids: list[str]) -> np.ndarray:
    """The points of the items ``ids`` (item store first, then gallery, as the query endpoints
    resolve ids) embedded by the snapshot's model; :class:`PoolError` naming unknown ids and
    items whose embedding is not finite."""
    learner = snapshot.learner
    X = np.zeros((len(ids), learner.n_features), dtype=np.float32)
    missing = np.arange(len(ids))
    for store in (catalog.items, catalog.gallery):
        if not len(missing) or store.dim != learner.n_features:
            continue
        found_X, found = store.get_many([ids[i] for i in missing.tolist()])
        X[missing[found]] = found_X[found]
        missing = missing[~found]
    if len(missing):
        also = f" ({len(missing)} of the pool's ids are unknown)" if len(missing) > 1 else ""
        raise PoolError(
            [
                (("pool", i), f"unknown item id {ids[i]!r}{also}", ids[i])
                for i in missing[:MAX_REPORTED].tolist()
            ]
        )
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, with the ids named
        points = learner.transform(X)
    bad = np.flatnonzero(~np.isfinite(points).all(axis=1))
    if len(bad):
        msg = "the model's embedding of this item is not finite: its features are too large"
        raise PoolError([(("pool", i), msg, ids[i]) for i in bad[:MAX_REPORTED].tolist()])
    return points


def compute(snapshot: Snapshot, catalog: Catalog, request: SuggestRequest) -> SuggestAnswer:
    """Choose ``request.batch`` questions from the request's pool with ``snapshot``'s model."""
    started = time.perf_counter()
    learner = snapshot.learner
    if learner.metric != "l2":
        raise refused(
            ("kind",),
            f"the service learns {learner.name!r}, a similarity (inner product), not a "
            "distance: its items have no Euclidean space in which to choose triplet questions; "
            "suggestions need a distance learner (oahu, euclidean, lego, rdml, opml)",
            "triplet",
        )
    if request.pool is None:
        ids, points = gallery_points(snapshot, request.seed)
        if len(ids) < MIN_POOL:
            msg = f"the gallery has {len(ids)} items with a finite embedding, fewer than the "
            raise refused(("pool",), msg + f"{MIN_POOL} a question names", "gallery")
    else:
        ids, points = request.pool, pool_points(snapshot, catalog, request.pool)
    most = distinct_questions(len(ids))
    if request.batch > most:
        msg = f"a pool of {len(ids)} items makes only {most} distinct questions, fewer than "
        raise refused(("batch",), msg + f"batch {request.batch}", request.batch)
    try:
        chosen = suggest_from_embeddings(points, request.batch, request.strategy, seed=request.seed)
    except ValueError as exc:  # what the core refuses about this pool, in its own words
        raise refused((), f"no questions from this pool: {exc}") from None
    questions = [
        Question(ids[s.anchor], ids[s.first], ids[s.second], float(s.score)) for s in chosen
    ]
    return SuggestAnswer(questions, len(ids), snapshot, time.perf_counter() - started)


@dataclass
class _Job:
    request: SuggestRequest
    future: Future


class Suggester:
    """Answers suggestion requests one at a time on a thread of its own, from the current
    snapshot; with a ``sink``, every answer is also handed to it for publication."""

    def __init__(
        self,
        publisher: SnapshotPublisher,
        catalog: Catalog,
        sink: SuggestionSink | None = None,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.publisher = publisher
        self.catalog = catalog
        self.sink = sink
        self.max_waiting = max_waiting
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # queued or being answered
        self._thread = threading.Thread(target=self._run, name="oahu-suggest", daemon=True)

    @property
    def topic(self) -> str | None:
        """The topic answers are published to, if any."""
        return None if self.sink is None else self.sink.topic

    def start(self) -> None:
        self._thread.start()
        if self.sink is not None:
            self.sink.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)
        if self.sink is not None:
            self.sink.stop()

    def submit(self, request: SuggestRequest) -> Future:
        """Queue ``request``; the future resolves to a :class:`SuggestAnswer` or fails with
        :class:`PoolError` or :class:`NotReady`. :class:`Busy` when too many wait already."""
        with self._lock:
            if self._pending > self.max_waiting:
                raise Busy(
                    f"{self._pending} suggestion requests are being answered or waiting; "
                    "retry when they are done"
                )
            self._pending += 1
        job = _Job(request, Future())
        self._queue.put(job)
        return job.future

    def _run(self) -> None:
        use_native_threads(1)
        lower_thread_priority(SUGGEST_NICENESS)
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                snapshot = self.publisher.current
                if snapshot is None:
                    raise NotReady("no model snapshot published yet")
                answer = compute(snapshot, self.catalog, job.request)
            except Exception as exc:  # the request learns what went wrong; the thread goes on
                job.future.set_exception(exc)
            else:
                job.future.set_result(answer)
            finally:
                with self._lock:
                    self._pending -= 1


# ---------------------------------------------------------------------- publication
def suggestion_messages(
    answer: SuggestAnswer, request_id: str, strategy: str, at: float | None = None
) -> list[tuple[bytes, bytes]]:
    """(key, value) of each question of ``answer`` as a Kafka record: JSON naming the items by
    id, keyed by ``request_id`` so that one answer's questions stay in order on one partition.

    A message is not a constraint (no ``positive``/``negative``): sent to the input topic by
    mistake it is dead-lettered, never learned.

    >>> from types import SimpleNamespace
    >>> snap = SimpleNamespace(version=3, updates=40, learner=SimpleNamespace(constraints_seen=41))
    >>> answer = SuggestAnswer([Question("17", "4", "90", 0.5)], 898, snap, 0.1)
    >>> [(key, value)] = suggestion_messages(answer, "r1", "random", at=1.5)
    >>> key, json.loads(value)["anchor"], json.loads(value)["model"]["updates"]
    (b'r1', {'id': '17'}, 40)
    """
    at = time.time() if at is None else at
    model = model_meta(answer.snapshot)
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


def model_meta(snapshot: Any) -> dict[str, int]:
    """What identifies the model an answer comes from: the snapshot (as every answer of the
    service names it) and the constraints it had seen."""
    return {
        "snapshot": snapshot.version,
        "updates": snapshot.updates,
        "constraints_seen": int(snapshot.learner.constraints_seen),
    }


def suggest_target(config: ServiceConfig) -> tuple[str, str] | None:
    """(bootstrap servers, topic) of ``--suggest-topic``: a bare topic is on the source's
    brokers; None when answers are not published."""
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
