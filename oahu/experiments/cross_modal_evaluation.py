"""Cross-modal retrieval and link prediction, measured as CSLP (Zhen and Zha, AAAI 2015,
Section 5) and the cross-view hashing literature measure them.

Queries of one modality rank the items of the other (the test split of both); an item is
relevant to a query when they share a class, or, for linked objects (:mod:`oahu.streams.linked`),
when a link joins them: the ``link_*`` functions take that relevance as a bool matrix.

* mAP@all: the mean over queries of the average precision of the whole ranking;
* Recall@K: the share of queries with a relevant item among their K nearest;
* link-prediction AUC: ROC AUC of the score −distance on a fixed, seeded sample of cross-modal
  pairs of test items, half of them linked (same class); for linked objects, the held-out links
  against as many unlinked pairs (:func:`held_out_link_auc`).

Rankings by Hamming distance break ties by a seeded random order, so that the many ties of short
codes count as the expected precision of a random order among them rather than in the favour of
an index order that may correlate with the labels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sklearn.metrics import roc_auc_score

from oahu.experiments.evaluation import verification_pairs
from oahu.learners.cross_modal.codes import hamming_distances

__all__ = [
    "held_out_link_auc",
    "link_auc",
    "link_mean_average_precision",
    "link_recall_at",
    "link_relevance",
    "mean_average_precision",
    "nearest_labels",
    "recall_at",
    "squared_distances",
]

_CHUNK = 512  # queries ranked at once: memory (chunk, n_gallery)


def _ranked_relevance(distances: np.ndarray, relevant: np.ndarray, seed: int) -> np.ndarray:
    """``relevant`` (queries, gallery) reordered by each query's ranking of the gallery."""
    if distances.dtype.kind in "iu":  # Hamming: random order among equal distances
        jitter = np.random.default_rng(seed).random(distances.shape)
        order = np.lexsort((jitter, distances), axis=1)
    else:
        order = np.argsort(distances, axis=1, kind="stable")
    return np.take_along_axis(relevant, order, axis=1)


# What is relevant to queries start..stop: (stop - start, n_gallery) bool.
Relevance = Callable[[int, int], np.ndarray]


def _same_class(query_labels: np.ndarray, gallery_labels: np.ndarray) -> Relevance:
    query_labels, gallery_labels = np.asarray(query_labels), np.asarray(gallery_labels)
    return lambda start, stop: query_labels[start:stop, None] == gallery_labels[None, :]


Ranking = tuple[np.ndarray, np.ndarray] | np.ndarray


def _blocks(ranking: Ranking, n: int):
    """(start, distances of queries start..start+_CHUNK) over a distance matrix, or computed a
    chunk at a time from (queries, gallery): packed codes (uint8) by Hamming distance, points by
    squared Euclidean distance. A chunk at a time: 35,000 queries against 35,000 items would be
    a 10 GB matrix at once."""
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        if not isinstance(ranking, tuple):
            yield start, ranking[start:stop]
            continue
        queries, gallery = ranking
        if queries.dtype == np.uint8:
            yield start, hamming_distances(queries[start:stop], gallery)
        else:
            yield start, squared_distances(queries[start:stop], gallery)


def mean_average_precision(
    ranking: Ranking,
    query_labels: np.ndarray,
    gallery_labels: np.ndarray,
    seed: int = 0,
) -> float:
    """mAP@all of every query's ranking of the whole gallery.

    ``ranking`` is a distance matrix (m, n) (smaller is closer; integer distances count as
    Hamming, ties broken at random), or a pair (queries, gallery) of packed codes (uint8, by
    Hamming distance) or of points (by squared Euclidean distance), ranked a chunk of queries at
    a time.

    >>> d = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    >>> round(mean_average_precision(d, np.array([0, 1]), np.array([0, 1, 0])), 4)
    0.6667
    >>> points = (np.array([[0.05], [0.35]]), np.array([[0.0], [0.2], [0.4]]))
    >>> round(mean_average_precision(points, np.array([0, 1]), np.array([0, 1, 0])), 4)
    0.6667
    """
    relevance = _same_class(query_labels, gallery_labels)
    return _mean_average_precision(ranking, len(query_labels), relevance, seed)


def link_mean_average_precision(ranking: Ranking, relevant: np.ndarray, seed: int = 0) -> float:
    """mAP@all as :func:`mean_average_precision`, an item relevant to a query where
    ``relevant`` (queries, gallery), bool, says so (a link joins them).

    >>> d = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    >>> relevant = np.array([[True, False, True], [False, True, False]])
    >>> round(link_mean_average_precision(d, relevant), 4)  # (1 + 2/3) / 2 and 1/2, averaged
    0.6667
    """
    relevant = np.asarray(relevant, dtype=bool)
    return _mean_average_precision(ranking, len(relevant), lambda a, b: relevant[a:b], seed)


def _mean_average_precision(ranking: Ranking, n: int, relevance: Relevance, seed: int) -> float:
    total = 0.0
    for start, block in _blocks(ranking, n):
        stop = start + len(block)
        rel = _ranked_relevance(block, relevance(start, stop), seed + start)
        hits = np.cumsum(rel, axis=1)
        precision = hits / np.arange(1, rel.shape[1] + 1)
        relevant = np.maximum(rel.sum(axis=1), 1)
        total += float(((precision * rel).sum(axis=1) / relevant).sum())
    return total / n if n else 0.0


def squared_distances(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """‖q − g‖² for every query and gallery point, (m, n) float64."""
    q = np.asarray(queries, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    out = (q * q).sum(1)[:, None] + (g * g).sum(1)[None, :] - 2.0 * q @ g.T
    return np.maximum(out, 0.0)


def recall_at(
    ranking: Ranking, query_labels: np.ndarray, gallery_labels: np.ndarray, ks=(1, 10)
) -> dict[str, float]:
    """Share of queries with an item of their class among their K nearest, for each K
    (``ranking`` as in :func:`mean_average_precision`).

    >>> d = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    >>> recall_at(d, np.array([0, 1]), np.array([0, 1, 0]), ks=(1, 2))
    {'1': 0.5, '2': 1.0}
    """
    relevance = _same_class(query_labels, gallery_labels)
    return _recall_at(ranking, len(query_labels), relevance, ks)


def link_recall_at(ranking: Ranking, relevant: np.ndarray, ks=(1, 10)) -> dict[str, float]:
    """Share of queries with a relevant item (``relevant``, as in
    :func:`link_mean_average_precision`) among their K nearest, for each K.

    >>> d = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    >>> link_recall_at(d, np.array([[False, True, False], [True, False, False]]), ks=(1, 2))
    {'1': 0.0, '2': 0.5}
    """
    relevant = np.asarray(relevant, dtype=bool)
    return _recall_at(ranking, len(relevant), lambda a, b: relevant[a:b], ks)


def _recall_at(ranking: Ranking, n: int, relevance: Relevance, ks) -> dict[str, float]:
    hits = {k: 0 for k in ks}
    for start, block in _blocks(ranking, n):
        rel = _ranked_relevance(block, relevance(start, start + len(block)), start)
        for k in ks:
            hits[k] += int(rel[:, :k].any(axis=1).sum())
    return {str(k): hits[k] / max(n, 1) for k in ks}


def nearest_labels(
    queries: np.ndarray, gallery: np.ndarray, gallery_labels: np.ndarray, k: int
) -> np.ndarray:
    """The labels of each query point's ``k`` nearest gallery points, nearest first, (m, k).

    >>> nearest_labels(np.array([[0.0]]), np.array([[3.0], [1.0], [2.0]]), np.array([7, 8, 9]), 2)
    array([[8, 9]])
    """
    out = []
    for _, block in _blocks((queries, gallery), len(queries)):
        out.append(np.asarray(gallery_labels)[np.argsort(block, axis=1, kind="stable")[:, :k]])
    return np.concatenate(out) if out else np.empty((0, k), dtype=np.asarray(gallery_labels).dtype)


def link_auc(
    points_a: np.ndarray,
    points_b: np.ndarray,
    labels: np.ndarray,
    n_pairs: int = 20_000,
    seed: int = 0,
) -> float:
    """Link-prediction AUC on cross-modal pairs: ``points_a[i]`` (modality A) against
    ``points_b[j]`` (modality B) of the same held-out objects (rows aligned with ``labels``),
    a seeded sample half linked (same class), scored by −‖a − b‖².

    >>> a = np.array([[0.0], [1.0], [0.1], [0.9]])
    >>> link_auc(a, a + 0.01, np.array([0, 1, 0, 1]), n_pairs=8)
    1.0
    """
    i, j, linked = verification_pairs(np.asarray(labels), n_pairs, seed)
    diff = np.asarray(points_a, dtype=np.float64)[i] - np.asarray(points_b, dtype=np.float64)[j]
    return float(roc_auc_score(linked, -(diff * diff).sum(axis=1)))


def link_relevance(links: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The objects of A and of B that ``links`` (k, 2) join, ascending, and which are linked:
    bool (objects of A, objects of B), the relevance of :func:`link_mean_average_precision`.

    >>> a, b, relevant = link_relevance(np.array([[7, 2], [3, 2], [7, 5]]))
    >>> a.tolist(), b.tolist(), relevant.tolist()
    ([3, 7], [2, 5], [[True, False], [True, True]])
    """
    a, b = np.unique(links[:, 0]), np.unique(links[:, 1])
    relevant = np.zeros((len(a), len(b)), dtype=bool)
    relevant[np.searchsorted(a, links[:, 0]), np.searchsorted(b, links[:, 1])] = True
    return a, b, relevant


def held_out_link_auc(
    points_a: np.ndarray, points_b: np.ndarray, relevant: np.ndarray, seed: int = 0
) -> float:
    """Link-prediction AUC of held-out links: every linked (i, j) of ``relevant`` (the rows of
    ``points_a`` against those of ``points_b``, bool) against as many unlinked pairs, a seeded
    sample without repeats (all of them where there are fewer), scored by −‖a − b‖².

    >>> a = np.array([[0.0], [1.0]])
    >>> held_out_link_auc(a, a + 0.01, np.eye(2, dtype=bool))
    1.0
    """
    relevant = np.asarray(relevant, dtype=bool)
    linked = np.flatnonzero(relevant)
    unlinked = np.flatnonzero(~relevant)
    rng = np.random.default_rng([seed, 0x11A])
    unlinked = rng.choice(unlinked, size=min(len(linked), len(unlinked)), replace=False)
    pairs = np.concatenate([linked, unlinked])
    i, j = np.unravel_index(pairs, relevant.shape)
    diff = np.asarray(points_a, dtype=np.float64)[i] - np.asarray(points_b, dtype=np.float64)[j]
    truth = np.r_[np.ones(len(linked), dtype=bool), np.zeros(len(unlinked), dtype=bool)]
    return float(roc_auc_score(truth, -(diff * diff).sum(axis=1)))
