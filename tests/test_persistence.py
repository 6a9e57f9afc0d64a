"""oahu.persistence: one format for files, bytes and pickles, and the checkpoints of the first
release (whose params were hand-written per learner) still load."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from oahu.learners.baselines.lego import LEGO
from oahu.learners.oahu.learner import OAHU
from oahu.persistence import (
    FORMAT_VERSION,
    learner_from_bytes,
    learner_to_bytes,
    load_learner,
    read_blob,
    save_learner,
    verified_payload,
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
    assert (tmp_path / "lego.pt").read_bytes() == data  # header line, then a torch.save zip
    payload, verified = verified_payload(data, "lego.pt")
    assert verified and payload.startswith(b"PK\x03\x04")
    blob = read_blob(tmp_path / "lego.pt")  # torch.load(payload, weights_only=True)
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


# OAHUConfig's fields before oahu's own default learner existed, when every OAHU was the paper's
# algorithm, in three eras of checkpoints:
# the first release's whole config, then with preprocessing, then with a PCA-initialised E0.
_FIRST = ("n_hidden_layers", "hidden_width", "embedding_dim", "beta", "smoothing")
_FIRST += ("learning_rate", "tau", "batch_size", "init", "head0_init_scale", "seed", "device")
OLD_FIELDS = {
    "first release": _FIRST,
    "preprocess": (*_FIRST, "preprocess", "cpu_threads"),
    "head0 from PCA": (*_FIRST, "preprocess", "cpu_threads", "head0_init", "head0_components"),
}


def paper_era_oahu(fields: tuple[str, ...]) -> tuple[OAHU, np.ndarray]:
    """A small OAHU as the paper's algorithm was before oahu's default learner existed (with the
    old defaults of the fields its era lacked), trained a little, and the rest of its stream."""
    params = {"hidden_width": 8, "embedding_dim": 4, "device": "cpu"}
    if "head0_init" in fields:  # the 'tuned' preset's kind of E0 and input
        params.update(head0_init="pca", head0_components=2, preprocess="center")
        params.update(init="orthogonal", learning_rate=0.003)
    model = OAHU(4, preset="paper", **params)
    rng = np.random.default_rng(1)
    if model.needs_prepare:
        model.prepare(rng.normal(size=(30, 4)))
    stream = rng.normal(size=(40, 3, 4))
    model.learn_triplets(*stream[:20].transpose(1, 0, 2))
    return model, stream[20:]


@pytest.mark.parametrize("era", list(OLD_FIELDS))
@pytest.mark.parametrize("preset", ["absent", None, "tuned"])
def test_a_checkpoint_of_the_paper_era_loads_as_the_paper_algorithm(tmp_path, era, preset):
    """Before oahu's default learner, every OAHU ran the paper's algorithm, and its params were
    its whole config of the time (first without a preset, then with None or 'tuned', a preset
    since removed): the fields it predates take the paper's values, not the new defaults."""
    model, rest = paper_era_oahu(OLD_FIELDS[era])
    state = model.get_state()
    state["params"] = {name: getattr(model.config, name) for name in OLD_FIELDS[era]}
    if preset != "absent":
        state["params"]["preset"] = preset
    for added in ("learned", "rng", "replay", "graph", "prequential"):  # not saved then
        del state["model"][added]
    torch.save({"format_version": 1, "state": state, "extra": {}}, tmp_path / "old.pt")
    restored, _ = load_learner(tmp_path / "old.pt", device="cpu")
    assert restored.config == model.config and restored.preset == "paper"
    x = np.random.default_rng(2).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_array_equal(restored.embed(x), model.embed(x))
    for learner in (model, restored):  # and it goes on learning as it did
        learner.learn_triplets(*rest.transpose(1, 0, 2))
    for name, value in model.network.tensors().items():
        assert torch.equal(restored.network.tensors()[name], value), name
    np.testing.assert_array_equal(restored.alpha, model.alpha)


def test_a_checkpoint_of_the_default_learner_keeps_its_configuration(tmp_path):
    model = OAHU(4, hidden_width=8, device="cpu")
    model.prepare(np.random.default_rng(1).normal(size=(30, 4)))
    save_learner(model, tmp_path / "new.pt")
    restored, _ = load_learner(tmp_path / "new.pt")
    assert restored.preset is None and restored.config == model.config
    assert restored.config.loss == "margin" and restored.config.residual_heads


def test_a_default_learner_saved_before_the_step_floor_keeps_learning_without_one(tmp_path):
    """Its params predate ``lr_floor``: it is restored with no floor, as it learned, not with
    the floor of today's default."""
    model = OAHU(4, hidden_width=8, lr_decay=5.0, lr_floor=0.0, device="cpu")
    rng = np.random.default_rng(1)
    model.prepare(rng.normal(size=(30, 4)))
    stream = rng.normal(size=(60, 3, 4))
    model.learn_triplets(*stream[:10].transpose(1, 0, 2))
    state = model.get_state()
    del state["params"]["lr_floor"]
    torch.save({"format_version": 1, "state": state, "extra": {}}, tmp_path / "old.pt")
    restored, _ = load_learner(tmp_path / "old.pt", device="cpu")
    assert restored.config == model.config
    for learner in (model, restored):  # far past where a floor of 0.5 would hold the step
        learner.learn_triplets(*stream[10:].transpose(1, 0, 2))
    assert restored.diagnostics()["learning_rate"] == model.diagnostics()["learning_rate"]
    for name, value in model.network.tensors().items():
        assert torch.equal(restored.network.tensors()[name], value), name


def test_an_unknown_format_version_is_refused(tmp_path):
    torch.save({"format_version": 2, "state": {}, "extra": {}}, tmp_path / "future.pt")
    with pytest.raises(ValueError, match=r"format_version: .* has 2, this oahu reads 1"):
        load_learner(tmp_path / "future.pt")


def test_a_queries_only_state_embeds_the_same_and_refuses_to_learn_or_be_saved():
    """What the learner process sends the serving process for a snapshot: the model without the
    memories learning keeps (most of a checkpoint), answering queries exactly as the learner."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 12)).astype(np.float32)
    learner = OAHU(12)
    learner.prepare(x)
    learner.learn_triplets(x[:1000], x[1000:2000], x[2000:])  # memories of 3,000 items
    full = learner_to_bytes(learner)
    served, _ = learner_from_bytes(learner_to_bytes(learner, queries_only=True))
    assert len(learner_to_bytes(learner, queries_only=True)) < len(full) / 3
    np.testing.assert_array_equal(served.embed(x[:7]), learner.embed(x[:7]))
    np.testing.assert_array_equal(served.alpha, learner.alpha)
    assert served.updates == learner.updates and served.queries_only
    with pytest.raises(ValueError, match="queries only"):
        served.learn_triplets(x[:1], x[1:2], x[2:3])
    with pytest.raises(ValueError, match="queries only"):
        learner_to_bytes(served)  # saving it as a checkpoint would lose the memories
    again, _ = learner_from_bytes(learner_to_bytes(served, queries_only=True))
    np.testing.assert_array_equal(again.embed(x[:7]), learner.embed(x[:7]))
    assert not learner_from_bytes(full)[0].queries_only


def test_the_migration_of_old_params_belongs_to_the_learner_class() -> None:
    """Persistence rebuilds every learner through its class's migrate_params: the identity for
    a learner whose parameters never changed meaning, OAHU's own for checkpoints of the paper's
    algorithm."""
    from oahu.registry import learner_class

    old = {"hidden_width": 8, "learning_rate": 0.3}
    assert learner_class("lego").migrate_params(old) == old
    assert learner_class("oahu").migrate_params(old) == {**old, "preset": "paper"}
