"""What the baselines guarantee beyond the learner contract (tests/test_learner_contract.py): PSD
metrics over long streams, LEGO's targets, OPML's one-pass memory, hyper-parameter validation."""

from __future__ import annotations

import numpy as np
import pytest
from test_learner_contract import D, feed, random_stream

from oahu.learners.baselines.euclidean import Euclidean
from oahu.learners.baselines.lego import LEGO, UNIT_SCALE_TARGETS
from oahu.learners.baselines.oasis import OASIS
from oahu.learners.baselines.opml import OPML
from oahu.learners.baselines.rdml import RDML
from oahu.persistence import load_learner, save_learner
from oahu.registry import make_learner


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


def test_a_satisfied_constraint_is_not_counted():
    lego = LEGO(n_features=2, target_similar=1.0, target_dissimilar=2.0, preprocess="none")
    used = lego.learn_triplets([[0.0, 0.0]], [[0.5, 0.0]], [[3.0, 0.0]])  # 0.25 <= 1, 9 >= 2
    assert used.tolist() == [False]
    assert (lego.constraints_used, lego.updates, lego.utilization) == (0, 0, 0.0)
    used = lego.learn_triplets([[0.0, 0.0]], [[0.5, 0.0]], [[1.0, 0.0]])  # negative too close
    assert used.tolist() == [True]
    assert (lego.constraints_used, lego.updates, lego.utilization) == (1, 1, 0.5)


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
    assert raw.targets == LEGO.targets_from_sample(x)
    assert raw.targets[1] > 100.0  # squared distances of std-5 items: ~ 2 · 10 · 25
    assert raw.get_params()["target_similar"] is None  # a parameter stays as it was given
    unit = LEGO(n_features=D, preprocess="standardize+unit")
    unit.prepare(x)
    scaled = unit.input_scaler.transform(x)
    assert unit.targets == LEGO.targets_from_sample(scaled)
    assert 0.0 < unit.targets[0] < unit.targets[1] <= 4.0  # unit rows: d² <= 4


def test_lego_keeps_explicit_targets_and_falls_back_when_never_prepared():
    x = shifted_sample()
    given = LEGO(n_features=D, target_similar=0.5, target_dissimilar=9.0, preprocess="none")
    given.prepare(x)
    assert given.targets == (0.5, 9.0)
    partial = LEGO(n_features=D, target_dissimilar=1e4, preprocess="none")
    partial.prepare(x)
    assert partial.targets == (LEGO.targets_from_sample(x)[0], 1e4)
    unprepared = LEGO(n_features=D)
    assert unprepared.targets is None
    feed(unprepared, random_stream(10, seed=19))
    assert unprepared.targets == UNIT_SCALE_TARGETS
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
    assert resumed.get_params() == lego.get_params() and resumed.targets == lego.targets
    np.testing.assert_array_equal(resumed.embed(x[:5]), lego.embed(x[:5]))


def test_opml_samples_validation():
    opml = OPML(n_features=D)
    with pytest.raises(ValueError, match="X"):
        opml.learn_samples(np.zeros((3, D - 1)), [0, 1, 2])
    with pytest.raises(ValueError, match="y"):
        opml.learn_samples(np.zeros((3, D)), [0, 1])


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


def test_declared_capabilities_and_metrics():
    declared = {
        c.name: (c.capabilities.constraint_kinds, c.capabilities.learns_samples, c.metric)
        for c in (Euclidean, LEGO, RDML, OASIS, OPML)
    }
    assert declared == {
        # accepts every kind, learns from none
        "euclidean": (("triplet", "pair", "quadruplet"), False, "l2"),
        "lego": (("pair", "triplet"), False, "l2"),  # a triplet is learned as two pairs
        "rdml": (("pair", "triplet"), False, "l2"),
        "oasis": (("triplet",), False, "ip"),
        # its own one-pass triplets from samples; quadruplets through the same update
        "opml": (("triplet", "quadruplet"), True, "l2"),
    }


def test_opml_learns_a_triplet_and_its_quadruplet_alike():
    from oahu.constraint_kinds import triplet_as_quadruplet

    t = np.random.default_rng(4).random((20, 3, D))
    by_triplet, by_quadruplet = OPML(n_features=D), OPML(n_features=D)
    used_t = by_triplet.learn("triplet", t)
    used_q = by_quadruplet.learn("quadruplet", triplet_as_quadruplet(t))
    assert used_t.tolist() == used_q.tolist() and used_t.any()
    assert np.array_equal(by_triplet.metric_matrix, by_quadruplet.metric_matrix)


@pytest.mark.parametrize("cls", [LEGO, RDML, OASIS])
def test_learners_without_quadruplets_refuse_them_by_kind(cls):
    q = np.random.default_rng(4).random((2, 4, D))
    with pytest.raises(ValueError, match=r"kind: .* not from quadruplets"):
        cls(n_features=D).learn("quadruplet", q)
