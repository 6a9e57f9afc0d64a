"""Answering queries from the published snapshot, batched across concurrent requests.

One worker thread takes every query that is waiting, groups them by operation and parameter, and
answers each group with one index search (a single query costs almost as much as fifty), its
items embedded one by one (:func:`embed_each`), so that an item's answer does not depend on what
waits beside it. Each group reads ``publisher.current`` once, so all of its answers come from one
snapshot. Keeping the math in one thread also keeps it off the event loop and leaves the other
core to the learner.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from oahu.inference import classify, retrieve, verify
from oahu.learner import Learner
from oahu.service.serving.snapshot import Snapshot, SnapshotPublisher
from oahu.service.serving.stalls import StallWatch
from oahu.threads import use_native_threads

OPERATIONS = ("embed", "classify", "retrieve", "verify")


class NotReady(RuntimeError):
    """No snapshot published yet, or the gallery a query needs is empty."""


class NotFinite(ValueError):
    """The model's embedding of some of a request's items (``rows``; pairs for verify) is not
    finite: finite features near float32's limits can overflow its arithmetic. Only that request
    fails; the others batched with it are answered."""

    def __init__(self, rows: list[int]) -> None:
        super().__init__(f"the model's embedding of item(s) {rows} is not finite")
        self.rows = rows


@dataclass
class _Job:
    op: str
    param: Any  # k for classify/retrieve, the threshold for verify, None for embed
    x: np.ndarray  # (n, d); verify: (2, n, d)
    future: Future


class QueryEngine:
    """Batched embed / classify / retrieve / verify over the current snapshot.

    >>> import tempfile, pathlib
    >>> from oahu.persistence import learner_to_bytes
    >>> from oahu.registry import make_learner
    >>> from oahu.service.catalog import Catalog
    >>> from oahu.service.item_store import ItemStore
    >>> from oahu.service.metrics import ServiceMetrics
    >>> gallery = ItemStore(dim=2)
    >>> gallery.add(["a", "b"], [[1, 0], [0, 1]], y=[0, 1])
    >>> cat = Catalog(ItemStore(dim=2), gallery, pathlib.Path(tempfile.mkdtemp()) / "o.npz")
    >>> pub = SnapshotPublisher(cat, ServiceMetrics())
    >>> pub.start(); pub.submit(learner_to_bytes(make_learner("euclidean", 2)))
    >>> _ = pub.wait_for(1, timeout=10)
    >>> engine = QueryEngine(pub); engine.start()
    >>> result, snap = engine.submit("classify", np.array([[0.9, 0.1]]), 1).result()
    >>> result["labels"].tolist(), snap.version
    ([0], 1)
    >>> engine.stop(); pub.stop()
    """

    def __init__(
        self,
        publisher: SnapshotPublisher,
        max_batch_rows: int = 4096,
        stalls: StallWatch | None = None,
    ) -> None:
        self.publisher = publisher
        self.max_batch_rows = max_batch_rows
        self.stalls = stalls  # told when the worker starts and ends answering
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="oahu-queries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    @property
    def failed(self) -> bool:
        """Whether the worker started and is gone: nothing answers queries any more."""
        return self._thread.ident is not None and not self._thread.is_alive()

    def submit(self, op: str, x: np.ndarray, param: Any = None) -> Future:
        """Queue one request; the future resolves to ``(result, snapshot)``."""
        if op not in OPERATIONS:
            raise ValueError(f"op: one of {OPERATIONS}, got {op!r}")
        job = _Job(op, param, np.asarray(x, dtype=np.float32), Future())
        self._queue.put(job)
        return job.future

    # ------------------------------------------------------------------ worker
    def _take_waiting(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs, rows = [first], len(first.x)
        while rows < self.max_batch_rows:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            rows += job.x.shape[-2]
        return jobs, False

    def _run(self) -> None:
        use_native_threads(1, faiss=True)
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, stopping = self._take_waiting(first)
            groups: dict[tuple[str, Any], list[_Job]] = defaultdict(list)
            for job in jobs:
                groups[(job.op, job.param)].append(job)
            if self.stalls is not None:
                self.stalls.begin("queries")
            try:
                for (op, param), group in groups.items():
                    self._answer(op, param, group)
            finally:
                if self.stalls is not None:
                    self.stalls.end("queries")
            if stopping:
                return

    def _answer(self, op: str, param: Any, jobs: list[_Job]) -> None:
        snapshot = self.publisher.current
        try:
            if snapshot is None:
                raise NotReady("no model snapshot published yet")
            results = _compute(op, param, snapshot, [job.x for job in jobs])
        except Exception as exc:  # every waiting request learns what went wrong
            for job in jobs:
                job.future.set_exception(exc)
            return
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, NotFinite):
                job.future.set_exception(result)
            else:
                job.future.set_result((result, snapshot))


def _split(n_rows: list[int]) -> list[slice]:
    bounds = np.concatenate([[0], np.cumsum(n_rows)])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def _finite_rows(emb: np.ndarray) -> np.ndarray:
    """Which items (axis 1 of ``emb``, (depths, n, dim)) have finite embeddings; the others are
    zeroed in place so that they cannot disturb the search of the rest of the batch."""
    finite = np.isfinite(emb).all(axis=(0, 2))
    if not finite.all():
        emb[:, ~finite] = 0.0
    return finite


def _per_request(results: list[Any], parts: list[slice], finite: np.ndarray) -> list[Any]:
    return [
        result if finite[s].all() else NotFinite(np.flatnonzero(~finite[s]).tolist())
        for result, s in zip(results, parts, strict=True)
    ]


def embed_each(learner: Learner, x: np.ndarray) -> np.ndarray:
    """The query embeddings of ``x``'s items, each item embedded on its own, (depths, n, dim).

    BLAS libraries choose a product's kernel by its shape, and a kernel for many rows can round
    a row's sums otherwise than one for a single row (1.2e-7 apart for some items of a batch of
    64 on this project's 2-core AMD EPYC). Embedded as one batch, an item's scores would depend
    on the requests that happened to wait beside it, and replicas under different loads would
    answer one query on one snapshot differently. One item at a time, every product has one
    shape; it costs ~0.07 ms per item (16 items: 1.0 ms instead of 0.2), beside a search of
    3-12 ms."""
    if len(x) == 0:
        return learner.embed(x, role="query")
    return np.concatenate([learner.embed(x[i : i + 1], role="query") for i in range(len(x))], 1)


def _compute(op: str, param: Any, snap: Snapshot, xs: list[np.ndarray]) -> list[Any]:
    """One pass for all inputs of a group; the answers split back per request (a
    :class:`NotFinite` for a request whose items the model cannot embed)."""
    if op == "verify":
        parts = _split([x.shape[1] for x in xs])
        pairs = np.concatenate(xs, axis=1)
        emb = embed_each(snap.learner, np.concatenate([pairs[0], pairs[1]]))
        n = pairs.shape[1]
        finite = _finite_rows(emb)
        out = verify(
            emb[:, :n], emb[:, n:], snap.alpha, threshold=param, metric=snap.learner.metric
        )
        results = [
            {"similar": out.similar[s], "vote": out.vote[s], "score": out.score[s]} for s in parts
        ]
        return _per_request(results, parts, finite[:n] & finite[n:])
    parts = _split([len(x) for x in xs])
    emb = embed_each(snap.learner, np.concatenate(xs))
    finite = _finite_rows(emb)
    if op == "embed":
        return _per_request([emb[:, s] for s in parts], parts, finite)
    if snap.index is None:
        raise NotReady("the gallery is empty: add labelled items with POST /v1/items")
    if op == "classify":
        result = classify(snap.index, emb, snap.alpha, k=param)
        results = [
            {"labels": result.labels[s], "classes": result.classes, "scores": result.scores[s]}
            for s in parts
        ]
    else:
        found = retrieve(snap.index, emb, snap.alpha, k=param)
        results = [{"positions": found.positions[s], "scores": found.scores[s]} for s in parts]
    return _per_request(results, parts, finite)
