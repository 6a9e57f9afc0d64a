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


def test_bad_specs_and_missing_statistics() -> None:
    with pytest.raises(ValueError, match="unknown step 'zscore'"):
        parse_preprocess("center+zscore")
    with pytest.raises(ValueError, match="standardize already centers"):
        parse_preprocess("center+standardize")
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
    plain = make_learner(name, n_features=3)
    scaled = learner.input_scaler.transform(X)
    assert np.allclose(learner.embed(X), plain.embed(scaled), atol=1e-6)
    save_learner(learner, tmp_path / "m.pt")
    restored, _ = load_learner(tmp_path / "m.pt")
    assert restored.input_scaler.spec == "standardize+unit"
    assert np.allclose(restored.embed(X), learner.embed(X))


def test_learning_sees_scaled_inputs() -> None:
    scaled_model = make_learner(
        "oahu", n_features=3, preprocess="center", hidden_width=4, embedding_dim=2, device="cpu"
    )
    scaled_model.prepare(X)
    reference = make_learner("oahu", n_features=3, hidden_width=4, embedding_dim=2, device="cpu")
    shift = X.mean(axis=0)
    rng = np.random.default_rng(0)
    a, p, n = (rng.random((8, 3), dtype=np.float32) for _ in range(3))
    scaled_model.learn_triplets(a, p, n)
    reference.learn_triplets(a - shift, p - shift, n - shift)
    assert np.allclose(scaled_model.embed(a), reference.embed(a - shift), atol=1e-6)
