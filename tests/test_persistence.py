"""oahu.persistence: one format for files, bytes and pickles, and the checkpoints of the first
release (whose params were hand-written per learner) still load."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from oahu.baselines.lego import LEGO
from oahu.oahu_learner import OAHU
from oahu.persistence import (
    FORMAT_VERSION,
    learner_from_bytes,
    learner_to_bytes,
    load_learner,
    save_learner,
)


def trained_lego() -> LEGO:
    rng = np.random.default_rng(0)
    lego = LEGO(4, preprocess="none")
    lego.prepare(rng.normal(size=(50, 4)))
    lego.learn_pairs(rng.normal(size=(20, 4)), rng.normal(size=(20, 4)), rng.random(20) < 0.5)
    return lego


def test_bytes_files_and_pickles_are_one_format(tmp_path):
    lego = trained_lego()
    data = learner_to_bytes(lego, extra={"offset": 20})
    save_learner(lego, tmp_path / "lego.pt", extra={"offset": 20})
    assert (tmp_path / "lego.pt").read_bytes()[:2] == data[:2]  # both torch.save zip archives
    blob = torch.load(tmp_path / "lego.pt", weights_only=True)
    assert blob["format_version"] == FORMAT_VERSION and blob["extra"] == {"offset": 20}
    assert blob["state"]["params"] == lego.get_params()
    for restored in (
        learner_from_bytes(data)[0],
        load_learner(tmp_path / "lego.pt")[0],
        pickle.loads(pickle.dumps(lego)),
    ):
        np.testing.assert_array_equal(restored.metric_matrix, lego.metric_matrix)
        assert restored.targets == lego.targets


def test_a_first_release_lego_checkpoint_loads(tmp_path):
    """Then LEGO's params held its resolved targets and its state did not."""
    lego = trained_lego()
    state = lego.get_state()
    state["params"] = {
        "preprocess": "none",
        "learning_rate": 0.1,
        "target_similar": lego.targets[0],
        "target_dissimilar": lego.targets[1],
    }
    del state["model"]["targets"]
    torch.save({"format_version": 1, "state": state, "extra": {}}, tmp_path / "old.pt")
    restored, _ = load_learner(tmp_path / "old.pt")
    assert restored.targets == lego.targets
    np.testing.assert_array_equal(restored.metric_matrix, lego.metric_matrix)


def test_a_first_release_oahu_checkpoint_loads(tmp_path):
    """Then OAHU's params were its whole config, without a preset."""
    model = OAHU(
        4, preset="tuned", hidden_width=8, embedding_dim=4, head0_components=2, device="cpu"
    )
    model.prepare(np.random.default_rng(1).normal(size=(30, 4)))
    state = model.get_state()
    state["params"] = model.config.to_dict()
    torch.save({"format_version": 1, "state": state, "extra": {}}, tmp_path / "old.pt")
    restored, _ = load_learner(tmp_path / "old.pt", device="cpu")
    assert restored.config == model.config and restored.preset is None
    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_array_equal(restored.embed(x), model.embed(x))


def test_an_unknown_format_version_is_refused(tmp_path):
    torch.save({"format_version": 2, "state": {}, "extra": {}}, tmp_path / "future.pt")
    with pytest.raises(ValueError, match=r"format_version: .* has 2, this oahu reads 1"):
        load_learner(tmp_path / "future.pt")
