"""Replaying a constraint stream through a learner, in stream order.

This is what ``oahu replay`` and the benchmarks train with: the stream's constraints are handed to
the learner in order, a chunk of features at a time (the learner itself still updates one
constraint, or one micro-batch, at a time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from oahu.learner import Learner
from oahu.streams.stream_file import ConstraintStream

CHUNK = 1024  # constraints materialised as features at a time


@dataclass(frozen=True)
class ReplayStats:
    constraints: int  # constraints offered to the learner
    seconds: float  # wall time spent learning (feature gathering included)
    # [constraints seen, rolling prequential accuracy] after each chunk, for a learner that
    # reports ``prequential_accuracy`` (docs/algorithms.md, "Prequential accuracy").
    prequential: list[tuple[int, float]] = field(default_factory=list)

    @property
    def constraints_per_s(self) -> float | None:
        """Constraints learned per second; None when nothing was learned (no rate to give, and
        JSON has no infinity)."""
        return self.constraints / self.seconds if self.constraints and self.seconds > 0 else None


def replay(
    learner: Learner,
    stream: ConstraintStream,
    progress: bool = False,
    chunk: int = CHUNK,
    checkpoints: Sequence[int] = (),
    at_checkpoint: Callable[[int], None] | None = None,
) -> ReplayStats:
    """Train ``learner`` on ``stream`` in order, ``chunk`` constraints at a time (at least one
    update's, :attr:`~oahu.learner.Learner.constraints_per_update`); returns how many
    constraints and how long.

    ``at_checkpoint(n)`` is called after the first n constraints for each n of ``checkpoints``
    (a learning curve in one pass: e.g. evaluate there); its time is not counted as learning.
    A learner that builds its own constraints from samples (OPML, Section 4.1 of the paper)
    instead makes its one pass over the stream's development items, in the stream's (seeded)
    split order, each labelled by the concept in force at the same share of the stream (a
    drifting stream's, :mod:`oahu.streams.drift`).
    """
    if learner.capabilities.learns_samples:
        x, y = stream.X[stream.dev_idx], sample_labels(stream)

        def learn(start: int, stop: int) -> None:
            learner.learn_samples(x[start:stop], y[start:stop])

        total = len(x)
    else:
        if not learner.capabilities.learns(stream.kind):
            kind = learner.capabilities.protocol_kind
            raise ValueError(
                f"stream: {learner.name!r} learns from {kind}s, but this stream holds "
                f"{stream.kind}s; build a {kind} stream (oahu make-stream --kind {kind})"
            )

        def learn(start: int, stop: int) -> None:
            similar = None if stream.similar is None else stream.similar[start:stop]
            learner.learn(stream.kind, stream.features(start, stop), similar)

        total = len(stream)
    tracks_prequential = any(
        d.name == "prequential_accuracy" for d in learner.capabilities.diagnostics
    )
    # Whole updates: a micro-batch learner gets at least one batch per call.
    chunk = max(chunk, learner.constraints_per_update)
    pending = sorted({int(n) for n in checkpoints if 0 <= int(n) <= total})
    curve: list[tuple[int, float]] = []
    seconds = 0.0
    done = 0
    with tqdm(total=total, disable=not progress, unit="constraint", smoothing=0.1) as bar:
        while True:
            while pending and pending[0] <= done:
                if at_checkpoint is not None:
                    at_checkpoint(pending.pop(0))
                else:
                    pending.pop(0)
            if done >= total:
                break
            stop = min(done + chunk, total, *(pending[:1] or [total]))
            started = time.perf_counter()
            learn(done, stop)
            seconds += time.perf_counter() - started
            bar.update(stop - done)
            done = stop
            if tracks_prequential:
                curve.append((done, float(learner.diagnostics()["prequential_accuracy"])))
    return ReplayStats(total, seconds, curve)


def sample_labels(stream: ConstraintStream) -> np.ndarray:
    """Labels of the development items for a one-pass learner of samples: the i-th of n items
    takes its label under the concept of constraint ⌊i N / n⌋ (the final labels for a stream
    with one concept).

    >>> from oahu.streams.stream_file import ConstraintStream
    >>> s = ConstraintStream(np.eye(4), [1, 1, 1, 1], [0, 1, 2, 3], [], "triplet",
    ...                      [[0, 1, 2]] * 4, concepts=np.array([0, 0, 1, 1], np.int8),
    ...                      concept_labels=[[5, 5, 6, 6], [1, 1, 1, 1]])
    >>> sample_labels(s).tolist()
    [5, 5, 1, 1]
    """
    if stream.concepts is None or stream.concept_labels is None or not len(stream):
        return stream.y[stream.dev_idx]
    n, total = len(stream.dev_idx), len(stream)
    concept = stream.concepts[np.arange(n) * total // n]
    return stream.concept_labels[concept, stream.dev_idx]


def as_json_floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values).ravel()]
