"""Input preprocessing: fitted on unlabelled items, applied to learning and embedding alike."""

import numpy as np
import pytest

from oahu.persistence import load_learner, save_learner
from oahu.preprocessing import InputScaler, parse_preprocess
from oahu.registry import LEARNER_NAMES, make_learner

X = np.array([[0.0, 10.0, 5.0], [2.0, 30.0, 5.0], [4.0, 20.0, 5.0]], dtype=np.float32)


def test_center_standardize_unit_by_hand() -> None:
    centered = InputScaler("center", 3)
    centered.fit(X)
    assert centered.transform(X[:1]).tolist() == [[-2.0, -10.0, 0.0]]
    standard = InputScaler("standardize", 3)
    standard.fit(X)
    # std of column 0 is √(8/3); column 2 is constant, so its scale stays 1 (not 1/0)
    assert standard.transform(X[:1])[0].tolist() == pytest.approx(
        [-2 / np.sqrt(8 / 3), -10 / np.sqrt(200 / 3), 0.0], rel=1e-6
    )
    unit = InputScaler("unit", 3)
    unit.fit(X)  # nothing to fit
    assert np.linalg.norm(unit.transform(X), axis=1) == pytest.approx([1, 1, 1])


def test_lift_appends_the_rms_norm_of_the_centred_items_by_hand() -> None:
    lifted = InputScaler("center+lift", 3)
    lifted.fit(X)
    # Centred rows (-2, -10, 0), (0, 10, 0), (2, 0, 0): squared norms 104, 100, 4; mean 208/3.
    r = np.sqrt(208 / 3)
    assert lifted.n_outputs == 4 and lifted.lift == pytest.approx(r, rel=1e-6)
    out = lifted.transform(X)
    assert out[:, :3].tolist() == [[-2.0, -10.0, 0.0], [0.0, 10.0, 0.0], [2.0, 0.0, 0.0]]
    assert out[:, 3] == pytest.approx([r, r, r], rel=1e-6)
    # The cosine of lifted items: an item at the centre is at angle 0 from (0, r) ...
    centre = lifted.transform(X.mean(axis=0, keepdims=True))
    assert centre[0, :3] == pytest.approx([0, 0, 0], abs=1e-5)
    # ... and with pca:K the coordinate follows the K projected axes.
    projected = InputScaler("pca:2+lift", 3)
    projected.fit(X)
    assert projected.n_outputs == 3 and projected.lift == pytest.approx(r, rel=1e-5)
    state = projected.get_state()
    restored = InputScaler("pca:2+lift", 3)
    restored.set_state(state)
    assert restored.transform(X).tolist() == projected.transform(X).tolist()


def test_bad_specs_and_missing_statistics() -> None:
    with pytest.raises(ValueError, match="unknown step 'zscore'"):
        parse_preprocess("center+zscore")
    with pytest.raises(ValueError, match="standardize already centers"):
        parse_preprocess("center+standardize")
    with pytest.raises(ValueError, match="lift needs center, standardize or pca:K first"):
        parse_preprocess("lift")
    with pytest.raises(ValueError, match="lift must be the last step"):
        parse_preprocess("pca:8+lift+unit")
    with pytest.raises(ValueError, match=r"call learner.prepare\(X\)"):
        InputScaler("center", 3).transform(X)
    with pytest.raises(ValueError, match="prepare needs items of shape"):
        InputScaler("center", 3).fit(X[:, :2])


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_every_learner_embeds_through_its_scaler_and_checkpoints_it(name, tmp_path) -> None:
    learner = make_learner(name, n_features=3, preprocess="standardize+unit")
    with pytest.raises(ValueError, match="prepare"):
        learner.embed(X)
    learner.prepare(X)
    plain = make_learner(name, n_features=3, preprocess="none")  # the same, on scaled items
    scaled = learner.input_scaler.transform(X)
    assert np.allclose(learner.embed(X), plain.embed(scaled), atol=1e-6)
    save_learner(learner, tmp_path / "m.pt")
    restored, _ = load_learner(tmp_path / "m.pt")
    assert restored.input_scaler.spec == "standardize+unit"
    assert np.allclose(restored.embed(X), learner.embed(X))


@pytest.mark.parametrize("preset", [None, "paper"])
def test_learning_sees_scaled_inputs(preset) -> None:
    small = dict(preset=preset, hidden_width=4, embedding_dim=2, device="cpu")
    scaled_model = make_learner("oahu", n_features=3, preprocess="center", **small)
    scaled_model.prepare(X)
    reference = make_learner("oahu", n_features=3, preprocess="none", **small)
    shift = X.mean(axis=0)
    rng = np.random.default_rng(0)
    a, p, n = (rng.random((8, 3), dtype=np.float32) for _ in range(3))
    scaled_model.learn_triplets(a, p, n)
    reference.learn_triplets(a - shift, p - shift, n - shift)
    assert np.allclose(scaled_model.embed(a), reference.embed(a - shift), atol=1e-6)


def test_learning_sees_projected_inputs() -> None:
    """OAHU's default "pca:K": learning and embedding see the items on their top K axes."""
    items = np.random.default_rng(1).normal(size=(50, 5)).astype(np.float32)
    small = dict(hidden_width=4, device="cpu")
    projected = make_learner("oahu", n_features=5, preprocess="pca:3", **small)
    projected.prepare(items)
    scaler = projected.input_scaler
    assert scaler.n_outputs == 3 and projected.embed(items).shape == (projected.n_depths, 50, 3)
    reference = make_learner("oahu", n_features=3, preprocess="none", **small)

    def project(x: np.ndarray) -> np.ndarray:
        return ((x - scaler.mean) @ scaler.components.T).astype(np.float32)

    a, p, n = np.random.default_rng(0).normal(size=(3, 8, 5)).astype(np.float32)
    projected.learn_triplets(a, p, n)
    reference.learn_triplets(project(a), project(p), project(n))
    assert np.allclose(projected.embed(a), reference.embed(project(a)), atol=1e-5)


def test_the_projection_of_an_item_does_not_depend_on_the_items_beside_it() -> None:
    """The service embeds a query alone or batched with other requests' queries, and must give
    one answer per model: float32 BLAS would round a row differently by the batch's size."""
    items = np.random.default_rng(2).normal(size=(1000, 64)).astype(np.float32)
    scaler = InputScaler("pca:32", 64)
    scaler.fit(items)
    alone = scaler.transform(items[:8])
    for n in (9, 16, 17, 64, 65, 257, 1000):
        np.testing.assert_array_equal(scaler.transform(items[:n])[:8], alone)
        after_others = np.concatenate([items[8:n], items[:8]])
        np.testing.assert_array_equal(scaler.transform(after_others)[-8:], alone)


@pytest.mark.parametrize(("n_features", "steps"), [(201, "pca:200"), (200, "pca:200+lift")])
def test_auto_projects_and_lifts_only_items_of_at_most_200_features(n_features, steps) -> None:
    """OAHU's default "auto" is one of two specs, by dimension, and the same model as that spec
    (the same statistics, embeddings and checkpoint state); its parameter stays "auto"."""
    rng = np.random.default_rng(0)
    items = rng.random((300, n_features), dtype=np.float32)
    a, p, n = rng.random((3, 10, n_features), dtype=np.float32)
    auto = make_learner("oahu", n_features, device="cpu", seed=3)
    spelled = make_learner("oahu", n_features, device="cpu", seed=3, preprocess=steps)
    assert auto.get_params()["preprocess"] == "auto" and auto.input_scaler.spec == steps
    assert auto.input_scaler.n_outputs == 200 + int(steps.endswith("lift"))
    for learner in (auto, spelled):
        learner.prepare(items)
        learner.learn_triplets(a, p, n)
    np.testing.assert_array_equal(auto.embed(a), spelled.embed(a))
    assert auto.input_scaler.get_state()["spec"] == steps
    restored = InputScaler("auto", n_features)
    restored.set_state(auto.input_scaler.get_state())  # a checkpoint of "auto" restores it
    with pytest.raises(ValueError, match="checkpoint has"):
        InputScaler("pca:200+lift" if steps == "pca:200" else "pca:200", n_features).set_state(
            auto.input_scaler.get_state()
        )
