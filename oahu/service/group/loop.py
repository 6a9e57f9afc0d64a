"""The learn loop of a learning group's member: rounds of local learning, each ended by a
combine, and the consistent cut that a checkpoint is.

A round: the member polls up to K updates' worth of its own records (K × the largest update,
K from :func:`round_updates`; any number, 0 included, when its partitions are idle or
behind), learns them with the one-process loop's code (:class:`~oahu.service.learning.consumer.
ConsumerLoop`: decoding, dead letters, in-flight records), logs them in the schedule
(:mod:`.schedule`) and joins the combine (:mod:`.combine`), one all-reduce that also carries
what members tell each other: a stop (any member), the end of a file (all members), a
checkpoint (rank 0 decides, as one learner process does, on the group's consumed count) and
item changes (rank 0 has them from the serving process and broadcasts them; every member
applies them at the same round boundary). No member waits for another's records: a member
with none joins the combine with weight 0 after one short poll.

The cut: after a combine that asks for a checkpoint every member holds the same model;
each makes its schedule lines and dead letters durable, then the members' offsets (of their own
partitions), dead-letter counts and answered questions are gathered at rank 0, which writes the
combined model with all of them as one checkpoint (the same file format as one learner
process's) and then commits the offsets to Kafka. A checkpoint is thus a cut at a combining
barrier, Flink's aligned checkpoint: restarting every member from it replays exactly the
records no member had learned into it.

A record that makes the learner raise fails the group (instead of a one-process rewind to the
last checkpoint, which the other members' models have moved past): the group restarts from the
cut and the in-flight file of that member isolates the record, dead-lettered at the second
failure as one learner process would (:mod:`oahu.service.learning.in_flight`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from prometheus_client.metrics_core import Metric

from oahu.connectors.dead_letter import DeadLetterSink
from oahu.connectors.source import Source, SourceRecord
from oahu.learner import Learner
from oahu.service.catalog import Catalog, ItemChange
from oahu.service.checkpoints import Progress, write_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.group.combine import apply, combine_rule, pack, unpack
from oahu.service.group.schedule import ScheduleLog, record_runs
from oahu.service.learning.consumer import ConsumerLoop
from oahu.service.learning.in_flight import Ranges
from oahu.service.learning.link import ServingLink
from oahu.service.metrics import LearningMetrics

log = logging.getLogger(__name__)

#: The longest a member waits for records while the group is busy: an idle member joins the
#: combine this soon, so that it holds the others back by at most this much per round.
BUSY_POLL_SECONDS = 0.01

#: Rank 0 reports the group's status at most this often: a round can last a few milliseconds,
#: and each report (status and metric families) costs both processes; one learner process
#: reports about as often, once per poll of ``poll_records``.
STATUS_INTERVAL_SECONDS = 0.5

# The signals each member adds to the combine, in this order.
_STOP, _EXHAUSTED, _CHECKPOINT, _CHANGES, _CONSUMED = range(5)
_N_SIGNALS = 5


class GroupFailure(RuntimeError):
    """The group cannot go on as one (a member's learning raised): it restarts from the cut."""


class Collectives(Protocol):
    """What the loop needs of the process group (``torch.distributed``, :mod:`.members`)."""

    rank: int
    members: int

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over the members."""
        ...

    def gather(self, value: Any) -> list[Any] | None:
        """Every member's ``value`` at rank 0 (None elsewhere)."""
        ...

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` at every member."""
        ...


class NoServing:
    """The serving link of members other than rank 0: they serve nothing and report nothing."""

    def offer(self, learner: Learner, force: bool = False) -> bool:
        return False

    def report(
        self, status: dict[str, Any], families: Callable[[], list[Metric]], force: bool = False
    ) -> None:
        return None


class RoundLink:
    """Rank 0's serving link, opened only between rounds: the serving process gets the combined
    model and the group's counts, never a member's model in the middle of a round."""

    def __init__(self, link: ServingLink) -> None:
        self.link = link
        self.open = False

    def offer(self, learner: Learner, force: bool = False) -> bool:
        return self.open and self.link.offer(learner, force)

    def report(
        self, status: dict[str, Any], families: Callable[[], list[Metric]], force: bool = False
    ) -> None:
        if self.open:
            self.link.report(status, families, force)

    def ack(self, version: int) -> None:
        ack = getattr(self.link, "ack", None)
        if ack is not None:
            ack(version)


@dataclass(frozen=True)
class RoundOutcome:
    """What the members said to each other at a combine (summed over them)."""

    stop: bool
    all_exhausted: bool
    checkpoint: bool
    changes: int
    consumed: int


#: Updates per member per round when ``combine_every`` is not given: a strict round of 64 steps
#: spent 12-16% of a member's time at the combine, and on development streams 256 steps made as
#: few validation errors as 64; a micro-batch round of 64 updates is already thousands of
#: constraints, and more of them would only delay stops, checkpoints and served snapshots.
STRICT_ROUND_UPDATES = 256
MICRO_BATCH_ROUND_UPDATES = 64


def round_updates(config: ServiceConfig, learner: Learner) -> int:
    """Each member's updates per round (K): ``combine_every``, else by the learner's mode.

    >>> from oahu.learners.oahu.learner import OAHU
    >>> config = ServiceConfig()
    >>> round_updates(config, OAHU(n_features=2)), round_updates(config, OAHU(2, batch_size=8))
    (256, 64)
    >>> round_updates(config.replace(combine_every=4), OAHU(n_features=2))
    4
    """
    if config.combine_every is not None:
        return config.combine_every
    strict = learner.constraints_per_update == 1
    return STRICT_ROUND_UPDATES if strict else MICRO_BATCH_ROUND_UPDATES


def round_records(config: ServiceConfig, learner: Learner) -> int:
    """The records a member polls for one round: K updates' worth."""
    return round_updates(config, learner) * max(1, learner.constraints_per_update)


def group_progress(config: ServiceConfig, progress: Progress, block: int) -> Progress:
    """The progress a group of ``config.learners`` starts from. A stream file's checkpoint
    belongs to a number of learners and a block (its offsets are per shard, :mod:`.shards`):
    a group's of another size is refused; its block stays (a group's checkpoint written before
    files were cut in blocks dealt records out one by one: a block of 1); one learner process's
    offset of the file (everything before it learned) starts every shard, in blocks of
    ``block``, as does a new group."""
    members = config.learners
    written_by = progress.group.get("members", 1)
    if config.is_kafka:
        return progress
    if written_by == members:
        progress.group.setdefault("block", 1 if progress.offsets else block)
        return progress
    if written_by == 1:
        if progress.offsets:
            start = progress.offsets.get(0, 0)
            progress.offsets = {p: start for p in range(members)}
        progress.group = {**progress.group, "members": members, "block": block}
        return progress
    raise ValueError(
        f"learners: the checkpoint in {config.checkpoint_dir} was written by a group of "
        f"{written_by} learners over a stream file, whose offsets are per member; continue it "
        f"with --learners {written_by}"
    )


class GroupLoop(ConsumerLoop):
    """A member's learn loop (see the module docstring); ``group`` its collectives,
    ``schedule`` its schedule log, ``changes`` (rank 0) the item changes the serving process
    sent, applied at the next round boundary."""

    def __init__(
        self,
        config: ServiceConfig,
        learner: Learner,
        source: Source,
        catalog: Catalog,
        dead_letters: DeadLetterSink,
        link: ServingLink,
        metrics: LearningMetrics,
        progress: Progress,
        group: Collectives,
        schedule: ScheduleLog,
        changes: queue.SimpleQueue[ItemChange] | None = None,
        fell_back: bool = False,
        start_state: bytes | None = None,
    ) -> None:
        self.round_link = RoundLink(link)
        self.group = group  # before the one-process loop's set-up, which refreshes the status
        self._member_status_at = 0.0
        super().__init__(
            config, learner, source, catalog, dead_letters, self.round_link, metrics, progress,
            fell_back, start_state,
        )  # fmt: skip
        self.schedule = schedule
        self.changes = changes
        self.round = progress.group.get("round", 0)
        # what the last combine gave every member (θ₀ and the counters), the started model first
        self.last = learner.combine_values()
        self.rule = combine_rule(learner)
        self._dead_at_cut = Counter(progress.dead_letters)
        self._status_at = 0.0
        self.round_records = round_records(config, learner)

    # ------------------------------------------------------------------ rounds
    def run(self, stop: threading.Event) -> None:
        """Rounds until a member is stopped or every member's file is read (with
        ``exit_at_end``); the last round ends with a cut."""
        busy = True
        try:
            while True:
                timeout = min(self.config.poll_timeout, BUSY_POLL_SECONDS) if busy else (
                    self.config.poll_timeout
                )  # fmt: skip
                started = time.monotonic()
                records = [] if stop.is_set() else self.source.poll(self.round_records, timeout)
                outcome = self.learn_round(records, stop.is_set())
                final = outcome.stop or outcome.all_exhausted
                if outcome.checkpoint or final:
                    self.cut()
                self._between_rounds(final)
                if final:
                    break
                busy = outcome.consumed > 0
                if not busy:  # the whole group is idle: no need to combine more often
                    stop.wait(max(0.0, self.config.poll_timeout - (time.monotonic() - started)))
        finally:
            self.finished.set()

    def learn_round(self, records: list[SourceRecord], stopping: bool) -> RoundOutcome:
        """Learn this member's ``records`` of the round, log them, and combine."""
        learned = self.learner.constraints_learned
        consumed = self.progress.consumed
        if records:
            with self.lock:
                self.process(records)
        weight = float(self.learner.constraints_learned - learned)
        local = self.progress.consumed - consumed
        self.round += 1
        self.schedule.append(
            self.round, weight, record_runs((r.partition, r.offset) for r in records)
        )
        pending: list[ItemChange] = []
        if self.changes is not None:
            while not self.changes.empty():
                pending.append(self.changes.get())
        signals = [0.0] * _N_SIGNALS
        signals[_STOP] = float(stopping)
        signals[_EXHAUSTED] = float(self.config.exit_at_end and self.source.exhausted)
        signals[_CHECKPOINT] = float(self.group.rank == 0 and self._checkpoint_due())
        signals[_CHANGES] = float(len(pending))
        signals[_CONSUMED] = float(local)
        with self.lock:
            total = self.group.all_reduce(
                pack(self.learner.combine_values(), self.last, weight, signals, self.rule)
            )
            combined, summed = unpack(total, self.last, _N_SIGNALS, self.rule)
            apply(self.learner, combined)
            self.last = self.learner.combine_values()
            group_consumed = round(float(summed[_CONSUMED]))
            self.progress.consumed = consumed + group_consumed
            self.metrics.consumed.inc(group_consumed - local)  # the other members' records
        outcome = RoundOutcome(
            stop=summed[_STOP] > 0,
            all_exhausted=round(float(summed[_EXHAUSTED])) == self.group.members,
            checkpoint=summed[_CHECKPOINT] > 0,
            changes=round(float(summed[_CHANGES])),
            consumed=group_consumed,
        )
        if outcome.changes:
            self._apply_changes(pending)
        return outcome

    def _apply_changes(self, pending: list[ItemChange]) -> None:
        """Rank 0's item changes, applied by every member at this round boundary."""
        changes = self.group.broadcast(pending)
        for change in changes:
            self.catalog.apply(change)
        if self.group.rank == 0:
            for change in changes:
                self.round_link.ack(change.version)

    def _between_rounds(self, final: bool = False) -> None:
        """Rank 0 hands the combined model and the group's status to the serving process
        (``final``: the model and status it ends with, in any case)."""
        if self.group.rank != 0:
            return
        self.round_link.open = True
        try:
            with self.lock:
                self.link.offer(self.learner, force=final)
                now = time.monotonic()
                if final or now - self._status_at >= STATUS_INTERVAL_SECONDS:
                    self._status_at = now
                    self._refresh_lag()
                    self._refresh_status(force=final)
        finally:
            self.round_link.open = False

    def _refresh_status(self, force: bool = False) -> None:
        """The status between rounds only (rank 0, :meth:`_between_rounds`); the other members,
        which report to nobody, refresh it (and log their source's readiness and drifts) at most
        every :data:`STATUS_INTERVAL_SECONDS`."""
        if self.round_link.open:
            super()._refresh_status(force)
            return
        now = time.monotonic()
        if self.group.rank == 0:
            return  # rank 0's comes between rounds
        if now - self._member_status_at >= STATUS_INTERVAL_SECONDS:
            self._member_status_at = now
            super()._refresh_status(force)

    def _rewind(self, ranges: Ranges, exc: BaseException) -> None:
        raise GroupFailure(
            f"member {self.group.rank}: learning offsets "
            f"{ {p: f'{a}-{b}' for p, (a, b) in ranges.items()} } raised "
            f"{type(exc).__name__}: {exc}; the group restarts from its last checkpoint"
        ) from exc

    # ------------------------------------------------------------------ the cut
    def cut(self) -> None:
        """A checkpoint of the group at this combining barrier (see the module docstring)."""
        with self.lock:
            started = time.perf_counter()
            self.schedule.sync()
            self.dead_letters.flush()
            own = set(self.source.assignment)
            mine = {
                "offsets": {p: o for p, o in self.progress.offsets.items() if p in own},
                "dead_letters": dict(self.progress.dead_letters - self._dead_at_cut),
                "answered": list(self.progress.answered),
            }
            gathered = self.group.gather(mine)  # every member's lines and letters are durable
            if gathered is not None:
                self._write_cut(gathered)
            self._dead_at_cut = Counter(self.progress.dead_letters)
            self.checkpointed = Progress.from_extra(self.progress.to_extra())
            self._forget_before(mine["offsets"])
            self._checkpoint_due_at = time.monotonic() + self.config.checkpoint_interval
            self.metrics.checkpoint_seconds.observe(time.perf_counter() - started)

    def _write_cut(self, gathered: list[dict[str, Any]]) -> None:
        """Rank 0: the members' offsets and counts with the combined model, one checkpoint."""
        progress = self.progress
        dead = Counter(self._dead_at_cut)
        for member in gathered:
            progress.offsets.update(member["offsets"])
            dead.update(member["dead_letters"])
            for question in member["answered"]:
                progress.answered.add(question)
        progress.dead_letters = dead
        progress.items_version = self.catalog.version
        progress.written_at = time.time()
        # a file's block (group_progress) stays with the checkpoint
        progress.group = {**progress.group, "members": self.group.members, "round": self.round}
        keep = progress.consumed != self.checkpointed.consumed
        write_checkpoint(self.checkpoint_file, self.learner, progress, keep_previous=keep)
        self._commit()
        self.metrics.checkpoint_time.set(progress.written_at)

    def _commit(self) -> None:
        """Rank 0 commits every member's offsets once the cut is durable (a file source only
        records its own)."""
        if not self.source.connected:
            return
        offsets = dict(self.progress.offsets)
        if not self.config.is_kafka:
            offsets = {p: o for p, o in offsets.items() if p in self.source.assignment}
        if offsets:
            self.source.commit(offsets)


def member_directory(config: ServiceConfig, rank: int) -> Path:
    """Where member ``rank`` keeps its own state (in-flight records, a file source's dead
    letters): the checkpoint directory for rank 0, ``group/member-<rank>`` in it for the
    others."""
    if rank == 0:
        return Path(config.checkpoint_dir)
    return Path(config.checkpoint_dir) / "group" / f"member-{rank}"
