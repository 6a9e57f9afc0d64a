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

With ``--suggest-topic`` every answer is also published to Kafka
(:mod:`oahu.service.serving.suggestion_sink`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from oahu.active import distinct_questions, suggest_from_embeddings
from oahu.learner import depths_side_by_side
from oahu.service.catalog import Catalog
from oahu.service.serving.inputs import MAX_POOL, MIN_POOL
from oahu.service.serving.queries import NotReady
from oahu.service.serving.snapshot import Snapshot, SnapshotPublisher
from oahu.threads import lower_thread_priority, use_native_threads

if TYPE_CHECKING:  # the sink imports this module's answers; at run time a sink is handed in
    from oahu.service.serving.suggestion_sink import SuggestionSink

__all__ = [
    "Busy",
    "PoolError",
    "Question",
    "SuggestAnswer",
    "SuggestRequest",
    "Suggester",
    "compute",
    "gallery_points",
    "pool_points",
    "refused",
]

log = logging.getLogger(__name__)

MAX_WAITING = 4  # requests queued behind the one being answered; more get 503
SUGGEST_NICENESS = 10  # as the snapshot builder: queries come first when the cores run short
MAX_REPORTED = 10  # unknown or unembeddable ids named in one 422


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
