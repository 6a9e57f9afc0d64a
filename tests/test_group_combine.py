"""Combining the models of a learning group's members: the arithmetic of both rules by hand, and
OAHU's parameters and hedge weights as the group combines them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oahu.combinable import CombineValues
from oahu.learners.oahu.learner import OAHU
from oahu.registry import make_learner
from oahu.service.config import ServiceConfig
from oahu.service.group.combine import combine_in_process, combine_rule, pack, unpack
from oahu.service.group.loop import round_records


def _values(averaged: list[float], summed: list[float]) -> CombineValues:
    return CombineValues(torch.tensor(averaged, dtype=torch.float64), np.array(summed))


LAST = torch.tensor([9.0, 9.0], dtype=torch.float64)  # what the last combine gave every member


def _three_members(rule: str):
    # member 0 learned 2 constraints, member 1 learned 6, member 2 none (its model is the last
    # combined one, which must not pull the others back)
    last = CombineValues(LAST, np.array([100.0, 10.0]))
    parts = [
        pack(_values([1.0, -2.0], [102.0, 11.0]), last, 2.0, [0.0, 1.0], rule),
        pack(_values([3.0, 2.0], [106.0, 10.0]), last, 6.0, [1.0, 0.0], rule),
        pack(_values([9.0, 9.0], [100.0, 10.0]), last, 0.0, [0.0, 1.0], rule),
    ]
    return unpack(sum(parts), last, n_signals=2, rule=rule)


def test_weighted_mean_and_summed_counters_by_hand() -> None:
    combined, signals = _three_members("mean")
    # (2·1 + 6·3) / 8 = 2.5 and (2·(−2) + 6·2) / 8 = 1.0
    assert combined.averaged.tolist() == [2.5, 1.0]
    # 100 + 2 + 6 + 0 and 10 + 1 + 0 + 0
    assert combined.summed.tolist() == [108.0, 11.0]
    assert signals.tolist() == [1.0, 2.0]


def test_summed_changes_and_counters_by_hand() -> None:
    combined, signals = _three_members("sum")
    # 9 + (1 − 9) + (3 − 9) + 0 = −5 and 9 + (−2 − 9) + (2 − 9) + 0 = −9
    assert combined.averaged.tolist() == [-5.0, -9.0]
    assert combined.summed.tolist() == [108.0, 11.0]
    assert signals.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("rule", ["mean", "sum"])
def test_a_round_in_which_nobody_learned_changes_no_parameter(rule) -> None:
    last = CombineValues(LAST, np.array([5.0]))
    part = pack(_values([9.0, 9.0], [5.0]), last, 0.0, [], rule)
    combined, _ = unpack(part, last, n_signals=0, rule=rule)
    assert combined.averaged.numel() == 0 and combined.summed.tolist() == [5.0]


def test_strict_learners_add_up_their_changes_and_micro_batches_average() -> None:
    assert combine_rule(OAHU(n_features=2)) == "sum"
    assert combine_rule(OAHU(n_features=2, batch_size=4)) == "mean"


def _two_oahu() -> tuple[OAHU, OAHU, CombineValues]:
    """Two copies of one model, each after its own strict triplets (5 and 3), and the values
    they started from."""
    rng = np.random.default_rng(0)
    models = []
    for _ in range(2):
        m = OAHU(n_features=4, hidden_width=6, n_hidden_layers=2, device="cpu", preprocess="none")
        models.append(m)
    start = models[0].combine_values()
    torch.testing.assert_close(models[1].combine_values().averaged, start.averaged)
    a, p, n = rng.random((3, 5, 4), dtype=np.float32)
    models[0].learn_triplets(a, p, n)
    b, q, r = rng.random((3, 3, 4), dtype=np.float32)
    models[1].learn_triplets(b, q, r)
    return models[0], models[1], start


def _weights(m: OAHU) -> torch.Tensor:
    return m.network.tensors()["W1"].clone().double()


def _assert_one_model(m0: OAHU, m1: OAHU) -> None:
    """Both hold one model: the same embedding of the same items."""
    x = np.random.default_rng(1).random((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(m0.embed(x), m1.embed(x))


def test_oahu_parameters_are_averaged_by_constraints_learned() -> None:
    m0, m1, start = _two_oahu()
    w0, w1 = _weights(m0), _weights(m1)
    combine_in_process([m0, m1], [5.0, 3.0], start, "mean")
    expected = (5.0 * w0 + 3.0 * w1) / 8.0
    for m in (m0, m1):
        np.testing.assert_allclose(m.network.tensors()["W1"].numpy(), expected.numpy(), atol=1e-7)
    _assert_one_model(m0, m1)


def test_oahu_parameter_changes_are_added_up() -> None:
    m0, m1, start = _two_oahu()
    w0, w1 = _weights(m0), _weights(m1)
    w_start = _weights(OAHU(n_features=4, hidden_width=6, n_hidden_layers=2, preprocess="none"))
    assert not torch.equal(w0, w_start) and not torch.equal(w1, w_start)
    combined = combine_in_process([m0, m1], [5.0, 3.0], start, "sum")
    expected = w_start + (w0 - w_start) + (w1 - w_start)
    for m in (m0, m1):
        np.testing.assert_allclose(m.network.tensors()["W1"].numpy(), expected.numpy(), atol=1e-7)
    _assert_one_model(m0, m1)
    # what the next combine starts from is what every member now holds
    torch.testing.assert_close(combined.averaged, m1.combine_values().averaged)


def _alpha_combined(rule: str, a0: list[float], a1: list[float]) -> list[np.ndarray]:
    m0, m1, start = _two_oahu()  # started at α = (1/3, 1/3, 1/3)
    m0.update_step.alpha = np.array(a0, np.float32)
    m1.update_step.alpha = np.array(a1, np.float32)
    combine_in_process([m0, m1], [1.0, 1.0], start, rule)
    return [m0.alpha, m1.alpha]


def test_oahu_alpha_is_the_renormalised_weighted_geometric_mean() -> None:
    # by hand: sqrt(0.5·0.2) = 0.31623, sqrt(0.3·0.2) = 0.24495, sqrt(0.2·0.6) = 0.34641,
    # summing to 0.90759; divided by it
    geometric = [math.sqrt(0.5 * 0.2), math.sqrt(0.3 * 0.2), math.sqrt(0.2 * 0.6)]
    expected = [g / sum(geometric) for g in geometric]
    np.testing.assert_allclose(expected, [0.34843, 0.26989, 0.38168], atol=1e-5)
    for alpha in _alpha_combined("mean", [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]):
        np.testing.assert_allclose(alpha, expected, atol=1e-6)


def test_oahu_alpha_multiplies_the_members_discounts() -> None:
    # each member's discount of a depth is α_i / (1/3); together (0.5·0.2, 0.3·0.2, 0.2·0.6)·3,
    # proportional to (0.10, 0.06, 0.12): 0.10 / 0.28 = 0.35714, 0.21429, 0.42857
    for alpha in _alpha_combined("sum", [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]):
        np.testing.assert_allclose(alpha, [0.35714, 0.21429, 0.42857], atol=1e-5)


def test_oahu_alpha_is_floored_after_the_discounts_multiply() -> None:
    # (0.9², 0.05², 0.05²) normalised is (0.993865, 0.003067, 0.003067); the floor
    # s/(L+1) = 0.1/3 raises both small ones to 0.033333, and renormalising (sum 1.060532)
    # gives 0.937138 and 0.031431, as the hedge's own step floors
    for alpha in _alpha_combined("sum", [0.9, 0.05, 0.05], [0.9, 0.05, 0.05]):
        np.testing.assert_allclose(alpha, [0.937138, 0.031431, 0.031431], atol=1e-6)


@pytest.mark.parametrize("rule", ["mean", "sum"])
def test_counters_are_summed_over_the_members(rule) -> None:
    m0, m1, start = _two_oahu()  # 5 and 3 triplets, one update each (strict)
    combined = combine_in_process([m0, m1], [5.0, 3.0], start, rule)
    for m in (m0, m1):
        assert (m.constraints_seen, m.updates, m.update_step.learned) == (8, 8, 8)
    assert combined.summed[:3].tolist() == [8.0, m0.constraints_used, 8.0]


def test_a_learner_that_cannot_combine_is_refused_with_more_than_one_learner() -> None:
    assert OAHU.capabilities.combines_parameters
    assert not make_learner("lego", 3).capabilities.combines_parameters
    with pytest.raises(ValueError, match=r"learners: 2 learner .* 'lego' declares no way"):
        ServiceConfig(learners=2, learner="lego")
    with pytest.raises(ValueError, match=r"learners: must be an integer >= 1, got 0"):
        ServiceConfig(learners=0)
    with pytest.raises(ValueError, match="group_address: expected tcp://HOST:PORT or env://"):
        ServiceConfig(learners=2, group_address="127.0.0.1:29500")
    assert ServiceConfig().learners == 1
    with pytest.raises(ValueError, match=r"combine_every: must be an integer >= 1, got 0"):
        ServiceConfig(learners=2, combine_every=0)


def test_a_round_is_256_strict_steps_or_64_micro_batches_unless_k_is_given() -> None:
    config = ServiceConfig(learners=2)
    assert round_records(config, OAHU(n_features=3)) == 256
    assert round_records(config, OAHU(n_features=3, batch_size=16)) == 64 * 16
    given = config.replace(combine_every=5)
    assert round_records(given, OAHU(n_features=3)) == 5
    assert round_records(given, OAHU(n_features=3, batch_size=16)) == 5 * 16
