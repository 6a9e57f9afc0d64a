"""The learn loop: poll records, decode, resolve, learn, dead-letter the rest, checkpoint.

One thread of the learner process runs :meth:`ConsumerLoop.run` and owns the learner; it hands
the learner's state to an outlet (which decides when a new snapshot is due) and its status to a
reporter. Records are decoded in bulk and handed to the learner as runs of consecutive valid
constraints (``learn_triplets`` and ``learn_pairs`` process a run in order, so this equals
learning them one by one).

Delivery: a checkpoint holds the learner and the next offset of every partition it has read;
source offsets (Kafka group offsets) are committed only after the checkpoint is durable. On
start and on every partition assignment the source is moved to the checkpointed offsets (or the
group's committed offset when that is further: another group member learned those records). A
crash at any moment therefore replays exactly the records the checkpointed model has not seen.
Dead letters between the last checkpoint and a crash are emitted again on replay: the
dead-letter sink is at-least-once, the model exactly-once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from oahu.connectors.dead_letter import DeadLetter, DeadLetterSink
from oahu.connectors.messages import decode_batch
from oahu.connectors.resolve import ResolvedBatch, resolve_batch
from oahu.connectors.source import Source, SourceRecord
from oahu.learner import Learner
from oahu.service.catalog import Catalog
from oahu.service.checkpoints import Progress, write_checkpoint
from oahu.service.metrics import LearningMetrics

log = logging.getLogger(__name__)

UNSUPPORTED_KIND = "unsupported_kind"  # a valid constraint of a kind the learner cannot learn
_LAG_REFRESH_SECONDS = 1.0


class StateOutlet(Protocol):
    """Where the loop offers the learner after each run of updates (``SnapshotPublisher``, or
    the link to the serving process); ``force`` hands it over even if no rebuild is due."""

    def offer(self, learner: Learner, force: bool = False) -> bool: ...


Reporter = Callable[[dict[str, Any], bool], None]  # (status, force): status after each change


def learns(learner: Learner, kind: str) -> bool:
    """Whether ``learner`` implements learning from constraints of ``kind``."""
    method = "_learn_triplets" if kind == "triplet" else "_learn_pairs"
    return getattr(type(learner), method) is not getattr(Learner, method)


class ConsumerLoop:
    """Trains ``learner`` on ``source`` until stopped; see the module docstring.

    ``checkpoint_every`` consumed records or ``checkpoint_interval`` seconds trigger a
    checkpoint; ``exit_at_end`` ends the loop once a file source is exhausted.
    """

    def __init__(
        self,
        learner: Learner,
        source: Source | None,
        catalog: Catalog,
        dead_letters: DeadLetterSink,
        publisher: StateOutlet,
        metrics: LearningMetrics,
        checkpoint_file: str | Path,
        progress: Progress,
        *,
        reporter: Reporter | None = None,
        checkpoint_every: int = 5000,
        checkpoint_interval: float = 30.0,
        poll_records: int = 1000,
        poll_timeout: float = 0.5,
        exit_at_end: bool = False,
    ) -> None:
        self.learner = learner
        self.source = source
        self.catalog = catalog
        self.dead_letters = dead_letters
        self.publisher = publisher
        self.metrics = metrics
        self.checkpoint_file = Path(checkpoint_file)
        self.progress = progress
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval = checkpoint_interval
        self.poll_records = poll_records
        self.poll_timeout = poll_timeout
        self.exit_at_end = exit_at_end
        self.reporter = reporter
        self.lock = threading.RLock()  # held while the learner or the offsets change
        self.checkpointed = Progress.from_extra(progress.to_extra())
        self.lag: dict[int, int] = {}
        self.status: dict[str, Any] = {}
        self.finished = threading.Event()
        self._checkpoint_due_at = time.monotonic() + checkpoint_interval
        self._lag_at = 0.0
        self._restore_metrics()

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set (or the file ends with ``exit_at_end``), then write a
        final checkpoint and commit it."""
        assert self.source is not None
        if not hasattr(self.source, "assignment"):  # a file: no rebalance will seek for us
            self.source.seek({0: self.progress.offsets.get(0, 0)})
        try:
            while not stop.is_set():
                started = time.monotonic()
                records = self.source.poll(self.poll_records, self.poll_timeout)
                self.metrics.source_ready.set(1 if self.source.ready else 0)
                if records:
                    with self.lock:
                        self.process(records)
                self._refresh_lag(force=not records)
                if self._checkpoint_due():
                    self.checkpoint()
                if not records:
                    with self.lock:  # publish the latest model once the stream goes quiet
                        self.publisher.offer(self.learner)
                        self._refresh_status(force=True)
                    if self.exit_at_end and getattr(self.source, "exhausted", False):
                        break
                    stop.wait(max(0.0, self.poll_timeout - (time.monotonic() - started)))
            self.checkpoint()
            with self.lock:
                self.publisher.offer(self.learner, force=True)  # serve the final model
        finally:
            self.finished.set()

    def process(self, records: list[SourceRecord]) -> None:
        """Learn every valid record in order; dead-letter the others; advance the offsets."""
        decoded = decode_batch([r.value for r in records])
        errors = list(decoded.errors)
        for batch in decoded.batches:
            resolved, failed = resolve_batch(batch, self.catalog.items, dim=self.learner.n_features)
            errors.extend(failed)
            if resolved is not None:
                self._learn(resolved, records)
        for i, error in sorted(errors, key=lambda e: e[0]):
            self._dead_letter(DeadLetter.from_error(error, records[i]))
        for r in records:
            self.progress.offsets[r.partition] = r.offset + 1
        self.progress.consumed += len(records)
        self.metrics.consumed.inc(len(records))
        self.publisher.offer(self.learner)
        self._refresh_status()

    def _learn(self, batch: ResolvedBatch, records: list[SourceRecord]) -> None:
        if not learns(self.learner, batch.kind):
            for i in batch.index.tolist():
                letter = DeadLetter(
                    UNSUPPORTED_KIND,
                    f"learner {self.learner.name!r} does not learn from {batch.kind}s",
                    records[i].source,
                    records[i].partition,
                    records[i].offset,
                    records[i].value,
                    time.time(),
                )
                self._dead_letter(letter)
            return
        learner = self.learner
        seen, skipped, used = learner.constraints_learned, Counter(learner.skipped), None
        started = time.perf_counter()
        x = batch.x
        if batch.kind == "triplet":
            used = learner.learn_triplets(x[:, 0], x[:, 1], x[:, 2])
        else:
            used = learner.learn_pairs(x[:, 0], x[:, 1], batch.similar)
        self.metrics.update_seconds.observe((time.perf_counter() - started) / len(batch))
        self.metrics.learned.inc(learner.constraints_learned - seen)
        self.metrics.used.inc(int(np.count_nonzero(used)))
        for reason, count in (learner.skipped - skipped).items():
            self.metrics.skipped.labels(reason=reason).inc(count)

    def _dead_letter(self, letter: DeadLetter) -> None:
        self.dead_letters.write(letter)
        self.progress.dead_letters[letter.reason] += 1
        self.metrics.dead_letters.labels(reason=letter.reason).inc()

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_due(self) -> bool:
        pending = self.progress.consumed - self.checkpointed.consumed
        return pending > 0 and (
            pending >= self.checkpoint_every or time.monotonic() >= self._checkpoint_due_at
        )

    def checkpoint(self) -> None:
        """Write learner + offsets atomically, then commit the offsets to the source."""
        with self.lock:
            started = time.perf_counter()
            self.dead_letters.flush()  # letters of checkpointed records are delivered first
            self.progress.items_version = self.catalog.version
            self.progress.written_at = time.time()
            write_checkpoint(self.checkpoint_file, self.learner, self.progress)
            self.checkpointed = Progress.from_extra(self.progress.to_extra())
            self._commit()
            self._checkpoint_due_at = time.monotonic() + self.checkpoint_interval
            self.metrics.checkpoint_seconds.observe(time.perf_counter() - started)
            self.metrics.checkpoint_time.set(self.progress.written_at)
            self._refresh_status(force=True)

    def _commit(self) -> None:
        if self.source is None or not self.source.ready:
            return
        owned = self._owned()
        offsets = {p: o for p, o in self.progress.offsets.items() if p in owned}
        if offsets:
            self.source.commit(offsets)

    def _owned(self) -> set[int]:
        assignment = getattr(self.source, "assignment", None)
        return set(assignment) if assignment is not None else {0}

    # ------------------------------------------------------------------ rebalance
    def on_revoke(self, partitions: list[int]) -> None:
        """Before giving partitions up: checkpoint and commit what was learned from them."""
        self.checkpoint()
        with self.lock:
            for p in partitions:
                self.lag.pop(p, None)
                with contextlib.suppress(KeyError):  # never reported for this partition
                    self.metrics.lag.remove(str(p))

    def on_assign(self, partitions: list[int]) -> None:
        """Continue each new partition after the last record learned from it, by this model
        (checkpoint) or by another group member (committed offset), whichever is further."""
        assert self.source is not None
        with self.lock:
            targets = {}
            for p in partitions:
                try:
                    committed = self.source.committed(p)  # type: ignore[attr-defined]
                except Exception as exc:  # the checkpoint alone still gives a safe position
                    log.warning("committed offset of partition %s unavailable: %r", p, exc)
                    committed = None
                candidates = [o for o in (self.progress.offsets.get(p), committed) if o is not None]
                if candidates:
                    targets[p] = max(candidates)
                    self.progress.offsets[p] = targets[p]
            if targets:
                self.source.seek(targets)
            log.info("assigned partitions %s, starting at %s", partitions, targets)

    # ------------------------------------------------------------------ status
    def _refresh_lag(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.source is None or not self.source.ready:
            return
        if not force and now - self._lag_at < _LAG_REFRESH_SECONDS:
            return
        self._lag_at = now
        try:
            lag = self.source.lag()
        except Exception as exc:  # lag is informative only; never stop learning for it
            log.debug("lag unavailable: %r", exc)
            return
        self.lag = dict(lag)
        for p, value in lag.items():
            self.metrics.lag.labels(partition=str(p)).set(value)
        self._refresh_status()

    def _restore_metrics(self) -> None:
        """Counters continue from the checkpoint, so totals describe the whole model."""
        p = self.progress
        self.metrics.consumed.inc(p.consumed)
        for reason, count in p.dead_letters.items():
            self.metrics.dead_letters.labels(reason=reason).inc(count)
        self.metrics.learned.inc(self.learner.constraints_learned)
        self.metrics.used.inc(self.learner.constraints_used)
        for reason, count in self.learner.skipped.items():
            self.metrics.skipped.labels(reason=reason).inc(count)
        if p.written_at:
            self.metrics.checkpoint_time.set(p.written_at)
        self._refresh_status()

    def _refresh_status(self, force: bool = False) -> None:
        """Plain values about the model and the stream, for /v1/model and the gauges; reported
        (``force``: even if a report was sent a moment ago)."""
        learner = self.learner
        self.metrics.updates.set(learner.updates)
        self.metrics.utilization.set(learner.utilization)
        for depth, a in enumerate(learner.alpha.tolist()):
            self.metrics.alpha.labels(depth=str(depth)).set(a)
        self.status = {
            **model_status(
                learner, self.progress, self.checkpointed, self.checkpoint_file, self.lag
            ),
            "source_ready": bool(self.source is not None and self.source.ready),
        }
        for depth, value in enumerate(self.status["depth_loss"] or []):
            self.metrics.depth_loss.labels(depth=str(depth)).set(value)
        self._report(force)

    def _report(self, force: bool = False) -> None:
        if self.reporter is not None:
            self.reporter(self.status, force)


def model_status(
    learner: Learner,
    progress: Progress,
    checkpointed: Progress,
    checkpoint_file: Path,
    lag: dict[int, int] | None = None,
) -> dict[str, Any]:
    """What /v1/model tells about the model, the stream and the last checkpoint (plain values)."""
    losses = getattr(learner, "last_losses", None)
    depth_loss = None if losses is None else [float(v) for v in np.asarray(losses.cpu())]
    return {
        **learner.summary(),
        "n_features": learner.n_features,
        "n_depths": learner.n_depths,
        "metric": learner.metric,
        "depth_loss": depth_loss,
        "constraints_consumed": progress.consumed,
        "dead_letters": dict(progress.dead_letters),
        "offsets": {str(p): o for p, o in sorted(progress.offsets.items())},
        "lag": {str(p): v for p, v in sorted((lag or {}).items())},
        "checkpoint": {
            "path": str(checkpoint_file),
            "written_at": checkpointed.written_at or None,
            "constraints_consumed": checkpointed.consumed,
            "offsets": {str(p): o for p, o in sorted(checkpointed.offsets.items())},
            "items_version": checkpointed.items_version,
        },
    }
