"""Label noise on constraint streams: a seeded share of the constraints made wrong.

Real annotation streams contain mistakes; a benchmark stream built by the paper's protocol
(:mod:`streams.protocol`) contains none. :func:`add_noise` returns a copy of a stream in which
exactly ``round(rate * N)`` constraints are wrong:

* a triplet ``(anchor, positive, negative)`` gets its positive and negative swapped: it now says
  the anchor is closer to the item of the other class;
* a pair ``(u, v, similar)`` gets ``similar`` flipped;
* a quadruplet ``(a, b, c, d)``, which says D(a, b) < D(c, d), gets its two pairs swapped,
  ``(c, d, a, b)``: it now says the pair that was farther is the closer one (a triplet is the
  quadruplet ``(anchor, positive, anchor, negative)``, and swapping its pairs is swapping its
  positive and negative).

The items of every constraint stay the same, only what the constraint says about them changes,
and the stream records which constraints were made wrong in its optional field ``flipped``
(streams/FORMAT.md), so that a benchmark can tell how many of the wrong constraints a learner
down-weighted, and ``meta["noise"]`` says how (``model``, ``rate``, ``flipped``, ``seed``).

Two noise models (:data:`NOISE_MODELS`) choose the wrong constraints:

* ``uniform``: a uniform sample without replacement: every constraint is equally likely to be
  wrong, as with an annotator who errs at random;
* ``confusable``: a sample without replacement with probability proportional to how confusable
  the constraint's classes are, as with an annotator who errs where the classes look alike
  (a shirt for a T-shirt, a coat for a pullover, a sandal for a sneaker). Confusability is
  measured on the data: the centroids of the classes over the development items
  (``X[dev_idx]``, labels ``y``), the squared Euclidean distance ``d(a, b)`` between the
  centroids of classes ``a`` and ``b``, and the weight ``w(a, b) = exp(-d(a, b) / s)``, where
  ``s`` is the median of the distances between distinct classes (so that the weights do not
  depend on the scale of the features). A triplet weighs ``w(class(anchor), class(negative))``:
  swapping it claims the anchor is closer to the negative's class. A dissimilar pair weighs
  ``w(class(u), class(v))``: flipping it claims the two classes are the same. A similar pair
  weighs ``max w(class(u), c)`` over the other classes ``c``: flipping it claims ``u``'s class is
  another one, most plausibly the one it is most easily taken for. A quadruplet weighs
  ``w(class(c), class(d)) / w(class(a), class(b)) = exp(-(d(c, d) - d(a, b)) / s)``: swapping
  it claims ``c`` and ``d`` are closer than ``a`` and ``b``, most plausible where the classes of
  the farther pair look more alike than those of the closer one. Where ``a`` and ``b`` share a
  class (``w = 1``) this is the triplet's weight, so a triplet weighs the same as the
  quadruplet ``(anchor, positive, anchor, negative)``. :func:`class_confusability` gives the
  weights.

On a drifting stream (:mod:`streams.drift`; noise is added after the drift is built) each
constraint's classes are those of the concept it was drawn from (``concept_labels[concepts]``),
with each concept's weights computed under its own labels. The choice is seeded, by default by
the stream's own seed (``meta["seed"]``), with draws of their own: the same stream and seed give
the same noisy stream whatever else was drawn.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers

import numpy as np

from oahu.checks import check_choice, check_number
from oahu.streams.protocol import _rng
from oahu.streams.stream_file import ConstraintStream

__all__ = ["NOISE_MODELS", "add_noise", "class_confusability"]

#: The noise models, in the order ``oahu make-stream --noise-model`` lists them.
NOISE_MODELS: tuple[str, ...] = ("uniform", "confusable")
# The tag of this module's draws, apart from those of streams.protocol (0, 1, 2) and
# streams.drift (16 and up, one per concept).
_NOISE = 32
# A quadruplet (a, b, c, d) made wrong: (c, d, a, b).
_SWAP_PAIRS = [2, 3, 0, 1]


def class_confusability(
    X: np.ndarray, labels: np.ndarray, dev_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(classes, W): the classes among the development items, sorted, and ``W[i, j] = w(classes[i],
    classes[j]) = exp(-d / s)``, ``d`` the squared Euclidean distance between the two classes'
    centroids over the development items, ``s`` the median of ``d`` over distinct classes (1 on
    the diagonal; all 1 when there is a single class or all centroids coincide).

    >>> X = np.array([[0.0], [0.2], [1.0], [1.2], [5.0], [5.2]]); y = np.array([0, 0, 1, 1, 2, 2])
    >>> classes, W = class_confusability(X, y, np.arange(6))
    >>> classes.tolist(), W.round(3).tolist()  # centroids 0.1, 1.1, 5.1: d = 1, 16, 25; s = 16
    ([0, 1, 2], [[1.0, 0.939, 0.21], [0.939, 1.0, 0.368], [0.21, 0.368, 1.0]])
    """
    log_w, classes = _log_confusability(np.asarray(X), np.asarray(labels), np.asarray(dev_idx))
    return classes, np.exp(log_w)


def _log_confusability(
    X: np.ndarray, labels: np.ndarray, dev_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(log W, classes) of :func:`class_confusability`, in the log domain (no underflow)."""
    dev_labels = labels[dev_idx]
    classes = np.unique(dev_labels)
    # One mean per class (a loop over the classes, not the items): float64 sums, exact enough
    # and independent of how a matrix product would be split over threads.
    centroids = np.stack(
        [X[dev_idx[dev_labels == c]].mean(axis=0, dtype=np.float64) for c in classes]
    )
    d = ((centroids[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=-1)
    off_diagonal = d[np.triu_indices(len(classes), k=1)]
    scale = float(np.median(off_diagonal)) if off_diagonal.size else 0.0
    if not scale > 0:  # one class, or centroids that all coincide: nothing is more confusable
        return np.zeros_like(d), classes
    return -d / scale, classes


def _constraint_log_weights(stream: ConstraintStream) -> np.ndarray:
    """(N,) log confusability weight of each constraint (see the module docstring)."""
    if stream.concepts is None or stream.concept_labels is None:
        concept_labels, concepts = stream.y[None, :], np.zeros(len(stream), dtype=np.int64)
    else:
        concept_labels, concepts = stream.concept_labels, stream.concepts.astype(np.int64)
    # One class index space for all concepts: row k of ``log_w`` is concept k's weights over it,
    # -inf for a class without development items under concept k (no constraint uses one).
    all_classes, dense = np.unique(concept_labels, return_inverse=True)
    dense = dense.reshape(concept_labels.shape)
    n_classes = len(all_classes)
    log_w = np.full((len(concept_labels), n_classes, n_classes), -np.inf)
    for k, labels in enumerate(dense):  # one pass per concept (at most a few)
        concept_log_w, present = _log_confusability(stream.X, labels, stream.dev_idx)
        log_w[k, present[:, None], present[None, :]] = concept_log_w
    # The class of each role of each constraint, under the concept it was drawn from.
    cls = dense[concepts[:, None], stream.constraints]
    if stream.kind == "triplet":
        return log_w[concepts, cls[:, 0], cls[:, 2]]
    if stream.kind == "quadruplet":
        # w(c, d) / w(a, b): how much more alike the farther pair's classes look.
        return log_w[concepts, cls[:, 2], cls[:, 3]] - log_w[concepts, cls[:, 0], cls[:, 1]]
    assert stream.similar is not None
    # A similar pair weighs u's class against the class it is most easily taken for.
    others = log_w.copy()
    others[:, np.arange(n_classes), np.arange(n_classes)] = -np.inf
    closest = others.max(axis=2)
    closest[np.isneginf(closest)] = 0.0  # a class with no other class: any weight will do
    return np.where(
        stream.similar, closest[concepts, cls[:, 0]], log_w[concepts, cls[:, 0], cls[:, 1]]
    )


def _check_arguments(
    stream: ConstraintStream, rate: float, model: str, seed: int | None
) -> tuple[float, int]:
    if not isinstance(stream, ConstraintStream):
        raise TypeError(f"stream: expected a ConstraintStream, got {type(stream).__name__}")
    check_number(rate, "rate", low=0.0, high=1.0, closed="left")
    check_choice(model, "model", NOISE_MODELS)
    if stream.flipped is not None or "noise" in stream.meta:
        raise ValueError(
            "stream: already has noise (flipped or meta['noise']); add noise to the clean stream"
        )
    if seed is None:
        seed = stream.meta.get("seed")
        if seed is None:
            raise ValueError("seed: the stream's meta has no seed to default to; pass one")
        what = "meta['seed']"
    else:
        what = "seed"
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"{what}: expected a non-negative integer, got {seed!r}")
    return float(rate), int(seed)


def add_noise(
    stream: ConstraintStream, rate: float, model: str = "uniform", seed: int | None = None
) -> ConstraintStream:
    """A copy of ``stream`` in which exactly ``round(rate * len(stream))`` constraints, chosen by
    ``model`` (one of :data:`NOISE_MODELS`) with ``seed`` (default: the stream's
    ``meta["seed"]``), are wrong: triplets with positive and negative swapped, pairs with
    ``similar`` flipped, quadruplets ``(a, b, c, d)`` with their pairs swapped, ``(c, d, a, b)``;
    ``flipped`` marks them and ``meta["noise"]`` records
    ``{"model", "rate", "flipped", "seed"}``. ``rate`` is in [0, 1); 0 gives an equal copy with
    nothing flipped. ``stream`` is left as it is; the copy shares its items (``X``, ``y``, the
    splits and item sets), the constraints, ``similar`` and ``meta`` are its own. A stream that
    already has noise is refused.

    >>> from oahu.streams import build_stream
    >>> clean = build_stream("digits", n_constraints=100, seed=0)
    >>> noisy = add_noise(clean, rate=0.1, model="confusable")
    >>> int(noisy.flipped.sum()), noisy.meta["noise"]
    (10, {'model': 'confusable', 'rate': 0.1, 'flipped': 10, 'seed': 0})
    >>> was, now = clean.constraints[noisy.flipped], noisy.constraints[noisy.flipped]
    >>> bool((now[:, 1] == was[:, 2]).all() and (now[:, 2] == was[:, 1]).all())
    True
    >>> bool((noisy.constraints[~noisy.flipped] == clean.constraints[~noisy.flipped]).all())
    True
    """
    rate, seed = _check_arguments(stream, rate, model, seed)
    n = len(stream)
    n_flipped = round(rate * n)
    rng = _rng(seed, _NOISE)
    if model == "uniform" or n_flipped == 0:
        chosen = (
            rng.choice(n, size=n_flipped, replace=False) if n_flipped else np.empty(0, np.int64)
        )
    else:
        # Weighted sampling without replacement (Efraimidis & Spirakis): the k smallest of
        # E_i / w_i, E_i ~ Exp(1), are a draw of k constraints one at a time with probability
        # proportional to w among those not yet drawn. In logs, so that tiny weights stay > 0.
        keys = np.log(rng.exponential(size=n)) - _constraint_log_weights(stream)
        chosen = np.argpartition(keys, n_flipped - 1)[:n_flipped]
    flipped = np.zeros(n, dtype=bool)
    flipped[chosen] = True
    constraints = stream.constraints.copy()
    similar = None if stream.similar is None else stream.similar.copy()
    if stream.kind == "triplet":
        constraints[flipped, 1], constraints[flipped, 2] = (
            stream.constraints[flipped, 2],
            stream.constraints[flipped, 1],
        )
    elif stream.kind == "quadruplet":
        constraints[flipped] = stream.constraints[flipped][:, _SWAP_PAIRS]
    else:
        assert similar is not None
        similar[flipped] = ~similar[flipped]
    noise = {"model": model, "rate": rate, "flipped": int(n_flipped), "seed": seed}
    return dataclasses.replace(
        stream,
        constraints=constraints,
        similar=similar,
        meta={**copy.deepcopy(stream.meta), "noise": noise},
        flipped=flipped,
    )
