"""The parameter step (Eq. 21-22) against a hand computation and against autograd.

These check the paper's algorithm, so every learner here is ``preset="paper"`` (ABTL, the
α-weighted gradient, no residual heads, no replay or mining); oahu's default learner steps
through the same code (tests/test_oahu_learner.py checks its modes).
"""

import math

import numpy as np
import pytest
import torch
from step_reference import ETA, TAU, reference_step

from oahu.learners.oahu.learner import OAHU


def test_linear_head_step_by_hand() -> None:
    # L = 0: only E0. Θ0 = I, a = (1, 0), p = (0, 1), n = (−1, 0) → f = the inputs themselves.
    # D+ = √2, D− = 2 = c2 (no repulsive gradient). ∂L/∂D+ = g = 1/(2(2 − c1)).
    # ∂f_a: g(f_a − f_p)/D+ = g/√2·(1, −1), projected off f_a = (1, 0): (0, −g/√2)
    # ∂f_p: g/√2·(−1, 1), projected off f_p = (0, 1): (−g/√2, 0)
    # ∂Θ0 = Σ ∂raw ⊗ x = [[0, −g/√2], [−g/√2, 0]] → Θ0' = [[1, ηg/√2], [ηg/√2, 1]]
    model = OAHU(
        2,
        preset="paper",
        n_hidden_layers=0,
        embedding_dim=2,
        tau=TAU,
        learning_rate=ETA,
        device="cpu",
    )
    model.network.head0.copy_(torch.eye(2))
    a, p, n = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[-1.0, 0.0]])
    used = model.learn_triplets(a, p, n)
    c1 = TAU / (math.e**2 - 1) * (math.exp(math.sqrt(2)) - 1)
    off = ETA * 0.5 / (2 - c1) / math.sqrt(2)
    assert off == pytest.approx(0.054357, abs=1e-6)
    expected = torch.tensor([[1.0, off], [off, 1.0]])
    assert torch.allclose(model.network.head0, expected, atol=1e-7)
    assert used.tolist() == [True]
    assert model.alpha.tolist() == [1.0]  # one depth: the hedge keeps α = [1]


def _tiny_model(batch_size: int = 1, preset: str | None = "paper") -> OAHU:
    # Seed chosen so that no ReLU unit is dead for these inputs (a dead unit makes D+ = 0 at
    # some depth, where autograd's norm gradient is 0/0 and ours is 0).
    model = OAHU(
        5,
        preset=preset,
        n_hidden_layers=3,
        hidden_width=6,
        embedding_dim=3,
        tau=TAU,
        learning_rate=ETA,
        batch_size=batch_size,
        seed=3,
        device="cpu",
    )
    if model.needs_prepare:  # oahu's default projects onto principal axes fitted on items
        model.prepare(np.random.default_rng(11).random((60, 5), dtype=np.float32))
    # Far into a stream, where a micro-batch update takes the whole batch (B3).
    model.update_step.learned = 10_000
    return model


def _triplets(n: int) -> np.ndarray:
    return np.random.default_rng(7).random((n, 3, 5), dtype=np.float32)


def test_step_equals_autograd_on_weighted_sum() -> None:
    model = _tiny_model()
    trip = _triplets(1)
    expected, _ = reference_step(model, trip, per_depth=False)
    model.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    for name, value in model.network.tensors().items():
        assert torch.allclose(value.double(), expected[name], atol=1e-6), name


def test_step_is_eq21_and_eq22() -> None:
    """Θ(l) moves by −ηα(l)∇L(l) alone (Eq. 21); W(l) by −ηΣ_{j≥l} α(j)∇L(j) (Eq. 22)."""
    model = _tiny_model()
    trip = _triplets(1)
    before = {k: v.clone().double() for k, v in model.network.tensors().items()}
    per_depth, _ = reference_step(model, trip, per_depth=True)
    alpha = model.alpha
    model.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    after = {k: v.double() for k, v in model.network.tensors().items()}
    n_layers = model.config.n_hidden_layers
    # Eq. 21, depth 0: only L(0) reaches Θ(0).
    assert torch.allclose(
        after["head0"], before["head0"] - ETA * alpha[0] * per_depth["head0"][0], atol=1e-6
    )
    for j in range(1, model.n_depths):
        assert torch.count_nonzero(per_depth["head0"][j]) == 0
    # Eq. 21, deeper heads: Θ(l) sees only L(l).
    for l in range(1, model.n_depths):
        own = per_depth["heads"][l][l - 1]
        assert torch.allclose(
            after["heads"][l - 1], before["heads"][l - 1] - ETA * alpha[l] * own, atol=1e-6
        )
    # Eq. 22: W(l) collects the losses of depths j ≥ l only.
    for l in range(1, n_layers + 1):
        grads = per_depth[f"W{l}"]
        for j in range(l):
            assert torch.count_nonzero(grads[j]) == 0
        combined = sum(alpha[j] * grads[j] for j in range(l, model.n_depths))
        assert torch.allclose(after[f"W{l}"], before[f"W{l}"] - ETA * combined, atol=1e-6)


def test_hedge_uses_pre_update_losses() -> None:
    model = _tiny_model()
    trip = _triplets(1)
    _, losses = reference_step(model, trip, per_depth=False)
    model.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    assert model.last_losses.double().tolist() == pytest.approx(
        [float(v.detach()) for v in losses], abs=1e-6
    )


def _tiny_batch_model(max_step_change: float) -> OAHU:
    model = _tiny_model(batch_size=4)
    model.update_step.config = model.config.replace(max_step_change=max_step_change)
    return model


def test_a_micro_batch_step_moves_as_far_as_its_constraints_would_alone() -> None:
    """B new constraints step along the sum of their gradients, B times the batch mean (B1):
    each constraint counts as much as in a strict step. (No trust region here: it would not
    bind on four triplets at η = 0.3 anyway, but this checks the sum alone.)"""
    model = _tiny_batch_model(max_step_change=1e9)
    before = {k: v.clone().double() for k, v in model.network.tensors().items()}
    trip = _triplets(4)
    mean_step, _ = reference_step(model, trip, per_depth=False)  # θ − η · mean gradient
    model.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    assert model.updates == 1
    for name, value in model.network.tensors().items():
        expected = before[name] + 4 * (mean_step[name] - before[name])
        assert torch.allclose(value.double(), expected, atol=1e-6), name


def test_the_trust_region_shortens_a_micro_batch_step_to_its_bound() -> None:
    """‖Δθ‖ ≤ max_step_change · ‖θ‖ (B2): a step that would go further is scaled down along
    its own direction, to exactly the bound."""
    free = _tiny_batch_model(max_step_change=1e9)
    bounded = _tiny_batch_model(max_step_change=1e-3)
    start = torch.cat([v.flatten().double() for v in free.network.tensors().values()])
    trip = _triplets(4)
    for model in (free, bounded):
        model.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    moved = {
        name: torch.cat([v.flatten().double() for v in m.network.tensors().values()]) - start
        for name, m in (("free", free), ("bounded", bounded))
    }
    assert float(moved["free"].norm() / start.norm()) > 1e-2  # far beyond the bound
    assert float(moved["bounded"].norm() / start.norm()) == pytest.approx(1e-3, rel=1e-4)
    direction = torch.nn.functional.cosine_similarity(moved["free"], moved["bounded"], dim=0)
    assert float(direction) == pytest.approx(1.0, abs=1e-6)


def _on_torch_path(model: OAHU) -> OAHU:
    """The same learner, stepping with torch tensors as it does on a GPU, here on the CPU."""
    step = model.update_step
    step.on_host = False
    step.alpha = torch.from_numpy(step.alpha.copy())
    step.last_losses = torch.from_numpy(step.last_losses.copy())
    return model


@pytest.mark.parametrize("preset", ["paper", None])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_torch_path_equals_numpy_path(batch_size: int, preset: str | None) -> None:
    # On the CPU the step runs on numpy views; on a GPU the same code runs on torch tensors.
    # This session's machine has no GPU, so the torch path is checked here, on the CPU, for the
    # paper's algorithm and for oahu's default (margin loss, hedge on mistakes, replay, mining).
    host = _tiny_model(batch_size, preset)
    device_like = _on_torch_path(_tiny_model(batch_size, preset))
    trip = _triplets(12)  # more steps at η = 0.3 amplify float rounding beyond 1e-5
    used_host = host.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    used_torch = device_like.learn_triplets(trip[:, 0], trip[:, 1], trip[:, 2])
    assert used_host.tolist() == used_torch.tolist()
    assert host.updates == device_like.updates == 12 // batch_size
    for name, value in host.network.tensors().items():
        assert torch.allclose(value, device_like.network.tensors()[name], atol=1e-5), name
    assert np.allclose(host.alpha, device_like.alpha, atol=1e-6)
    if preset == "paper":
        assert not np.allclose(host.alpha, 1.0 / host.n_depths)  # the hedge did move
    else:  # every depth starts at E0's metric and ranks alike: α stays, the weights move
        start = _tiny_model(batch_size, preset).network.tensors()
        moved = [not torch.equal(v, start[k]) for k, v in host.network.tensors().items()]
        assert all(moved)
