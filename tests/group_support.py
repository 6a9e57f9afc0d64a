"""Helpers of the learning-group tests: rank 0 run as the serving process runs it (a real
:class:`~oahu.service.serving.process.LearnerProcess` over a pipe, which spawns the other
members), started from the latest checkpoint as the serving process does, and the one-process
replay of the schedule the group logged."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oahu.learner import Learner
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.checkpoints import Progress, checkpoint_path, restore_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.group.schedule import learned_offsets, read_schedule, replay_schedule
from oahu.service.learning.main import learner_main
from oahu.service.messages import Start
from oahu.service.serving.process import LearnerProcess


def start_of(config: ServiceConfig, new: Callable[[], Learner]) -> Start:
    """What the serving process sends first: the latest checkpoint, else ``new()``."""
    restored = restore_checkpoint(checkpoint_path(config.checkpoint_dir))
    if restored is None:
        return Start(learner_to_bytes(new()), Progress().to_extra())
    return Start(
        learner_to_bytes(restored.learner), restored.progress.to_extra(), restored.fell_back
    )


def leader(config: ServiceConfig, start: Start) -> LearnerProcess:
    """Rank 0 of the group, spawned (and spawning its members) as ``oahu run`` does."""
    states: list[bytes] = []
    process = LearnerProcess(learner_main, (config,), start, {}, states.append, lambda f: None)
    process.start()
    return process


def prepared(stream: Any, **params: Any) -> Callable[[], Learner]:
    def new() -> Learner:
        model = make_learner("oahu", stream.n_features, **params)
        model.prepare(stream.X[stream.dev_idx])
        return model

    return new


def assert_each_once(
    config: ServiceConfig, members: int, expected: Sequence[tuple[int, int]]
) -> None:
    """The schedule's union of learned offsets is ``expected``, each exactly once."""
    rounds = read_schedule(config.checkpoint_dir, members)
    counts = collections.Counter(learned_offsets(rounds))
    repeated = {o: c for o, c in counts.items() if c > 1}
    assert not repeated, f"learned more than once: {sorted(repeated)[:10]}"
    missing = set(expected) - set(counts)
    assert not missing, f"never learned: {sorted(missing)[:10]}"
    assert set(counts) == set(expected)


def replayed(
    config: ServiceConfig, members: int, start: Learner, learn: Callable[[Learner, Any], None]
) -> Learner:
    return replay_schedule(start, read_schedule(config.checkpoint_dir, members), members, learn)


def checkpointed(config: ServiceConfig) -> tuple[Learner, Progress]:
    restored = restore_checkpoint(Path(config.checkpoint_dir) / "checkpoint.pt")
    assert restored is not None
    return restored.learner, restored.progress
