"""The evaluation protocol: full and subsampled queries agree where they must; graded nDCG@10
over a label hierarchy, by hand, against scikit-learn's nDCG, and inside evaluate()."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import ndcg_score

from oahu.experiments.evaluation import evaluate, graded_ndcg
from oahu.learners.baselines.euclidean import Euclidean
from oahu.learners.oahu.learner import OAHU
from oahu.streams.datasets import load_digits
from oahu.streams.groupings import coarse_labels
from oahu.streams.protocol import split_dev_test


def test_subsampled_queries_match_the_same_queries_evaluated_in_full() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    learner = Euclidean(ds.n_features)
    full = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500)
    everything = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500, max_queries=len(test))
    assert everything == full  # asking for all of them is the full evaluation
    part = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500, max_queries=300)
    # An estimate of the same quantities: close, not equal.
    assert abs(part.error - full.error) < 0.03
    assert abs(part.recall_at[1] - full.recall_at[1]) < 0.03


def test_euclidean_digits_figures() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    report = evaluate(Euclidean(ds.n_features), ds.X, ds.y, dev, test, n_pairs=1000)
    assert report.error == 13 / 898  # measured, and the CLI's end-to-end test agrees
    assert 0.5 < report.auc < 1.0
    assert np.all(np.diff([report.recall_at[k] for k in (1, 2, 4, 8)]) >= 0)


# ------------------------------------------------------------------ graded nDCG@10
# A small hierarchy: classes 0, 1 in group 0, classes 2, 3 in group 1.
LABELS = np.array([0, 0, 0, 1, 1, 2, 2, 3])
GROUP_OF = np.array([0, 0, 1, 1])
COARSE = GROUP_OF[LABELS]


def ndcg_of(retrieved: list[list[int]], queries: list[int], k: int) -> float:
    """graded_ndcg of gallery rows ``queries`` against the whole gallery, each one excluded."""
    q = np.array(queries)
    return graded_ndcg(np.array(retrieved), LABELS[q], COARSE[q], LABELS, COARSE, k=k, exclude=q)


def ideal_ranking(query: int) -> list[int]:
    """Every other gallery row, by gain: the query's class, then its group, then the rest."""
    gain = 2 * (LABELS == LABELS[query]) + (COARSE == COARSE[query]) * (LABELS != LABELS[query])
    order = np.argsort(-gain, kind="stable")
    return [int(i) for i in order if i != query]


def test_graded_ndcg_by_hand() -> None:
    # Query row 0 (class 0, group 0). Available: rows 1, 2 of class 0 (gain 2) and rows 3, 4 of
    # class 1 (gain 1). Retrieved at k = 3: row 3 (1), row 5 (0), row 1 (2):
    #   DCG  = 1/log2(2) + 0/log2(3) + 2/log2(4) = 1 + 0 + 1 = 2
    #   IDCG = 2/log2(2) + 2/log2(3) + 1/log2(4) = 2 + 1.2618595 + 0.5 = 3.7618595
    assert ndcg_of([[3, 5, 1]], [0], k=3) == pytest.approx(2 / 3.7618595, abs=1e-7)
    # Query row 7 (class 3, group 1): no classmate, one other item of its group (rows 5 or 6 both
    # class 2: two). IDCG = 1 + 1/log2(3); retrieving row 6 second and a miss (-1) third:
    #   DCG = 0 + 1/log2(3).
    ideal = 1 + 1 / np.log2(3)
    assert ndcg_of([[0, 6, -1]], [7], k=3) == pytest.approx((1 / np.log2(3)) / ideal)
    # The mean over queries.
    both = ndcg_of([[3, 5, 1], [0, 6, -1]], [0, 7], k=3)
    assert both == pytest.approx((2 / 3.7618595 + (1 / np.log2(3)) / ideal) / 2, abs=1e-7)


def test_graded_ndcg_is_one_for_the_ideal_ranking_and_less_otherwise() -> None:
    queries = list(range(len(LABELS)))
    for k in (1, 3, 7, 10):  # 10: more ranks than items, the tail found nothing (-1)
        best = [(ideal_ranking(q) + [-1] * k)[:k] for q in queries]
        assert ndcg_of(best, queries, k) == pytest.approx(1.0)
    reversed_ = [ideal_ranking(q)[::-1][:3] for q in queries]
    shuffled = [list(np.random.default_rng(q).permutation(ideal_ranking(q)))[:3] for q in queries]
    assert ndcg_of(reversed_, queries, 3) < ndcg_of(shuffled, queries, 3) < 1.0


def test_graded_ndcg_without_the_query_in_the_gallery_counts_every_item() -> None:
    # A query not in the gallery (no exclude): all three class-0 rows are available to it.
    retrieved = np.array([[0, 1, 2]])
    assert graded_ndcg(retrieved, np.array([0]), np.array([0]), LABELS, COARSE, k=3) == 1.0
    # With row 0 excluded only two class-0 rows are available: [1, 2, 3] is ideal then.
    assert ndcg_of([[1, 2, 3]], [0], k=3) == pytest.approx(1.0)


def test_graded_ndcg_with_one_class_per_group_is_binary_ndcg() -> None:
    # Coarse = fine: gains are 2 or 0, so nDCG is the binary (0/1 gain) nDCG.
    retrieved = np.array([[3, 1, 5]])
    value = graded_ndcg(retrieved, LABELS[[0]], LABELS[[0]], LABELS, LABELS, k=3, exclude=[0])
    assert value == pytest.approx((1 / np.log2(3)) / (1 + 1 / np.log2(3)))


@st.composite
def ranking_cases(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n = draw(st.integers(3, 30))  # scikit-learn ranks at least 2 items
    labels = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
    group_of = np.array(draw(st.lists(st.integers(0, 2), min_size=6, max_size=6)))
    coarse = group_of[labels]
    k = draw(st.integers(1, n - 1))
    queries = np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # Each query's k distinct other rows, in random order.
    retrieved = np.stack([rng.permutation(np.delete(np.arange(n), q))[:k] for q in queries])
    return labels, coarse, queries, retrieved, np.int64(k)


@settings(max_examples=200, deadline=None)
@given(ranking_cases())
def test_graded_ndcg_agrees_with_scikit_learn(case: tuple[np.ndarray, ...]) -> None:
    labels, coarse, queries, retrieved, k = case
    value = graded_ndcg(
        retrieved, labels[queries], coarse[queries], labels, coarse, k=int(k), exclude=queries
    )
    assert 0.0 <= value <= 1.0
    # scikit-learn's nDCG of the same ranking: every gallery item but the query, the retrieved
    # ones scored highest in rank order, the rest tied below them (beyond rank k, so unscored).
    expected = []
    for q, found in zip(queries, retrieved, strict=True):
        others = np.delete(np.arange(len(labels)), q)
        same_class = labels[others] == labels[q]
        gain = np.where(same_class, 2, (coarse[others] == coarse[q]).astype(int))
        score = np.zeros(len(others))
        score[np.searchsorted(others, found)] = np.arange(len(found), 0, -1)
        expected.append(ndcg_score(gain[None], score[None], k=int(k)))
    assert value == pytest.approx(np.mean(expected))


def test_evaluate_adds_ndcg_only_when_given_a_hierarchy() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    learner = Euclidean(ds.n_features)
    plain = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500)
    graded = evaluate(
        learner, ds.X, ds.y, dev, test, n_pairs=500, coarse=coarse_labels("digits", ds.y, "shape")
    )
    assert plain.ndcg_at_10 is None and "ndcg_at_10" not in plain.to_dict()
    assert graded.to_dict()["ndcg_at_10"] == graded.ndcg_at_10
    assert 0.9 < graded.ndcg_at_10 < 1.0
    # Retrieving 10 instead of 8 for the nDCG leaves everything else as it was.
    assert dataclasses.replace(graded, ndcg_at_10=None) == plain
    with pytest.raises(ValueError, match="coarse"):
        evaluate(learner, ds.X, ds.y, dev, test, n_pairs=500, coarse=np.zeros(10, dtype=int))


def test_graded_ndcg_of_a_multi_depth_learner_and_its_recall_agree_with_plain_evaluate() -> None:
    ds = load_digits()
    dev, test = split_dev_test(ds.n_items, seed=0)
    learner = OAHU(ds.n_features, device="cpu")
    learner.prepare(ds.X[dev])
    coarse = coarse_labels("digits", ds.y, "shape")
    plain = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=200, max_queries=400)
    graded = evaluate(learner, ds.X, ds.y, dev, test, n_pairs=200, max_queries=400, coarse=coarse)
    assert learner.n_depths > 1
    assert graded.recall_at == plain.recall_at
    assert 0.0 < graded.ndcg_at_10 <= 1.0
