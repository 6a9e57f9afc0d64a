"""OAHU learning quadruplets (a, b, c, d), each saying D(a, b) < D(c, d): the step against
autograd, triplets as the quadruplets (a, p, a, n), degenerate rows, checkpoints and the torch
path."""

import numpy as np
import pytest
import torch
from step_reference import ETA, TAU, reference_step

from oahu.constraint_kinds import triplet_as_quadruplet
from oahu.learners.oahu.learner import OAHU
from oahu.persistence import learner_from_bytes, learner_to_bytes

D = 5
ITEMS = np.random.default_rng(11).random((60, D), dtype=np.float32)


def tiny(preset: str | None = "paper", **kw) -> OAHU:
    # The seed and sizes of tests/test_network_step.py: no dead ReLU unit for these inputs.
    params = dict(n_hidden_layers=3, hidden_width=6, embedding_dim=3, tau=TAU, seed=3)
    params.update(learning_rate=ETA, device="cpu")
    if preset is None:
        params.update(embedding_dim=0, preprocess="pca:4", item_memory=16, margin=0.5)
    params.update(kw)
    model = OAHU(D, preset=preset, **params)
    if model.needs_prepare:
        model.prepare(ITEMS)
    return model


def quadruplets(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 4, D), dtype=np.float32)


def learn(model: OAHU, q: np.ndarray) -> np.ndarray:
    return model.learn_quadruplets(q[:, 0], q[:, 1], q[:, 2], q[:, 3])


def test_step_equals_autograd_of_abtl_on_the_two_pairs() -> None:
    """The paper's ABTL with D+ = D(a, b) and D− = D(c, d), α-weighted, one step of η."""
    model = tiny()
    q = quadruplets(1)
    expected, _ = reference_step(model, q, per_depth=False)
    assert learn(model, q).tolist() == [True]
    for name, value in model.network.tensors().items():
        assert torch.allclose(value.double(), expected[name], atol=1e-6), name


@pytest.mark.parametrize("preset", ["paper", None])
def test_a_triplet_and_its_quadruplet_teach_the_same(preset: str | None) -> None:
    # The default's mining draws from what triplets reveal, which quadruplets do not carry, so
    # it is off here; replay is on (each kind replays its own reservoir, in the same draws).
    kw = {} if preset == "paper" else {"mined": 0, "replay": 1}
    as_triplets, as_quadruplets = tiny(preset, **kw), tiny(preset, **kw)
    t = np.random.default_rng(3).random((15, 3, D), dtype=np.float32)
    used_t = as_triplets.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    used_q = learn(as_quadruplets, triplet_as_quadruplet(t))
    assert used_t.tolist() == used_q.tolist()
    assert as_triplets.updates == as_quadruplets.updates == 15
    for (name, x), y in zip(
        as_triplets.network.tensors().items(),
        as_quadruplets.network.tensors().values(),
        strict=True,
    ):
        assert torch.allclose(x, y, atol=1e-5), name
    assert np.allclose(as_triplets.alpha, as_quadruplets.alpha, atol=1e-6)
    assert as_triplets.prequential.combined == as_quadruplets.prequential.combined


def test_degenerate_quadruplets_are_skipped_and_counted() -> None:
    model = tiny(None)
    q = quadruplets(5)
    q[1, 3] = q[1, 2]  # c == d: no distance is below D(c, d) = 0
    q[2, 2], q[2, 3] = q[2, 0], q[2, 1]  # (c, d) = (a, b)
    q[3, 2], q[3, 3] = q[3, 1], q[3, 0]  # (c, d) = (b, a)
    q[4, 1, 0] = np.nan
    used = learn(model, q)
    assert model.skipped == {"degenerate": 3, "non_finite": 1}
    assert used[1:].tolist() == [False] * 4
    assert model.constraints_seen == 5 and model.constraints_learned == 1


def test_learn_by_kind_takes_quadruplets_in_role_order() -> None:
    by_kind, by_name = tiny(None), tiny(None)
    q = quadruplets(6)
    assert by_kind.learn("quadruplet", q).tolist() == learn(by_name, q).tolist()
    assert torch.equal(by_kind.network.head0, by_name.network.head0)
    with pytest.raises(ValueError, match=r"a, b, c, d: lengths differ \(2, 2, 2, 1\)"):
        by_kind.learn_quadruplets(q[:2, 0], q[:2, 1], q[:2, 2], q[:1, 3])


def test_checkpoint_keeps_the_quadruplet_replay_and_continues_exactly() -> None:
    whole, first = tiny(None), tiny(None)
    q = quadruplets(30)
    t = np.random.default_rng(5).random((10, 3, D), dtype=np.float32)
    for model in (whole, first):  # triplets feed the graph: mined triplets join quadruplet steps
        model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
        learn(model, q[:12])
    reservoir = first.update_step.replay_quadruplets
    assert reservoir is not None and reservoir.size == 12
    resumed = learner_from_bytes(learner_to_bytes(first))[0]
    learn(whole, q[12:])
    learn(resumed, q[12:])
    for (name, x), y in zip(
        whole.network.tensors().items(), resumed.network.tensors().values(), strict=True
    ):
        assert torch.equal(x, y), name
    assert np.array_equal(whole.alpha, resumed.alpha)
    assert whole.diagnostics() == resumed.diagnostics()


def test_a_triplet_only_learner_holds_no_quadruplet_reservoir() -> None:
    model = tiny(None)
    t = np.random.default_rng(5).random((4, 3, D), dtype=np.float32)
    model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])
    assert model.update_step.replay_quadruplets is None
    assert model.get_state()["model"]["replay_quadruplets"] is None


@pytest.mark.parametrize("preset", ["paper", None])
def test_torch_path_equals_numpy_path_on_quadruplets(preset: str | None) -> None:
    host, device_like = tiny(preset), tiny(preset)
    step = device_like.update_step
    step.on_host = False
    step.alpha = torch.from_numpy(step.alpha.copy())
    step.last_losses = torch.from_numpy(step.last_losses.copy())
    q = quadruplets(12)
    assert learn(host, q).tolist() == learn(device_like, q).tolist()
    for name, value in host.network.tensors().items():
        assert torch.allclose(value, device_like.network.tensors()[name], atol=1e-5), name
    assert np.allclose(host.alpha, device_like.alpha, atol=1e-6)


def test_quadruplets_from_classes_teach_the_classes() -> None:
    """Digits: quadruplets 'a same-class pair is closer than a different-class pair' raise
    the share of held-out quadruplets the metric ranks right."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    rng = np.random.default_rng(0)

    def sample(n: int) -> np.ndarray:
        idx = np.empty((n, 4), dtype=np.int64)
        for row in idx:
            while True:
                a, b, c, d = rng.integers(0, len(y), 4)
                if a != b and y[a] == y[b] and y[c] != y[d]:
                    row[:] = a, b, c, d
                    break
        return idx

    def ranked_right(model: OAHU, idx: np.ndarray) -> float:
        f = model.transform(x)
        near = np.linalg.norm(f[idx[:, 0]] - f[idx[:, 1]], axis=1)
        far = np.linalg.norm(f[idx[:, 2]] - f[idx[:, 3]], axis=1)
        return float(np.mean(near < far))

    model = OAHU(64, device="cpu", seed=0)
    model.prepare(x)
    held_out = sample(2000)
    before = ranked_right(model, held_out)
    model.learn("quadruplet", x[sample(3000)])
    after = ranked_right(model, held_out)
    assert after > before + 0.01, (before, after)
