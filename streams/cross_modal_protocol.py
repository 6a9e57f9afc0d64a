"""The CSLP protocol (Zhen and Zha, AAAI 2015): a cross-modal constraint stream drawn from the
class labels of objects seen in two views, or from the links between two modalities' own
objects (streams/FORMAT.md, "Cross-modal streams"). The stream it builds, and its files, are
:mod:`streams.cross_modal`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from oahu.checks import check_int, check_number
from oahu.streams.cross_modal import (
    CROSS_MODAL_FORMAT,
    FORMAT_VERSION,
    LINKED_FORMAT_VERSION,
    PAIR,
    PROTOCOL,
    TRIPLET,
    CrossModalStream,
)
from oahu.streams.linked import LinkedObjects, draw_linked, split_linked
from oahu.streams.protocol import _rng, split_dev_test
from oahu.streams.views import TwoViews

__all__ = ["build_cross_modal_stream"]

# The stream's draws get a tag of their own: the split reads the seed's bits under another
# (streams.protocol), and a stream from the same bits would correlate with it.
_CSLP = 64


def build_cross_modal_stream(
    views: TwoViews | LinkedObjects,
    n_constraints: int,
    seed: int,
    pair_share: float = 0.5,
    within_share: float = 0.0,
) -> CrossModalStream:
    """A cross-modal stream of ``n_constraints`` constraints drawn from class labels, or from
    the links of :class:`~oahu.streams.linked.LinkedObjects` (the CSLP protocol, whose
    constraints come from class information or from given links; streams/FORMAT.md,
    "Cross-modal streams").

    From labels:

    * The objects are split 1:1 into development and test objects as
      :func:`oahu.streams.protocol.split_dev_test` splits them: the same split as
      ``build_stream`` of a single view with the same seed.
    * Exactly ``round(pair_share * N)`` constraints are pairs and the others triplets, at
      seeded random positions; independently, exactly ``round(within_share * N)`` (none by
      default) have all their items in one modality (A or B with probability 1/2), the others
      are cross-modal. Every item is a development object.
    * A cross-modal pair: its first item in A or B (probability 1/2), its second in the other
      modality; linked (same class) with probability 1/2; the first item uniform, the second
      uniform among the objects of the first's class (linked; the same object, seen in the
      other modality, included: the most natural link) or of the other classes (unlinked).
    * A cross-modal triplet: the anchor in A or B (probability 1/2), uniform; the positive and
      the negative in the other modality, the positive uniform in the anchor's class (the
      anchor's own object included), the negative uniform in the other classes.
    * A constraint within one modality is drawn the same way, except that a linked pair's
      second item and a triplet's positive are another object than the first (the same object
      in the same modality says nothing); its first item is then uniform among the objects of
      classes with two development objects or more.

    Every constraint is label-consistent: a pair's ``similar`` is ``y[u] == y[v]``, a triplet
    has ``y[anchor] == y[positive] != y[negative]``. The same arguments give the same stream.

    From links: each modality's objects are split 1:1 by
    :func:`oahu.streams.linked.split_linked`, the pairs and triplets are placed and the first
    item's modality drawn as above, and the objects by :func:`oahu.streams.linked.draw_linked`
    from the development links (both objects development objects) alone: a linked pair is one
    of them, an unlinked pair two development objects that are not linked, a triplet's
    positive is linked to its anchor and its negative is not. Links only join objects of two
    modalities, and there are no labels: ``within_share`` must be 0.

    >>> rng = np.random.default_rng(0)
    >>> views = TwoViews(("a", "b"), (rng.random((20, 3)), rng.random((20, 5))),
    ...                  np.arange(20) % 4)
    >>> s = build_cross_modal_stream(views, n_constraints=10, seed=0)
    >>> len(s), s.meta["n_pairs"], s.meta["n_triplets"], s.meta["n_cross"], len(s.dev_idx)
    (10, 5, 5, 10, 10)
    >>> bool(np.all(s.modality[:, 0] != s.modality[:, 1]))  # every constraint cross-modal
    True
    """
    if not isinstance(views, TwoViews | LinkedObjects):
        raise ValueError(f"views: expected TwoViews or LinkedObjects, got {type(views).__name__}")
    n = check_int(n_constraints, "n_constraints", minimum=0)
    seed = check_int(seed, "seed", minimum=0)
    pair_share = check_number(pair_share, "pair_share", low=0.0, high=1.0)
    within_share = check_number(within_share, "within_share", low=0.0, high=1.0)
    if isinstance(views, LinkedObjects) and within_share > 0:
        raise ValueError(
            f"within_share: linked objects have no labels and links join objects of two "
            f"modalities, so there is nothing to draw a constraint within one modality from; "
            f"expected 0, got {within_share}"
        )
    n_pairs, n_within = round(pair_share * n), round(within_share * n)
    is_pair, within, linked, first_modality, rng = _placement(n, n_pairs, n_within, seed)
    meta = _meta(views, seed, n, pair_share, within_share, is_pair, within, linked)
    if isinstance(views, LinkedObjects):
        (dev_idx, test_idx), (dev_b, test_b) = split_linked(views.sizes, views.links, seed)
        objects = draw_linked(
            views.links, views.sizes, (dev_idx, dev_b), is_pair, linked, first_modality, rng
        )
        y, extra = None, {"links": views.links, "dev_idx_b": dev_b, "test_idx_b": test_b}
    else:
        dev_idx, test_idx = split_dev_test(views.n_objects, seed)
        objects = _draw(views.y, dev_idx, is_pair, linked, within, rng)
        y, extra = views.y, {}
        if views.class_names:
            meta["class_names"] = list(views.class_names)
    stream = CrossModalStream(
        views.names,
        views.X,
        y,
        dev_idx,
        test_idx,
        objects,
        _modality(first_modality, is_pair, within),
        np.where(is_pair, PAIR, TRIPLET),
        linked,
        meta,
        **extra,
    )
    if stream.is_linked:
        _count_links(stream, seed)
    return stream


def _placement(
    n: int, n_pairs: int, n_within: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.random.Generator]:
    """Which constraints are pairs, which within one modality, which pairs linked, each first
    item's modality, and the generator the objects are then drawn with."""
    rng = _rng(seed, _CSLP)
    is_pair = rng.permutation(np.arange(n) < n_pairs)
    within = rng.permutation(np.arange(n) < n_within)
    linked = is_pair & (rng.random(n) < 0.5)
    first_modality = rng.integers(2, size=n)
    return is_pair, within, linked, first_modality, rng


def _modality(first: np.ndarray, is_pair: np.ndarray, within: np.ndarray) -> np.ndarray:
    second = np.where(within, first, 1 - first)
    return np.stack([first, second, np.where(is_pair, -1, second)], axis=1)


def _meta(
    data: TwoViews | LinkedObjects,
    seed: int,
    n: int,
    pair_share: float,
    within_share: float,
    is_pair: np.ndarray,
    within: np.ndarray,
    linked: np.ndarray,
) -> dict[str, Any]:
    n_pairs, n_within = int(is_pair.sum()), int(within.sum())
    return {
        "format": CROSS_MODAL_FORMAT,
        "format_version": FORMAT_VERSION,
        "dataset": data.dataset,
        "views": list(data.names),
        "derived": isinstance(data, TwoViews) and data.derived,
        "seed": seed,
        "protocol": PROTOCOL,
        "n_constraints": n,
        "pair_share": pair_share,
        "within_share": within_share,
        "n_pairs": n_pairs,
        "n_triplets": n - n_pairs,
        "n_cross": n - n_within,
        "n_within": n_within,
        "n_linked": int(linked.sum()),
    }


def _count_links(stream: CrossModalStream, seed: int) -> None:
    """Count a stream of linked objects' links of each part into its meta; without a test link
    there is nothing to evaluate, which is an error."""
    assert stream.links is not None
    n_links, n_dev, n_test = len(stream.links), len(stream.dev_links), len(stream.test_links)
    if not n_test:
        raise ValueError(
            f"links: with seed {seed}, no link joins two test objects, and the evaluation holds "
            "out those; another seed splits the objects otherwise"
        )
    stream.meta.update(
        format_version=LINKED_FORMAT_VERSION,
        relevance="links",
        n_links=n_links,
        n_dev_links=n_dev,
        n_test_links=n_test,
        n_unused_links=n_links - n_dev - n_test,
    )


def _draw(
    y: np.ndarray,
    dev_idx: np.ndarray,
    is_pair: np.ndarray,
    linked: np.ndarray,
    within: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The objects of every constraint, (N, 3), drawn at once from per-class index tables.

    The development objects are sorted by class, so "an object of class c" is a draw from one
    contiguous range and "an object of another class" a draw from the two ranges around it.
    """
    items = dev_idx[np.argsort(y[dev_idx], kind="stable")]
    _, start, count = np.unique(y[items], return_index=True, return_counts=True)
    if len(count) < 2:
        raise ValueError(
            "y: the development objects are all of one class; cross-modal constraints need two"
        )
    n, n_dev = len(is_pair), len(items)
    class_of = np.repeat(np.arange(len(count)), count)
    # A linked pair or a triplet within one modality needs a second object of the first's class.
    other_object = within & (~is_pair | linked)
    has_partner = np.flatnonzero(count[class_of] >= 2)
    if other_object.any() and len(has_partner) == 0:
        raise ValueError(
            "within_share: a linked pair or a triplet within one modality needs a class with 2 "
            "development objects, and no class has"
        )
    first = np.where(
        other_object,
        has_partner[rng.integers(max(len(has_partner), 1), size=n)] if len(has_partner) else 0,
        rng.integers(n_dev, size=n),
    )
    cls = class_of[first]
    lo, size = start[cls], count[cls]
    same = lo + rng.integers(size)  # the first object itself included
    another = lo + rng.integers(np.maximum(size - 1, 1))
    another += another >= first  # any other object of the class
    other = rng.integers(n_dev - size)
    other += np.where(other >= lo, size, 0)  # skip the first's class range
    partner = np.where(other_object, another, same)
    second = np.where(is_pair & ~linked, other, partner)
    third = np.where(is_pair, -1, items[other])
    return np.stack([items[first], items[second], third], axis=1)
