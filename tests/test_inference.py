"""Serving (Eq. 23-27) on small hand-scored examples, with each exact kind of gallery index."""

import math

import numpy as np
import pytest

from oahu.inference import (
    classify,
    make_index,
    neighbour_scores,
    recall_at,
    retrieve,
    verify,
)

EXACT_KINDS = ["exact", "flat"]


def emb(*rows_per_depth):
    return np.array(rows_per_depth, dtype=np.float32)


def test_neighbour_scores_by_hand_including_equal_distances() -> None:
    # depth 0: distances 0, 1, 2 → exponents 0, 0.5, 1; depth 1: all equal → exponent 0
    dissim = np.array([[[0.0, 1.0, 2.0]], [[0.7, 0.7, 0.7]]])
    s = neighbour_scores(dissim, np.array([0.4, 0.6]))
    assert s[0, 0].tolist() == pytest.approx([0.4, 0.4 * math.exp(-0.5), 0.4 * math.exp(-1)])
    assert s[1, 0].tolist() == pytest.approx([0.6, 0.6, 0.6])


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_classify_sums_scores_over_depths_and_neighbours(kind: str) -> None:
    # Gallery on a line (1-d embeddings), two depths that disagree.
    gallery = emb([[0.0], [1.0], [3.0]], [[5.0], [0.0], [0.2]])
    labels = np.array([7, 8, 8])
    index = make_index(kind, gallery, labels)
    query = emb([[0.0]], [[0.0]])
    alpha = np.array([0.7, 0.3])
    out = classify(index, query, alpha, k=2)
    # depth 0: neighbours item0 (d 0, label 7), item1 (d 1, label 8) → 0.7·e⁰, 0.7·e⁻¹
    # depth 1: neighbours item1 (d 0, label 8), item2 (d 0.2, label 8) → 0.3·e⁰, 0.3·e⁻¹
    expected_7 = 0.7
    expected_8 = 0.7 * math.exp(-1) + 0.3 + 0.3 * math.exp(-1)
    assert out.classes.tolist() == [7, 8]
    assert out.scores[0].tolist() == pytest.approx([expected_7, expected_8])
    assert out.labels.tolist() == [7]  # 0.7 > 0.6679


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_classify_with_k_equal_to_gallery_and_tied_distances(kind: str) -> None:
    index = make_index(kind, emb([[1.0], [-1.0]]), np.array([0, 1]))
    out = classify(index, emb([[0.0]]), np.array([1.0]), k=2)
    assert out.scores[0].tolist() == pytest.approx([1.0, 1.0])  # d_max = d_min: both e⁰
    assert out.labels.tolist() == [0]  # ties go to the smallest label


def test_verify_votes_and_score() -> None:
    a = emb([[1.0, 0.0]], [[1.0, 0.0]], [[1.0, 0.0]])
    b = emb([[1.0, 0.0]], [[0.0, 1.0]], [[-1.0, 0.0]])  # distances 0, √2, 2
    alpha = np.array([0.5, 0.3, 0.2])
    out = verify(a, b, alpha, threshold=0.75)
    # D/2 = 0, 0.707, 1 → votes 1, 1, 0 → P = 0.8
    assert out.vote.tolist() == pytest.approx([0.8])
    assert out.similar.tolist() == [True]
    assert out.score.tolist() == pytest.approx([-(0.3 * math.sqrt(2) + 0.2 * 2)])
    assert verify(a, b, alpha, threshold=0.5).similar.tolist() == [True]  # P = 0.5 ≥ 0.5
    assert verify(a, b, alpha, threshold=0.0).similar.tolist() == [False]


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_retrieve_keeps_distinct_items_at_their_best_score(kind: str) -> None:
    gallery = emb([[0.0], [1.0], [2.0], [9.0]], [[2.0], [0.0], [1.0], [9.0]])
    index = make_index(kind, gallery)
    alpha = np.array([0.5, 0.5])
    out = retrieve(index, emb([[0.0]], [[0.0]]), alpha, k=3)
    # depth 0 top-3: items 0 (0.5), 1 (0.5·e^-0.5), 2 (0.5·e^-1)
    # depth 1 top-3: items 1 (0.5), 2 (0.5·e^-0.5), 0 (0.5·e^-1)
    # best per item: 0 → 0.5, 1 → 0.5, 2 → 0.5·e^-0.5; ties by position
    assert out.positions.tolist() == [[0, 1, 2]]
    assert out.scores[0].tolist() == pytest.approx([0.5, 0.5, 0.5 * math.exp(-0.5)])


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_retrieve_excludes_the_query_and_pads(kind: str) -> None:
    index = make_index(kind, emb([[0.0], [1.0]]))
    out = retrieve(index, emb([[0.0], [1.0]]), np.array([1.0]), k=2, exclude=np.array([0, 1]))
    assert out.positions.tolist() == [[1, -1], [0, -1]]


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_inner_product_gallery_ranks_by_similarity(kind: str) -> None:
    index = make_index(
        kind, emb([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]), np.array([0, 1, 2]), metric="ip"
    )
    dissim, pos = index.search(emb([[1.0, 0.0]]), k=3)
    assert pos.tolist() == [[[1, 0, 2]]]
    assert dissim.tolist() == [[[-3.0, -1.0, 0.0]]]
    assert classify(index, emb([[1.0, 0.0]]), np.array([1.0]), k=1).labels.tolist() == [1]


def test_recall_at() -> None:
    retrieved = np.array([[1, 2, 0], [2, 2, 2], [0, 1, 1]])
    # query 0 finds its class at rank 3, query 1 never, query 2 at rank 1
    assert recall_at(retrieved, np.array([0, 1, 0]), ks=(1, 2, 3)) == {1: 1 / 3, 2: 1 / 3, 3: 2 / 3}


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_bad_query_shape_names_the_field(kind: str) -> None:
    index = make_index(kind, emb([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="queries"):
        index.search(np.zeros((2, 1, 2), dtype=np.float32), k=1)


@pytest.mark.parametrize("kind", EXACT_KINDS)
def test_classify_leave_one_out_never_counts_the_query_itself(kind: str) -> None:
    # Items 0 and 1 are class 0, item 2 class 1; item 1 lies nearer item 2 than item 0.
    index = make_index(kind, emb([[0.0], [3.0], [4.0]]), labels=np.array([0, 0, 1]))
    queries = emb([[0.0], [3.0], [4.0]])
    alpha = np.array([1.0])
    assert classify(index, queries, alpha, k=1).labels.tolist() == [0, 0, 1]  # each itself
    # Without itself: 0's nearest other is 1 (class 0); 1's is 2 (class 1); 2's is 1 (class 0).
    out = classify(index, queries, alpha, k=1, exclude=np.array([0, 1, 2]))
    assert out.labels.tolist() == [0, 1, 0]
    # A row outside a query's k + 1 nearest leaves its k nearest as they were.
    out = classify(index, emb([[0.0]]), alpha, k=1, exclude=np.array([2]))
    assert out.labels.tolist() == [0]
