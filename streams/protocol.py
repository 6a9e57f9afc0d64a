"""The paper's benchmark-stream protocol (Section 4.3.2 and footnote 1 of the OAHU paper;
docs/algorithms.md, "Benchmark streams").

* :func:`split_dev_test` shuffles the labelled items with the run's seed and splits them 1:1 into
  development and test sets (global indices into the dataset).
* :func:`triplet_stream` / :func:`pair_stream`: N/2 *seed* constraints sampled from the
  development set, plus N/2 constraints *derived* by transitive closure (:mod:`streams.closure`)
  from what the seeds revealed so far. After each seed comes one derived constraint when one is
  pending: the oldest pending creation first (constraints created by the same seed come in a
  seeded random order), never one already in the stream. Derived constraints use the revealed
  knowledge only, never the labels; they are label-consistent because the seeds are.
* When closure runs dry (random pairs are mostly dissimilar with 10 classes, so pair streams reveal
  little), the stream is topped up with further seeds so that exactly N constraints come out; a
  stream therefore holds *at least* ceil(N/2) seeds. Seeds never repeat an earlier constraint.
* :func:`random_triplets` / :func:`random_pairs`: i.i.d. random constraints, no closure (repeats
  possible), for comparison.

Everything is deterministic per seed and returns global item indices in stream order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from oahu.checks import check_int
from oahu.streams.closure import PROTOCOL_KINDS, ClosureKnowledge, Revelation

_NO_TRIPLETS = (
    "labels: triplets need a class with at least 2 development items and a second class; the "
    "development set has none"
)
_SEED_BATCH = 1024  # seeds are drawn vectorised, this many at a time
# The split and the streams of one run share its seed; tagging each use keeps their draws
# independent (a split and a stream from plain default_rng(seed) would read the same bits).
_SPLIT, _CLOSURE, _RANDOM, _CLASS_SPLIT = 0, 1, 2, 3
#: How a stream's items are split into development and test sets: ``items``, the paper's
#: classification protocol (a 1:1 split of the items); ``classes``, its retrieval protocol for
#: CARS-196 and CIFAR-100 (Section 4.5: the items of half of the classes learn, the other half,
#: never seen, are retrieved).
SPLITS: tuple[str, ...] = ("items", "classes")


def _rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([check_int(seed, "seed", minimum=0), tag])


def split_dev_test(n_items: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded shuffle of ``range(n_items)`` split 1:1 into (dev_idx, test_idx), int64.

    The development set gets the extra item when ``n_items`` is odd.

    >>> dev, test = split_dev_test(5, seed=0)
    >>> len(dev), len(test), sorted(np.concatenate([dev, test]).tolist())
    (3, 2, [0, 1, 2, 3, 4])
    """
    if int(n_items) < 2:
        raise ValueError(f"n_items: need at least 2 items to split, got {n_items!r}")
    order = _rng(seed, _SPLIT).permutation(int(n_items)).astype(np.int64)
    n_dev = (int(n_items) + 1) // 2
    return order[:n_dev], order[n_dev:]


def split_classes(labels: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-disjoint split: (dev_idx, test_idx), the items of a seeded half of the classes
    and the items of the others (int64, ascending).

    The development half gets the extra class when the number of classes is odd. Learning sees
    only development items, so the test classes are never seen: the retrieval protocol of the
    paper's Section 4.5.

    >>> labels = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    >>> dev, test = split_classes(labels, seed=0)
    >>> sorted(set(labels[dev].tolist()) | set(labels[test].tolist())), len(dev), len(test)
    ([0, 1, 2, 3], 4, 4)
    >>> bool(set(labels[dev].tolist()) & set(labels[test].tolist()))
    False
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels: expected a 1-d array, got shape {labels.shape}")
    classes = np.unique(labels)
    if len(classes) < 4:
        raise ValueError(
            f"split: the class-disjoint split needs at least 4 classes (2 to learn from, 2 "
            f"unseen to retrieve), the labels have {len(classes)}"
        )
    order = _rng(seed, _CLASS_SPLIT).permutation(len(classes))
    seen = classes[order[: len(classes) - len(classes) // 2]]
    is_dev = np.isin(labels, seen)
    return np.flatnonzero(is_dev).astype(np.int64), np.flatnonzero(~is_dev).astype(np.int64)


class _DevSampler:
    """Vectorised draws of valid seed constraints among the development items.

    Dev items are sorted by class, so "an item of class c" is a draw from one contiguous range
    and "an item of another class" a draw from the two ranges around it.
    """

    def __init__(self, labels: np.ndarray, dev_idx: np.ndarray, rng: np.random.Generator):
        labels, dev_idx = _check_inputs(labels, dev_idx)
        order = np.argsort(labels[dev_idx], kind="stable")
        self.items = dev_idx[order]
        dev_labels = labels[self.items]
        _, self.start, counts = np.unique(dev_labels, return_index=True, return_counts=True)
        self.class_of = np.repeat(np.arange(len(counts)), counts)
        self.count = counts
        self.rng = rng
        # An anchor needs a positive other than itself and a negative of another class.
        self.anchor_ok = np.flatnonzero((counts[self.class_of] >= 2) & (len(counts) >= 2))

    def triplets(self, n: int) -> np.ndarray:
        if len(self.anchor_ok) == 0:
            raise ValueError(_NO_TRIPLETS)
        rng, n_dev = self.rng, len(self.items)
        anchor = self.anchor_ok[rng.integers(len(self.anchor_ok), size=n)]
        cls = self.class_of[anchor]
        start, count = self.start[cls], self.count[cls]
        positive = start + rng.integers(count - 1)
        positive += positive >= anchor  # any other item of the class
        negative = rng.integers(n_dev - count)
        negative += np.where(negative >= start, count, 0)  # skip the anchor's class range
        return self.items[np.stack([anchor, positive, negative], axis=1)]

    def pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng, n_dev = self.rng, len(self.items)
        u = rng.integers(n_dev, size=n)
        v = rng.integers(n_dev - 1, size=n)
        v += v >= u
        return self.items[np.stack([u, v], axis=1)], self.class_of[u] == self.class_of[v]


def _check_inputs(labels: np.ndarray, dev_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels)
    dev_idx = np.asarray(dev_idx, dtype=np.int64)
    if labels.ndim != 1:
        raise ValueError(f"labels: expected a 1-d array, got shape {labels.shape}")
    if dev_idx.ndim != 1 or len(dev_idx) < 2:
        raise ValueError(f"dev_idx: expected at least 2 indices, got shape {dev_idx.shape}")
    if dev_idx.min() < 0 or dev_idx.max() >= len(labels):
        raise ValueError(f"dev_idx: indices must lie in [0, {len(labels)}) (len(labels))")
    if len(np.unique(dev_idx)) != len(dev_idx):
        raise ValueError("dev_idx: indices must be distinct")
    return labels, dev_idx


def distinct_constraints(labels: np.ndarray, dev_idx: np.ndarray, kind: str) -> int:
    """How many distinct constraints of ``kind`` the labels of the development items allow:
    ordered (anchor, positive, negative) triplets, or unordered pairs.

    >>> distinct_constraints(np.array([0, 0, 1]), np.arange(3), "triplet")  # (0,1,2), (1,0,2)
    2
    >>> distinct_constraints(np.array([0, 0, 1]), np.arange(3), "pair")
    3
    """
    labels, dev_idx = _check_inputs(labels, dev_idx)
    n = len(dev_idx)
    if kind == "pair":
        return n * (n - 1) // 2
    _, counts = np.unique(labels[dev_idx], return_counts=True)
    return int(np.sum(counts * (counts - 1) * (n - counts)))


def _check_n(n_constraints: int) -> int:
    return check_int(n_constraints, "n_constraints", minimum=0)


@dataclass(frozen=True)
class ClosureStream:
    """A closure-protocol stream with the origin of each constraint.

    ``constraints``: (N, 3) triplets or (N, 2) pairs of global indices, in stream order;
    ``similar``: (N,) bool for pairs, ``None`` for triplets; ``is_seed``: (N,) bool, False where
    the constraint was derived by closure.
    """

    constraints: np.ndarray
    similar: np.ndarray | None
    is_seed: np.ndarray


def closure_stream(
    labels: np.ndarray, dev_idx: np.ndarray, n_constraints: int, seed: int, kind: str
) -> ClosureStream:
    """Random seeds from the development set interleaved with their transitive closure.

    Exactly ``n_constraints`` constraints; see the module docstring for the protocol.

    >>> labels = np.array([0, 0, 0, 1, 1, 1])
    >>> s = closure_stream(labels, np.arange(6), n_constraints=6, seed=0, kind="triplet")
    >>> s.is_seed.tolist()
    [True, False, True, False, True, False]
    >>> bool(np.all(labels[s.constraints[:, 0]] == labels[s.constraints[:, 1]]))
    True
    """
    if kind not in PROTOCOL_KINDS:
        # Closure derives from class labels alone; a quadruplet needs a label hierarchy.
        hint = " (quadruplets come from a label hierarchy: streams.hierarchy)"
        raise ValueError(
            f"kind: expected 'triplet' or 'pair', got {kind!r}"
            + (hint if kind == "quadruplet" else "")
        )
    available = distinct_constraints(labels, dev_idx, kind)
    if _check_n(n_constraints) > available:  # the seeds would be drawn forever
        if available == 0 and kind == "triplet":
            raise ValueError(_NO_TRIPLETS)
        raise ValueError(
            f"n_constraints: the development items' labels allow {available} distinct {kind}s, "
            f"asked for {n_constraints}"
        )
    # Separate generators: the seeds do not depend on how the closure's draws are consumed.
    seed_rng, order_rng = _rng(seed, _CLOSURE).spawn(2)
    sampler = _DevSampler(labels, dev_idx, seed_rng)
    return interleave_closure(
        _seed_supply(sampler, kind), len(labels), kind, _check_n(n_constraints), order_rng
    )


def interleave_closure(
    seeds: Iterable[tuple[tuple[int, ...], bool]],
    n_items: int,
    kind: str,
    n_constraints: int,
    rng: np.random.Generator,
) -> ClosureStream:
    """Each seed, then the oldest pending derived constraint not yet in the stream, if any.

    ``seeds`` yields ``(constraint, similar)`` (``similar`` is ignored for triplets); a seed that
    repeats an earlier constraint is passed over. Stops at ``n_constraints`` constraints or when
    ``seeds`` runs out. ``rng`` orders the constraints that one seed made derivable.

    >>> seeds = [((0, 1, 2), False), ((3, 4, 5), False)]
    >>> interleave_closure(seeds, 6, "triplet", 10, np.random.default_rng(0)).constraints.tolist()
    [[0, 1, 2], [1, 0, 2], [3, 4, 5], [4, 3, 5]]
    """
    knowledge = ClosureKnowledge(n_items, kind, rng)
    width = 3 if kind == "triplet" else 2
    out = np.empty((n_constraints, width), dtype=np.int64)
    similar = np.zeros(n_constraints, dtype=bool)
    is_seed = np.zeros(n_constraints, dtype=bool)
    emitted: set[tuple[int, ...]] = set()
    pending = _PendingQueue(limit=n_constraints)
    n = 0
    for constraint, sim in seeds:
        if n == n_constraints:
            break
        if _key(constraint, kind) in emitted:
            continue  # seeds never repeat an earlier constraint either
        out[n], similar[n], is_seed[n] = constraint, sim, True
        emitted.add(_key(constraint, kind))
        n += 1
        for revelation in _reveal(knowledge, constraint, sim, record=not pending.full):
            pending.add(revelation)
        derived = pending.pop_new(emitted, kind)
        if derived is not None and n < n_constraints:
            out[n], similar[n] = derived
            emitted.add(_key(derived[0], kind))
            n += 1
    return ClosureStream(out[:n], similar[:n] if kind == "pair" else None, is_seed[:n])


class _PendingQueue:
    """Revelations not yet drawn dry, oldest first, and how many constraints they still hold.

    Revelations are disjoint, so an undrawn constraint is either new or a seed already in the
    stream: a stream of N constraints draws at most N times from the queue (once per derived
    constraint, once per skipped seed). Once ``limit = N`` constraints wait, nothing revealed
    later can ever be reached, and building those revelations is wasted work — quadratic once
    giant components with thousands of dissimilar links form.
    """

    def __init__(self, limit: int) -> None:
        self._queue: deque[Iterator[tuple[tuple[int, ...], bool]]] = deque()
        self.limit = limit
        self.undrawn = 0

    @property
    def full(self) -> bool:
        return self.undrawn >= self.limit

    def add(self, revelation: Revelation) -> None:
        self._queue.append(iter(revelation))
        self.undrawn += revelation.size

    def pop_new(
        self, emitted: set[tuple[int, ...]], kind: str
    ) -> tuple[tuple[int, ...], bool] | None:
        """The oldest pending constraint not yet in the stream (None when there is none)."""
        while self._queue:
            for constraint, sim in self._queue[0]:
                self.undrawn -= 1
                if _key(constraint, kind) not in emitted:
                    return constraint, sim
            self._queue.popleft()
        return None


def _seed_supply(sampler: _DevSampler, kind: str) -> Iterator[tuple[tuple[int, ...], bool]]:
    while True:
        if kind == "triplet":
            batch, sims = sampler.triplets(_SEED_BATCH).tolist(), [False] * _SEED_BATCH
        else:
            pairs, sim = sampler.pairs(_SEED_BATCH)
            batch, sims = pairs.tolist(), sim.tolist()
        yield from zip(map(tuple, batch), sims, strict=True)


def _reveal(
    knowledge: ClosureKnowledge, constraint: tuple[int, ...], similar: bool, record: bool
) -> list[Revelation]:
    """Reveal a seed's facts; the revelations of those that made new constraints derivable."""
    if len(constraint) == 3:
        anchor, positive, negative = constraint
        revelations = [
            knowledge.reveal_similar(anchor, positive, record),
            knowledge.reveal_dissimilar(anchor, negative, record),
        ]
    else:
        u, v = constraint
        reveal = knowledge.reveal_similar if similar else knowledge.reveal_dissimilar
        revelations = [reveal(u, v, record)]
    return [r for r in revelations if r is not None]


def _key(constraint: tuple[int, ...], kind: str) -> tuple[int, ...]:
    # A pair is unordered; a triplet's roles are not.
    if kind == "pair":
        u, v = constraint
        return (u, v) if u < v else (v, u)
    return constraint


def triplet_stream(
    labels: np.ndarray, dev_idx: np.ndarray, n_constraints: int, seed: int
) -> np.ndarray:
    """(N, 3) int64 triplets (anchor, positive, negative), seeds + closure, in stream order."""
    return closure_stream(labels, dev_idx, n_constraints, seed, kind="triplet").constraints


def pair_stream(
    labels: np.ndarray, dev_idx: np.ndarray, n_constraints: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """((N, 2) int64 pairs, (N,) bool similar), random seed pairs + closure, in stream order."""
    stream = closure_stream(labels, dev_idx, n_constraints, seed, kind="pair")
    assert stream.similar is not None
    return stream.constraints, stream.similar


def random_triplets(
    labels: np.ndarray, dev_idx: np.ndarray, n_constraints: int, seed: int
) -> np.ndarray:
    """(N, 3) int64 i.i.d. uniformly drawn valid triplets of development items, no closure."""
    n = _check_n(n_constraints)
    return _DevSampler(labels, dev_idx, _rng(seed, _RANDOM)).triplets(n)


def random_pairs(
    labels: np.ndarray, dev_idx: np.ndarray, n_constraints: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """((N, 2) int64, (N,) bool similar) i.i.d. random pairs of development items, no closure."""
    n = _check_n(n_constraints)
    return _DevSampler(labels, dev_idx, _rng(seed, _RANDOM)).pairs(n)
