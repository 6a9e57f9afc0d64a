"""Combining the models of a learning group's members: the arithmetic by hand, and OAHU's
parameters and hedge weights as the group combines them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from oahu.learner import CombineValues
from oahu.learners.oahu.learner import OAHU
from oahu.registry import make_learner
from oahu.service.config import ServiceConfig
from oahu.service.group.combine import combine_in_process, pack, unpack


def _values(averaged: list[float], summed: list[float]) -> CombineValues:
    return CombineValues(torch.tensor(averaged, dtype=torch.float64), np.array(summed))


def test_weighted_average_and_summed_counters_by_hand() -> None:
    # member 0 learned 2 constraints, member 1 learned 6, member 2 none (its model is the last
    # combined one, which must not pull the others back)
    base = np.array([100.0, 10.0])
    parts = [
        pack(_values([1.0, -2.0], [102.0, 11.0]), base, 2.0, [0.0, 1.0]),
        pack(_values([3.0, 2.0], [106.0, 10.0]), base, 6.0, [1.0, 0.0]),
        pack(_values([9.0, 9.0], [100.0, 10.0]), base, 0.0, [0.0, 1.0]),
    ]
    combined, signals = unpack(sum(parts), base, n_signals=2)
    # (2·1 + 6·3) / 8 = 2.5 and (2·(−2) + 6·2) / 8 = 1.0
    assert combined.averaged.tolist() == [2.5, 1.0]
    # 100 + 2 + 6 + 0 and 10 + 1 + 0 + 0
    assert combined.summed.tolist() == [108.0, 11.0]
    assert signals.tolist() == [1.0, 2.0]


def test_a_round_in_which_nobody_learned_changes_no_parameter() -> None:
    base = np.array([5.0])
    combined, _ = unpack(pack(_values([7.0], [5.0]), base, 0.0, []), base, n_signals=0)
    assert combined.averaged.numel() == 0 and combined.summed.tolist() == [5.0]


def _two_oahu() -> tuple[OAHU, OAHU]:
    rng = np.random.default_rng(0)
    models = []
    for _ in range(2):
        m = OAHU(n_features=4, hidden_width=6, n_hidden_layers=2, device="cpu", preprocess="none")
        models.append(m)
    a, p, n = rng.random((3, 5, 4), dtype=np.float32)
    models[0].learn_triplets(a, p, n)
    b, q, r = rng.random((3, 3, 4), dtype=np.float32)
    models[1].learn_triplets(b, q, r)
    return models[0], models[1]


def test_oahu_parameters_are_averaged_by_constraints_learned() -> None:
    m0, m1 = _two_oahu()
    w0, w1 = m0.network.tensors()["W1"].clone(), m1.network.tensors()["W1"].clone()
    base = np.zeros_like(m0.combine_values().summed)
    combine_in_process([m0, m1], [5.0, 3.0], base)
    expected = (5.0 * w0.double() + 3.0 * w1.double()) / 8.0
    for m in (m0, m1):
        np.testing.assert_allclose(m.network.tensors()["W1"].numpy(), expected.numpy(), atol=1e-7)
    # both hold one model: the same embedding of the same items
    x = np.random.default_rng(1).random((4, 4), dtype=np.float32)
    np.testing.assert_array_equal(m0.embed(x), m1.embed(x))


def test_oahu_alpha_is_the_renormalised_weighted_geometric_mean() -> None:
    m0, m1 = _two_oahu()
    a0 = np.array([0.5, 0.3, 0.2], np.float32)
    a1 = np.array([0.2, 0.2, 0.6], np.float32)
    m0.update_step.alpha, m1.update_step.alpha = a0.copy(), a1.copy()
    base = np.zeros_like(m0.combine_values().summed)
    combine_in_process([m0, m1], [1.0, 1.0], base)
    # by hand: sqrt(0.5·0.2) = 0.31623, sqrt(0.3·0.2) = 0.24495, sqrt(0.2·0.6) = 0.34641,
    # summing to 0.90759; divided by it
    geometric = [math.sqrt(0.5 * 0.2), math.sqrt(0.3 * 0.2), math.sqrt(0.2 * 0.6)]
    expected = [g / sum(geometric) for g in geometric]
    np.testing.assert_allclose(expected, [0.34843, 0.26989, 0.38168], atol=1e-5)
    np.testing.assert_allclose(m0.alpha, expected, atol=1e-6)
    np.testing.assert_allclose(m1.alpha, expected, atol=1e-6)


def test_counters_are_summed_over_the_members() -> None:
    m0, m1 = _two_oahu()  # 5 and 3 triplets, one update each (strict)
    base = np.zeros_like(m0.combine_values().summed)
    summed = combine_in_process([m0, m1], [5.0, 3.0], base)
    for m in (m0, m1):
        assert (m.constraints_seen, m.updates, m.update_step.learned) == (8, 8, 8)
    assert summed[:3].tolist() == [8.0, m0.constraints_used, 8.0]


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
