"""Drifting benchmark streams (concept drift): the paper's stream protocol
(:mod:`streams.protocol`) with the concept changing partway through the stream.

A drifting stream has two concepts: 0, in force at the start, and 1, the final concept. Each
constraint is drawn from one of them: ``mask[i]`` is True when constraint ``i`` comes from the
new concept (:func:`drift_mask`). Each concept's constraints come from its own protocol stream
(closure or random, with its own tagged seed) over the development items under that concept's
labels, and the two are interleaved by the mask. The new concept's closure starts fresh at the
drift: what the old concept's seeds revealed does not carry over (it may no longer hold).

Kinds, with ``M`` = ``drift_at`` and ``W`` = ``drift_width``:

* ``abrupt``: concept 0 is class identity, concept 1 a coarse grouping of the classes
  (:mod:`streams.groupings`), by default the dataset's drift default (``season`` for
  fashion-mnist, ``shape`` for digits: :data:`streams.groupings.DRIFT_GROUPINGS`); constraint
  ``i`` is from concept 1 when ``i >= M``.
* ``gradual``: the same concepts; constraint ``i`` is from concept 0 before ``M``, from concept 1
  from ``M + W`` on, and in between from concept 1 with probability ``(i - M) / W`` (a seeded
  draw): the new concept's share rises linearly over ``W`` constraints.
* ``covariate``: the concept (class identity) stays, the items change. Every item gets a copy
  rotated by 90 degrees (:func:`rotate90`), stored after the ``n`` originals (rows ``n .. 2n-1``,
  copy ``i + n`` of item ``i``); constraints before ``M`` use the originals, from ``M`` on the
  copies. Both splits hold the originals and their copies.
* ``novel``: a seeded ~30% of the classes (:func:`novel_classes`) is absent before ``M``: the
  constraints before ``M`` are drawn among the development items of the other classes, from
  ``M`` on among all of them. The concept (class identity) stays.

Only gradual drift has a width: the other kinds refuse a non-zero one rather than ignore it.

The stream records the drift: ``concepts`` (the concept of each constraint),
``concept_labels`` (each item's label under each concept; ``y`` is the final concept's, so that
replay and evaluation, which read ``y``, evaluate the concept in force at the end), the item
sets evaluation and ``prepare`` use (covariate: the rotated copies are the final gallery and
queries, the original development items what exists at the start; novel: the start holds no
novel-class item), and ``meta["drift"]``. A stream whose drift comes at its end (``M = N``)
still ends under the new concept: it is in force from the next constraint on.
"""

from __future__ import annotations

import math

import numpy as np

from oahu.checks import check_choice, check_int
from oahu.streams.benchmark_stream import protocol_meta
from oahu.streams.closure import PROTOCOL_KINDS
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset
from oahu.streams.groupings import Grouping, grouping_for
from oahu.streams.protocol import (
    _check_n,
    _rng,
    closure_stream,
    random_pairs,
    random_triplets,
    split_dev_test,
)
from oahu.streams.stream_file import KINDS, PROTOCOLS, ConstraintStream

__all__ = [
    "DRIFTS",
    "NOVEL_SHARE",
    "build_drift_stream",
    "drift_mask",
    "novel_classes",
    "rotate90",
]

#: The kinds of drift, in the order ``oahu make-stream --drift`` lists them.
DRIFTS: tuple[str, ...] = ("abrupt", "gradual", "covariate", "novel")
#: The share of the classes that novel drift holds back until the drift (rounded up).
NOVEL_SHARE = 0.3
# Tags of this module's draws, apart from those of streams.protocol (0, 1, 2): the split of a
# drifting stream is the plain stream's, the rest is drawn independently of it.
_GRADUAL, _NOVEL, _CONCEPT = 16, 17, 18


def drift_mask(
    n_constraints: int, drift_at: int, drift_width: int = 0, seed: int = 0
) -> np.ndarray:
    """(N,) bool, True where constraint ``i`` is drawn from the new concept: from ``drift_at``
    on, or with probability ``(i - drift_at) / drift_width`` in the ``drift_width`` constraints
    from ``drift_at`` on (a draw seeded by ``seed``).

    >>> drift_mask(6, drift_at=2).astype(int).tolist()
    [0, 0, 1, 1, 1, 1]
    >>> m = drift_mask(1000, drift_at=100, drift_width=800, seed=0)
    >>> bool(m[:101].any()), bool(m[900:].all()), bool(0.2 < m[200:400].mean() < 0.3)
    (False, True, True)
    """
    n = _check_n(n_constraints)
    if not 0 <= int(drift_at) <= n:
        raise ValueError(
            f"drift_at: the drift must come at a constraint in [0, {n}] (n_constraints), "
            f"got {drift_at!r}"
        )
    check_int(drift_width, "drift_width", minimum=0)
    at, width = int(drift_at), int(drift_width)
    i = np.arange(n)
    if width == 0:
        return i >= at
    # One draw per constraint whatever M and W: the mask of one seed does not depend on which
    # constraints fall inside the transition.
    share = np.clip((i - at) / width, 0.0, 1.0)
    return _rng(seed, _GRADUAL).random(n) < share


def rotate90(X: np.ndarray) -> np.ndarray:
    """Each row of ``X`` read as a square image (row-major), rotated by 90 degrees
    counter-clockwise (``np.rot90``) and flattened again; float32.

    >>> rotate90(np.array([[1, 2, 3, 4]])).tolist()  # [[1, 2], [3, 4]] -> [[2, 4], [1, 3]]
    [[2.0, 4.0, 1.0, 3.0]]
    """
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"X: expected shape (n_items, n_features), got {X.shape}")
    n, d = X.shape
    side = math.isqrt(d)
    if side * side != d:
        raise ValueError(
            f"X: rotating needs square images, but {d} features per item is not a square number"
        )
    return np.ascontiguousarray(np.rot90(X.reshape(n, side, side), axes=(1, 2)).reshape(n, d))


def novel_classes(labels: np.ndarray, seed: int) -> np.ndarray:
    """The classes novel drift holds back until the drift: a seeded choice of ceil(30%) of
    the classes in ``labels``, at least 1 and at most all but 2 (triplets need two classes);
    sorted, int64.

    >>> novel_classes(np.arange(10), seed=0).size, novel_classes(np.arange(3), seed=0).size
    (3, 1)
    """
    classes = np.unique(np.asarray(labels))
    if len(classes) < 3:
        raise ValueError(
            f"labels: novel drift needs at least 3 classes (one held back, two for the "
            f"constraints before the drift), got {len(classes)}"
        )
    n_novel = min(max(math.ceil(NOVEL_SHARE * len(classes)), 1), len(classes) - 2)
    chosen = _rng(seed, _NOVEL).choice(classes, size=n_novel, replace=False)
    return np.sort(chosen).astype(np.int64)


def _concept_stream(
    labels: np.ndarray,
    dev_idx: np.ndarray,
    n_constraints: int,
    seed: int,
    concept: int,
    kind: str,
    protocol: str,
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """One concept's (constraints, similar, n_seeds) by ``protocol`` under ``labels``."""
    width = 3 if kind == "triplet" else 2
    if n_constraints == 0:  # the concept never comes up: nothing to draw (nor to fail on)
        return np.empty((0, width), np.int64), np.empty(0, bool) if kind == "pair" else None, 0
    # A seed of its own per concept: the two streams are independent of each other and of the
    # plain stream of ``seed``, whatever each one consumes.
    concept_seed = int(_rng(seed, _CONCEPT + concept).integers(2**62))
    if protocol == "random":
        sampler = random_triplets if kind == "triplet" else random_pairs
        drawn = sampler(labels, dev_idx, n_constraints, concept_seed)
        constraints, similar = (drawn, None) if kind == "triplet" else drawn
        return constraints, similar, len(constraints)
    stream = closure_stream(labels, dev_idx, n_constraints, concept_seed, kind)
    return stream.constraints, stream.similar, int(stream.is_seed.sum())


def build_drift_stream(
    dataset: str | Dataset,
    n_constraints: int,
    seed: int,
    drift: str,
    drift_at: int,
    drift_width: int = 0,
    kind: str = "triplet",
    protocol: str = "closure",
    grouping: Grouping | None = None,
) -> ConstraintStream:
    """A benchmark stream of ``n_constraints`` constraints whose concept drifts at constraint
    ``drift_at`` (see the module docstring for the kinds); the dev/test split is that of
    ``build_stream(dataset, n_constraints, seed)``. ``grouping`` (abrupt and gradual drift)
    defaults to the dataset's drift default (``grouping_for(dataset name)``: season for
    fashion-mnist, shape for digits); pass e.g. ``grouping_for("fashion-mnist", "garment")``
    for another of :data:`streams.groupings.GROUPINGS`.

    >>> s = build_drift_stream("digits", n_constraints=100, seed=0, drift="abrupt", drift_at=60)
    >>> len(s), int(s.concepts[:60].max()), int(s.concepts[60:].min())
    (100, 0, 1)
    >>> s.meta["drift"]["concepts"], sorted(set(s.y.tolist()))  # y: the final concept's
    (['class', 'grouping:shape'], [0, 1, 2])
    >>> parity = grouping_for("digits", "parity")
    >>> s = build_drift_stream("digits", 100, 0, "abrupt", drift_at=60, grouping=parity)
    >>> s.meta["drift"]["concepts"], s.meta["drift"]["groups"]["even"]
    (['class', 'grouping:parity'], [0, 2, 4, 6, 8])
    >>> s = build_drift_stream("digits", 100, seed=0, drift="covariate", drift_at=60)
    >>> s.n_items, int(s.constraints[:60].max()) < 1797 <= int(s.constraints[60:].min())
    (3594, True)
    """
    if kind not in PROTOCOL_KINDS:
        # Each concept's constraints come from the paper's protocol, which draws triplets and
        # pairs only (quadruplets come from a label hierarchy, streams.hierarchy).
        raise ValueError(
            f"kind: drifting streams are {' or '.join(PROTOCOL_KINDS)} streams (of the kinds "
            f"{', '.join(KINDS)}), got {kind!r}"
        )
    check_choice(protocol, "protocol", PROTOCOLS)
    check_choice(drift, "drift", DRIFTS)
    if drift == "gradual" and int(drift_width) <= 0:
        raise ValueError(f"drift_width: gradual drift needs a width > 0, got {drift_width!r}")
    if drift != "gradual" and int(drift_width) != 0:
        raise ValueError(
            f"drift_width: only gradual drift has a width; {drift} drift takes 0, got "
            f"{drift_width!r}"
        )
    mask = drift_mask(n_constraints, drift_at, drift_width, seed)
    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    dev_idx, test_idx = split_dev_test(ds.n_items, seed)
    X, y = ds.X, ds.y
    gallery_idx = query_idx = start_idx = None
    facts: dict[str, object]
    if drift in ("abrupt", "gradual"):
        grouping = grouping_for(ds.name) if grouping is None else grouping
        labels = [y, grouping.coarse(y)]
        pools = [dev_idx, dev_idx]
        names = ["class", f"grouping:{grouping.name}"]
        facts = {"groups": {name: list(classes) for name, classes in grouping.groups.items()}}
    elif drift == "covariate":
        n = ds.n_items
        X = np.concatenate([ds.X, rotate90(ds.X)])
        y = np.concatenate([ds.y, ds.y])
        labels = [y, y]
        pools = [dev_idx, dev_idx + n]
        # The originals exist at the start; evaluation at the end is on the rotated items.
        start_idx, gallery_idx, query_idx = dev_idx, dev_idx + n, test_idx + n
        dev_idx = np.concatenate([dev_idx, dev_idx + n])
        test_idx = np.concatenate([test_idx, test_idx + n])
        names = ["class", "class:rotate90"]
        facts = {"shift": "rotate90"}
    else:
        novel = novel_classes(y, seed)
        known = dev_idx[~np.isin(y[dev_idx], novel)]
        labels = [y, y]
        pools = [known, dev_idx]
        start_idx = known  # the novel classes' items do not exist before the drift
        names = ["class:known", "class"]
        facts = {"novel_classes": novel.tolist()}
    counts = [int((~mask).sum()), int(mask.sum())]
    parts = [
        _concept_stream(labels[c], pools[c], counts[c], seed, c, kind, protocol) for c in (0, 1)
    ]
    width = 3 if kind == "triplet" else 2
    constraints = np.empty((len(mask), width), dtype=np.int64)
    constraints[~mask], constraints[mask] = parts[0][0], parts[1][0]
    similar = None
    if kind == "pair":
        similar = np.empty(len(mask), dtype=bool)
        similar[~mask], similar[mask] = parts[0][1], parts[1][1]
    meta = {
        **protocol_meta(ds.name, seed, protocol, n_constraints, parts[0][2] + parts[1][2]),
        "drift": {
            "kind": drift,
            "at": int(drift_at),
            "width": int(drift_width),
            "concepts": names,
            **facts,
        },
    }
    return ConstraintStream(
        X,
        labels[1],
        dev_idx,
        test_idx,
        kind,
        constraints,
        similar,
        meta,
        concepts=mask.astype(np.int8),
        concept_labels=np.stack(labels),
        gallery_idx=gallery_idx,
        query_idx=query_idx,
        start_idx=start_idx,
        # a square image rotated by 90 degrees keeps its shape
        image_shape=ds.image_shape,
    )
