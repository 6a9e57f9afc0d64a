"""The hedge step of Eq. 20 with the floor s/(L+1) and renormalisation, worked by hand."""

import math

import pytest
import torch

from oahu.learners.oahu.hedge import hedge_update


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_linear_branch_by_hand() -> None:
    # L_min = 0.2: 0.99^0.2 · ln 0.2 = −1.606 ≤ β − 1 = −0.01 → α·(1 − (1 − β)L)
    # α·[0.998, 0.995, 0.990] = [0.499, 0.24875, 0.2475]; Σ = 0.99525; none below 0.1/3.
    new = hedge_update(t(0.5, 0.25, 0.25), t(0.2, 0.5, 1.0), beta=0.99, smoothing=0.1)
    assert new.tolist() == pytest.approx(
        [0.499 / 0.99525, 0.24875 / 0.99525, 0.2475 / 0.99525], abs=1e-12
    )


def test_multiplicative_branch_by_hand() -> None:
    # L_min = 0.999: 0.99^0.999 · ln 0.999 = −0.00099 > −0.01 → α·β^L
    factor_a, factor_b = 0.99**1.0, 0.99**0.999
    new = hedge_update(t(0.5, 0.5), t(1.0, 0.999), beta=0.99, smoothing=0.1)
    total = 0.5 * factor_a + 0.5 * factor_b
    assert new.tolist() == pytest.approx([0.5 * factor_a / total, 0.5 * factor_b / total])
    assert 0.99**0.999 * math.log(0.999) > 0.99 - 1  # the branch really is the first one


def test_zero_minimum_loss_takes_linear_branch_and_floor_applies() -> None:
    # β = 0.5, L = [0, 1, 1]: ln 0 = −∞ → linear: α·[1, 0.5, 0.5] = [0.9, 0.025, 0.025]
    # floor s/(L+1) = 0.1/3 lifts the two small ones to 0.0333…; Σ = 0.9666…
    floor = 0.1 / 3
    new = hedge_update(t(0.9, 0.05, 0.05), t(0.0, 1.0, 1.0), beta=0.5, smoothing=0.1)
    total = 0.9 + 2 * floor
    assert new.tolist() == pytest.approx([0.9 / total, floor / total, floor / total], abs=1e-12)


def test_result_is_a_distribution_and_input_untouched() -> None:
    alpha = torch.full((6,), 1 / 6, dtype=torch.float64)
    losses = torch.rand(6, dtype=torch.float64)
    new = hedge_update(alpha, losses, beta=0.99, smoothing=0.1)
    assert float(new.sum()) == pytest.approx(1.0)
    assert (new > 0).all()
    assert torch.equal(alpha, torch.full((6,), 1 / 6, dtype=torch.float64))


def test_lower_loss_gains_weight() -> None:
    new = hedge_update(t(0.25, 0.25, 0.25, 0.25), t(0.1, 0.2, 0.3, 0.4), beta=0.9, smoothing=0.0)
    assert (new.diff() < 0).all()


def test_numpy_and_torch_agree() -> None:
    import numpy as np

    alpha = np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32)
    losses = np.array([0.7, 0.2, 0.0, 1.0], dtype=np.float32)
    on_numpy = hedge_update(alpha, losses, beta=0.99, smoothing=0.1)
    on_torch = hedge_update(torch.from_numpy(alpha), torch.from_numpy(losses), 0.99, 0.1)
    assert isinstance(on_numpy, np.ndarray)
    assert on_numpy.tolist() == pytest.approx(on_torch.tolist(), abs=1e-7)
