"""The hedge step of Eq. 20 with the floor s/(L+1) and renormalisation, worked by hand, and the
signals that drive it: the training loss (the paper) and the prequential mistakes (ours)."""

import math

import numpy as np
import pytest
import torch

from oahu.learners.oahu.hedge import HEDGE_SIGNALS, LossSignal, MistakeSignal, hedge_update
from oahu.learners.oahu.learner import OAHU


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


def test_an_update_of_b_constraints_discounts_as_b_updates_would() -> None:
    # Three constraints of one update, one column each (ours, H2): each takes its own branch.
    # Column 0 as in the linear test (L_min = 0.2): [0.998, 0.995, 0.990]; column 1, L_min =
    # 0.999: β^L = [0.99^0.999, 0.99, 0.99]; column 2, L_min = 0: linear, [1, 0.99, 0.99].
    signals = torch.tensor(
        [[0.2, 0.999, 0.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64
    )
    new = hedge_update(t(0.5, 0.25, 0.25), signals, beta=0.99, smoothing=0.1)
    product = [0.998 * 0.99**0.999 * 1.0, 0.995 * 0.99 * 0.99, 0.990 * 0.99 * 0.99]
    raw = [a * f / max(product) for a, f in zip([0.5, 0.25, 0.25], product, strict=True)]
    assert new.tolist() == pytest.approx([v / sum(raw) for v in raw], abs=1e-12)
    # With 0/1 mistakes, one update of three constraints is the three updates one by one (the
    # floor does not bind here).
    mistakes = [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]  # depth 0 erred 3 times, depth 1 twice
    once = t(0.5, 0.5)
    for row in mistakes:
        once = hedge_update(once, t(*row), beta=0.99, smoothing=0.1)
    batch = hedge_update(t(0.5, 0.5), torch.tensor(mistakes, dtype=torch.float64).T, 0.99, 0.1)
    assert batch.tolist() == pytest.approx(once.tolist(), abs=1e-12)
    # A batch too long for a product of its factors (0.99^100,000 underflows) still hedges.
    long = hedge_update(
        t(0.5, 0.5), torch.ones(2, 100_000, dtype=torch.float64) * t(1.0, 0.5)[:, None], 0.99, 0.1
    )
    # L_min = 0.5: the linear branch, 0.99 against 0.995 a hundred thousand times: depth 0's
    # relative factor is e^-504, floored at s/(L+1) = 0.05 beside depth 1's 0.5.
    assert long.tolist() == pytest.approx([0.05 / 0.55, 0.5 / 0.55])


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


def test_the_signals_pick_what_an_update_measured() -> None:
    losses, mistakes = t(0.3, 0.1, 0.6)[:, None], t(0.0, 0.0, 1.0)[:, None]
    assert LossSignal()(losses, mistakes) is losses
    assert MistakeSignal()(losses, mistakes) is mistakes
    assert MistakeSignal()(losses, torch.zeros(3, 2)) is None  # no depth erred
    assert (HEDGE_SIGNALS["loss"], HEDGE_SIGNALS["mistakes"]) == (LossSignal, MistakeSignal)


def _hedging(signal: str) -> OAHU:
    """A 3-depth learner whose α sits below the floor s/(L+1) = 0.1/3 on two depths: the floor
    and renormalisation alone would move it."""
    model = OAHU(n_features=4, n_hidden_layers=2, preprocess="none", hedge_signal=signal)
    step = model.update_step
    step.alpha = np.array([0.98, 0.01, 0.01], dtype=np.float32)
    step.mistakes = np.zeros((3, 1), dtype=np.float32)
    return model


LOSSES = np.array([[0.2], [0.0], [0.4]], dtype=np.float32)  # one new constraint's, per depth


def test_mistake_signal_leaves_alpha_exactly_as_it_is_when_no_depth_erred() -> None:
    model = _hedging("mistakes")
    before = model.update_step.alpha
    # Eq. 20 on all-zero mistakes would still floor and renormalise α ...
    assert not np.allclose(hedge_update(before, model.update_step.mistakes, 0.99, 0.1), before)
    model.update_step.hedge(LOSSES)
    # ... which the signal skips: α stays, to the bit.
    assert model.update_step.alpha is before
    assert np.array_equal(before, np.array([0.98, 0.01, 0.01], dtype=np.float32))


def test_mistake_signal_discounts_the_depths_that_erred() -> None:
    model = _hedging("mistakes")
    model.update_step.mistakes = np.array([[0.0], [1.0], [0.0]], dtype=np.float32)
    model.update_step.hedge(LOSSES)
    # Linear branch (L_min = 0): [0.98, 0.01 · 0.99, 0.01], floored at 1/30: [0.98, 1/30, 1/30].
    floor = 0.1 / 3
    total = 0.98 + 2 * floor
    assert model.alpha.tolist() == pytest.approx([0.98 / total, floor / total, floor / total])


def test_loss_signal_hedges_on_the_new_constraints_losses() -> None:
    model = _hedging("loss")
    model.update_step.hedge(LOSSES)
    # Linear branch (L_min = 0): α · (1 − 0.01 · L) = [0.98 · 0.998, 0.01, 0.01 · 0.996], the
    # last two floored at 1/30, then renormalised.
    floor = 0.1 / 3
    total = 0.98 * 0.998 + 2 * floor
    expected = [0.98 * 0.998 / total, floor / total, floor / total]
    assert model.alpha.tolist() == pytest.approx(expected, abs=1e-6)
