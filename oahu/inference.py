"""Serving a learned metric (Section 3.6; SPEC §4): kNN classification, verification, retrieval.

A :class:`GalleryIndex` holds one exact faiss index per depth. Every query is answered from all
depths at once and the depths are combined with the hedge weights α:

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

import faiss
import numpy as np

from oahu.learner import Learner, MetricKind


class GalleryIndex:
    """Exact nearest-neighbour search over a gallery, one faiss flat index per depth.

    >>> emb = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]], dtype=np.float32)
    >>> index = GalleryIndex(emb, labels=np.array([0, 1, 1]))
    >>> dissim, pos = index.search(np.array([[[1.0, 0.0]]], dtype=np.float32), k=2)
    >>> pos.tolist(), [round(float(v), 4) for v in dissim.ravel()]
    ([[[0, 2]]], [0.0, 0.8944])
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        labels: np.ndarray | None = None,
        metric: MetricKind = "l2",
        ids: np.ndarray | None = None,
    ) -> None:
        emb = np.ascontiguousarray(embeddings, dtype=np.float32)
        if emb.ndim != 3:
            raise ValueError(f"embeddings: expected (n_depths, n_items, dim), got {emb.shape}")
        if metric not in ("l2", "ip"):
            raise ValueError(f"metric: must be 'l2' or 'ip', got {metric!r}")
        n_items = emb.shape[1]
        for name, arr in (("labels", labels), ("ids", ids)):
            if arr is not None and len(arr) != n_items:
                raise ValueError(f"{name}: expected {n_items} entries, got {len(arr)}")
        self.metric = metric
        self.labels = None if labels is None else np.asarray(labels)
        # Fixed per index, so classification need not recompute them per query batch.
        self.classes, self.class_of_item = (
            (None, None) if labels is None else np.unique(self.labels, return_inverse=True)
        )
        self.ids = None if ids is None else np.asarray(ids)
        self.n_depths, self.n_items, self.dim = emb.shape
        factory = faiss.IndexFlatIP if metric == "ip" else faiss.IndexFlatL2
        self._indexes = []
        for depth in emb:
            index = factory(self.dim)
            index.add(depth)
            self._indexes.append(index)

    @classmethod
    def from_learner(
        cls,
        learner: Learner,
        x: np.ndarray,
        labels: np.ndarray | None = None,
        ids: np.ndarray | None = None,
    ) -> GalleryIndex:
        """Embed ``x`` with ``learner`` (gallery role) and index it."""
        return cls(learner.embed(x, role="gallery"), labels, learner.metric, ids)

    def _check_queries(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``queries`` as float32 (D, n, dim), or ``ValueError`` naming what is wrong."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 3 or q.shape[0] != self.n_depths or q.shape[2] != self.dim:
            raise ValueError(
                f"queries: expected ({self.n_depths}, n, {self.dim}), got {tuple(q.shape)}"
            )
        if k < 1:
            raise ValueError(f"k: must be >= 1, got {k}")
        return q

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest gallery items per depth: ``(dissimilarity, position)``, each (D, Q, k).

        Dissimilarity is the Euclidean distance for ``"l2"`` and the negated inner product for
        ``"ip"``; positions are rows of the gallery (−1 where the gallery has fewer than k items).
        """
        q = self._check_queries(queries, k)
        dissim = np.empty((self.n_depths, q.shape[1], k), dtype=np.float32)
        pos = np.empty((self.n_depths, q.shape[1], k), dtype=np.int64)
        for depth, (index, depth_q) in enumerate(zip(self._indexes, q, strict=True)):
            scores, found = index.search(depth_q, k)
            if self.metric == "ip":
                dissim[depth] = -scores
            else:  # faiss returns squared L2 distances
                dissim[depth] = np.sqrt(np.maximum(scores, 0.0))
            pos[depth] = found
        missing = pos < 0
        dissim[missing] = np.inf
        return dissim, pos


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


def classify(
    index: GalleryIndex, queries: np.ndarray, alpha: np.ndarray, k: int = 5
) -> Classification:
    """kNN classification of Eq. 23-25 over all depths (ties go to the smallest label)."""
    if index.classes is None:
        raise ValueError("index: the gallery has no labels to classify with")
    dissim, pos = index.search(queries, k)
    scores = neighbour_scores(dissim, alpha)
    classes, class_of_item = index.classes, index.class_of_item
    n_queries = queries.shape[1]
    neighbour_class = class_of_item[np.maximum(pos, 0)]
    query_of = np.broadcast_to(np.arange(n_queries)[None, :, None], pos.shape)
    flat = (query_of * len(classes) + neighbour_class).ravel()
    class_scores = np.bincount(
        flat, weights=scores.ravel(), minlength=n_queries * len(classes)
    ).reshape(n_queries, len(classes))
    return Classification(classes[class_scores.argmax(axis=1)], classes, class_scores)


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
