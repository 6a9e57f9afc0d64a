"""OAHU as a learner: modes, determinism, checkpoints and bad input."""

import numpy as np
import pytest
import torch

from oahu.config import PRESETS, OAHUConfig
from oahu.oahu_learner import OAHU
from oahu.persistence import load_learner, save_learner

D = 12


def small(**kw) -> OAHU:
    params = dict(hidden_width=16, embedding_dim=6, device="cpu")
    params.update(kw)
    return OAHU(D, **params)


@pytest.fixture
def triplets() -> np.ndarray:
    return np.random.default_rng(0).random((40, 3, D), dtype=np.float32)


def assert_same_state(a: OAHU, b: OAHU) -> None:
    for (name, x), y in zip(a.network.tensors().items(), b.network.tensors().values(), strict=True):
        assert torch.equal(x, y), name
    assert np.array_equal(a.alpha, b.alpha)
    assert (a.updates, a.constraints_seen, a.constraints_used) == (
        b.updates,
        b.constraints_seen,
        b.constraints_used,
    )


def test_strict_one_call_equals_one_triplet_per_call(triplets) -> None:
    together, one_by_one = small(), small()
    together.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    for t in triplets:
        one_by_one.learn_triplets(t[0], t[1], t[2])
    assert_same_state(together, one_by_one)
    assert together.updates == len(triplets)


def test_micro_batch_of_one_equals_strict_bit_for_bit(triplets) -> None:
    strict = small()  # the default config is strict Algorithm 1
    assert strict.config.batch_size == 1
    config = OAHUConfig(hidden_width=16, embedding_dim=6, device="cpu", batch_size=1)
    micro = OAHU.from_config(D, config)
    strict.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    for start in range(0, len(triplets), 7):  # arbitrary chunking of the stream
        chunk = triplets[start : start + 7]
        micro.learn_triplets(chunk[:, 0], chunk[:, 1], chunk[:, 2])
    assert_same_state(strict, micro)


def test_micro_batch_takes_one_update_per_batch(triplets) -> None:
    model = small(batch_size=16)
    used = model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    assert model.updates == 3  # 16 + 16 + 8
    assert used.all() and model.utilization == 1.0
    assert model.alpha.sum() == pytest.approx(1.0)


def test_same_seed_same_model_different_seed_different_model(triplets) -> None:
    a, b, c = small(seed=5), small(seed=5), small(seed=6)
    for m in (a, b, c):
        m.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    assert_same_state(a, b)
    assert not torch.equal(a.network.head0, c.network.head0)


def test_save_load_continues_exactly(tmp_path, triplets) -> None:
    whole, first = small(seed=1), small(seed=1)
    whole.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    first.learn_triplets(triplets[:20, 0], triplets[:20, 1], triplets[:20, 2])
    path = tmp_path / "oahu.pt"
    save_learner(first, path, {"offset": 20})
    raw = torch.load(path, weights_only=True)  # no code runs when a checkpoint is opened
    assert raw["state"]["learner"] == "oahu"
    resumed, extra = load_learner(path)
    assert extra == {"offset": 20}
    assert resumed.config == first.config
    resumed.learn_triplets(triplets[20:, 0], triplets[20:, 1], triplets[20:, 2])
    assert_same_state(whole, resumed)


def test_wrong_dimension_raises_naming_the_field() -> None:
    model = small()
    good = np.zeros((2, D), dtype=np.float32)
    with pytest.raises(ValueError, match=r"negatives: expected shape \(n, 12\)"):
        model.learn_triplets(good, good, np.zeros((2, D + 1)))
    with pytest.raises(ValueError, match="lengths differ"):
        model.learn_triplets(good, good, good[:1])
    assert model.constraints_seen == 0


def test_non_finite_and_degenerate_triplets_are_skipped_and_counted(triplets) -> None:
    model, clean = small(), small()
    a, p, n = (triplets[:6, i].copy() for i in range(3))
    a[1, 3] = np.nan
    p[2, 0] = np.inf
    n[4] = a[4]  # anchor identical to the negative
    before = {k: v.clone() for k, v in model.network.tensors().items()}
    used = model.learn_triplets(a, p, n)
    assert used.tolist() == [True, False, False, True, False, True]
    assert model.skipped == {"non_finite": 2, "degenerate": 1}
    assert model.constraints_seen == 6 and model.constraints_learned == 3
    assert model.utilization == 1.0
    # The skipped rows left no trace: same as learning the three good ones alone.
    keep = [0, 3, 5]
    clean.learn_triplets(a[keep], p[keep], n[keep])
    for name, value in model.network.tensors().items():
        assert torch.equal(value, clean.network.tensors()[name]), name
    assert not torch.equal(before["head0"], model.network.head0)


def test_non_finite_loss_never_reaches_the_weights(triplets) -> None:
    model = small()
    a, p, n = (triplets[:3, i].copy() for i in range(3))
    a[1] = 3e38  # finite input whose embedding overflows
    used = model.learn_triplets(a, p, n)
    assert used.tolist() == [True, False, True]
    assert model.skipped == {"non_finite_loss": 1}
    assert all(torch.isfinite(v).all() for v in model.network.tensors().values())
    assert np.isfinite(model.alpha).all()


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="learning_rate: must be > 0, got -1"):
        OAHU(4, learning_rate=-1)
    with pytest.raises(ValueError, match="batch_size"):
        OAHU(4, batch_size=0)
    with pytest.raises(ValueError, match="preset: unknown 'nope'"):
        OAHU(4, preset="nope")
    with pytest.raises(ValueError, match="n_features"):
        OAHU(0)


def test_paper_defaults() -> None:
    cfg = OAHU(4).config
    assert (cfg.n_hidden_layers, cfg.hidden_width, cfg.embedding_dim) == (5, 100, 50)
    assert (cfg.beta, cfg.smoothing, cfg.learning_rate, cfg.tau) == (0.99, 0.1, 0.3, 0.1)
    assert OAHU(4).alpha.tolist() == pytest.approx([1 / 6] * 6)


def test_embeddings_are_unit_vectors_per_depth(triplets) -> None:
    model = small()
    emb = model.embed(triplets[:, 0])
    assert emb.shape == (6, 40, 6) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=-1), 1.0, atol=1e-5)


def test_pca_head0_starts_as_the_principal_axes_and_its_zero_rows_stay_zero(triplets) -> None:
    rng = np.random.default_rng(3)
    # Items whose variance is 9, 4 and 1 along three known orthogonal axes and 0 elsewhere
    # (latent coordinates centred and exactly uncorrelated, so the axes are exact).
    axes = np.linalg.qr(rng.standard_normal((D, 3)))[0].T  # (3, D), orthonormal rows
    latent = rng.standard_normal((500, 3))
    latent = np.linalg.qr(latent - latent.mean(0))[0] * np.sqrt(500)
    items = (latent * [3.0, 2.0, 1.0]) @ axes + 0.5
    model = small(head0_init="pca", head0_components=3, preprocess="center")
    model.prepare(items.astype(np.float32))
    head0 = model.network.head0.numpy().astype(np.float64)
    # Each of the first three rows is one axis, in order of variance (up to sign).
    assert np.abs(np.abs(head0[:3] @ axes.T) - np.eye(3)).max() < 1e-3
    assert np.count_nonzero(head0[3:]) == 0
    model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    assert model.updates == len(triplets)
    after = model.network.head0.numpy()
    assert not np.array_equal(after[:3], head0[:3])  # E0 learned ...
    assert np.count_nonzero(after[3:]) == 0  # ... within the span it started in


def test_pca_head0_takes_at_most_the_axes_the_items_span() -> None:
    model = small(head0_init="pca")  # 0 components = embedding_dim = 6
    model.prepare(np.random.default_rng(0).random((4, D), dtype=np.float32))
    assert np.count_nonzero(np.abs(model.network.head0.numpy()).sum(1)) == 4


def test_pca_head0_refuses_to_reinitialise_a_trained_model(triplets) -> None:
    model = small(head0_init="pca")
    model.prepare(triplets[:, 0])
    model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    with pytest.raises(ValueError, match="prepare: head0_init='pca' sets E0 before learning"):
        model.prepare(triplets[:, 0])
    with pytest.raises(ValueError, match="head0_components: must be <= embedding_dim"):
        small(head0_init="pca", head0_components=7)
    with pytest.raises(ValueError, match="head0_init: must be 'random' or 'pca', got 'svd'"):
        small(head0_init="svd")


def test_pca_head0_must_be_prepared_before_learning_and_survives_a_checkpoint(
    tmp_path, triplets
) -> None:
    model = small(head0_init="pca")
    assert model.needs_prepare
    with pytest.raises(ValueError, match=r"call learner\.prepare"):
        model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
    assert model.updates == 0
    model.prepare(triplets[:, 0])
    assert not model.needs_prepare
    model.learn_triplets(triplets[:5, 0], triplets[:5, 1], triplets[:5, 2])
    save_learner(model, tmp_path / "m.pt")
    restored, _ = load_learner(tmp_path / "m.pt")
    assert not restored.needs_prepare
    for learner in (model, restored):
        learner.learn_triplets(triplets[5:, 0], triplets[5:, 1], triplets[5:, 2])
    assert_same_state(model, restored)


def test_parameters_are_a_preset_and_the_config_fields() -> None:
    model = OAHU(D, preset="tuned", learning_rate=0.01, device="cpu")
    assert model.config == PRESETS["tuned"].replace(learning_rate=0.01, device="cpu")
    params = model.get_params()
    assert (params["preset"], params["hidden_width"], params["learning_rate"]) == (
        "tuned",
        784,
        0.01,
    )
    assert OAHU(D, **params).config == model.config  # what rebuilding a checkpoint does
    assert OAHU.from_config(D, model.config).config == model.config
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*hidden_widht"):
        OAHU(D, hidden_widht=3)
