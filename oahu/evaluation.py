"""Evaluating a learned metric the way the paper does (Section 4).

The development split is the kNN gallery and the test split the queries: error rate and macro-F1 of
Eq. 23-25 classification, ROC AUC of the continuous verification score on a fixed sample of test
pairs, and Recall@K (Section 4.5.2) retrieving within the test split with each query excluded.

Two diagnostics per depth come with them, so that a head gone wrong shows: the error of each
depth's kNN alone (``depth_error``), and the spread of each depth's gallery embeddings, the
root-mean-square distance to their centroid (``depth_spread``; 0 for a head that maps everything
to one point, about 1 for unit embeddings spread over the sphere).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sklearn.metrics import f1_score, roc_auc_score

from oahu.inference import Classification, classify, make_index, recall_at, retrieve, verify
from oahu.learner import Learner

RECALL_KS: tuple[int, ...] = (1, 2, 4, 8)


@dataclass
class Evaluation:
    error: float
    macro_f1: float
    auc: float
    recall_at: dict[int, float] = field(default_factory=dict)
    depth_error: list[float] = field(default_factory=list)
    depth_spread: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["recall_at"] = {str(k): v for k, v in self.recall_at.items()}
        return out


def verification_pairs(
    labels: np.ndarray, n_pairs: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A fixed, seeded sample of item pairs, half similar and half dissimilar.

    Returns positions ``(i, j)`` into ``labels`` and whether each pair is similar.

    >>> i, j, same = verification_pairs(np.array([0, 0, 1, 1, 1]), n_pairs=6, seed=0)
    >>> same.tolist(), bool((i != j).all())
    ([True, True, True, False, False, False], True)
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    n_similar = n_pairs // 2
    # Similar pairs: a random item, then a random other member of its class.
    order = np.argsort(labels, kind="stable")
    classes, starts, counts = np.unique(labels[order], return_index=True, return_counts=True)
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels))
    eligible = np.flatnonzero(counts[np.searchsorted(classes, labels)] > 1)
    first = rng.choice(eligible, size=n_similar)
    cls = np.searchsorted(classes, labels[first])
    offset = rng.integers(0, counts[cls] - 1)
    offset += offset >= rank[first] - starts[cls]  # skip the item itself
    second = order[starts[cls] + offset]
    # Dissimilar pairs: rejection-sample until the labels differ.
    n_dissimilar = n_pairs - n_similar
    u = rng.integers(0, len(labels), size=n_dissimilar)
    v = rng.integers(0, len(labels), size=n_dissimilar)
    same = labels[u] == labels[v]
    while same.any():
        v[same] = rng.integers(0, len(labels), size=int(same.sum()))
        same = labels[u] == labels[v]
    i = np.concatenate([first, u])
    j = np.concatenate([second, v])
    return i, j, labels[i] == labels[j]


def knn_classify(
    learner: Learner,
    gallery_x: np.ndarray,
    gallery_y: np.ndarray,
    queries: np.ndarray,
    k: int = 5,
    index_kind: str = "exact",
    per_depth: bool = False,
) -> Classification:
    """Eq. 23-25 kNN classification of embedded ``queries`` (n_depths, n, dim) against the
    gallery items ``gallery_x`` with labels ``gallery_y``: what :func:`evaluate` measures, and
    what ``/v1/classify`` answers from a snapshot of the same learner and gallery."""
    gallery = learner.embed(gallery_x, role="gallery")
    index = make_index(index_kind, gallery, np.asarray(gallery_y), learner.metric)
    return classify(index, queries, learner.alpha, k=k, per_depth=per_depth)


def classification_quality(
    learner: Learner,
    gallery_x: np.ndarray,
    gallery_y: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    k: int = 5,
    index_kind: str = "exact",
) -> dict[str, Any]:
    """Eq. 23-25 kNN classification of embedded ``queries`` against the gallery, scored:
    ``error``, ``macro_f1``, each depth's own ``depth_error`` and the gallery's ``depth_spread``."""
    gallery = learner.embed(gallery_x, role="gallery")
    index = make_index(index_kind, gallery, np.asarray(gallery_y), learner.metric)
    found = classify(index, queries, learner.alpha, k=k, per_depth=True)
    return {
        "error": float(np.mean(found.labels != query_labels)),
        "macro_f1": float(f1_score(query_labels, found.labels, average="macro")),
        "depth_error": [float(np.mean(labels != query_labels)) for labels in found.depth_labels],
        "depth_spread": embedding_spread(gallery),
    }


def embedding_spread(embeddings: np.ndarray) -> list[float]:
    """Per depth, the root-mean-square distance of embeddings (n_depths, n, dim) to their
    centroid.

    >>> embedding_spread(np.array([[[1.0, 0.0], [-1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]]))
    [1.0, 0.0]
    """
    x = np.asarray(embeddings, dtype=np.float64)
    centred = x - x.mean(axis=1, keepdims=True)
    return [float(v) for v in np.sqrt((centred**2).sum(-1).mean(-1))]


def evaluate(
    learner: Learner,
    X: np.ndarray,
    y: np.ndarray,
    gallery_idx: np.ndarray,
    query_idx: np.ndarray,
    k: int = 5,
    n_pairs: int = 10_000,
    recall_ks: tuple[int, ...] = RECALL_KS,
    seed: int = 0,
    max_queries: int | None = None,
    index_kind: str = "exact",
) -> Evaluation:
    """Classification, verification and retrieval quality of ``learner`` (see module doc).

    ``index_kind`` is the gallery search (:func:`oahu.inference.make_index`; ``"exact"``, the
    one the service answers with, by default). ``max_queries`` evaluates a seeded random subset of
    that many queries instead of all of them (an unbiased estimate, for sweeps where the full test
    split costs too much); the galleries stay whole.
    """
    y = np.asarray(y)
    alpha = learner.alpha
    query_idx = np.asarray(query_idx)
    subset = np.arange(len(query_idx))
    if max_queries is not None and max_queries < len(query_idx):
        if max_queries < 1:
            raise ValueError(f"max_queries: must be >= 1, got {max_queries}")
        rng = np.random.default_rng([seed, 0x51])
        subset = np.sort(rng.choice(len(query_idx), size=max_queries, replace=False))
    queries = learner.embed(X[query_idx[subset]], role="query")
    query_labels = y[query_idx[subset]]

    quality = classification_quality(
        learner, X[gallery_idx], y[gallery_idx], queries, query_labels, k, index_kind
    )

    # The whole query split is the retrieval gallery; a similarity learner embeds it differently.
    test_labels = y[query_idx]
    if learner.metric == "ip" or len(subset) < len(query_idx):
        test_gallery = learner.embed(X[query_idx], role="gallery")
    else:
        test_gallery = queries
    i, j, same = verification_pairs(query_labels, n_pairs, seed)
    score = verify(queries[:, i], test_gallery[:, subset[j]], alpha, metric=learner.metric).score
    auc = float(roc_auc_score(same, score))

    test_index = make_index(index_kind, test_gallery, test_labels, learner.metric)
    found = retrieve(test_index, queries, alpha, k=max(recall_ks), exclude=subset).positions
    retrieved_labels = np.where(found >= 0, test_labels[np.maximum(found, 0)], -1)
    return Evaluation(
        quality["error"],
        quality["macro_f1"],
        auc,
        recall_at(retrieved_labels, query_labels, recall_ks),
        quality["depth_error"],
        quality["depth_spread"],
    )
