"""Replaying a constraint stream through a learner, in stream order.

This is what ``oahu replay`` and the benchmarks train with: the stream's constraints are handed to
the learner in order, a chunk of features at a time (the learner itself still updates one
constraint, or one micro-batch, at a time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from oahu.learner import Learner
from oahu.streams.stream_file import ConstraintStream

CHUNK = 1024  # constraints materialised as features at a time


@dataclass(frozen=True)
class ReplayStats:
    constraints: int  # constraints offered to the learner
    seconds: float  # wall time spent learning (feature gathering included)

    @property
    def constraints_per_s(self) -> float:
        return self.constraints / self.seconds if self.seconds > 0 else float("inf")


def replay(
    learner: Learner, stream: ConstraintStream, progress: bool = False, chunk: int = CHUNK
) -> ReplayStats:
    """Train ``learner`` on ``stream`` in order; returns how many constraints and how long.

    A learner that builds its own constraints from samples (OPML, Section 4.1 of the paper)
    instead makes its one pass over the stream's development items, in the stream's (seeded)
    split order.
    """
    if learner.capabilities.learns_samples:
        x, y = stream.X[stream.dev_idx], stream.y[stream.dev_idx]
        started = time.perf_counter()
        for start in tqdm(range(0, len(x), chunk), disable=not progress, unit="chunk"):
            learner.learn_samples(x[start : start + chunk], y[start : start + chunk])
        return ReplayStats(len(x), time.perf_counter() - started)
    if not learner.capabilities.learns(stream.kind):
        kind = learner.capabilities.protocol_kind
        raise ValueError(
            f"stream: {learner.name!r} learns from {kind}s, but this stream holds "
            f"{stream.kind}s; build a {kind} stream (oahu make-stream --kind {kind})"
        )
    started = time.perf_counter()
    with tqdm(total=len(stream), disable=not progress, unit="constraint", smoothing=0.1) as bar:
        for start in range(0, len(stream), chunk):
            stop = min(start + chunk, len(stream))
            similar = None if stream.similar is None else stream.similar[start:stop]
            learner.learn(stream.kind, stream.features(start, stop), similar)
            bar.update(stop - start)
    return ReplayStats(len(stream), time.perf_counter() - started)


def stream_kind_for(learner: Learner) -> str:
    """The kind of stream the paper's protocol feeds this learner (pairs for LEGO and RDML)."""
    return learner.capabilities.protocol_kind


def as_json_floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values).ravel()]
