"""Graded label-hierarchy streams: quadruplets that rank pairs of items by how far apart they sit
in a two-level label hierarchy (class within group, :mod:`streams.groupings`).

A quadruplet ``(a, b, c, d)`` says D(a, b) < D(c, d) (Law, Thome and Cord, IJCV 2016;
:mod:`oahu.constraint_kinds`). Under a grouping of the classes, two items are at hierarchy
distance 0 when they share a class, 1 when they share a group but not a class, and 2 when their
groups differ (:func:`hierarchy_distance`). :func:`build_hierarchy_stream` draws quadruplets of
two levels, each saying that the pair closer in the hierarchy is closer under the metric:

* ``fine``: ``(a, b)`` of the same class, ``(c, d)`` of the same group but different classes;
* ``coarse``: ``(a, b)`` of the same group but different classes, ``(c, d)`` of different
  groups.

This is what a triplet of the paper's protocol cannot say: a triplet (anchor, positive,
negative) separates the anchor's class from any other, whatever their groups, so a metric learnt
from triplets owes nothing to the hierarchy.

The protocol, deterministic per seed:

* the development/test split is :func:`streams.protocol.split_dev_test`'s, that of
  ``build_stream(dataset, n, seed)`` for the same seed, so that both kinds of stream are
  evaluated on the same test items;
* exactly ``round(fine_share * N)`` quadruplets are fine and the others coarse (half each by
  default), at seeded random positions in the stream;
* each pair is drawn from the development items: its first item uniformly among the items that
  have a partner of the pair's relation (same class; same group, other class; other group), its
  second uniformly among those partners; the two pairs of a quadruplet are drawn independently
  (they may share an item). Every quadruplet is drawn, none derived: there is no transitive
  closure for quadruplets, so there are no repeats to avoid either (repeats are possible, as in
  the paper's ``random`` protocol).

Comparing kinds at equal annotation cost: a quadruplet references 4 items, a triplet 3, so N
quadruplets reference as many items as ``ceil(4N / 3)`` triplets
(:func:`matched_triplet_count`); :func:`matched_triplet_stream` builds that triplet stream by the
paper's protocol with the same seed (and so the same split).

>>> s = build_hierarchy_stream("digits", n_constraints=8, seed=0, hierarchy="parity")
>>> len(s), s.kind, s.meta["hierarchy"], s.meta["mix"]
(8, 'quadruplet', 'parity', {'fine_share': 0.5, 'fine': 4, 'coarse': 4})
>>> t = matched_triplet_stream("digits", n_quadruplets=8, seed=0)
>>> len(t), t.kind, bool((t.dev_idx == s.dev_idx).all())  # ceil(32 / 3) = 11
(11, 'triplet', True)
"""

from __future__ import annotations

import numbers

import numpy as np

from oahu.streams.benchmark_stream import build_stream, protocol_meta
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset
from oahu.streams.groupings import Grouping, grouping_for
from oahu.streams.protocol import _check_n, _rng, split_dev_test
from oahu.streams.stream_file import ConstraintStream

__all__ = [
    "HIERARCHY_LEVELS",
    "HIERARCHY_PROTOCOL",
    "build_hierarchy_stream",
    "hierarchy_distance",
    "matched_triplet_count",
    "matched_triplet_stream",
]

#: The levels of a hierarchy quadruplet, by the hierarchy distance of its closer pair (a, b).
HIERARCHY_LEVELS: tuple[str, ...] = ("fine", "coarse")
#: ``meta["protocol"]`` of a hierarchy stream.
HIERARCHY_PROTOCOL = "hierarchy"
# The tag of this module's draws, apart from those of streams.protocol (0, 1, 2), streams.drift
# (16 and up) and streams.noise (32).
_HIERARCHY = 48
# Pair relations, by hierarchy distance: same class, same group but another class, other group.
_SAME_CLASS, _SAME_GROUP, _OTHER_GROUP = 0, 1, 2


def hierarchy_distance(
    grouping: Grouping, labels_u: np.ndarray, labels_v: np.ndarray
) -> np.ndarray:
    """int64 hierarchy distance of the class labels ``labels_u`` and ``labels_v`` (same shape)
    under ``grouping``: 0 for the same class, 1 for the same group but different classes, 2 for
    different groups. A hierarchy quadruplet (a, b, c, d) holds when the distance of (a, b) is
    below that of (c, d); its level (:data:`HIERARCHY_LEVELS`) is the distance of (a, b).

    >>> garment = grouping_for("fashion-mnist", "garment")  # tops {0, 2, 4, 6}, footwear {5, 7, 9}
    >>> hierarchy_distance(garment, np.array([0, 0, 0]), np.array([0, 2, 5])).tolist()
    [0, 1, 2]
    """
    u, v = np.asarray(labels_u), np.asarray(labels_v)
    if u.shape != v.shape:
        raise ValueError(f"labels_u, labels_v: shapes differ, {u.shape} and {v.shape}")
    same_group = grouping.coarse(u) == grouping.coarse(v)
    return np.where(u == v, 0, np.where(same_group, 1, 2)).astype(np.int64)


class _PairSampler:
    """Vectorised draws of pairs of development items at a given hierarchy distance.

    The items are sorted by (group, class), so that each class and each group is one contiguous
    range of positions: "another item of my class" is a draw from one range, "an item of my
    group but another class" from the group's range around the class's, "an item of another
    group" from everything around the group's.
    """

    def __init__(
        self,
        fine: np.ndarray,
        coarse: np.ndarray,
        dev_idx: np.ndarray,
        grouping_name: str,
        rng: np.random.Generator,
    ) -> None:
        self.items = dev_idx[np.lexsort((fine[dev_idx], coarse[dev_idx]))]
        self.grouping_name = grouping_name
        self.rng = rng
        # A class lies in one group, so each class's positions are contiguous too: the first
        # occurrence of a label is the start of its range.
        self.class_start, self.class_count = _ranges(fine[self.items])
        self.group_start, self.group_count = _ranges(coarse[self.items])
        n = len(self.items)
        #: Per relation, how many partners each position has.
        self.partners = (
            self.class_count - 1,
            self.group_count - self.class_count,
            n - self.group_count,
        )

    def check(self, relation: int) -> None:
        """``ValueError`` when no development item has a partner at hierarchy distance
        ``relation``."""
        if np.any(self.partners[relation] > 0):
            return
        name = self.grouping_name
        raise ValueError(
            (
                "labels: no class has two development items: no pair of the same class to draw",
                f"hierarchy: no group of {name!r} holds development items of two classes: no pair "
                "of the same group but different classes to draw",
                f"hierarchy: the development items all lie in one group of {name!r}: no pair of "
                "different groups to draw",
            )[relation]
        )

    def pairs(self, relation: int, size: int) -> np.ndarray:
        """(size, 2) int64 pairs of development items at hierarchy distance ``relation``."""
        if size == 0:
            return np.empty((0, 2), dtype=np.int64)
        self.check(relation)
        partners = self.partners[relation]
        eligible = np.flatnonzero(partners > 0)
        first = eligible[self.rng.integers(len(eligible), size=size)]
        second = self.rng.integers(partners[first])  # the how-many-th partner, per row
        c_start, c_count = self.class_start[first], self.class_count[first]
        g_start, g_count = self.group_start[first], self.group_count[first]
        if relation == _SAME_CLASS:
            second += c_start
            second += second >= first  # any other item of the class
        elif relation == _SAME_GROUP:
            second += g_start
            second += np.where(second >= c_start, c_count, 0)  # skip the first item's class
        else:
            second += np.where(second >= g_start, g_count, 0)  # skip the first item's group
        return self.items[np.stack([first, second], axis=1)]


def _ranges(sorted_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, count) of the contiguous range of each position's label, per position."""
    _, start, inverse, count = np.unique(
        sorted_labels, return_index=True, return_inverse=True, return_counts=True
    )
    return start[inverse], count[inverse]


def _check_share(fine_share: float) -> float:
    ok = isinstance(fine_share, numbers.Real) and not isinstance(fine_share, bool)
    if not (ok and 0 <= float(fine_share) <= 1):
        raise ValueError(f"fine_share: must be a number in [0, 1], got {fine_share!r}")
    return float(fine_share)


def build_hierarchy_stream(
    dataset: str | Dataset,
    n_constraints: int,
    seed: int,
    hierarchy: str | Grouping,
    fine_share: float = 0.5,
) -> ConstraintStream:
    """A quadruplet stream of ``n_constraints`` hierarchy quadruplets (module docstring) from the
    development split of ``dataset``: ``round(fine_share * n_constraints)`` fine ones (a pair of
    one class closer than a pair of one group, different classes), the others coarse (a pair of
    one group, different classes, closer than a pair of different groups), at seeded random
    positions. ``hierarchy`` names one of the dataset's groupings
    (:data:`streams.groupings.GROUPINGS`) or is a :class:`Grouping` of its classes. The same
    arguments give the same stream; the split is that of ``build_stream(dataset, ..., seed)``.

    ``meta`` holds the paper protocol's keys (``protocol`` ``"hierarchy"``, ``n_seeds`` = N:
    every quadruplet is drawn, none derived), ``hierarchy`` (the grouping's name), ``groups``
    (group name -> classes) and ``mix`` (``fine_share`` and the counts ``fine`` and
    ``coarse``).

    >>> s = build_hierarchy_stream("digits", n_constraints=100, seed=0, hierarchy="shape")
    >>> s.constraints.shape, s.meta["mix"]
    ((100, 4), {'fine_share': 0.5, 'fine': 50, 'coarse': 50})
    >>> g = grouping_for("digits", "shape")
    >>> a, b, c, d = s.y[s.constraints.T]
    >>> near, far = hierarchy_distance(g, a, b), hierarchy_distance(g, c, d)
    >>> bool(np.all(near < far)), np.bincount(near).tolist()  # 50 fine, 50 coarse
    (True, [50, 50])
    >>> again = build_hierarchy_stream("digits", 100, seed=0, hierarchy=g)  # same seed, same stream
    >>> bool((again.constraints == s.constraints).all())
    True
    """
    n = _check_n(n_constraints)
    fine_share = _check_share(fine_share)
    if isinstance(hierarchy, Grouping):
        grouping = hierarchy
    elif isinstance(hierarchy, str):
        # Checked before the dataset loads.
        name = dataset if isinstance(dataset, str) else dataset.name
        grouping = grouping_for(name, hierarchy)
    else:
        raise ValueError(
            f"hierarchy: expected a grouping's name or a Grouping, got {type(hierarchy).__name__}"
        )
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    dev_idx, test_idx = split_dev_test(ds.n_items, seed)
    coarse = grouping.coarse(ds.y)
    n_fine = round(fine_share * n)
    rng = _rng(seed, _HIERARCHY)
    sampler = _PairSampler(ds.y, coarse, dev_idx, grouping.name, rng)
    # Refuse an impossible stream before drawing any of it.
    for level, count in enumerate((n_fine, n - n_fine)):
        if count:
            sampler.check(level)
            sampler.check(level + 1)
    is_coarse = rng.permutation(np.arange(n) >= n_fine)
    constraints = np.empty((n, 4), dtype=np.int64)
    for level, rows in enumerate((~is_coarse, is_coarse)):
        count = int(rows.sum())
        constraints[rows, :2] = sampler.pairs(level, count)  # the closer pair (a, b)
        constraints[rows, 2:] = sampler.pairs(level + 1, count)  # the farther pair (c, d)
    meta = {
        **protocol_meta(ds.name, seed, HIERARCHY_PROTOCOL, n, n),
        "hierarchy": grouping.name,
        "groups": {group: list(classes) for group, classes in grouping.groups.items()},
        "mix": {"fine_share": fine_share, "fine": n_fine, "coarse": n - n_fine},
    }
    return ConstraintStream(
        ds.X,
        ds.y,
        dev_idx,
        test_idx,
        "quadruplet",
        constraints,
        None,
        meta,
        image_shape=ds.image_shape,
    )


def matched_triplet_count(n_quadruplets: int) -> int:
    """How many triplets reference as many items as ``n_quadruplets`` quadruplets do, rounded
    up: ``ceil(4N / 3)`` (so ``3 * ceil(4N / 3)`` item references, 4N to 4N + 2).

    >>> [matched_triplet_count(n) for n in (0, 1, 2, 3, 300)]
    [0, 2, 3, 4, 400]
    """
    return -(-4 * _check_n(n_quadruplets) // 3)


def matched_triplet_stream(
    dataset: str | Dataset, n_quadruplets: int, seed: int, protocol: str = "closure"
) -> ConstraintStream:
    """The triplet stream to compare ``n_quadruplets`` hierarchy quadruplets with at equal item
    references: ``build_stream(dataset, matched_triplet_count(n_quadruplets), seed, "triplet",
    protocol)``, the paper's protocol with the same seed (so the same development/test split as
    :func:`build_hierarchy_stream`), its ``meta`` also holding ``matched_quadruplets``
    (``n_quadruplets``).

    >>> t = matched_triplet_stream("digits", n_quadruplets=30, seed=0)
    >>> len(t), t.meta["matched_quadruplets"], t.meta["protocol"]
    (40, 30, 'closure')
    """
    n_triplets = matched_triplet_count(n_quadruplets)
    stream = build_stream(dataset, n_triplets, seed, "triplet", protocol)
    stream.meta["matched_quadruplets"] = int(n_quadruplets)  # the stream's own dict, still JSON
    return stream
