"""The combining schedule of a learning group: which offsets each member learned in each round,
logged by every member, and its replay in one process.

Member r appends one JSON line per round to ``group/schedule-<r>.jsonl`` in the checkpoint
directory: ``{"round": n, "weight": w, "runs": [[partition, first, count, stride], ...]}``, the
records it learned in that round in the order it learned them (runs of one partition whose
offsets step by ``stride``: 1 in a Kafka partition, N in a shard of a stream file). The lines
of the rounds a checkpoint covers are fsynced before it is written. When the group starts
again from a checkpoint of round n, every member cuts its log after round n and writes
``{"restart": n}``: the rounds after n were learned by a model that is gone, and their records
are learned again. The union of the logged offsets is therefore every record the checkpointed
model learned, each once.

:func:`replay_schedule` learns the same records in the same rounds with N learners in one
process and combines them as the group does (:func:`.combine.combine_in_process`): the model a
group learned, again, without processes or sockets.

>>> runs = record_runs([(0, 3), (0, 6), (0, 9), (2, 1), (2, 2)])
>>> runs, run_offsets(runs)[:4]
([[0, 3, 3, 3], [2, 1, 2, 1]], [(0, 3), (0, 6), (0, 9), (2, 1)])
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oahu.connectors.messages import decode_batch
from oahu.learner import Learner
from oahu.persistence import learner_from_bytes, learner_to_bytes
from oahu.service.group.combine import combine_in_process, combine_rule
from oahu.service.item_store import ItemStore
from oahu.service.learning.modalities import single_modality
from oahu.service.learning.resolve import resolve_batch
from oahu.streams.atomic import atomic_open

__all__ = [
    "GROUP_DIR",
    "Round",
    "ScheduleLog",
    "learn_values",
    "read_schedule",
    "record_runs",
    "replay_schedule",
    "run_offsets",
]

GROUP_DIR = "group"  # in the checkpoint directory: the schedule logs and members' own state


def record_runs(records: Iterable[tuple[int, int]]) -> list[list[int]]:
    """(partition, offset) pairs, in order, as runs ``[partition, first, count, stride]``."""
    runs: list[list[int]] = []
    for partition, offset in records:
        if runs:
            last = runs[-1]
            p, first, count, stride = last
            if p == partition:
                end = first + (count - 1) * stride
                if count == 1 and offset > first:
                    last[2:] = [2, offset - first]
                    continue
                if offset - end == stride:
                    last[2] += 1
                    continue
        runs.append([partition, offset, 1, 1])
    return runs


def run_offsets(runs: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    """The (partition, offset) pairs of ``runs``, in order."""
    return [(p, first + i * stride) for p, first, count, stride in runs for i in range(count)]


def schedule_path(checkpoint_dir: str | os.PathLike[str], member: int) -> Path:
    return Path(checkpoint_dir) / GROUP_DIR / f"schedule-{member}.jsonl"


class ScheduleLog:
    """Member ``member``'s schedule log in ``checkpoint_dir``, cut after round ``cut`` (the
    checkpoint the group starts from) with a restart line."""

    def __init__(self, checkpoint_dir: str | os.PathLike[str], member: int, cut: int) -> None:
        self.path = schedule_path(checkpoint_dir, member)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = [line for line in _lines(self.path) if line.get("round", -1) <= cut]
        kept.append({"restart": cut})
        with atomic_open(self.path, "w") as fh:
            fh.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in kept)
        self._fh = open(self.path, "a", encoding="utf-8")  # held open until close()

    def append(self, round_: int, weight: float, runs: list[list[int]]) -> None:
        line = {"round": round_, "weight": weight, "runs": runs}
        self._fh.write(json.dumps(line, separators=(",", ":")) + "\n")

    def sync(self) -> None:
        """Make the lines written so far durable (before a checkpoint covers them)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:  # a line torn by a crash: past any checkpoint, cut anyway
            break
    return out


@dataclass(frozen=True)
class Round:
    """One combine round: each member's weight and learned (partition, offset) pairs, or a
    restart of the group from the checkpoint of round ``restart``."""

    number: int
    weights: tuple[float, ...] = ()
    offsets: tuple[tuple[tuple[int, int], ...], ...] = ()
    restart: bool = False


def read_schedule(checkpoint_dir: str | os.PathLike[str], members: int) -> list[Round]:
    """The group's rounds and restarts, from every member's log (which must agree on them)."""
    logs = [_lines(schedule_path(checkpoint_dir, m)) for m in range(members)]
    lengths = {len(log) for log in logs}
    if len(lengths) != 1:
        raise ValueError(f"schedule logs disagree: {[len(log) for log in logs]} lines")
    rounds = []
    for lines in zip(*logs, strict=True):
        if "restart" in lines[0]:
            if {line.get("restart") for line in lines} != {lines[0]["restart"]}:
                raise ValueError(f"schedule logs disagree on a restart: {lines}")
            rounds.append(Round(lines[0]["restart"], restart=True))
            continue
        numbers = {line["round"] for line in lines}
        if len(numbers) != 1:
            raise ValueError(f"schedule logs disagree on a round: {sorted(numbers)}")
        rounds.append(
            Round(
                lines[0]["round"],
                tuple(float(line["weight"]) for line in lines),
                tuple(tuple(run_offsets(line["runs"])) for line in lines),
            )
        )
    return rounds


def learned_offsets(rounds: Iterable[Round]) -> list[tuple[int, int]]:
    """Every (partition, offset) the rounds learned, in no particular order, repeats kept."""
    return [o for r in rounds if not r.restart for member in r.offsets for o in member]


def learn_values(learner: Learner, values: list[bytes], items: ItemStore) -> None:
    """Learn one member's records of one round as the learn loop does: decoded in bulk, items
    resolved by id, each run of one kind learned in one call (constraints with items of another
    modality than the default are the loop's dead letters: not learned)."""
    decoded = decode_batch(values)
    for decoded_batch in decoded.batches:
        batch, _ = single_modality(decoded_batch, learner.name)
        if batch is None:
            continue
        resolved, _ = resolve_batch(batch, items, dim=learner.n_features)
        if resolved is not None and learner.capabilities.learns(resolved.kind):
            learner.learn(resolved.kind, resolved.x, resolved.similar)


def replay_schedule(
    start: Learner,
    rounds: Sequence[Round],
    members: int,
    learn: Callable[[Learner, Sequence[tuple[int, int]]], None],
) -> Learner:
    """The model a group of ``members`` learned from ``start`` in ``rounds``, learned again in
    this process: ``learn(learner, offsets)`` learns one member's records of one round; after
    each round the members are combined; at a restart every member continues from member 0's
    state, as the group re-formed from the checkpoint rank 0 wrote. Returns member 0."""
    state = learner_to_bytes(start)
    learners = [learner_from_bytes(state)[0] for _ in range(members)]
    last, rule = learners[0].combine_values(), combine_rule(learners[0])
    for r in rounds:
        if r.restart:
            state = learner_to_bytes(learners[0])
            learners = [learner_from_bytes(state)[0] for _ in range(members)]
            last = learners[0].combine_values()
            continue
        weights = []
        for learner, offsets in zip(learners, r.offsets, strict=True):
            before = learner.constraints_learned
            if offsets:
                learn(learner, offsets)
            weights.append(float(learner.constraints_learned - before))
        if not np.allclose(weights, r.weights):
            raise ValueError(f"round {r.number}: learned {weights}, the group {list(r.weights)}")
        last = combine_in_process(learners, weights, last, rule)
    return learners[0]
