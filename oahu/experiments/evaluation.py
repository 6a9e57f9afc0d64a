"""Evaluating a learned metric the way the paper does (Section 4).

The development split is the kNN gallery and the test split the queries: error rate and macro-F1
of Eq. 23-25 classification (leave-one-out within the test split in the class-disjoint
protocol, whose test classes have no development items);
verification as in the paper's LFW experiment (Section 4.4), the ROC AUC of the continuous Eq. 26
score over a fixed, seeded sample of test pairs, half of one class and half of two
(:func:`verification_pairs`); and Recall@K (Section 4.5.2) retrieving within the test split with
each query excluded.
Given a coarse labelling of the items as well (a two-level label hierarchy, class within group:
:mod:`oahu.streams.groupings`), the same retrieval is also scored by graded nDCG@10
(:func:`graded_ndcg`): full credit for the query's class, half for another class of its group.

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

from oahu.checks import check_int
from oahu.inference import classify, index_gallery, make_index, recall_at, retrieve, verify
from oahu.learner import Learner

RECALL_KS: tuple[int, ...] = (1, 2, 4, 8)
NDCG_K = 10  # the cut-off of Evaluation.ndcg_at_10


@dataclass
class Evaluation:
    error: float
    macro_f1: float
    auc: float
    recall_at: dict[int, float] = field(default_factory=dict)
    depth_error: list[float] = field(default_factory=list)
    depth_spread: list[float] = field(default_factory=list)
    # Graded nDCG@10 over the coarse labelling evaluate() was given; None without one.
    ndcg_at_10: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["recall_at"] = {str(k): v for k, v in self.recall_at.items()}
        if self.ndcg_at_10 is None:
            # Absent rather than null: reports of evaluations without a hierarchy keep the keys
            # they always had.
            del out["ndcg_at_10"]
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


def classification_quality(
    learner: Learner,
    gallery_x: np.ndarray,
    gallery_y: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    k: int = 5,
    index_kind: str = "exact",
    exclude: np.ndarray | None = None,
) -> dict[str, Any]:
    """Eq. 23-25 kNN classification of embedded ``queries`` against the gallery, scored:
    ``error``, ``macro_f1``, each depth's own ``depth_error`` and the gallery's ``depth_spread``.
    ``exclude``: per query, the gallery row it must not count as its own neighbour."""
    gallery = index_gallery(learner, gallery_x, np.asarray(gallery_y), kind=index_kind)
    found = classify(gallery.index, queries, learner.alpha, k=k, per_depth=True, exclude=exclude)
    return {
        "error": float(np.mean(found.labels != query_labels)),
        "macro_f1": float(f1_score(query_labels, found.labels, average="macro")),
        "depth_error": [float(np.mean(labels != query_labels)) for labels in found.depth_labels],
        "depth_spread": embedding_spread(gallery.embeddings),
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


def _count_in(gallery_keys: np.ndarray, query_keys: np.ndarray) -> np.ndarray:
    """How many of ``gallery_keys`` equal each of ``query_keys`` (0 for a key it lacks)."""
    values, counts = np.unique(gallery_keys, return_counts=True)
    if len(values) == 0:
        return np.zeros(len(query_keys), dtype=np.int64)
    at = np.minimum(np.searchsorted(values, query_keys), len(values) - 1)
    return np.where(values[at] == query_keys, counts[at], 0)


def graded_ndcg(
    retrieved: np.ndarray,
    query_labels: np.ndarray,
    query_coarse: np.ndarray,
    gallery_labels: np.ndarray,
    gallery_coarse: np.ndarray,
    k: int = NDCG_K,
    exclude: np.ndarray | None = None,
) -> float:
    """Mean graded nDCG@k of ranked retrievals over a two-level label hierarchy.

    ``retrieved`` (n_queries, >= k) holds gallery rows, best first, -1 where nothing was found
    (:func:`oahu.inference.retrieve`'s ``positions``). A retrieved item gains 2 when it has the
    query's class (``query_labels`` against ``gallery_labels``), 1 when it has another class of
    the query's group (``query_coarse`` against ``gallery_coarse``), 0 otherwise; rank r
    (from 1) is discounted by log2(r + 1). The ideal DCG ranks every available item of the
    query's class first, then those of its group: available means in the gallery, less the
    row ``exclude`` names per query (the query itself when the gallery holds the queries, as
    :func:`oahu.inference.retrieve` takes it). A query with no item of its group available
    scores 0 (scikit-learn's ``ndcg_score`` convention).

    Two queries, of class 0 (group 0) and class 2 (group 1), against a gallery holding each of
    them: the first retrieves a class-1 item (group 0) before its class-0 one, so its DCG is
    1 + 2/log2(3) of the ideal 2 + 1/log2(3); the second retrieves its classmate first.

    >>> gallery_labels, gallery_coarse = np.array([0, 0, 1, 2, 2]), np.array([0, 0, 0, 1, 1])
    >>> retrieved = np.array([[2, 1], [4, 2]])  # the queries are gallery rows 0 and 3
    >>> value = graded_ndcg(retrieved, np.array([0, 2]), np.array([0, 1]), gallery_labels,
    ...                     gallery_coarse, k=2, exclude=np.array([0, 3]))
    >>> first = (1 + 2 / np.log2(3)) / (2 + 1 / np.log2(3))
    >>> round(value, 4), bool(np.isclose(value, (first + 1.0) / 2))
    (0.9299, True)
    """
    query_labels, query_coarse = np.asarray(query_labels), np.asarray(query_coarse)
    gallery_labels, gallery_coarse = np.asarray(gallery_labels), np.asarray(gallery_coarse)
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    retrieved = np.asarray(retrieved)[:, :k]
    if retrieved.shape[1] < k:  # fewer columns than k: the missing ranks found nothing
        pad = np.full((len(retrieved), k - retrieved.shape[1]), -1, dtype=np.int64)
        retrieved = np.concatenate([retrieved, pad], axis=1)
    found = retrieved >= 0
    at = np.maximum(retrieved, 0)
    same_class = found & (gallery_labels[at] == query_labels[:, None])
    same_group = found & ~same_class & (gallery_coarse[at] == query_coarse[:, None])
    gain = 2.0 * same_class + 1.0 * same_group
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = gain @ discount

    # Items available per query: of its class, and of its group but another class. The pair
    # count keeps this right even for a labelling whose classes straddle groups.
    _, label_code = np.unique(np.concatenate([query_labels, gallery_labels]), return_inverse=True)
    _, coarse_code = np.unique(np.concatenate([query_coarse, gallery_coarse]), return_inverse=True)
    pair_code = label_code * (int(coarse_code.max(initial=0)) + 1) + coarse_code
    n_q = len(query_labels)
    n_class = _count_in(gallery_labels, query_labels)
    n_group = _count_in(gallery_coarse, query_coarse) - _count_in(pair_code[n_q:], pair_code[:n_q])
    if exclude is not None:
        exclude = np.asarray(exclude)
        excluded_class = gallery_labels[exclude] == query_labels
        n_class = n_class - excluded_class
        n_group = n_group - (~excluded_class & (gallery_coarse[exclude] == query_coarse))
    # Ideal DCG: 2 on the first n_class ranks, 1 on the next n_group, within the first k.
    cumulative = np.concatenate([[0.0], np.cumsum(discount)])
    top_class = np.minimum(n_class, k)
    top_group = np.minimum(n_class + n_group, k)
    ideal = cumulative[top_class] + cumulative[top_group]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_query = np.where(ideal > 0, dcg / ideal, 0.0)
    return float(per_query.mean()) if n_q else float("nan")


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
    coarse: np.ndarray | None = None,
    leave_one_out: bool = False,
) -> Evaluation:
    """Classification, verification and retrieval quality of ``learner`` (see module doc).

    ``index_kind`` is the gallery search (:func:`oahu.inference.make_index`; ``"exact"``, the
    one the service answers with, by default). ``max_queries`` evaluates a seeded random subset of
    that many queries instead of all of them (an unbiased estimate, for sweeps where the full test
    split costs too much); the galleries stay whole. ``coarse``, a coarser label per item of
    ``X`` (e.g. :func:`oahu.streams.groupings.coarse_labels` of ``y``), adds the graded nDCG@10
    of the Recall@K retrieval (:func:`graded_ndcg`) as ``ndcg_at_10``. ``leave_one_out``
    classifies with the queries as their own gallery (``gallery_idx`` equal to ``query_idx``),
    never counting a query as its own neighbour: the class-disjoint protocol, whose test
    classes have no development items.

    >>> from oahu.learners.baselines.euclidean import Euclidean
    >>> from oahu.streams.datasets import load_digits
    >>> from oahu.streams.groupings import coarse_labels
    >>> from oahu.streams.protocol import split_dev_test
    >>> ds = load_digits()
    >>> dev, test = split_dev_test(ds.n_items, seed=0)
    >>> report = evaluate(Euclidean(ds.n_features), ds.X, ds.y, dev, test, n_pairs=100,
    ...                   coarse=coarse_labels("digits", ds.y, "shape"))
    >>> 0.9 < report.ndcg_at_10 < 1.0, "ndcg_at_10" in report.to_dict()
    (True, True)
    """
    y = np.asarray(y)
    if coarse is not None and np.shape(coarse) != y.shape:
        raise ValueError(
            f"coarse: expected one label per item, shape {y.shape}, got {np.shape(coarse)}"
        )
    check_int(n_pairs, "n_pairs")
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

    if leave_one_out and not np.array_equal(np.asarray(gallery_idx), query_idx):
        raise ValueError("leave_one_out: the gallery must be the queries themselves")
    quality = classification_quality(
        learner,
        X[gallery_idx],
        y[gallery_idx],
        queries,
        query_labels,
        k,
        index_kind,
        exclude=subset if leave_one_out else None,
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
    # One retrieval serves Recall@K and nDCG@10: a longer list starts with the same items (an
    # item ranks by its best depth, where it is among the top k' of that depth alone), ties of
    # exactly equal scores apart.
    depth = max(recall_ks) if coarse is None else max(*recall_ks, NDCG_K)
    found = retrieve(test_index, queries, alpha, k=depth, exclude=subset).positions
    retrieved_labels = np.where(found >= 0, test_labels[np.maximum(found, 0)], -1)
    ndcg = None
    if coarse is not None:
        test_coarse = np.asarray(coarse)[query_idx]
        ndcg = graded_ndcg(
            found, query_labels, test_coarse[subset], test_labels, test_coarse, NDCG_K, subset
        )
    return Evaluation(
        quality["error"],
        quality["macro_f1"],
        auc,
        recall_at(retrieved_labels, query_labels, recall_ks),
        quality["depth_error"],
        quality["depth_spread"],
        ndcg,
    )
