"""The baselines as oahu Learners: PSD over long streams, utilisation counting, checkpoint
continuation, input validation and hyper-parameter validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oahu.baselines.euclidean import Euclidean
from oahu.baselines.lego import LEGO, UNIT_SCALE_TARGETS
from oahu.baselines.oasis import OASIS
from oahu.baselines.opml import OPML
from oahu.baselines.rdml import RDML
from oahu.persistence import load_learner, save_learner
from oahu.registry import make_learner

D = 10
ALL = ["euclidean", "lego", "rdml", "oasis", "opml"]


def random_stream(n: int, seed: int, scale: float = 0.3) -> tuple[np.ndarray, ...]:
    """Triplets (a, p, n) and a similarity flag, Gaussian items with squared gaps ~ 2 d scale²."""
    rng = np.random.default_rng(seed)
    a, p, neg = (rng.standard_normal((n, D)) * scale for _ in range(3))
    return a, p, neg, rng.random(n) < 0.5


def feed(learner, stream, start: int = 0, stop: int | None = None) -> np.ndarray:
    a, p, neg, similar = (part[start:stop] for part in stream)
    if learner.constraint_kind == "pair" and learner.name != "euclidean":
        return learner.learn_pairs(a, neg, similar)
    return learner.learn_triplets(a, p, neg)


# ------------------------------------------------------------------------------------------ PSD
@pytest.mark.parametrize("name", ["lego", "rdml", "opml"])
def test_metric_stays_psd_over_a_long_stream(name):
    learner = make_learner(name, D)
    stream = random_stream(2000, seed=11)
    feed(learner, stream)
    assert learner.utilization > 0.2  # the stream really moved the metric
    metric = learner.metric_matrix
    np.testing.assert_array_equal(metric, metric.T)
    assert np.linalg.eigvalsh(metric).min() >= -1e-8


def test_rdml_inverse_stays_accurate_over_a_long_stream():
    rdml = RDML(n_features=D)
    feed(rdml, random_stream(2000, seed=12))
    assert rdml.updates > 500
    product = rdml.metric_matrix @ rdml.inverse_metric_matrix
    np.testing.assert_allclose(product, np.eye(D), atol=1e-8)


# ------------------------------------------------------------------------------ utilisation U
@pytest.mark.parametrize("name", ALL)
def test_used_mask_and_counters_agree(name):
    learner = make_learner(name, D)
    used = feed(learner, random_stream(300, seed=13))
    assert learner.constraints_used == int(used.sum())
    assert learner.constraints_seen == learner.constraints_learned == 300
    assert learner.utilization == pytest.approx(used.mean())
    if name == "euclidean":
        assert not used.any()
    else:
        assert 0 < used.sum() < 300  # some constraints move the model, some are satisfied
        # pair learners may take two steps per triplet, the others one per used constraint
        assert learner.updates == used.sum()


def test_a_satisfied_constraint_is_not_counted():
    lego = LEGO(n_features=2, target_similar=1.0, target_dissimilar=2.0, preprocess="none")
    used = lego.learn_triplets([[0.0, 0.0]], [[0.5, 0.0]], [[3.0, 0.0]])  # 0.25 <= 1, 9 >= 2
    assert used.tolist() == [False]
    assert (lego.constraints_used, lego.updates, lego.utilization) == (0, 0, 0.0)
    used = lego.learn_triplets([[0.0, 0.0]], [[0.5, 0.0]], [[1.0, 0.0]])  # negative too close
    assert used.tolist() == [True]
    assert (lego.constraints_used, lego.updates, lego.utilization) == (1, 1, 0.5)


# --------------------------------------------------------------------------------- checkpoints
def state_tensors(learner) -> dict[str, torch.Tensor]:
    return {k: v for k, v in learner.get_state()["model"].items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("name", ALL)
def test_save_load_continues_exactly(name, tmp_path):
    stream = random_stream(400, seed=14)
    uninterrupted = make_learner(name, D)
    feed(uninterrupted, stream)

    first_half = make_learner(name, D)
    feed(first_half, stream, stop=200)
    path = tmp_path / f"{name}.pt"
    save_learner(first_half, path, extra={"offset": 200})
    resumed, extra = load_learner(path)
    assert extra == {"offset": 200}
    feed(resumed, stream, start=200)

    assert type(resumed) is type(uninterrupted)
    assert resumed.get_params() == uninterrupted.get_params()
    assert resumed.summary() == uninterrupted.summary()
    expected = state_tensors(uninterrupted)
    for key, tensor in state_tensors(resumed).items():
        assert torch.equal(tensor, expected[key]), key
    probe = random_stream(5, seed=15)[0]
    for role in ("query", "gallery"):
        np.testing.assert_array_equal(resumed.embed(probe, role), uninterrupted.embed(probe, role))
    blob = torch.load(path, weights_only=True)
    assert blob["state"]["learner"] == name


def test_opml_checkpoint_keeps_the_latest_sample_per_class(tmp_path):
    rng = np.random.default_rng(16)
    x, y = rng.standard_normal((60, D)) * 0.3, rng.choice(np.array(["cat", "dog", "owl"]), 60)
    whole = OPML(n_features=D, regularization=0.01)
    whole.learn_samples(x, y)
    half = OPML(n_features=D, regularization=0.01)
    half.learn_samples(x[:25], y[:25])
    save_learner(half, tmp_path / "opml.pt")
    resumed, _ = load_learner(tmp_path / "opml.pt")
    resumed.learn_samples(x[25:], y[25:])
    np.testing.assert_array_equal(resumed.metric_matrix, whole.metric_matrix)
    assert resumed.constraints_seen == whole.constraints_seen > 50


# ------------------------------------------------------------------------------- LEGO targets
def shifted_sample(seed: int = 18) -> np.ndarray:
    """Items far from unit scale (std 5 around 3), so the targets depend on preprocessing."""
    return (np.random.default_rng(seed).standard_normal((300, D)) * 5.0 + 3.0).astype(np.float32)


def test_lego_prepare_sets_its_targets_from_the_preprocessed_sample():
    x = shifted_sample()
    raw = LEGO(n_features=D, preprocess="none")
    raw.prepare(x)
    assert (raw.target_similar, raw.target_dissimilar) == LEGO.targets_from_sample(x)
    assert raw.target_dissimilar > 100.0  # squared distances of std-5 items: ~ 2 · 10 · 25
    unit = LEGO(n_features=D, preprocess="standardize+unit")
    unit.prepare(x)
    scaled = unit.input_scaler.transform(x)
    assert (unit.target_similar, unit.target_dissimilar) == LEGO.targets_from_sample(scaled)
    assert 0.0 < unit.target_similar < unit.target_dissimilar <= 4.0  # unit rows: d² <= 4


def test_lego_keeps_explicit_targets_and_falls_back_when_never_prepared():
    x = shifted_sample()
    given = LEGO(n_features=D, target_similar=0.5, target_dissimilar=9.0, preprocess="none")
    given.prepare(x)
    assert (given.target_similar, given.target_dissimilar) == (0.5, 9.0)
    partial = LEGO(n_features=D, target_dissimilar=1e4, preprocess="none")
    partial.prepare(x)
    assert partial.target_similar == LEGO.targets_from_sample(x)[0]
    assert partial.target_dissimilar == 1e4
    unprepared = LEGO(n_features=D)
    assert unprepared.get_params()["target_similar"] is None
    feed(unprepared, random_stream(10, seed=19))
    assert (unprepared.target_similar, unprepared.target_dissimilar) == UNIT_SCALE_TARGETS
    too_close = LEGO(
        n_features=D, target_similar=1e4, preprocess="none"
    )  # above the sample's 95th percentile
    with pytest.raises(ValueError, match="target_dissimilar"):
        too_close.prepare(x)


def test_lego_prepared_targets_survive_a_checkpoint(tmp_path):
    x = shifted_sample()
    lego = LEGO(n_features=D, preprocess="center+unit")
    lego.prepare(x)
    feed(lego, (x[:100], x[100:200], x[200:], np.arange(100) % 2 == 0))
    save_learner(lego, tmp_path / "lego.pt")
    resumed, _ = load_learner(tmp_path / "lego.pt")
    assert resumed.get_params() == lego.get_params()
    np.testing.assert_array_equal(resumed.embed(x[:5]), lego.embed(x[:5]))


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name", ALL)
def test_wrong_dimension_names_the_field(name):
    learner = make_learner(name, D)
    good, bad = np.zeros((2, D)), np.zeros((2, D + 1))
    with pytest.raises(ValueError, match="negatives"):
        learner.learn_triplets(good, good + 1, bad)
    with pytest.raises(ValueError, match=r"\bu\b"):
        learner.learn_pairs(bad, good, [True, False])
    with pytest.raises(ValueError, match=r"\bx\b"):
        learner.embed(bad)


def test_opml_samples_validation():
    opml = OPML(n_features=D)
    with pytest.raises(ValueError, match="X"):
        opml.learn_samples(np.zeros((3, D - 1)), [0, 1, 2])
    with pytest.raises(ValueError, match="y"):
        opml.learn_samples(np.zeros((3, D)), [0, 1])


@pytest.mark.parametrize("name", ALL)
def test_non_finite_constraints_are_skipped_and_counted(name):
    learner, clean = make_learner(name, D), make_learner(name, D)
    a, p, neg, similar = random_stream(20, seed=17)
    dirty_a = a.copy()
    dirty_a[[3, 8], 0] = [np.nan, np.inf]
    keep = np.setdiff1d(np.arange(20), [3, 8])
    used = feed(learner, (dirty_a, p, neg, similar))
    feed(clean, (a[keep], p[keep], neg[keep], similar[keep]))
    assert not used[[3, 8]].any()
    assert learner.skipped["non_finite"] == 2
    assert learner.constraints_learned == 18
    for key, tensor in state_tensors(clean).items():
        assert torch.equal(state_tensors(learner)[key], tensor), key


def test_opml_non_finite_sample_is_not_kept_as_latest():
    x = np.array([[0.0, 1.0], [1.0, 0.0], [np.nan, 0.0], [0.5, 0.5]])
    opml = OPML(n_features=2, regularization=0.1)
    used = opml.learn_samples(x, [0, 1, 0, 0])
    # sample 2 is skipped; sample 3 pairs with sample 0 (not the NaN one) and with sample 1
    reference = OPML(n_features=2, regularization=0.1)
    reference.learn_triplets(x[[3]], x[[0]], x[[1]])
    assert used.tolist()[:3] == [False, False, False]
    assert opml.skipped["non_finite"] == 1
    np.testing.assert_array_equal(opml.metric_matrix, reference.metric_matrix)


# ---------------------------------------------------------------------------- hyper-parameters
@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (LEGO, {"learning_rate": 0.0}, "learning_rate"),
        (LEGO, {"target_similar": -1.0}, "target_similar"),
        (LEGO, {"target_similar": 3.0, "target_dissimilar": 2.0}, "target_dissimilar"),
        (RDML, {"learning_rate": float("inf")}, "learning_rate"),
        (RDML, {"psd_margin": 1.0}, "psd_margin"),
        (OASIS, {"aggressiveness": "big"}, "aggressiveness"),
        (OPML, {"regularization": float("nan")}, "regularization"),
    ],
)
def test_bad_hyper_parameter_names_the_field_and_value(cls, kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        cls(n_features=D, **kwargs)
    assert repr(next(iter(kwargs.values()))) in str(err.value)


@pytest.mark.parametrize("name", ALL)
def test_registry_builds_each_baseline_with_its_params(name):
    learner = make_learner(name, D)
    assert learner.name == name
    assert type(make_learner(name, D, **learner.get_params())) is type(learner)
    assert learner.embed(np.ones((3, D))).shape == (1, 3, D)
    assert learner.embed(np.ones((3, D))).dtype == np.float32


def test_declared_kinds_and_metrics():
    kinds = {c.name: (c.constraint_kind, c.metric) for c in (Euclidean, LEGO, RDML, OASIS, OPML)}
    assert kinds == {
        "euclidean": ("triplet", "l2"),
        "lego": ("pair", "l2"),
        "rdml": ("pair", "l2"),
        "oasis": ("triplet", "ip"),
        "opml": ("triplet", "l2"),
    }
