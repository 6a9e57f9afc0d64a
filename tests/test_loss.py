"""The per-depth losses, ABTL (Eq. 6-13) and the margin loss (ours), and the chain rule from a
constraint's distances to its embeddings, against hand-computed values and their stated
properties (docs/algorithms.md)."""

import math

import numpy as np
import pytest
import torch

from oahu.learners.oahu.config import OAHUConfig
from oahu.learners.oahu.loss import (
    ABTL,
    LOSSES,
    MarginLoss,
    constraint_distances,
    dissimilarity_threshold,
    embedding_gradient,
    similarity_threshold,
)

TAU = 0.1


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_threshold_boundaries() -> None:
    # d_sim(0) = 0, d_sim(2) = τ, d_dis(0) = 2 − τ, d_dis(2) = 2.
    assert similarity_threshold(t(0.0, 2.0), TAU).tolist() == pytest.approx([0.0, TAU])
    assert dissimilarity_threshold(t(0.0, 2.0), TAU).tolist() == pytest.approx([2 - TAU, 2.0])


def test_thresholds_at_one_by_hand() -> None:
    # τ(e − 1)/(e² − 1) = τ/(e + 1);  τ(1 − e⁻¹)/(1 − e⁻²) + 2 − τ = τ/(1 + e⁻¹) + 2 − τ
    assert float(similarity_threshold(t(1.0), TAU)) == pytest.approx(0.1 / (math.e + 1))
    assert float(similarity_threshold(t(1.0), TAU)) == pytest.approx(0.026894142, abs=1e-9)
    assert float(dissimilarity_threshold(t(1.0), TAU)) == pytest.approx(1.973105858, abs=1e-9)


@pytest.mark.parametrize(
    ("d_pos", "d_neg", "attr", "rep", "loss"),
    [
        (0.0, 2.0, 0.0, 0.0, 0.0),  # perfectly satisfied: no loss at all
        (0.0, 0.0, 0.0, 1.0, 0.5),  # negative on top of the anchor: full repulsive loss
        (2.0, 2.0, 1.0, 0.0, 0.5),  # positive at the antipode: full attractive loss
        (2.0, 0.0, 1.0, 1.0, 1.0),  # worst case
        # D = 1: (1 − 0.026894)/(2 − 0.026894) and 1 − 1/1.973106, both 0.493185
        (1.0, 1.0, 0.4931850, 0.4931850, 0.4931850),
        (1.0, 2.0, 0.4931850, 0.0, 0.2465925),
    ],
)
def test_abtl_by_hand(d_pos, d_neg, attr, rep, loss) -> None:
    got_loss, g_pos, g_neg = ABTL(TAU)(t(d_pos), t(d_neg))
    assert float(got_loss) == pytest.approx(loss, abs=1e-6)
    # Each part pulls (pushes) exactly where it is positive.
    assert (float(g_pos) > 0) == (attr > 0) and (float(g_neg) < 0) == (rep > 0)


def test_thresholds_bracket_distances_so_every_nontrivial_triplet_has_loss() -> None:
    d = torch.linspace(0, 2, 201, dtype=torch.float64)
    assert (similarity_threshold(d, TAU) <= d).all()
    assert (dissimilarity_threshold(d, TAU) >= d).all()
    grid_pos, grid_neg = torch.meshgrid(d, d, indexing="ij")
    loss, _, _ = ABTL(TAU)(grid_pos, grid_neg)
    assert ((loss >= 0) & (loss <= 1)).all()
    trivial = (grid_pos == 0) & (grid_neg == 2)
    assert (loss[~trivial] > 0).all()  # full constraint utilisation
    assert (loss[trivial] == 0).all()


def test_thresholds_are_monotone() -> None:
    d = torch.linspace(0, 2, 50, dtype=torch.float64)
    assert (similarity_threshold(d, TAU).diff() > 0).all()
    assert (dissimilarity_threshold(d, TAU).diff() > 0).all()


def test_gradients_hold_thresholds_constant() -> None:
    d_pos = t(0.3, 1.0, 1.7, 0.0).requires_grad_(True)
    d_neg = t(0.2, 1.0, 1.99, 2.0).requires_grad_(True)
    # Autograd of Eq. 13 with c1, c2 detached is the reference.
    c1 = similarity_threshold(d_pos.detach(), TAU)
    c2 = dissimilarity_threshold(d_neg.detach(), TAU)
    ref = 0.5 * (torch.clamp((d_pos - c1) / (2 - c1), min=0) + torch.clamp(1 - d_neg / c2, min=0))
    ref.sum().backward()
    loss, g_pos, g_neg = ABTL(TAU)(d_pos.detach(), d_neg.detach())
    assert torch.allclose(loss, ref.detach())
    assert torch.allclose(g_pos, d_pos.grad)
    assert torch.allclose(g_neg, d_neg.grad)
    # By hand at D = 1: ∂L/∂D+ = 1/(2(2 − c1)), ∂L/∂D− = −1/(2 c2).
    assert float(g_pos[1]) == pytest.approx(0.5 / (2 - 0.026894142), abs=1e-7)
    assert float(g_neg[1]) == pytest.approx(-0.5 / 1.973105858, abs=1e-7)


def test_vectorised_over_depths_and_batch() -> None:
    d_pos = torch.rand(6, 32, dtype=torch.float64) * 2
    d_neg = torch.rand(6, 32, dtype=torch.float64) * 2
    loss, _, _ = ABTL(TAU)(d_pos, d_neg)
    one, _, _ = ABTL(TAU)(d_pos[3, 7:8], d_neg[3, 7:8])
    assert loss.shape == (6, 32)
    assert float(loss[3, 7]) == float(one[0])


@pytest.mark.parametrize("loss", [ABTL(TAU), MarginLoss(0.2)])
def test_numpy_and_torch_agree(loss) -> None:
    d_pos = np.array([0.0, 0.4, 1.3, 2.0], dtype=np.float32)
    d_neg = np.array([0.1, 1.9, 0.6, 2.0], dtype=np.float32)
    on_numpy = loss(d_pos, d_neg)
    on_torch = loss(torch.from_numpy(d_pos), torch.from_numpy(d_neg))
    for a, b in zip(on_numpy, on_torch, strict=True):
        assert isinstance(a, np.ndarray) and a.dtype == np.float32
        assert a.tolist() == pytest.approx(b.tolist(), abs=1e-6)


def test_margin_loss_by_hand() -> None:
    # D+ − D− + m = 0.5 − 0.6 + 0.2 = 0.1 > 0: active, ∂/∂D+ = 1, ∂/∂D− = −1. The second triplet
    # ranks its positive closer by more than the margin (0.2 − 0.9 + 0.2 < 0): inactive.
    loss, g_pos, g_neg = MarginLoss(margin=0.2)(t(0.5, 0.2), t(0.6, 0.9))
    assert loss.tolist() == pytest.approx([0.1, 0.0], abs=1e-12)
    assert g_pos.tolist() == [1.0, 0.0] and g_neg.tolist() == [-1.0, 0.0]


def test_losses_are_built_by_name_from_the_config() -> None:
    margin = LOSSES["margin"].from_config(OAHUConfig(margin=0.3))
    abtl = LOSSES["abtl"].from_config(OAHUConfig(loss="abtl", tau=0.2))
    assert isinstance(margin, MarginLoss) and margin.margin == 0.3
    assert isinstance(abtl, ABTL) and abtl.tau == 0.2
    # The margin loss leaves most constraints inactive, so a step may find nothing to learn;
    # ABTL's absolute bounds keep nearly all of them active.
    assert (MarginLoss.always_active, ABTL.always_active) == (False, True)


def test_distances_of_triplets_and_quadruplets_by_hand() -> None:
    # One depth, one constraint, 2-d embeddings role by role.
    a, p, n = [0.0, 0.0], [3.0, 4.0], [0.0, 1.0]
    _, dists = constraint_distances(t(a, p, n).reshape(1, 3, 1, 2), n_roles=3)
    assert dists.flatten().tolist() == [5.0, 1.0]  # D(a, p), D(a, n)
    c, d = [6.0, 8.0], [6.0, 6.0]
    _, dists = constraint_distances(t(a, p, c, d).reshape(1, 4, 1, 2), n_roles=4)
    assert dists.flatten().tolist() == [5.0, 2.0]  # D(a, b), D(c, d)


def test_embedding_gradient_of_a_quadruplet_by_hand() -> None:
    # a − b = (3, 4), c − d = (0, 2); ∂L/∂D+ = 1, ∂L/∂D− = −1, depth scale 0.5:
    # ∂/∂a = 0.5 · (0.6, 0.8), ∂/∂b = −∂/∂a, ∂/∂c = 0.5 · −1 · (0, 1), ∂/∂d = −∂/∂c.
    f = t(0.0, 0.0, -3.0, -4.0, 6.0, 8.0, 6.0, 6.0).reshape(1, 4, 1, 2)
    diffs, dists = constraint_distances(f, n_roles=4)
    grad = embedding_gradient(t(0.5), t(1.0)[None], t(-1.0)[None], diffs, dists, n_roles=4)
    assert grad.shape == (1, 4, 1, 2)
    assert grad.flatten().tolist() == pytest.approx(
        [0.3, 0.4, -0.3, -0.4, 0.0, -0.5, 0.0, 0.5], abs=1e-12
    )


def test_embedding_gradient_matches_autograd_of_the_distances() -> None:
    f = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    f.requires_grad_(True)
    g_pos, g_neg = torch.rand(2, 4, dtype=torch.float64), -torch.rand(2, 4, dtype=torch.float64)
    scale = t(0.25, 0.75)
    diffs, dists = constraint_distances(f, n_roles=3)
    (scale[:, None] * (g_pos * dists[:, 0, :, 0] + g_neg * dists[:, 1, :, 0])).sum().backward()
    got = embedding_gradient(scale, g_pos, g_neg, diffs.detach(), dists.detach(), n_roles=3)
    assert torch.allclose(got, f.grad)
