"""Self-paced learning (LEAP adapted to a stream): the selection rule by hand, the growth of
λ and γ, OAHU holding back hard constraints, its counters and checkpoints."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.learners.oahu.learner import OAHU
from oahu.learners.oahu.self_paced import SelfPacedSelector
from oahu.persistence import learner_from_bytes, learner_to_bytes


def selector(**kw) -> SelfPacedSelector:
    params = dict(start=0.1, diversity=0.3, growth=2.0, round_length=5, n_clusters=1)
    params.update(n_coordinates=2, seed=0)
    params.update(kw)
    return SelfPacedSelector(**params)


def test_easy_constraints_pass_and_hard_ones_pass_by_rank_within_their_cluster() -> None:
    pace = selector()
    where = np.zeros((4, 2))
    # λ = 0.1, γ = 0.3. 0.05 is easy. The hard ones rank among the window's hard ones:
    # 0.35 is 1st: 0.35 < 0.1 + 0.3 = 0.4, kept; 0.3 is 1st again (0.35 is above it): kept;
    # 0.32 is 2nd (0.3 is below it): 0.32 ≥ 0.1 + 0.3 (√2 − 1) = 0.224, held back.
    kept = [bool(pace.select(np.array([loss]), where[:1])[0]) for loss in (0.05, 0.35, 0.3, 0.32)]
    assert kept == [True, True, True, False]
    assert pace.held_back == 1 and pace.seen == 4


def test_one_call_is_judged_against_the_window_before_it() -> None:
    # A micro-batch's constraints do not rank against each other: all four hard ones are 1st.
    pace = selector()
    kept = pace.select(np.array([0.05, 0.35, 0.3, 0.32]), np.zeros((4, 2)))
    assert kept.tolist() == [True, True, True, True]
    # ... but they are in the window for the next call: 0.33 ranks 3rd (0.3 and 0.32 below it).
    assert pace.select(np.array([0.33]), np.zeros((1, 2))).tolist() == [False]  # 0.1 + 0.3 × 0.318


def test_thresholds_grow_by_the_factor_each_round_and_admit_what_was_held_back() -> None:
    pace = selector(round_length=2, diversity=0.0)
    where = np.zeros((1, 2))
    assert pace.select(np.array([0.15]), where).tolist() == [False]  # λ = 0.1
    pace.select(np.array([0.0]), where)
    assert pace.thresholds() == (0.2, 0.0)
    assert pace.select(np.array([0.15]), where).tolist() == [True]  # λ = 0.2 now


def test_ranks_are_within_a_cluster() -> None:
    # Two clusters far apart (centres set where the points are): a hard constraint ranks only
    # among its own cluster's. λ = 0, γ = 0.3.
    pace = selector(n_clusters=2, start=0.0, diversity=0.3, round_length=50)
    pace.kmeans.centers = {0: {0: -5.0, 1: 0.0}, 1: {0: 5.0, 1: 0.0}}
    left, right = np.array([[-5.0, 0.0]]), np.array([[5.0, 0.0]])
    assert pace.select(np.array([0.2]), left).tolist() == [True]  # 1st hard one on the left
    assert pace.select(np.array([0.25]), right).tolist() == [True]  # 1st on the right too
    assert pace.select(np.array([0.25]), left).tolist() == [False]  # 2nd on the left: 0.124


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(0, 3, allow_nan=False), min_size=1, max_size=40),
    st.integers(1, 10),
)
def test_every_constraint_below_lambda_is_kept_and_the_count_adds_up(losses, round_length):
    pace = selector(round_length=round_length, n_clusters=3)
    kept = []
    for loss in losses:
        lam, gamma = pace.thresholds()
        k = pace.select(np.array([loss]), np.array([[loss, -loss]]))[0]
        if loss < lam:
            assert k
        if loss >= lam + gamma:  # above the first rank's allowance: never kept
            assert not k
        kept.append(k)
    assert pace.held_back == len(losses) - sum(kept)
    assert pace.seen == len(losses)


def test_selector_state_round_trips() -> None:
    pace, where = selector(n_clusters=3), np.random.default_rng(0).random((20, 2))
    losses = np.random.default_rng(1).random(20)
    pace.select(losses[:10], where[:10])
    copy = selector(n_clusters=3)
    copy.set_state(pace.get_state())
    assert (
        pace.select(losses[10:], where[10:]).tolist()
        == copy.select(losses[10:], where[10:]).tolist()
    )
    assert pace.get_state() == copy.get_state()


D = 12
ITEMS = np.random.default_rng(7).random((200, D), dtype=np.float32)


def paced(**kw) -> OAHU:
    model = OAHU(
        D, hidden_width=16, preprocess="pca:8", item_memory=64, replay_memory=32, margin=0.5,
        device="cpu", self_paced=True, **kw,
    )  # fmt: skip
    model.prepare(ITEMS)
    return model


def test_oahu_holds_back_hard_triplets_and_learns_nothing_from_them() -> None:
    model = paced(pace_start=0.5, pace_diversity=0.0, replay=0, mined=0)
    t = np.random.default_rng(0).random((40, 3, D), dtype=np.float32)
    before = {k: v.clone() for k, v in model.network.tensors().items()}
    used = model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    held = int(model.diagnostics()["self_paced_held_back"])
    assert 0 < held < 40
    assert model.diagnostics()["self_paced_threshold"] == pytest.approx(0.5)
    # A triplet held back changed nothing: the count of used ones excludes them.
    assert used.sum() <= 40 - held
    moved = any(not torch.equal(v, before[k]) for k, v in model.network.tensors().items())
    assert moved
    # Nothing is held back with a threshold no loss reaches (margin loss ≤ 2 + margin).
    open_model = paced(pace_start=10.0, replay=0, mined=0)
    open_model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    assert open_model.diagnostics()["self_paced_held_back"] == 0
    plain = OAHU(
        D, hidden_width=16, preprocess="pca:8", item_memory=64, replay_memory=32, margin=0.5,
        device="cpu", replay=0, mined=0,
    )  # fmt: skip
    plain.prepare(ITEMS)
    plain.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    for name, value in plain.network.tensors().items():
        assert torch.equal(value, open_model.network.tensors()[name]), name


def test_a_held_back_triplet_enters_neither_replay_nor_graph() -> None:
    model = paced(pace_start=0.0, pace_diversity=0.0)  # everything with a loss is held back
    t = np.random.default_rng(0).random((30, 3, D), dtype=np.float32)
    model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    held = int(model.diagnostics()["self_paced_held_back"])
    assert held > 0
    assert model.update_step.replay.seen == 30 - held


def test_self_paced_oahu_continues_exactly_after_a_checkpoint() -> None:
    t = np.random.default_rng(3).random((60, 3, D), dtype=np.float32)
    whole, first = paced(pace_round=16), paced(pace_round=16)
    for model in (whole, first):
        model.learn_triplets(t[:30, 0], t[:30, 1], t[:30, 2])
    resumed = learner_from_bytes(learner_to_bytes(first))[0]
    whole.learn_triplets(t[30:, 0], t[30:, 1], t[30:, 2])
    resumed.learn_triplets(t[30:, 0], t[30:, 1], t[30:, 2])
    for name, value in whole.network.tensors().items():
        assert torch.equal(value, resumed.network.tensors()[name]), name
    assert whole.diagnostics() == resumed.diagnostics()


def test_config_refuses_bad_pace_settings() -> None:
    with pytest.raises(ValueError, match=r"pace_growth: must be a number >= 1, got 0\.5"):
        OAHU(D, pace_growth=0.5)
    with pytest.raises(ValueError, match="self_paced: must be true or false, got 'yes'"):
        OAHU(D, self_paced="yes")
    with pytest.raises(ValueError, match="pace_round: must be an integer >= 1, got 0"):
        OAHU(D, pace_round=0)


def test_the_service_learns_self_paced_and_reports_what_it_held_back(tmp_path) -> None:
    """``oahu run --self-paced``: the count reaches /v1/model and Prometheus."""
    from fastapi.testclient import TestClient
    from service_support import start_service

    from oahu.streams import add_noise, build_stream

    n = 600
    stream_file = tmp_path / "noisy.npz"
    add_noise(build_stream("digits", n, seed=2), 0.3, "uniform").save(stream_file)
    service = start_service(stream_file, tmp_path / "state", n, self_paced=True)
    try:
        with TestClient(service.app) as client:
            model = client.get("/v1/model").json()
            held = model["diagnostics"]["self_paced_held_back"]
            assert 0 < held < n  # some of the 180 flipped triplets, at least
            assert model["diagnostics"]["self_paced_threshold"] >= OAHU(D).config.pace_start
            text = client.get("/metrics").text
            assert f"oahu_self_paced_held_back {held}" in text
    finally:
        service.shutdown()
