"""Cross-modal retrieval and link prediction, measured as CSLP (Zhen and Zha, AAAI 2015,
Section 5) and the cross-view hashing literature measure them.

Queries of one modality rank the items of the other (the test split of both); an item is
relevant to a query when they share a class.

* mAP@all: the mean over queries of the average precision of the whole ranking;
* Recall@K: the share of queries with a relevant item among their K nearest;
* link-prediction AUC: ROC AUC of the score −distance on a fixed, seeded sample of cross-modal
  pairs of test items, half of them linked (same class).

Rankings by Hamming distance break ties by a seeded random order, so that the many ties of short
codes count as the expected precision of a random order among them rather than in the favour of
an index order that may correlate with the labels.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from oahu.experiments.evaluation import verification_pairs
from oahu.learners.cross_modal.codes import hamming_distances

__all__ = [
    "link_auc",
    "mean_average_precision",
    "nearest_labels",
    "recall_at",
    "squared_distances",
]

_CHUNK = 512  # queries ranked at once: memory (chunk, n_gallery)


def _ranked_relevance(
    distances: np.ndarray, query_labels: np.ndarray, gallery_labels: np.ndarray, seed: int
) -> np.ndarray:
    if distances.dtype.kind in "iu":  # Hamming: random order among equal distances
        jitter = np.random.default_rng(seed).random(distances.shape)
        order = np.lexsort((jitter, distances), axis=1)
    else:
        order = np.argsort(distances, axis=1, kind="stable")
    return gallery_labels[order] == query_labels[:, None]


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
    query_labels = np.asarray(query_labels)
    gallery_labels = np.asarray(gallery_labels)
    total = 0.0
    n = len(query_labels)
    for start, block in _blocks(ranking, n):
        stop = start + len(block)
        rel = _ranked_relevance(block, query_labels[start:stop], gallery_labels, seed + start)
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
    query_labels, gallery_labels = np.asarray(query_labels), np.asarray(gallery_labels)
    hits = {k: 0 for k in ks}
    for start, block in _blocks(ranking, len(query_labels)):
        labels = query_labels[start : start + len(block)]
        rel = _ranked_relevance(block, labels, gallery_labels, start)
        for k in ks:
            hits[k] += int(rel[:, :k].any(axis=1).sum())
    n = max(len(query_labels), 1)
    return {str(k): hits[k] / n for k in ks}


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
