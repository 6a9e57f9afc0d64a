"""The annotator loop: a learner asks for labels, a simulated annotator answers, the learner
learns the answers, until a label budget is spent (docs/active-learning.md, "The loop").

The learner starts from the paper's protocol (``initial`` constraints of ``build_stream``, each
counted as one label), then works in rounds: :func:`oahu.active.suggest` proposes ``batch``
questions over the development split (the pool, whose labels the learner never sees), the
annotator answers them from the development labels (:func:`annotate`), and the learner learns the
answered triplets. Every question costs one label whether or not it is answered.

The oracle ``"random"`` is the baseline: the first ``budget`` constraints of the paper's protocol
(``build_stream(dataset, budget, seed)``), one label each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from oahu.active import suggest
from oahu.checks import check_choice, check_int, check_number
from oahu.experiments.stream_replay import ReplayStats, replay
from oahu.learner import Learner
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.dataset import Dataset
from oahu.streams.stream_file import ConstraintStream

# --oracle -> the suggestion strategy it asks (None: the paper's random protocol).
ORACLES: dict[str, str | None] = {
    "active": "joint-entropy",
    "uncertainty": "uncertainty",
    "random": None,
}
# Constraints of the paper's protocol the active oracles start from: with none, the first
# questions would be chosen by an untrained metric.
INITIAL = 500
NEITHER = -1  # the annotator's answer when neither option (or both) shares the anchor's class


@dataclass(frozen=True)
class ActiveStats(ReplayStats):
    """What the loop did, besides what a replay reports (``constraints`` learned, the seconds
    spent learning, the prequential curve): labels spent, counting the initial protocol
    constraints one label each, rounds of questions, and the seconds spent suggesting. Every
    constraint came from a label, so ``answered`` (the labels that gave one) is
    ``constraints``."""

    labels_used: int = 0
    rounds: int = 0
    suggest_seconds: float = 0.0

    @property
    def answered(self) -> int:
        return self.constraints

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels_used": self.labels_used,
            "answered": self.answered,
            "rounds": self.rounds,
            "suggest_seconds": self.suggest_seconds,
        }


def annotate(
    labels: np.ndarray,
    questions: np.ndarray,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """The simulated annotator: for each question (anchor, first, second) of item positions into
    ``labels``, the option of the anchor's class, or :data:`NEITHER` when both or neither of the
    options share it. With ``noise`` = ρ, each answer that names an option names the other one
    instead with probability ρ (``rng`` draws which; a "neither" stays).

    >>> y = np.array([0, 0, 1, 1, 0])
    >>> annotate(y, np.array([[0, 1, 2], [0, 2, 4], [0, 1, 4], [0, 2, 3]])).tolist()
    [1, 4, -1, -1]
    >>> annotate(y, np.array([[0, 1, 2]]), noise=1.0, rng=np.random.default_rng(0)).tolist()
    [2]
    """
    q = np.asarray(questions, dtype=np.int64).reshape(-1, 3)
    labels = np.asarray(labels)
    same_first = labels[q[:, 1]] == labels[q[:, 0]]
    same_second = labels[q[:, 2]] == labels[q[:, 0]]
    answer = np.where(same_first & ~same_second, q[:, 1], NEITHER)
    answer = np.where(same_second & ~same_first, q[:, 2], answer)
    if noise:
        check_number(noise, "noise", low=0.0, high=1.0)
        if rng is None:
            raise ValueError("rng: a noisy annotator needs a seeded generator")
        flip = (rng.random(len(q)) < noise) & (answer != NEITHER)
        answer = np.where(flip, q[:, 1] + q[:, 2] - answer, answer)
    return answer


def answered_triplets(questions: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """The triplets (anchor, closer, farther) of the answered questions, (m, 3).

    >>> answered_triplets(np.array([[0, 1, 2], [3, 4, 5]]), np.array([2, -1])).tolist()
    [[0, 2, 1]]
    """
    q = np.asarray(questions, dtype=np.int64).reshape(-1, 3)
    ok = answers != NEITHER
    farther = q[ok, 1] + q[ok, 2] - answers[ok]
    return np.stack([q[ok, 0], answers[ok], farther], axis=1)


def active_learning(
    learner: Learner,
    source: str | Dataset | ConstraintStream,
    oracle: str,
    budget: int,
    batch: int,
    seed: int,
    *,
    initial: int = INITIAL,
    noise: float = 0.0,
    protocol: str = "closure",
    checkpoints: Sequence[int] = (),
    at_checkpoint: Callable[[int, ConstraintStream], None] | None = None,
    suggest_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> tuple[ConstraintStream, ActiveStats]:
    """Prepare ``learner`` on the development split and teach it ``budget`` labels' worth.

    ``source`` is a dataset (a name, a path or a :class:`~oahu.streams.datasets.Dataset`: the
    paper's protocol streams are built from it with ``seed`` and ``protocol``) or a triplet
    stream whose first constraints are the protocol's and whose development labels answer the
    questions. ``oracle`` is a key of :data:`ORACLES`. Returns the
    stream (its items, splits and labels, for evaluation) and :class:`ActiveStats`.
    ``at_checkpoint(n, stream)`` runs once ``n`` labels are used, for each n of ``checkpoints``
    (a learning curve in one run: rounds are cut to land on them; its time is not counted).
    The loop stops short of the budget only if the pool has no question left to ask.
    ``suggest_options`` pass to :func:`oahu.active.suggest` (anchors, neighbours, ...).
    Deterministic for a given ``seed``.

    >>> from oahu.registry import make_learner
    >>> learner = make_learner("oahu", 64, seed=0)
    >>> _, stats = active_learning(learner, "digits", "active", budget=140, batch=20, seed=0,
    ...                            initial=100)
    >>> stats.labels_used, stats.rounds, 100 <= stats.answered <= 140
    (140, 2, True)
    """
    check_choice(oracle, "oracle", ORACLES)
    check_int(budget, "budget")
    check_int(batch, "batch")
    check_int(initial, "initial", minimum=0)
    check_number(noise, "noise", low=0.0, high=1.0)
    strategy = ORACLES[oracle]
    if noise and strategy is None:
        raise ValueError(
            "noise: the random oracle replays the protocol's stream as it is; add label noise "
            "with oahu.streams.add_noise (oahu make-stream --noise) instead"
        )
    if not learner.capabilities.learns("triplet") or learner.capabilities.learns_samples:
        raise ValueError(
            f"learner: {learner.name!r} does not learn triplets, which is what the annotator's "
            "answers are; use a triplet learner (oahu, oasis, euclidean)"
        )
    start = min(budget if strategy is None else initial, budget)
    stream = _protocol_stream(source, start, seed, protocol)
    pending = sorted({int(n) for n in checkpoints if 0 <= int(n) <= budget})

    def checkpoint(used: int) -> None:
        while pending and pending[0] <= used:
            n = pending.pop(0)
            if at_checkpoint is not None:
                at_checkpoint(n, stream)

    learner.prepare(stream.X[stream.prepare_idx])
    first = replay(learner, stream, checkpoints=pending, at_checkpoint=checkpoint)
    used = len(stream)
    seconds, suggest_seconds = first.seconds, 0.0
    answered, rounds = 0, 0
    if strategy is not None:
        pool = stream.dev_idx
        pool_x, pool_y = stream.X[pool], stream.y[pool]
        position = np.full(stream.n_items, -1, dtype=np.int64)
        position[pool] = np.arange(len(pool))
        # Never ask again what the protocol already said (in pool positions).
        asked = {tuple(int(v) for v in t) for t in position[stream.constraints]}
        noise_rng = np.random.default_rng([seed, 1])
        options = dict(suggest_options or {})
        with tqdm(total=budget, initial=used, disable=not progress, unit="label") as bar:
            while used < budget:
                size = min(batch, budget - used, *(n - used for n in pending[:1]))
                started = time.perf_counter()
                questions = suggest(
                    learner,
                    pool_x,
                    size,
                    strategy,
                    seed=int(np.random.SeedSequence([seed, rounds]).generate_state(1)[0]),
                    exclude=asked,
                    **options,
                )
                suggest_seconds += time.perf_counter() - started
                if not questions:
                    break  # the pool has no question left to ask
                q = np.array([[s.anchor, s.first, s.second] for s in questions], dtype=np.int64)
                asked.update(tuple(int(v) for v in row) for row in q)
                triplets = answered_triplets(q, annotate(pool_y, q, noise, noise_rng))
                started = time.perf_counter()
                if len(triplets):
                    learner.learn("triplet", pool_x[triplets])
                seconds += time.perf_counter() - started
                used += len(q)
                answered += len(triplets)
                rounds += 1
                bar.update(len(q))
                checkpoint(used)
    prequential = list(first.prequential)
    if "prequential_accuracy" in learner.diagnostics():
        prequential.append((len(stream) + answered, learner.diagnostics()["prequential_accuracy"]))
    stats = ActiveStats(
        constraints=len(stream) + answered,
        seconds=seconds,
        prequential=prequential,
        labels_used=used,
        rounds=rounds,
        suggest_seconds=suggest_seconds,
    )
    return stream, stats


def _protocol_stream(
    source: str | Dataset | ConstraintStream, n: int, seed: int, protocol: str
) -> ConstraintStream:
    """The first ``n`` constraints of the paper's protocol: built from a dataset name, or cut
    from a given stream."""
    if isinstance(source, (str, Dataset)):
        return build_stream(source, n, seed, "triplet", protocol)
    if source.kind != "triplet":
        raise ValueError(
            f"source: the annotator answers triplet questions; got a {source.kind} stream"
        )
    if len(source) < n:
        raise ValueError(
            f"source: the stream holds {len(source)} constraints, fewer than the {n} needed"
        )
    return ConstraintStream(
        source.X,
        source.y,
        source.dev_idx,
        source.test_idx,
        "triplet",
        source.constraints[:n],
        meta=dict(source.meta),
        image_shape=source.image_shape,
    )
