"""ABTL (Eq. 9-13) against hand-computed values and its stated properties (docs/algorithms.md)."""

import math

import pytest
import torch

from oahu.learners.oahu.loss import (
    abtl,
    abtl_with_gradients,
    dissimilarity_threshold,
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
    got_loss, got_attr, got_rep = abtl(t(d_pos), t(d_neg), TAU)
    assert float(got_attr) == pytest.approx(attr, abs=1e-6)
    assert float(got_rep) == pytest.approx(rep, abs=1e-6)
    assert float(got_loss) == pytest.approx(loss, abs=1e-6)


def test_thresholds_bracket_distances_so_every_nontrivial_triplet_has_loss() -> None:
    d = torch.linspace(0, 2, 201, dtype=torch.float64)
    assert (similarity_threshold(d, TAU) <= d).all()
    assert (dissimilarity_threshold(d, TAU) >= d).all()
    grid_pos, grid_neg = torch.meshgrid(d, d, indexing="ij")
    loss, _, _ = abtl(grid_pos, grid_neg, TAU)
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
    loss, g_pos, g_neg = abtl_with_gradients(d_pos.detach(), d_neg.detach(), TAU)
    assert torch.allclose(loss, ref.detach())
    assert torch.allclose(g_pos, d_pos.grad)
    assert torch.allclose(g_neg, d_neg.grad)
    # By hand at D = 1: ∂L/∂D+ = 1/(2(2 − c1)), ∂L/∂D− = −1/(2 c2).
    assert float(g_pos[1]) == pytest.approx(0.5 / (2 - 0.026894142), abs=1e-7)
    assert float(g_neg[1]) == pytest.approx(-0.5 / 1.973105858, abs=1e-7)


def test_vectorised_over_depths_and_batch() -> None:
    d_pos = torch.rand(6, 32, dtype=torch.float64) * 2
    d_neg = torch.rand(6, 32, dtype=torch.float64) * 2
    loss, _, _ = abtl(d_pos, d_neg, TAU)
    one, _, _ = abtl(d_pos[3, 7:8], d_neg[3, 7:8], TAU)
    assert loss.shape == (6, 32)
    assert float(loss[3, 7]) == float(one[0])


def test_numpy_and_torch_agree() -> None:
    import numpy as np

    d_pos = np.array([0.0, 0.4, 1.3, 2.0], dtype=np.float32)
    d_neg = np.array([0.1, 1.9, 0.6, 2.0], dtype=np.float32)
    on_numpy = abtl_with_gradients(d_pos, d_neg, TAU)
    on_torch = abtl_with_gradients(torch.from_numpy(d_pos), torch.from_numpy(d_neg), TAU)
    for a, b in zip(on_numpy, on_torch, strict=True):
        assert isinstance(a, np.ndarray)
        assert a.tolist() == pytest.approx(b.tolist(), abs=1e-6)
