"""Each baseline's update rule against numbers computed here from the formula written out
(docs/algorithms.md), never by calling the implementation's own arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oahu.learners.baselines._linalg import mahalanobis_factor
from oahu.learners.baselines.euclidean import Euclidean
from oahu.learners.baselines.lego import LEGO
from oahu.learners.baselines.oasis import OASIS, PENDING_STEPS
from oahu.learners.baselines.opml import OPML
from oahu.learners.baselines.rdml import RDML


def squared_embedded_distance(learner, u, v) -> float:
    diff = learner.embed([u])[0, 0].astype(np.float64) - learner.embed([v])[0, 0]
    return float(diff @ diff)


# ---------------------------------------------------------------------------------------- LEGO
def test_lego_similar_pair_follows_the_closed_form():
    eta, u, far = 0.5, 1.0, 4.0  # far: the dissimilar target l
    lego = LEGO(2, learning_rate=eta, target_similar=u, target_dissimilar=far, preprocess="none")
    # z = (1, 1), A = I: ŷ = 2 > u, so ȳ = (η u ŷ − 1 + sqrt((η u ŷ − 1)² + 4 η ŷ²)) / (2 η ŷ)
    #   = (0 + sqrt(8)) / 2 = √2 and A ← I − η(ȳ − u) J / (1 + η(ȳ − u) ŷ)
    y_bar = math.sqrt(2.0)
    coef = eta * (y_bar - u) / (1.0 + eta * (y_bar - u) * 2.0)  # = 0.1464466...
    expected = np.eye(2) - coef * np.ones((2, 2))
    used = lego.learn_pairs([[1.0, 1.0]], [[0.0, 0.0]], [True])
    assert used.tolist() == [True]
    np.testing.assert_allclose(lego.metric_matrix, expected, rtol=1e-12)
    assert coef == pytest.approx(0.14644660940672624)
    # the new distance is ȳ: the update is exact, not a gradient approximation
    assert squared_embedded_distance(lego, [1.0, 1.0], [0.0, 0.0]) == pytest.approx(y_bar, 1e-6)


def test_lego_dissimilar_pair_then_a_satisfied_pair():
    eta, u, far = 0.5, 1.0, 4.0  # far: the dissimilar target l
    lego = LEGO(2, learning_rate=eta, target_similar=u, target_dissimilar=far, preprocess="none")
    # z = (1, 0), A = I: ŷ = 1 < l = 4; η l ŷ − 1 = 1, so ȳ = (1 + sqrt(1 + 2)) / 1 = 1 + √3
    y_bar = 1.0 + math.sqrt(3.0)
    coef = eta * (y_bar - far) / (1.0 + eta * (y_bar - far) * 1.0)  # < 0: A grows along z
    assert lego.learn_pairs([[1.0, 0.0]], [[0.0, 0.0]], [False]).tolist() == [True]
    np.testing.assert_allclose(lego.metric_matrix, np.diag([1.0 - coef, 1.0]), rtol=1e-12)
    assert lego.metric_matrix[0, 0] == pytest.approx(y_bar)  # ‖e1‖²_A = ȳ
    # within its bounds: similar with ŷ = 0.25 <= u, dissimilar with ŷ = 9 >= l
    before = lego.metric_matrix
    used = lego.learn_pairs([[0.0, 0.5], [0.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]], [True, False])
    assert used.tolist() == [False, False]
    np.testing.assert_array_equal(lego.metric_matrix, before)
    assert (lego.updates, lego.constraints_used) == (1, 1)


def test_lego_targets_from_sample_are_distance_percentiles():
    x = np.array([[0.0], [1.0], [3.0], [7.0]])
    targets = LEGO.targets_from_sample(x, low_pct=0, high_pct=100, n_pairs=2000, seed=3)
    assert targets == (1.0, 49.0)  # smallest and largest squared gaps: 1² and 7²
    assert LEGO.targets_from_sample(x, seed=3) == LEGO.targets_from_sample(x, seed=3)
    with pytest.raises(ValueError, match="low_pct"):
        LEGO.targets_from_sample(x, low_pct=60, high_pct=40)


# ---------------------------------------------------------------------------------------- RDML
def test_rdml_steps_and_psd_step_cap():
    lam, margin = 0.5, 0.5
    rdml = RDML(n_features=2, learning_rate=lam, psd_margin=margin, preprocess="none")
    # 1) dissimilar, z = (0.5, 0): d_A = 0.25 <= 1 is a mistake; A ← A + λ z zᵀ
    a = np.eye(2) + lam * np.outer([0.5, 0.0], [0.5, 0.0])
    assert rdml.learn_pairs([[0.5, 0.0]], [[0.0, 0.0]], [False]).tolist() == [True]
    np.testing.assert_allclose(rdml.metric_matrix, a, rtol=1e-12)
    # 2) similar, z = (1, 1): d_A = 2.125 >= 1 is a mistake; zᵀA⁻¹z = 1/1.125 + 1 and the step is
    #    min(λ, (1 − margin) / zᵀA⁻¹z) = 0.5 / 1.888... = 0.2647 < λ
    z = np.array([1.0, 1.0])
    q = 1.0 / 1.125 + 1.0
    step = min(lam, (1.0 - margin) / q)
    assert step == pytest.approx(0.26470588235294118)
    a = a - step * np.outer(z, z)
    assert rdml.learn_pairs([z], [[0.0, 0.0]], [True]).tolist() == [True]
    np.testing.assert_allclose(rdml.metric_matrix, a, rtol=1e-12)
    np.testing.assert_allclose(rdml.inverse_metric_matrix, np.linalg.inv(a), rtol=1e-10)
    # 3) no mistake: similar with d_A < 1, dissimilar with d_A > 1
    used = rdml.learn_pairs([[0.1, 0.0], [3.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]], [True, False])
    assert used.tolist() == [False, False]
    np.testing.assert_allclose(rdml.metric_matrix, a, rtol=1e-12)


def test_rdml_uncapped_similar_step_is_lambda():
    rdml = RDML(n_features=2, learning_rate=0.1, preprocess="none")
    # z = (1.5, 0): d_A = 2.25 >= 1; (1 − 0.5) / 2.25 = 0.222 > λ, so the step is λ = 0.1
    rdml.learn_pairs([[1.5, 0.0]], [[0.0, 0.0]], [True])
    np.testing.assert_allclose(rdml.metric_matrix, np.diag([1.0 - 0.1 * 2.25, 1.0]), rtol=1e-12)


# --------------------------------------------------------------------------------------- OASIS
def test_oasis_step_is_min_of_c_and_loss_over_frobenius_norm():
    p, p_pos, p_neg = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, 0.0]
    # W = I: S(p, p+) = 0, S(p, p−) = 0.5, loss = 1.5; V = p (p+ − p−)ᵀ, ‖V‖²_F = 1 · 1.25
    v = np.outer(p, np.subtract(p_pos, p_neg))
    assert float((v**2).sum()) == 1.25
    capped = OASIS(n_features=3, aggressiveness=0.1, preprocess="none")  # τ = min(0.1, 1.2) = 0.1
    assert capped.learn_triplets([p], [p_pos], [p_neg]).tolist() == [True]
    np.testing.assert_allclose(capped.similarity_matrix, np.eye(3) + 0.1 * v, rtol=1e-12)
    free = OASIS(n_features=3, aggressiveness=10.0, preprocess="none")  # τ = min(10, 1.2) = 1.2
    free.learn_triplets([p], [p_pos], [p_neg])
    np.testing.assert_allclose(free.similarity_matrix, np.eye(3) + 1.2 * v, rtol=1e-12)
    # passive-aggressive: after the uncapped step the triplet sits exactly on the margin
    w = free.similarity_matrix
    assert 1.0 - np.dot(p, w @ p_pos) + np.dot(p, w @ p_neg) == pytest.approx(0.0, abs=1e-12)


def test_oasis_no_update_when_loss_is_zero():
    oasis = OASIS(n_features=3, preprocess="none")
    # S(p, p+) = 1, S(p, p−) = 0: loss = max(0, 1 − 1 + 0) = 0
    used = oasis.learn_triplets([[1.0, 0.0, 0.0]], [[1.0, 1.0, 0.0]], [[0.0, 0.0, 1.0]])
    assert used.tolist() == [False]
    np.testing.assert_array_equal(oasis.similarity_matrix, np.eye(3))
    assert (oasis.updates, oasis.constraints_used) == (0, 0)


def test_oasis_pending_steps_give_the_step_by_step_w():
    """W is kept as W_base + U Vᵀ between folds; across several folds (PENDING_STEPS = 32) it
    matches the plain one-step-at-a-time OASIS loop up to round-off, decision for decision."""
    rng = np.random.default_rng(4)
    a, p, n = (rng.standard_normal((150, 6)).astype(np.float32) for _ in range(3))
    oasis = OASIS(n_features=6, aggressiveness=0.05, preprocess="none")
    used = oasis.learn_triplets(a[:70], p[:70], n[:70])
    used = np.concatenate([used, oasis.learn_triplets(a[70:], p[70:], n[70:])])
    w, expected_used = np.eye(6), []
    for q, pos, neg in zip(a.astype(float), p.astype(float), n.astype(float), strict=True):
        v = pos - neg
        loss = 1.0 - q @ w @ v
        expected_used.append(bool(loss > 0.0))
        if loss > 0.0:
            w += min(0.05, loss / ((q @ q) * (v @ v))) * np.outer(q, v)
    assert used.tolist() == expected_used and sum(expected_used) > 2 * PENDING_STEPS
    np.testing.assert_allclose(oasis.similarity_matrix, w, rtol=0, atol=1e-12)


def test_oasis_embeddings_reproduce_the_bilinear_similarity():
    rng = np.random.default_rng(0)
    oasis = OASIS(n_features=6, aggressiveness=0.5, preprocess="none")
    oasis.learn_triplets(*(rng.standard_normal((50, 6)) for _ in range(3)))
    assert oasis.updates > 10
    p, q = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    inner = oasis.embed(p, role="query")[0] @ oasis.embed(q, role="gallery")[0].T
    np.testing.assert_allclose(inner, p @ oasis.similarity_matrix @ q.T, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="role"):
        oasis.embed(p, role="index")


# ---------------------------------------------------------------------------------------- OPML
def test_opml_hand_example():
    opml = OPML(n_features=2, regularization=0.1)
    # x = (0, 0), x_p = (1, 0), x_q = (0, 1): a = (−1, 0), b = (0, −1), hinge 1 + 1 − 1 > 0
    # L = (I + 0.1 (a aᵀ − b bᵀ))⁻¹ = diag(1 / 1.1, 1 / 0.9), so M = Lᵀ L = diag(1/1.21, 1/0.81)
    expected = np.diag([1 / 1.21, 1 / 0.81])
    assert opml.learn_triplets([[0.0, 0.0]], [[1.0, 0.0]], [[0.0, 1.0]]).tolist() == [True]
    np.testing.assert_allclose(opml.metric_matrix, expected, rtol=1e-12)
    # ‖La‖² + 1 − ‖Lb‖² = 1/1.21 + 1 − 4/0.81 < 0: satisfied, no update
    assert opml.learn_triplets([[0.0, 0.0]], [[1.0, 0.0]], [[0.0, 2.0]]).tolist() == [False]
    np.testing.assert_allclose(opml.metric_matrix, expected, rtol=1e-12)


def test_opml_closed_form_equals_the_matrix_inverse_on_random_data():
    rng = np.random.default_rng(7)
    d, lam = 8, 0.05
    opml = OPML(n_features=d, regularization=lam)
    reference = np.eye(d)
    n_applied = 0
    for _ in range(40):
        # float32-representable inputs: learners take float32, the reference computes in float64
        x, xp, xq = (rng.standard_normal((3, d)) * 0.5).astype(np.float32).astype(np.float64)
        a, b = x - xp, x - xq
        violated = (reference @ a) @ (reference @ a) + 1.0 - (reference @ b) @ (reference @ b) > 0
        if violated:
            step = np.eye(d) + lam * (np.outer(a, a) - np.outer(b, b))
            reference = reference @ np.linalg.inv(step)
            n_applied += 1
        assert opml.learn_triplets([x], [xp], [xq]).tolist() == [violated]
    assert n_applied > 10
    np.testing.assert_allclose(opml.metric_matrix, reference.T @ reference, rtol=1e-9, atol=1e-12)


def test_opml_one_pass_triplets_use_latest_of_own_and_of_another_class():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3))
    # labels 0, 1, 0, 2, 1: sample 2 → (x2, x0, x1); sample 4 → (x4, x1, x3) (x3 is the latest
    # sample of a class other than 1); samples 0, 1, 3 open their class and form no triplet
    one_pass = OPML(n_features=3, regularization=0.05)
    used = one_pass.learn_samples(x, np.array([0, 1, 0, 2, 1]))
    explicit = OPML(n_features=3, regularization=0.05)
    expected_used = explicit.learn_triplets(x[[2, 4]], x[[0, 1]], x[[1, 3]])
    assert used[[0, 1, 3]].tolist() == [False, False, False]
    assert used[[2, 4]].tolist() == expected_used.tolist()
    np.testing.assert_array_equal(one_pass.metric_matrix, explicit.metric_matrix)
    assert one_pass.constraints_seen == 2


def test_opml_memory_carries_over_between_calls():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((30, 4)), rng.integers(0, 3, 30)
    whole, split = OPML(n_features=4, regularization=0.05), OPML(n_features=4, regularization=0.05)
    whole.learn_samples(x, y)
    split.learn_samples(x[:11], y[:11])
    split.learn_samples(x[11:], y[11:])
    np.testing.assert_array_equal(whole.metric_matrix, split.metric_matrix)
    assert whole.constraints_seen == split.constraints_seen > 20


def test_opml_skips_an_ill_posed_triplet():
    opml = OPML(n_features=2, regularization=0.5)
    # a = (−2, 0), b = (0, −1.5): the hinge 4 + 1 − 2.25 is violated, but
    # det(I + λ(a aᵀ − b bᵀ)) = (1 + 2)(1 − 1.125) < 0: indefinite, the objective has no minimiser
    used = opml.learn_triplets([[0.0, 0.0]], [[2.0, 0.0]], [[0.0, 1.5]])
    assert used.tolist() == [False]
    assert opml.skipped["ill_posed"] == 1
    np.testing.assert_array_equal(opml.metric_matrix, np.eye(2))


# ---------------------------------------------------------------------- embeddings and Euclidean
@pytest.mark.parametrize(
    "make", [lambda: LEGO(n_features=4, preprocess="none"), lambda: RDML(4, preprocess="none")]
)
def test_mahalanobis_embedding_distances_are_metric_distances(make):
    rng = np.random.default_rng(3)
    learner = make()
    x = rng.standard_normal((200, 4)) * 0.6
    learner.learn_pairs(x[:100], x[100:], rng.random(100) < 0.5)
    assert learner.updates > 5
    u, v = rng.standard_normal((2, 4))
    expected = (u - v) @ learner.metric_matrix @ (u - v)
    assert squared_embedded_distance(learner, u, v) == pytest.approx(expected, rel=1e-5)


def test_factor_of_a_singular_psd_matrix():
    z = np.array([1.0, 2.0, 2.0])
    a = np.eye(3) - np.outer(z, z) / 9.0  # PSD with eigenvalue 0 along z: Cholesky fails
    g = mahalanobis_factor(a)
    np.testing.assert_allclose(g @ g.T, a, atol=1e-12)


def test_euclidean_learns_nothing_and_embeds_identity():
    eu = Euclidean(n_features=3)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    assert eu.learn_triplets(x, x[::-1], x * 2).tolist() == [False, False]
    assert eu.learn_pairs(x, x * 2, [True, False]).tolist() == [False, False]
    np.testing.assert_array_equal(eu.embed(x), x[None])
    assert eu.embed(x, role="gallery").dtype == np.float32
    assert (eu.constraints_seen, eu.constraints_used, eu.updates) == (4, 0, 0)
