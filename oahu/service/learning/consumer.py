"""The learn loop: poll records, decode, resolve, learn, dead-letter the rest, checkpoint.

One thread of the learner process runs :meth:`ConsumerLoop.run` and owns the learner; it offers
the learner to its link to the serving process (which decides when a new snapshot is due) and
reports its status there. Records are decoded in bulk and handed to the learner as runs of
consecutive valid constraints (``learn_triplets`` and ``learn_pairs`` process a run in order, so
this equals learning them one by one).

Delivery: a checkpoint holds the learner and the next offset of every partition it has read;
source offsets (Kafka group offsets) are committed only after the checkpoint is durable. On
start (a file source announces its one partition at the first poll) and on every partition
assignment the source is moved to the checkpointed offsets (or the group's committed offset when
that is further: another group member learned those records; except right after a fallback past
a corrupt checkpoint, whose offsets may be the ones committed: then the restored checkpoint's own
offsets win, see :meth:`ConsumerLoop._start_offset`). A crash at any moment therefore replays
exactly the records the checkpointed model has not seen.
Dead letters between the last checkpoint and a crash are emitted again on replay: the
dead-letter sink is at-least-once, the model exactly-once.
A person's answer to one of the service's questions (a message with a ``question`` id) can be
delivered twice (a retried answer): the first message of a question is learned, later ones are
dead-lettered ``duplicate_answer``; the question ids are checkpointed with the model.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import torch

from oahu.connectors.answered import QUESTION_KEY, question_of
from oahu.connectors.constraint import ConstraintBatch
from oahu.connectors.dead_letter import (
    CRASH_LOOP,
    DUPLICATE_ANSWER,
    LEARN_ERROR,
    UNSUPPORTED_KIND,
    UNSUPPORTED_MODALITY,
    DeadLetter,
    DeadLetterSink,
)
from oahu.connectors.messages import decode_batch
from oahu.connectors.source import Source, SourceRecord
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes, learner_to_bytes
from oahu.service.catalog import Catalog
from oahu.service.checkpoints import (
    Progress,
    checkpoint_path,
    write_checkpoint,
)
from oahu.service.config import ServiceConfig
from oahu.service.learning.cross_modal import learn_cross_modal
from oahu.service.learning.in_flight import (
    CRASH_LOOP_STRIKES,
    InFlight,
    Ranges,
    offset_ranges,
)
from oahu.service.learning.link import ServingLink
from oahu.service.learning.modalities import single_modality
from oahu.service.learning.resolve import ResolvedBatch, resolve_batch
from oahu.service.metrics import LearningMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.status import model_status

log = logging.getLogger(__name__)

_LAG_REFRESH_SECONDS = 1.0


def caused_by_records(exc: Exception) -> bool:
    """Whether an error while learning records may be theirs (a value the decoder let through
    that breaks the learner); running out of memory or failing I/O is the machine's, and
    dead-lettering records for it would drain the stream into the dead-letter sink."""
    return not isinstance(exc, (MemoryError, OSError, torch.OutOfMemoryError))


class ConsumerLoop:
    """Trains ``learner`` on ``source`` until stopped; see the module docstring.

    From ``config``: ``checkpoint_every`` consumed records or ``checkpoint_interval`` seconds
    trigger a checkpoint (in ``checkpoint_dir``); each poll fetches at most ``poll_records``
    records and waits at most ``poll_timeout``; ``exit_at_end`` ends the loop once the source is
    exhausted. The loop handles the source's partition assignments (``Source.listen``).
    ``fell_back``: ``progress`` comes from an earlier checkpoint than the latest (see
    :meth:`on_assign`). ``start_state``: ``learner`` as :mod:`oahu.persistence` bytes, if the
    caller has them (else they are made), the state an error before the first checkpoint
    rewinds to (:meth:`_rewind`).

    The records in flight are named in the checkpoint directory (:mod:`.in_flight`): after a
    crash they are learned one at a time, and one that crashes the learner again and again is
    dead-lettered as ``crash_loop``.

    A cross-modal model (``learner`` declares ``capabilities.cross_modal``) comes with its items
    by modality, a :class:`~oahu.service.modal_catalog.ModalCatalog` as ``catalog``, against
    which its constraints resolve (:mod:`.cross_modal`).
    """

    def __init__(
        self,
        config: ServiceConfig,
        learner: Learner,
        source: Source,
        catalog: Catalog | ModalCatalog,
        dead_letters: DeadLetterSink,
        link: ServingLink,
        metrics: LearningMetrics,
        progress: Progress,
        fell_back: bool = False,
        start_state: bytes | None = None,
    ) -> None:
        if learner.capabilities.cross_modal != isinstance(catalog, ModalCatalog):
            raise ValueError(
                f"catalog: a cross-modal model learns from items by modality (a ModalCatalog), "
                f"and only it; learner {learner.name!r} with a {type(catalog).__name__}"
            )
        self.config = config
        self.learner = learner
        self.source = source
        self.catalog = catalog
        self.dead_letters = dead_letters
        self.link = link
        self.metrics = metrics
        self.checkpoint_file = checkpoint_path(config.checkpoint_dir)
        self.progress = progress
        self.lock = threading.RLock()  # held while the learner or the offsets change
        self.checkpointed = Progress.from_extra(progress.to_extra())
        self.lag: dict[int, int] = {}
        self.status: dict[str, Any] = {}
        self.finished = threading.Event()
        self._checkpoint_due_at = time.monotonic() + config.checkpoint_interval
        self._lag_at = 0.0
        self._source_ready: bool | None = None  # as last logged
        drift = learner.drift
        self._drifts_logged = sum(drift.counts.values()) if drift is not None else 0
        # After a fallback past a refused newer checkpoint the group's committed offsets may be
        # that checkpoint's: this model's own offsets win until each partition is assigned.
        self._own_offsets_win = set(progress.offsets) if fell_back else set()
        self._fell_back = fell_back
        self.metrics.restore(self.learner, self.progress, fell_back)
        self._rewind_point = start_state or learner_to_bytes(learner)
        self._assigned_at: dict[int, int] = {}  # where each partition started when assigned
        self._refused: dict[tuple[int, int], tuple[str, str]] = {}  # (partition, offset) → letter
        self.in_flight = InFlight(config.checkpoint_dir)
        self.recovery = self.in_flight.recover()
        self._refresh_status()  # counters continue from the checkpoint, gauges set
        source.listen(self.on_assign, self.on_revoke)

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set (or the file ends with ``exit_at_end``), then write a
        final checkpoint and commit it."""
        poll_records, poll_timeout = self.config.poll_records, self.config.poll_timeout
        try:
            while not stop.is_set():
                started = time.monotonic()
                records = self.source.poll(poll_records, poll_timeout)
                if records:
                    with self.lock:
                        self.process(records)
                self._refresh_lag(force=not records)
                if self._checkpoint_due():
                    self.checkpoint()
                if not records:
                    with self.lock:  # publish the latest model once the stream goes quiet
                        self.link.offer(self.learner)
                        self._refresh_status(force=True)
                    if self.config.exit_at_end and self.source.exhausted:
                        break
                    stop.wait(max(0.0, poll_timeout - (time.monotonic() - started)))
            self.checkpoint()
            with self.lock:
                self.link.offer(self.learner, force=True)  # serve the final model
        finally:
            self.finished.set()

    def process(self, records: list[SourceRecord]) -> None:
        """Learn every valid record in order; dead-letter the others; advance the offsets.

        An error while decoding, resolving or learning them rewinds the learner to the last
        checkpoint (:meth:`_rewind`), and they are then learned one at a time, so the one that
        raises is found and dead-lettered (``learn_error``) and the others are learned once.
        Records the last run crashed on are learned one at a time too (:mod:`.in_flight`).
        """
        ranges = offset_ranges(records)
        for p, (first, _) in ranges.items():  # where a rewind restarts a partition the
            self._assigned_at.setdefault(p, first)  # checkpoint does not know
        alone = self.recovery.isolates(records)
        runs = [[r] for r in records] if alone else [records]
        for run in runs:
            if not self._process_run(run, offset_ranges(run) if alone else ranges, alone):
                return  # rewound: the source replays from the last checkpoint
        self.in_flight.end(self.recovery)
        self.link.offer(self.learner)
        self._refresh_status()

    def _process_run(self, run: list[SourceRecord], ranges: Ranges, alone: bool) -> bool:
        """Learn ``run`` (its offsets ``ranges``) named in the in-flight file, ``alone``: one
        record by itself; False when it raised and the learner was rewound."""
        if alone:
            refused = self._refusal(run[0])
            if refused is not None:
                self._dead_letter(DeadLetter.of(run[0], *refused))
                self._advance(run)
                return True
        self.in_flight.begin(ranges, self.recovery, alone)
        try:
            letters = self._learn_records(run)
        except Exception as exc:
            if not caused_by_records(exc):
                raise
            if alone:
                key = (run[0].partition, run[0].offset)
                self._refused[key] = (LEARN_ERROR, f"{type(exc).__name__}: {exc}"[:1000])
            self._rewind(ranges, exc)
            return False
        for letter in letters:
            self._dead_letter(letter)
        self._advance(run)
        return True

    def _refusal(self, record: SourceRecord) -> tuple[str, str] | None:
        """The (reason, detail) ``record`` is dead-lettered for instead of learned, if any."""
        key = (record.partition, record.offset)
        if key not in self._refused and self.recovery.crash_looping(record):
            detail = f"in flight alone at {CRASH_LOOP_STRIKES} crashes of the learner process"
            self._refused[key] = (CRASH_LOOP, detail)
        return self._refused.get(key)

    def _advance(self, records: list[SourceRecord]) -> None:
        for r in records:
            self.progress.offsets[r.partition] = r.offset + 1
        self.progress.consumed += len(records)
        self.metrics.consumed.inc(len(records))

    def _learn_records(self, records: list[SourceRecord]) -> list[DeadLetter]:
        """Learn the valid records of ``records``; the dead letters for the others."""
        records, letters = self._drop_repeated_answers(records)
        decoded = decode_batch([r.value for r in records])
        errors = list(decoded.errors)
        for decoded_batch in decoded.batches:
            if isinstance(self.catalog, ModalCatalog):
                letters.extend(self._learn_cross_modal(decoded_batch, records, errors))
                continue
            batch, refused = single_modality(decoded_batch, self.learner.name)
            letters.extend(
                DeadLetter.of(records[i], UNSUPPORTED_MODALITY, detail) for i, detail in refused
            )
            if batch is None:
                continue
            resolved, failed = resolve_batch(batch, self.catalog.items, dim=self.learner.n_features)
            errors.extend(failed)
            if resolved is not None:
                letters.extend(self._learn(resolved, records))
        letters.extend(DeadLetter.from_error(error, records[i]) for i, error in errors)
        return sorted(letters, key=lambda letter: (letter.partition, letter.offset))

    def _learn_cross_modal(
        self, batch: ConstraintBatch, records: list[SourceRecord], errors: list
    ) -> list[DeadLetter]:
        """Learn ``batch`` with the cross-modal model; its refused rows' letters (decode
        errors go to ``errors``, dead-lettered with the others)."""
        assert isinstance(self.catalog, ModalCatalog)
        started = time.perf_counter()
        out = learn_cross_modal(self.learner, batch, self.catalog.items)  # type: ignore[arg-type]
        self._count(out.learned, out.learned, out.used, time.perf_counter() - started)
        errors.extend(out.errors)
        return [DeadLetter.of(records[i], reason, detail) for i, reason, detail in out.refused]

    def _drop_repeated_answers(
        self, records: list[SourceRecord]
    ) -> tuple[list[SourceRecord], list[DeadLetter]]:
        """``records`` less the answers to questions answered before, and their dead letters
        (``duplicate_answer``). A question's first message is its answer, learned or
        dead-lettered for what it holds; its question id joins ``progress.answered`` here, so
        a rewind or a restart forgets it with the model that had consumed it."""
        if QUESTION_KEY not in b"".join([r.value or b"" for r in records]):
            return records, []  # the stream's own records: one search over their bytes
        kept: list[SourceRecord] = []
        letters: list[DeadLetter] = []
        for record in records:
            question = question_of(record.value)
            if question is None or self.progress.answered.add(question):
                kept.append(record)
            else:
                detail = f"question {question!r} was answered by an earlier message"
                letters.append(DeadLetter.of(record, DUPLICATE_ANSWER, detail))
        return kept, letters

    def _learn(self, batch: ResolvedBatch, records: list[SourceRecord]) -> list[DeadLetter]:
        if not self.learner.capabilities.learns(batch.kind):
            detail = f"learner {self.learner.name!r} does not learn from {batch.kind}s"
            rejected = batch.index.tolist()
            return [DeadLetter.of(records[i], UNSUPPORTED_KIND, detail) for i in rejected]
        learner = self.learner
        seen, skipped = learner.constraints_learned, Counter(learner.skipped)
        started = time.perf_counter()
        used = learner.learn(batch.kind, batch.x, batch.similar)
        learned = learner.constraints_learned - seen
        self._count(len(batch), learned, int(np.count_nonzero(used)), time.perf_counter() - started)
        for reason, count in (learner.skipped - skipped).items():
            self.metrics.skipped.labels(reason=reason).inc(count)
        return []

    def _count(self, offered: int, learned: int, used: int, seconds: float) -> None:
        """Count what one learn call did: the seconds per constraint it was given, the
        constraints learned and those that changed the model."""
        if offered:
            self.metrics.update_seconds.observe(seconds / offered)
        self.metrics.learned.inc(learned)
        self.metrics.used.inc(used)

    def _rewind(self, ranges: Ranges, exc: BaseException) -> None:
        """After an error while learning the records in ``ranges``: the learner may hold part
        of an update, so continue from the last checkpoint's learner and offsets (kept in
        memory) and learn what follows it again, those records one at a time. Letters sent
        since that checkpoint are sent again (the dead-letter sink is at-least-once); the
        counters restart from the checkpoint's totals, as after a restart."""
        log.error(
            "learning offsets %s raised %s: %s; continuing from the last checkpoint (%d "
            "constraints consumed) and learning them one at a time",
            {p: f"{a}-{b}" for p, (a, b) in ranges.items()}, type(exc).__name__, exc,
            self.checkpointed.consumed, exc_info=exc,
        )  # fmt: skip
        self.learner, _ = learner_from_bytes(self._rewind_point)
        self.progress = Progress.from_extra(self.checkpointed.to_extra())
        owned = self.source.assignment
        starts = {p: self.progress.offsets.get(p, self._assigned_at.get(p)) for p in owned}
        targets = {p: o for p, o in starts.items() if o is not None}
        self.progress.offsets.update(targets)
        self.recovery.suspect(ranges)
        self.in_flight.end(self.recovery)
        self.source.seek(targets)
        self.metrics = LearningMetrics.of(self.learner)
        self.metrics.restore(self.learner, self.progress, self._fell_back)
        self._refresh_status(force=True)

    def _dead_letter(self, letter: DeadLetter) -> None:
        self.dead_letters.write(letter)
        self.progress.dead_letters[letter.reason] += 1
        self.metrics.dead_letters.labels(reason=letter.reason).inc()

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_due(self) -> bool:
        pending = self.progress.consumed - self.checkpointed.consumed
        return pending > 0 and (
            pending >= self.config.checkpoint_every or time.monotonic() >= self._checkpoint_due_at
        )

    def checkpoint(self) -> None:
        """Write learner + offsets atomically, then commit the offsets to the source."""
        with self.lock:
            started = time.perf_counter()
            self.dead_letters.flush()  # letters of checkpointed records are delivered first
            self.progress.items_version = self.catalog.version
            self.progress.written_at = time.time()
            # the same model as the latest checkpoint (nothing consumed since, e.g. the final
            # one after a revoke) replaces it rather than pushing an older one out of those kept
            keep = self.progress.consumed != self.checkpointed.consumed
            self._rewind_point = write_checkpoint(
                self.checkpoint_file, self.learner, self.progress, keep_previous=keep
            )
            self.checkpointed = Progress.from_extra(self.progress.to_extra())
            self._forget_before(self.checkpointed.offsets)
            self._commit()
            self._checkpoint_due_at = time.monotonic() + self.config.checkpoint_interval
            self.metrics.checkpoint_seconds.observe(time.perf_counter() - started)
            self.metrics.checkpoint_time.set(self.progress.written_at)
            self._refresh_status(force=True)

    def _forget_before(self, offsets: dict[int, int]) -> None:
        """Suspects, strikes and refusals behind a checkpoint's ``offsets`` are settled: no
        rewind or restart goes back to them."""
        self.recovery.passed(offsets)
        self._refused = {
            (p, o): letter for (p, o), letter in self._refused.items() if o >= offsets.get(p, 0)
        }
        self.in_flight.end(self.recovery)

    def _commit(self) -> None:
        # connected, not ready: a commit is worth trying while the coordinator is slow to
        # answer (e.g. during a rebalance); it fails harmlessly if the broker is gone
        if not self.source.connected:
            return
        owned = set(self.source.assignment)
        offsets = {p: o for p, o in self.progress.offsets.items() if p in owned}
        if offsets:
            self.source.commit(offsets)

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
        (checkpoint) or by another group member (committed offset), whichever is further;
        after a checkpoint fallback, from this model's own offset (:meth:`_start_offset`)."""
        with self.lock:
            targets = {}
            for p in partitions:
                try:
                    committed = self.source.committed(p)
                except Exception as exc:  # the checkpoint alone still gives a safe position
                    log.warning("committed offset of partition %s unavailable: %r", p, exc)
                    committed = None
                target = self._start_offset(p, self.progress.offsets.get(p), committed)
                self._assigned_at.pop(p, None)
                if target is not None:
                    targets[p] = self._assigned_at[p] = target
                    self.progress.offsets[p] = target
            if targets:
                self.source.seek(targets)
            log.info("assigned partitions %s, starting at %s", partitions, targets)

    def _start_offset(self, partition: int, own: int | None, committed: int | None) -> int | None:
        """Where ``partition`` continues: this checkpoint's offset ``own`` or the group's
        ``committed`` one, whichever is further, except right after a checkpoint fallback,
        when the committed offset may be the refused checkpoint's and ``own`` pairs with the
        model. Records the model will never learn are named in a warning."""
        if partition in self._own_offsets_win:
            self._own_offsets_win.discard(partition)
            if own is not None and committed is not None and committed > own:
                log.warning(
                    "partition %s: continuing from the restored checkpoint's offset %d, not the "
                    "group's committed %d (the refused checkpoint's): offsets %d to %d are "
                    "learned again by the restored model",
                    partition, own, committed, own, committed - 1,
                )  # fmt: skip
            return own
        if committed is None or (own is not None and own >= committed):
            return own
        if own is None:
            log.warning(
                "partition %s: no checkpoint covers it; starting at the group's committed offset "
                "%d, so this model never learns the records before offset %d (the group consumed "
                "them before; to learn them, reset the group's offsets or use a new group)",
                partition, committed, committed,
            )  # fmt: skip
        else:
            log.info(
                "partition %s: continuing at the group's committed offset %d, past this "
                "checkpoint's %d (another member learned offsets %d to %d)",
                partition, committed, own, own, committed - 1,
            )  # fmt: skip
        return committed

    # ------------------------------------------------------------------ status
    def _refresh_lag(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.source.ready:
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

    def _refresh_status(self, force: bool = False) -> None:
        """Plain values about the model and the stream, for /v1/model and the gauges; reported
        (``force``: even if a report was sent a moment ago)."""
        learner = self.learner
        reason = self.source.not_ready_reason
        if (reason is None) != self._source_ready:  # said once per change (the text ticks on)
            if reason is None:
                log.info("source ready" if self._source_ready is None else "source ready again")
            else:
                log.warning("source not ready: %s", reason)
            self._source_ready = reason is None
        self.metrics.source_ready.set(reason is None)
        self.status = {
            **model_status(
                learner, self.progress, self.checkpointed, self.checkpoint_file, self.lag
            ),
            "source_ready": reason is None,
            "source_not_ready": reason,
            "source_contact_age_s": self.source.seconds_since_contact,
        }
        self._log_drifts()
        self.metrics.set_model(learner, self.status["diagnostics"])
        self.link.report(self.status, self.metrics.families, force)

    def _log_drifts(self) -> None:
        """One warning per drift detected since the last report, with where the stream was."""
        drift = self.learner.drift
        total = sum(drift.counts.values()) if drift is not None else 0
        if drift is None or total <= self._drifts_logged:
            self._drifts_logged = min(self._drifts_logged, total)  # after a rewind
            return
        for event in drift.events[-(total - self._drifts_logged) :]:
            log.warning(
                "drift detected at constraint %d (%s): mistake rate %.3f -> %.3f; offsets %s",
                event.constraint,
                event.signal,
                event.mistakes_before,
                event.mistakes_after,
                dict(sorted(self.progress.offsets.items())),
            )
        self._drifts_logged = total
