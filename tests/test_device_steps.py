"""Device-resident strict updates (oahu.learners.oahu.device_steps): the same torch code that is
captured as CUDA graphs on a GPU, run eagerly on the CPU, checked against per-update learning and
for what it keeps on the host (reservoir mirror, constraint graph, counters, checkpoints)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oahu import OAHU
from oahu.learners.oahu.config import OAHUConfig
from oahu.learners.oahu.update_graphs import UPDATES_PER_GRAPH

D = 12


def _triplets(n: int, seed: int = 0, classes: int = 4) -> np.ndarray:
    """Triplets (n, 3, D) of a few Gaussian classes, items drawn from a pool so that they
    recur (the constraint graph links them)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, D)).astype(np.float32) * 2
    labels = rng.integers(0, classes, 300)
    pool = centres[labels] + rng.normal(size=(300, D)).astype(np.float32)
    out = np.empty((n, 3, D), np.float32)
    for k in range(n):
        a = rng.integers(0, 300)
        same = np.flatnonzero(labels == labels[a])
        other = np.flatnonzero(labels != labels[a])
        out[k] = pool[[a, rng.choice(same), rng.choice(other)]]
    return out


def _model(engine: str, **fields) -> OAHU:
    # One replayed triplet per new one at every batch size ("auto" replays none in micro-batch
    # mode), so that the device's reservoir is exercised by micro-batch blocks too.
    fields = {"hidden_width": 16, "preprocess": "none", "device": "cpu", "replay": 1, **fields}
    return OAHU(D, step_engine=engine, **fields)


def _learn(model: OAHU, rows: np.ndarray) -> np.ndarray:
    return model.learn_triplets(rows[:, 0], rows[:, 1], rows[:, 2])


@pytest.mark.parametrize("batch_size", [1, 16])
def test_without_memories_it_is_the_per_update_step(batch_size):
    # No replay and no mining: nothing is drawn or mined ahead, so a block of updates (strict,
    # or micro-batches of the same sizes, trust region and hedge over their columns) is the
    # per-update step's sequence of updates, up to float rounding.
    rows = _triplets(600)
    plain = dict(replay=0, mined=0, drift_detector="none", batch_size=batch_size, batch_ramp=10)
    per_update, device = _model("update", **plain), _model("device", **plain)
    used_a, used_b = _learn(per_update, rows), _learn(device, rows)
    for name, a in per_update.network.tensors().items():
        b = device.network.tensors()[name]
        assert torch.allclose(a, b, atol=2e-5), name
    np.testing.assert_allclose(per_update.alpha, device.alpha, atol=1e-5)
    np.testing.assert_allclose(per_update.last_losses, device.last_losses, atol=1e-5)
    assert (used_a == used_b).mean() > 0.99
    assert device.updates == per_update.updates
    assert (device.updates == 600) == (batch_size == 1)  # else updates of up to 16
    assert device.update_step.learned == 600
    assert device.prequential.seen == 600
    assert abs(device.prequential.combined - per_update.prequential.combined) < 0.01
    assert device.update_step.learning_rate == per_update.update_step.learning_rate


def test_blocks_grow_with_the_stream():
    model = _model("device", device_block=64)
    engine = model.device_steps
    assert engine.block_size() == UPDATES_PER_GRAPH  # nothing learned yet
    _learn(model, _triplets(100))
    assert engine.block_size() == 25  # a quarter of what was learned
    _learn(model, _triplets(400, seed=1))
    assert engine.block_size() == 64


def test_the_host_mirrors_what_the_device_holds():
    model = _model("device", replay_memory=50, item_memory=64)
    rows = _triplets(400)
    _learn(model, rows)
    step, engine = model.update_step, model.device_steps
    replay = step.replay
    # Algorithm R: the reservoir is full and has been offered every triplet.
    assert (replay.size, replay.seen) == (50, 400)
    np.testing.assert_array_equal(replay.rows, engine.reservoir[:50].numpy())
    # Every held row is one of the stream's triplets.
    keys = {r.tobytes() for r in rows}
    assert all(r.tobytes() in keys for r in replay.rows)
    # The constraint graph learned the stream, and mined triplets were learned from it.
    assert step.graph.size == 64 and step.graph.n_links > 0
    assert bool(engine.mining.valid.any())
    # The device holds the graph's items, and the host takes their refreshed embeddings back.
    held = step.graph.size
    np.testing.assert_array_equal(engine.mining.keys[:held].numpy(), step.graph.keys[:held])
    np.testing.assert_array_equal(engine.mining.rows[:held].numpy(), step.graph.rows[:held])
    engine.pull_graph()
    np.testing.assert_array_equal(
        engine.mining.embeddings[:held].numpy(), step.graph.embeddings[:held]
    )
    # α, the last losses and the step-size clock came back to the host.
    np.testing.assert_allclose(model.alpha, engine.alpha.numpy(), rtol=1e-6)
    assert model.alpha.sum() == pytest.approx(1.0)
    assert step.learning_rate == pytest.approx(step.step_size(399))


def test_a_non_finite_triplet_is_left_out_and_counted():
    model = _model("device")
    rows = _triplets(40)
    rows[17] *= np.float32(1e30)  # finite input whose squared norms overflow
    used = _learn(model, rows)
    assert model.skipped["non_finite_loss"] == 1
    assert not used[17]
    assert model.updates == 39 and model.update_step.learned == 39
    assert all(bool(torch.isfinite(t).all()) for t in model.network.tensors().values())
    assert model.update_step.replay.seen == 39  # never replayed
    # The block that left it out wrote the device's reservoir out of step with the host's: the
    # next block uploaded the host's again.
    _learn(model, _triplets(20, seed=3))
    np.testing.assert_array_equal(
        model.update_step.replay.rows[: model.update_step.replay.size],
        model.device_steps.reservoir[: model.update_step.replay.size].numpy(),
    )


@pytest.mark.parametrize("batch_size", [1, 8])
def test_a_checkpoint_restores_the_same_learning(batch_size):
    rows = _triplets(500)
    model = _model("device", batch_size=batch_size, batch_ramp=4)
    _learn(model, rows[:300])
    state = model.get_state()
    restored = _model("device", batch_size=batch_size, batch_ramp=4)
    restored.set_state(state)
    _learn(model, rows[300:])
    _learn(restored, rows[300:])
    for name, a in model.network.tensors().items():
        assert torch.equal(a, restored.network.tensors()[name]), name
    np.testing.assert_array_equal(model.alpha, restored.alpha)


def test_a_drift_that_empties_the_memories_uploads_the_new_reservoir():
    model = _model("device")
    _learn(model, _triplets(200))
    model._adapt_to_drift()  # alpha, step and memory (the default adaptation)
    assert model.update_step.replay.size == 0
    _learn(model, _triplets(30, seed=5))
    replay = model.update_step.replay
    assert replay.size == 30
    np.testing.assert_array_equal(replay.rows[:30], model.device_steps.reservoir[:30].numpy())


def test_quadruplets_take_the_per_update_step():
    model = _model("device")
    rng = np.random.default_rng(0)
    quads = rng.normal(size=(4, 20, D)).astype(np.float32)
    used = model.learn_quadruplets(*quads)
    assert model.updates == 20 and len(used) == 20


def test_engine_is_chosen_by_the_configuration():
    assert OAHU(D, device="cpu").device_steps is None  # "auto" on the CPU: per update
    assert OAHU(D, device="cpu", step_engine="device").device_steps is not None
    with pytest.raises(ValueError, match="step_engine: 'device' runs updates without self-paced"):
        OAHUConfig(step_engine="device", self_paced=True)
    with pytest.raises(ValueError, match="step_engine"):
        OAHUConfig(step_engine="gpu")
    with pytest.raises(ValueError, match="device_block"):
        OAHUConfig(device_block=2)


def test_paper_preset_runs_on_the_device_engine():
    model = OAHU(D, preset="paper", device="cpu", step_engine="device")
    _learn(model, _triplets(100))
    assert model.updates == 100
    assert not np.allclose(model.alpha, 1 / 6)  # the loss-driven hedge moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch_size", [1, 16])
def test_cuda_graphs_learn_the_cpu_model(batch_size):
    rows = _triplets(600)
    models = {}
    for device in ("cpu", "cuda"):
        models[device] = OAHU(
            D,
            hidden_width=16,
            preprocess="none",
            device=device,
            step_engine="device",
            device_block=64,
            batch_size=batch_size,
            batch_ramp=10,
        )
        _learn(models[device], rows)
    cpu, cuda = models["cpu"], models["cuda"]
    assert cuda.device_steps.runner.graphs is not None
    for name, a in cpu.network.tensors().items():
        b = cuda.network.tensors()[name].cpu()
        assert torch.allclose(a, b, atol=1e-3), (name, float((a - b).abs().max()))
    np.testing.assert_allclose(cpu.alpha, cuda.alpha, atol=1e-3)
    assert cuda.updates == cpu.updates
    assert cuda.update_step.learned == cpu.update_step.learned == 600


def test_a_drift_inside_a_call_drains_the_block_in_flight():
    # The adaptation runs while the next block is in flight: that block is applied before the
    # device takes the emptied memories and the uniform α, and nothing is mirrored into the
    # new reservoir that was drawn for the old one.
    model = _model("device", device_block=16)
    _learn(model, _triplets(200))
    calls = {"n": 0}
    original = model._observe_mistakes

    def drift_on_third(*args, **kwargs):
        calls["n"] += 1
        original(*args, **kwargs)
        return calls["n"] == 3

    model._observe_mistakes = drift_on_third
    _learn(model, _triplets(96, seed=4))
    replay = model.update_step.replay
    assert model.updates == 296 and model.update_step.decay_origin > 200
    assert 0 < replay.size < 96  # refilled after the drift, from the blocks launched since
    np.testing.assert_array_equal(
        replay.rows[: replay.size], model.device_steps.reservoir[: replay.size].numpy()
    )
    np.testing.assert_allclose(model.alpha, model.device_steps.alpha.numpy(), rtol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_same_seed_gives_the_same_model_on_cuda():
    # Fixed shapes: the same cuBLAS GEMMs and Triton kernels (fixed reduction orders, no
    # atomics), replayed from the same graphs.
    rows = _triplets(300)
    first, second = (
        OAHU(D, hidden_width=16, preprocess="none", device="cuda", device_block=64)
        for _ in range(2)
    )
    _learn(first, rows)
    _learn(second, rows)
    for name, a in first.network.tensors().items():
        assert torch.equal(a, second.network.tensors()[name]), name
    np.testing.assert_array_equal(first.alpha, second.alpha)


# ---------------------------------------------------------------- micro-batches


def test_micro_batches_learn_as_well_as_per_update_ones():
    # With replay and mining the draws differ (made per block), so compare what was learned:
    # the rolling prequential accuracy and the held-out ranking accuracy of the metric.
    rows, held_out = _triplets(3000), _triplets(500, seed=9)
    config = dict(batch_size=32, batch_ramp=5)
    accuracies = {}
    for engine in ("update", "device"):
        model = _model(engine, **config)
        _learn(model, rows)
        a, p, n = (model.embed(held_out[:, r]) for r in range(3))
        w = model.alpha[:, None]
        d_pos = (w * ((a - p) ** 2).sum(-1)).sum(0)
        d_neg = (w * ((a - n) ** 2).sum(-1)).sum(0)
        accuracies[engine] = (float((d_pos < d_neg).mean()), model.prequential.combined)
    (test_u, preq_u), (test_d, preq_d) = accuracies["update"], accuracies["device"]
    assert test_u > 0.8 and preq_u > 0.75  # the stream is learnable, and was learned
    assert abs(test_d - test_u) < 0.03 and abs(preq_d - preq_u) < 0.03


def test_a_micro_batch_learns_around_a_non_finite_triplet():
    model = _model("device", batch_size=8, batch_ramp=1)
    rows = _triplets(64)
    rows[37] *= np.float32(1e30)
    used = _learn(model, rows)
    assert model.skipped["non_finite_loss"] == 1 and not used[37]
    assert model.update_step.learned == 63
    assert all(bool(torch.isfinite(t).all()) for t in model.network.tensors().values())
    assert model.update_step.replay.seen == 63


def test_reservoir_slots_drawn_twice_in_one_update_keep_the_later_triplet():
    # A reservoir of 5 offered updates of 16: Algorithm R draws the same slot for several
    # triplets of one update; the device writes only the last, as the host's mirror does.
    model = _model("device", batch_size=16, batch_ramp=1, replay_memory=5)
    _learn(model, _triplets(400))
    replay = model.update_step.replay
    assert (replay.size, replay.seen) == (5, 400)
    assert not model.device_steps._out_of_step
    np.testing.assert_array_equal(replay.rows, model.device_steps.reservoir[:5].numpy())


def test_blocks_hold_whole_micro_batch_updates():
    model = _model("device", batch_size=64, batch_ramp=1, device_block=8)
    engine = model.device_steps
    assert engine.block == 8
    _learn(model, _triplets(1000))
    # A quarter of the 1,000 learned: whole updates of 64 within 250.
    assert engine._update_sizes(10_000).tolist() == [64, 64, 64]
    _learn(model, _triplets(3000, seed=1))
    assert engine._update_sizes(10_000).tolist() == [64] * 8  # device_block updates
    assert engine._update_sizes(100).tolist() == [64, 36]


def test_a_block_mentions_held_items_more_often_than_the_graph_holds_items():
    # Every mention of a held item rewrites its slot: a block of micro-batches writes a small
    # graph's slots many times over, and the device takes each slot once.
    model = _model("device", batch_size=64, batch_ramp=1, item_memory=16)
    _learn(model, _triplets(3000))
    graph, mining = model.update_step.graph, model.device_steps.mining
    assert graph.size == 16
    np.testing.assert_array_equal(mining.keys[:16].numpy(), graph.keys[:16])
    np.testing.assert_array_equal(mining.rows[:16].numpy(), graph.rows[:16])


@pytest.mark.parametrize("batch_size", [1, 16])
def test_the_drift_monitor_is_told_each_update_of_a_block(batch_size):
    # A block reports many updates at once; the monitor must see them as the per-update engine
    # makes them (each update's constraints ranked by the model before it), or it would take a
    # block of strict updates for one micro-batch and confirm drifts later.
    def sizes_seen(engine: str) -> list[int]:
        model = _model(engine, batch_size=batch_size, batch_ramp=10, device_block=16)
        seen: list[int] = []
        original = model._observe_mistakes

        def spy(mistakes, update_sizes=None):
            assert sum(update_sizes) == len(mistakes)
            seen.extend(int(size) for size in update_sizes)
            return original(mistakes, update_sizes)

        model._observe_mistakes = spy
        _learn(model, _triplets(400))
        return seen

    device = sizes_seen("device")
    assert device == sizes_seen("update")
    assert sum(device) == 400 and max(device) == batch_size  # strict: 400 updates of one
