"""Scoring neighbours over all depths (Section 3.6 of the paper; docs/algorithms.md, "Serving"):
kNN classification, verification, retrieval, Recall@K.

A gallery index (:mod:`oahu.inference.index`) finds each query's k nearest gallery items at every
depth; the depths are then combined with the hedge weights α:

* classification, Eq. 23-25: each of the k(L+1) neighbours scores
  exp(−(D − d_min)/(d_max − d_min))·α(l) for its label, with d_min, d_max over that depth's
  k neighbours (exponent 0 when they are equal);
* verification, Eq. 26: P = Σ_l α(l)·[D(l)/2 < T], similar iff P ≥ 0.5; the continuous score −Σ α D
  serves ROC analysis;
* retrieval, Eq. 27: the same candidates sorted by score, the top k distinct items.

For a similarity learner (``metric == "ip"``, e.g. OASIS) the index ranks by inner product and the
dissimilarity used in Eq. 25 is the negated similarity, so the same scoring code serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oahu.inference.index import GalleryIndex
from oahu.learner import MetricKind


def neighbour_scores(dissim: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Eq. 23-24: S = exp(−(D − d_min)/(d_max − d_min))·α(l) per neighbour, shape (D, Q, k).

    d_min and d_max are taken over each depth's k neighbours of a query; where they are equal the
    exponent is 0. Missing neighbours (infinite dissimilarity) score 0.

    >>> d = np.array([[[0.0, 1.0, 2.0]], [[0.5, 0.5, 0.5]]])
    >>> s = neighbour_scores(d, np.array([0.25, 0.75]))
    >>> np.round(s, 4).tolist()
    [[[0.25, 0.1516, 0.092]], [[0.75, 0.75, 0.75]]]
    """
    finite = np.isfinite(dissim)
    d = np.where(finite, dissim, np.nan)
    d_min = np.nanmin(d, axis=-1, keepdims=True)
    span = np.nanmax(d, axis=-1, keepdims=True) - d_min
    with np.errstate(invalid="ignore", divide="ignore"):
        exponent = np.where(span > 0, (d - d_min) / span, 0.0)
    scores = np.exp(-exponent) * np.asarray(alpha, dtype=np.float64)[:, None, None]
    return np.where(finite, scores, 0.0)


@dataclass(frozen=True)
class Classification:
    labels: np.ndarray  # (Q,) predicted label per query
    classes: np.ndarray  # (C,) the gallery's classes, sorted
    scores: np.ndarray  # (Q, C) Eq. 25 class scores
    # (D, Q) what each depth alone predicts (Eq. 23-25 with all of α on it), when asked for
    depth_labels: np.ndarray | None = None


def classify(
    index: GalleryIndex,
    queries: np.ndarray,
    alpha: np.ndarray,
    k: int = 5,
    per_depth: bool = False,
    exclude: np.ndarray | None = None,
) -> Classification:
    """kNN classification of Eq. 23-25 over all depths (ties go to the smallest label); with
    ``per_depth``, also each depth's own prediction from the same neighbours (which shows a head
    that is worse than the others, e.g. a collapsed one). ``exclude`` optionally gives, per
    query, one gallery row that is never its neighbour (leave-one-out, when the gallery holds
    the queries themselves).

    >>> from oahu.inference import make_index
    >>> gallery = np.array([[[0.0], [1.0], [10.0]], [[0.0], [9.0], [10.0]]], np.float32)
    >>> index = make_index("exact", gallery, np.array([0, 0, 1]), "l2")
    >>> result = classify(index, np.array([[[1.1]], [[9.1]]], np.float32), np.array([0.5, 0.5]),
    ...                   k=1, per_depth=True)
    >>> result.depth_labels.tolist()
    [[0], [0]]
    """
    if index.classes is None:
        raise ValueError("index: the gallery has no labels to classify with")
    if exclude is None:
        dissim, pos = index.search(queries, k)
    else:
        dissim, pos = _search_excluding(index, queries, k, np.asarray(exclude))
    scores = neighbour_scores(dissim, alpha)
    classes, class_of_item = index.classes, index.class_of_item
    n_queries = queries.shape[1]
    neighbour_class = class_of_item[np.maximum(pos, 0)]
    query_of = np.broadcast_to(np.arange(n_queries)[None, :, None], pos.shape)
    flat = (query_of * len(classes) + neighbour_class).reshape(len(pos), -1)

    def predict(depth_scores: np.ndarray, depth_flat: np.ndarray) -> np.ndarray:
        class_scores = np.bincount(
            depth_flat.ravel(), weights=depth_scores.ravel(), minlength=n_queries * len(classes)
        ).reshape(n_queries, len(classes))
        return class_scores

    class_scores = predict(scores, flat)
    depth_labels = None
    if per_depth:
        alone = neighbour_scores(dissim, np.ones(len(pos)))
        depth_labels = np.stack(
            [classes[predict(alone[l], flat[l]).argmax(axis=1)] for l in range(len(pos))]
        )
    return Classification(classes[class_scores.argmax(axis=1)], classes, class_scores, depth_labels)


def _search_excluding(
    index: GalleryIndex, queries: np.ndarray, k: int, exclude: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each depth's k nearest gallery rows other than the query's ``exclude`` row."""
    dissim, pos = index.search(queries, k + 1)
    drop = pos == exclude[None, :, None]
    drop[..., -1] |= ~drop.any(axis=-1)  # the row was not among them: the (k+1)-th goes
    keep = np.argsort(drop, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(dissim, keep, -1), np.take_along_axis(pos, keep, -1)


@dataclass(frozen=True)
class Verification:
    similar: np.ndarray  # (P,) bool: P ≥ 0.5
    vote: np.ndarray  # (P,) Σ α(l)·p_l of Eq. 26
    score: np.ndarray  # (P,) continuous: −Σ α D (l2) or Σ α S (ip); higher = more similar


def verify(
    emb_a: np.ndarray,
    emb_b: np.ndarray,
    alpha: np.ndarray,
    threshold: float = 0.5,
    metric: MetricKind = "l2",
) -> Verification:
    """Pair verification of Eq. 26 for embedded pairs (each (D, P, E)).

    For ``"l2"`` a depth votes similar when D(l)/2 < T (T in [0, 1]); for ``"ip"`` when the
    similarity exceeds T.
    """
    a = np.asarray(alpha, dtype=np.float64)[:, None]
    if metric == "ip":
        per_depth = np.einsum("dpe,dpe->dp", emb_a, emb_b)
        votes = per_depth > threshold
        score = (a * per_depth).sum(0)
    else:
        per_depth = np.linalg.norm(emb_a - emb_b, axis=-1)
        votes = per_depth / 2.0 < threshold
        score = -(a * per_depth).sum(0)
    vote = (a * votes).sum(0)
    return Verification(vote >= 0.5, vote, score)


@dataclass(frozen=True)
class Retrieval:
    positions: np.ndarray  # (Q, k) gallery rows, best first; −1 pads when fewer were found
    scores: np.ndarray  # (Q, k) Eq. 27 scores (an item keeps its best score over depths)


def retrieve(
    index: GalleryIndex,
    queries: np.ndarray,
    alpha: np.ndarray,
    k: int = 5,
    exclude: np.ndarray | None = None,
) -> Retrieval:
    """Top-k distinct gallery items by the Eq. 23 score over all depths (Eq. 27).

    ``exclude`` optionally gives, per query, one gallery row never to return (the query itself
    when the gallery contains the queries).
    """
    extra = 0 if exclude is None else 1
    dissim, pos = index.search(queries, k + extra)
    n_queries = queries.shape[1]
    score = neighbour_scores(dissim, alpha)
    # Candidates of all depths side by side: (Q, D·k').
    cand_pos = pos.transpose(1, 0, 2).reshape(n_queries, -1)
    cand_score = score.transpose(1, 0, 2).reshape(n_queries, -1)
    valid = cand_pos >= 0
    if exclude is not None:
        valid &= cand_pos != np.asarray(exclude)[:, None]
    query_of = np.broadcast_to(np.arange(n_queries)[:, None], cand_pos.shape)
    q, p, s = query_of[valid], cand_pos[valid], cand_score[valid]
    # Keep each (query, item) once, at its best score.
    order = np.lexsort((-s, p, q))
    q, p, s = q[order], p[order], s[order]
    first = np.ones(len(q), dtype=bool)
    first[1:] = (q[1:] != q[:-1]) | (p[1:] != p[:-1])
    q, p, s = q[first], p[first], s[first]
    # Rank by score within each query (stable on position for equal scores).
    order = np.lexsort((p, -s, q))
    q, p, s = q[order], p[order], s[order]
    starts = np.searchsorted(q, np.arange(n_queries))
    rank = np.arange(len(q)) - starts[q]
    keep = rank < k
    positions = np.full((n_queries, k), -1, dtype=np.int64)
    scores = np.zeros((n_queries, k), dtype=np.float64)
    positions[q[keep], rank[keep]] = p[keep]
    scores[q[keep], rank[keep]] = s[keep]
    return Retrieval(positions, scores)


def recall_at(
    retrieved_labels: np.ndarray, query_labels: np.ndarray, ks: tuple[int, ...] = (1, 2, 4, 8)
) -> dict[int, float]:
    """Recall@K (Section 4.5.2): share of queries with their class among the first K retrieved.

    >>> recall_at(np.array([[1, 0], [0, 0]]), np.array([0, 1]), ks=(1, 2))
    {1: 0.0, 2: 0.5}
    """
    hits = retrieved_labels == np.asarray(query_labels)[:, None]
    return {k: float(hits[:, :k].any(axis=1).mean()) for k in ks}
