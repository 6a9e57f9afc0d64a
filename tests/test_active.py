"""Choosing triplet questions for an annotator (oahu.active): the greedy joint-entropy batch, the
rank pitfall, uncertainty, uniform random questions, exclusions, determinism and validation."""

from __future__ import annotations

import numpy as np
import pytest

from oahu.active import (
    STRATEGIES,
    Candidates,
    Suggestion,
    candidates,
    dropout_masks,
    entropy_order,
    joint_entropy_batch,
    margins,
    nearest_neighbours,
    random_questions,
    suggest,
    suggest_from_embeddings,
)
from oahu.learners.baselines.euclidean import Euclidean
from oahu.registry import make_learner


def blobs(n: int = 300, dim: int = 6, seed: int = 0) -> np.ndarray:
    """Points in four overlapping clusters: plenty of uncertain questions."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(4, dim))
    return (centres[rng.integers(0, 4, n)] + rng.normal(size=(n, dim))).astype(np.float32)


def as_rows(questions: list[Suggestion]) -> list[tuple[int, int, int]]:
    return [(q.anchor, q.first, q.second) for q in questions]


def unordered(questions: list[Suggestion]) -> list[tuple[int, int, int]]:
    return [(q.anchor, min(q.first, q.second), max(q.first, q.second)) for q in questions]


# ------------------------------------------------------------------ joint entropy by hand


def test_pivoted_qr_never_takes_a_copy_before_a_different_candidate():
    # Candidates 0 and 1 have the same margins; 2 is weaker but points elsewhere.
    m = np.array([[2.0, -2, 0, 0], [2, -2, 0, 0], [0, 0, 1, -1], [1.9, -1.9, 0, 0]])
    picked, scores = joint_entropy_batch(m, np.arange(4), 2)
    assert picked.tolist() == [0, 2]
    # The residual of the first pick is its own centred norm, of the second its part
    # orthogonal to the first (here all of it).
    assert scores == pytest.approx([np.sqrt(8), np.sqrt(2)])


def test_pivoted_qr_picks_by_residual_not_by_size():
    # 1 is nearly parallel to the first pick 0, 2 is small but orthogonal: 2 comes second.
    m = np.array([[3.0, -3, 0, 0], [2.9, -3, 0.1, 0], [0, 0, 0.5, -0.5]])
    picked, _ = joint_entropy_batch(m, np.arange(3), 2)
    assert picked.tolist() == [0, 2]


def test_the_shortlist_limits_what_the_greedy_search_sees():
    m = np.array([[1.0, -1, 0], [5, -5, 0], [0, 1, -1]])
    picked, _ = joint_entropy_batch(m, np.array([0, 2, 1]), 2, shortlist=2)
    assert picked.tolist() == [0, 2]  # 1, the largest, is outside the shortlist


def test_rank_pitfall_fills_the_batch_by_entropy_order():
    # S = 3 perturbations: centred vectors span 2 dimensions, so the third pick has no residual.
    m = np.array([[1.0, -1, 0], [0, 1, -1], [1, 0, -1], [2, 0, -2]])
    picked, scores = joint_entropy_batch(m, np.array([2, 3, 0, 1]), 4)
    assert sorted(picked.tolist()) == [0, 1, 2, 3]
    assert (scores[:2] > 0).all() and (scores[2:] == 0).all()
    # The fill follows the entropy order, skipping those the QR took.
    taken = set(picked[:2].tolist())
    assert picked[2:].tolist() == [c for c in [2, 3, 0, 1] if c not in taken]


def test_zero_variance_candidates_are_filled_not_picked_by_qr():
    m = np.array([[1.0, 1, 1], [0, 1, -1]])
    picked, scores = joint_entropy_batch(m, np.array([0, 1]), 2)
    assert picked.tolist() == [1, 0] and scores[1] == 0.0


def test_joint_entropy_batch_is_diverse_where_uncertainty_repeats_itself():
    # Every item twice: a question and its copy (an option swapped for its twin) have the same
    # margins under every perturbation, hence the same entropy, next to each other in the
    # uncertainty order. Joint entropy takes at most one of each such group.
    base = blobs(120, dim=40, seed=3)  # margins span at most min(dim, S − 1) dimensions
    pool = np.repeat(base, 2, axis=0)
    original = np.arange(len(pool)) // 2

    def groups(questions: list[Suggestion]) -> list[tuple[int, ...]]:
        return [
            (int(original[q.anchor]), *sorted((int(original[q.first]), int(original[q.second]))))
            for q in questions
        ]

    kw = {"anchors": 240, "neighbours": 8, "seed": 5}
    diverse = groups(suggest_from_embeddings(pool, 20, "joint-entropy", **kw))
    repeated = groups(suggest_from_embeddings(pool, 20, "uncertainty", **kw))
    assert len(set(diverse)) == len(diverse) == 20
    assert len(set(repeated)) < len(repeated)


# ------------------------------------------------------------------ the pieces


def test_margins_by_hand():
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    # ξ = ‖m ⊙ (a − j)‖² − ‖m ⊙ (a − i)‖²: (4 − 1) unmasked, (0·2 − 1·2) with only x kept.
    got = margins(pts, np.array([[0, 1, 2], [0, 2, 1]]), np.array([[1.0, 1.0], [2.0, 0.0]]))
    assert got.tolist() == [[3.0, -2.0], [-3.0, 2.0]]


def test_dropout_masks_keep_expected_squared_distances():
    m = dropout_masks(400, 200, np.random.default_rng(0), 0.3)
    assert np.unique(m).tolist() == pytest.approx([0.0, 1 / 0.7])
    assert m.mean() == pytest.approx(1.0, abs=0.01)
    with pytest.raises(ValueError, match="dropout"):
        dropout_masks(4, 2, np.random.default_rng(0), 1.0)


def test_nearest_neighbours_exact_and_without_the_item_itself():
    rng = np.random.default_rng(2)
    pts = rng.normal(size=(700, 5)).astype(np.float32)
    rows = np.arange(0, 700, 3)  # more than one block of rows
    got = nearest_neighbours(pts, rows, 6)
    d = ((pts[rows, None, :] - pts[None, :, :]) ** 2).sum(-1)
    d[np.arange(len(rows)), rows] = np.inf
    assert got.tolist() == np.argsort(d, axis=1, kind="stable")[:, :6].tolist()


def test_candidates_are_pairs_of_an_anchors_neighbours():
    pts = blobs(80)
    c = candidates(pts, np.random.default_rng(0), anchors=10, neighbours=4, perturbations=16)
    assert c.questions.shape == (10 * 6, 3) and c.margins.shape == (60, 16)
    near = nearest_neighbours(pts, np.unique(c.questions[:, 0]), 4)
    for a, i, j in c.questions:
        row = near[np.searchsorted(np.unique(c.questions[:, 0]), a)].tolist()
        assert i in row and j in row and row.index(i) < row.index(j)


def test_entropy_order_breaks_ties_by_standardised_mean():
    m = np.array([[1.0, -1, 1, -1], [3, -1, 3, -1], [1, 1, 1, 1], [1, -1, 1, -1]])
    order = entropy_order(Candidates(np.zeros((4, 3), int), m))
    # 0, 1 and 3 all have P = 1/2; 0 and 3 have mean 0 (tied: by position), 1 mean 1.
    assert order.tolist() == [0, 3, 1, 2]


# ------------------------------------------------------------------ suggest_from_embeddings


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_questions_are_valid_and_never_repeat(strategy):
    pts = blobs()
    qs = suggest_from_embeddings(pts, 60, strategy, seed=1, anchors=64)
    assert len(qs) == 60
    assert all(isinstance(q, Suggestion) for q in qs)
    for q in qs:
        assert len({q.anchor, q.first, q.second}) == 3
        assert all(0 <= v < len(pts) for v in (q.anchor, q.first, q.second))
        assert np.isfinite(q.score) and q.score >= 0
    assert len(set(unordered(qs))) == len(qs)
    if strategy == "random":
        assert all(q.score == 0.0 for q in qs)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_deterministic_per_seed(strategy):
    pts = blobs()
    one = suggest_from_embeddings(pts, 25, strategy, seed=7, anchors=50)
    assert suggest_from_embeddings(pts, 25, strategy, seed=7, anchors=50) == one
    assert suggest_from_embeddings(pts, 25, strategy, seed=8, anchors=50) != one


def test_batch_beyond_the_rank_of_the_perturbations_still_gives_distinct_questions():
    pts = blobs(dim=20)
    qs = suggest_from_embeddings(pts, 30, "joint-entropy", perturbations=8, anchors=64)
    assert len(set(unordered(qs))) == 30
    scores = np.array([q.score for q in qs])
    # At most S − 1 = 7 picks by residual, the rest by entropy (score 0).
    assert 1 <= (scores > 0).sum() <= 7 and (scores[(scores > 0).sum() :] == 0).all()


def test_default_perturbations_cover_the_batch():
    pts = blobs(600, dim=100)
    qs = suggest_from_embeddings(pts, 80, "joint-entropy", anchors=128)
    # S = max(64, 81), and 100 dimensions: every pick has a residual.
    assert all(q.score > 0 for q in qs)


def test_options_come_in_random_order():
    pts = blobs()
    qs = suggest_from_embeddings(pts, 100, "uncertainty", anchors=100)
    d = lambda a, b: float(((pts[a] - pts[b]) ** 2).sum())  # noqa: E731
    first_nearer = [d(q.anchor, q.first) < d(q.anchor, q.second) for q in qs]
    assert 20 < sum(first_nearer) < 80


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_exclude_skips_questions_in_either_option_order(strategy):
    pts = blobs()
    first = suggest_from_embeddings(pts, 40, strategy, seed=3, anchors=40)
    # Half given as asked, half with the two options swapped.
    exclude = {
        (q.anchor, q.first, q.second) if k % 2 else (q.anchor, q.second, q.first)
        for k, q in enumerate(first)
    }
    again = suggest_from_embeddings(pts, 40, strategy, seed=3, anchors=40, exclude=exclude)
    assert len(again) == 40
    assert not set(unordered(again)) & set(unordered(first))


def test_exclude_validates_its_entries():
    with pytest.raises(ValueError, match="exclude"):
        suggest_from_embeddings(blobs(), 3, exclude={(1, 2)})
    with pytest.raises(ValueError, match="exclude"):
        suggest_from_embeddings(blobs(), 3, exclude={("a", "b", "c")})
    with pytest.raises(ValueError, match="outside the pool of 300"):
        suggest_from_embeddings(blobs(), 3, exclude={(0, 1, 300)})


def test_a_tiny_pool_returns_what_it_has():
    pts = np.array([[0.0], [1.0], [3.0]], dtype=np.float32)
    # Three items hold 3 questions (each anchor, the other two as options).
    for strategy in STRATEGIES:
        qs = suggest_from_embeddings(pts, 10, strategy)
        assert len(set(unordered(qs))) == len(qs) <= 3
    assert len(suggest_from_embeddings(pts, 10, "random")) == 3


# ------------------------------------------------------------------ random questions


def test_random_questions_are_uniform_over_a_small_pool():
    # 5 items: 5 anchors x C(4, 2) option pairs = 30 questions.
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(3000):
        (q,) = random_questions(5, 1, np.random.default_rng(seed))
        key = (int(q[0]), *sorted((int(q[1]), int(q[2]))))
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 30
    assert 50 < min(counts.values()) and max(counts.values()) < 150  # 100 expected each


def test_random_questions_by_rejection_are_valid_distinct_and_uniform():
    n = 200  # 200 * C(199, 2) questions: drawn by rejection, not enumerated
    q = random_questions(n, 20_000, np.random.default_rng(0))
    assert q.shape == (20_000, 3)
    assert ((q[:, 0] != q[:, 1]) & (q[:, 0] != q[:, 2]) & (q[:, 1] != q[:, 2])).all()
    keys = {(a, min(i, j), max(i, j)) for a, i, j in q.tolist()}
    assert len(keys) == len(q)
    # Every item is an anchor 100 times and an option 200 times in expectation.
    anchors = np.bincount(q[:, 0], minlength=n)
    options = np.bincount(q[:, 1:].ravel(), minlength=n)
    assert anchors.min() > 50 and anchors.max() < 150
    assert options.min() > 130 and options.max() < 270


# ------------------------------------------------------------------ learners and validation


def test_suggest_uses_the_learners_space():
    learner = make_learner("oahu", 6, seed=0)
    pool = blobs(200)
    learner.prepare(pool)
    got = suggest(learner, pool, 10, seed=4, anchors=32)
    assert got == suggest_from_embeddings(learner.transform(pool), 10, seed=4, anchors=32)


def test_a_similarity_learner_cannot_be_asked():
    with pytest.raises(ValueError, match="inner product"):
        suggest(make_learner("oasis", 6), blobs(50), 5)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"batch": 0}, "batch"),
        ({"strategy": "bald"}, "strategy"),
        ({"anchors": 0}, "anchors"),
        ({"neighbours": 1}, "neighbours"),
        ({"perturbations": 1}, "perturbations"),
        ({"points": np.zeros(5)}, "points"),
        ({"points": np.zeros((2, 3))}, "points"),
        ({"points": np.full((5, 2), np.nan)}, "points"),
    ],
)
def test_bad_arguments_name_the_field(kw, field):
    args = {"points": blobs(30), "batch": 3, **kw}
    points, batch = args.pop("points"), args.pop("batch")
    with pytest.raises(ValueError, match=field):
        suggest_from_embeddings(points, batch, **args)


def test_suggestion_triplet():
    s = Suggestion(1, 2, 3, 0.5)
    assert s.triplet(2) == (1, 2, 3) and s.triplet(3) == (1, 3, 2)
    with pytest.raises(ValueError, match="closer"):
        s.triplet(1)
    assert Euclidean(n_features=2).metric == "l2"
