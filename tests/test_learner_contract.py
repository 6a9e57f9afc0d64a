"""The contract every registered learner keeps, OAHU included: declared capabilities honoured,
parameters from the constructor signature, counters that agree with the masks, checkpoints and
pickles that continue exactly, bad input named or skipped and counted."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import numpy as np
import pytest
import torch

from oahu.learner import Learner
from oahu.persistence import learner_from_state, load_learner, read_blob, save_learner
from oahu.registry import LEARNER_NAMES, learner_class, make_learner

D = 10
# OAHU's default learner, only narrower, so that the suite runs in seconds.
SMALL = {"oahu": {"hidden_width": 16, "embedding_dim": 6, "device": "cpu"}}
# Unlabelled items, distributed like the streams' below, for the learners that fit something on
# items before learning (OAHU's default principal-axes projection): prepared as a user would.
ITEMS = np.random.default_rng(0).standard_normal((200, D)) * 0.3


def build(name: str, **params: Any) -> Learner:
    """A learner as it starts on a stream: constructed, and prepared if it needs it."""
    learner = unprepared(name, **params)
    if learner.needs_prepare:
        learner.prepare(ITEMS)
    return learner


def unprepared(name: str, **params: Any) -> Learner:
    return make_learner(name, D, **{**SMALL.get(name, {}), **params})


def random_stream(n: int, seed: int, scale: float = 0.3) -> tuple[np.ndarray, ...]:
    """Triplets (a, p, n) and a similarity flag, Gaussian items with squared gaps ~ 2 d scale²."""
    rng = np.random.default_rng(seed)
    a, p, neg = (rng.standard_normal((n, D)) * scale for _ in range(3))
    return a, p, neg, rng.random(n) < 0.5


def feed(learner: Learner, stream: tuple, start: int = 0, stop: int | None = None) -> np.ndarray:
    """The stream as the paper's protocol feeds the learner: (a, n, similar) pairs for pair
    learners, (a, p, n) triplets for the others."""
    a, p, neg, similar = (part[start:stop] for part in stream)
    if learner.capabilities.protocol_kind == "pair":
        return learner.learn_pairs(a, neg, similar)
    return learner.learn_triplets(a, p, neg)


def assert_same_state(x: Any, y: Any, path: str = "state") -> None:
    if isinstance(x, dict):
        assert set(x) == set(y), path
        for key in x:
            assert_same_state(x[key], y[key], f"{path}.{key}")
    elif isinstance(x, torch.Tensor):
        assert torch.equal(x, y), path
    else:
        assert x == y, path


# --------------------------------------------------------------------------- capabilities
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_declared_constraint_kinds_are_learned_and_others_refused(name):
    learner = build(name)
    a, p, neg, similar = random_stream(6, seed=1)
    items = {
        "triplet": np.stack([a, p, neg], axis=1),
        "pair": np.stack([a, neg], axis=1),
        "quadruplet": np.stack([a, p, neg, p], axis=1),
    }
    for kind, x in items.items():
        if learner.capabilities.learns(kind):
            assert learner.learn(kind, x, similar).shape == (6,)
        else:
            seen = learner.constraints_seen
            with pytest.raises(ValueError, match=f"kind: {name!r} learns from .*not from {kind}s"):
                learner.learn(kind, x, similar)
            assert learner.constraints_seen == seen  # refused before anything is counted
    assert learner.constraints_seen == 6 * len(learner.capabilities.constraint_kinds)


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_learning_from_samples_only_where_declared(name):
    learner = build(name)
    x, y = np.random.default_rng(2).standard_normal((8, D)) * 0.3, np.arange(8) % 2
    if learner.capabilities.learns_samples:
        assert learner.learn_samples(x, y).sum() > 0
    else:
        with pytest.raises(ValueError, match="learns from constraints, not from labelled samples"):
            learner.learn_samples(x, y)


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_a_torch_device_only_where_declared(name):
    # Serving searches on the learner's device, and a restored model moves to another one, by
    # this declaration: a learner declaring it takes a device and computes there.
    cls = learner_class(name)
    assert ("device" in cls.param_names()) == cls.capabilities.torch_device
    if cls.capabilities.torch_device:
        assert str(build(name, device="cpu").device) == "cpu"


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_diagnostics_report_what_is_declared(name):
    learner = build(name)
    feed(learner, random_stream(20, seed=3))
    values = learner.diagnostics()
    assert list(values) == [d.name for d in learner.capabilities.diagnostics]
    for d in learner.capabilities.diagnostics:
        if d.per_depth:
            assert len(values[d.name]) == learner.n_depths
            assert all(isinstance(v, float) and np.isfinite(v) for v in values[d.name])
        else:
            assert isinstance(values[d.name], float)


def test_a_class_must_implement_what_it_declares():
    from oahu.capabilities import Capabilities, Diagnostic
    from oahu.learners.baselines.euclidean import Euclidean

    with pytest.raises(TypeError, match="declares capabilities without _learn_samples"):

        class Fake(Euclidean):
            capabilities = Capabilities(learns_samples=True)

    with pytest.raises(TypeError, match="without _diagnostics"):

        class Quiet(Euclidean):
            capabilities = Capabilities(diagnostics=(Diagnostic("spread", "per-depth spread"),))


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_a_learner_that_fits_on_items_refuses_to_start_without_them(name):
    """Preprocessing fitted on unlabelled items (OAHU's default projection; ``center`` for any
    learner) must be prepared first: learning or embedding before says what to call."""
    assert unprepared(name).needs_prepare == (name == "oahu")  # by default, only OAHU's
    learner = unprepared(name, preprocess="center")
    assert learner.needs_prepare
    with pytest.raises(ValueError, match=r"call learner\.prepare\(X\)"):
        feed(learner, random_stream(4, seed=4))
    with pytest.raises(ValueError, match=r"call learner\.prepare\(X\)"):
        learner.embed(np.ones((2, D)))
    learner.prepare(ITEMS)
    assert not learner.needs_prepare
    feed(learner, random_stream(4, seed=4))
    assert learner.embed(np.ones((2, D))).shape[:2] == (learner.n_depths, 2)


# ----------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_params_are_the_declared_ones_and_rebuild_the_learner(name):
    learner = build(name)
    cls = learner_class(name)
    params = learner.get_params()
    assert list(params) == list(cls.param_names())
    # The declared defaults are what a learner built without them uses.
    defaults = {p.name: p.default for p in cls._param_specs()}
    assert make_learner(name, D).get_params() == defaults
    signature = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values()):
        # Declared by the constructor itself, in its order (OAHU takes its config's as **kwargs).
        assert list(params) == [p for p in signature if p != "n_features"]
    clone = learner.clone()
    assert type(clone) is type(learner) and clone.get_params() == params
    assert clone is not learner and clone.updates == 0
    assert type(make_learner(name, D, **params)) is cls
    assert repr(clone) == repr(learner)
    assert eval(repr(learner), {cls.__name__: cls}).get_params() == params


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_repr_shows_the_parameters_that_differ_from_their_defaults(name):
    learner = build(name, preprocess="center")
    text = repr(learner)
    assert text.startswith(f"{type(learner).__name__}(n_features={D}")
    assert "preprocess='center'" in text


# ------------------------------------------------------------------------------ counters
# The others: some, not all. OAHU's default learner too: its margin loss leaves a triplet that
# already ranks right by the margin inactive (its paper preset is below).
EXPECTED_USE = {"euclidean": "none"}


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_used_mask_and_counters_agree(name):
    learner = build(name)
    used = feed(learner, random_stream(300, seed=13))
    assert learner.constraints_used == int(used.sum())
    assert learner.constraints_seen == learner.constraints_learned == 300
    assert learner.utilization == pytest.approx(used.mean())
    expected = EXPECTED_USE.get(name, "some")
    if expected == "none":
        assert not used.any() and learner.updates == 0
    else:
        assert 0 < used.sum() < 300  # some constraints move the model, some are satisfied
        # Strict: one step per used constraint; OAHU steps on every constraint, since the
        # triplets it replays and mines alongside a satisfied one may still be active.
        steps = learner.constraints_learned if name == "oahu" else used.sum()
        assert learner.updates == steps


def test_oahu_paper_preset_uses_every_triplet():
    """ABTL (the paper's loss) is positive on every triplet (Section 3.5): U = 1."""
    learner = build("oahu", preset="paper")
    used = feed(learner, random_stream(300, seed=13))
    assert used.all() and learner.utilization == 1.0
    assert learner.updates == learner.constraints_used == 300


# ------------------------------------------------------------------- checkpoints, pickles
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_save_load_continues_exactly(name, tmp_path):
    stream = random_stream(400, seed=14)
    uninterrupted = build(name)
    feed(uninterrupted, stream)

    first_half = build(name)
    feed(first_half, stream, stop=200)
    path = tmp_path / f"{name}.pt"
    save_learner(first_half, path, extra={"offset": 200})
    resumed, extra = load_learner(path)
    assert extra == {"offset": 200}
    feed(resumed, stream, start=200)

    assert type(resumed) is type(uninterrupted)
    assert resumed.get_params() == uninterrupted.get_params()
    assert resumed.summary() == uninterrupted.summary()
    assert_same_state(resumed.get_state(), uninterrupted.get_state())
    probe = random_stream(5, seed=15)[0]
    for role in ("query", "gallery"):
        np.testing.assert_array_equal(resumed.embed(probe, role), uninterrupted.embed(probe, role))
    blob = read_blob(path)  # no code runs when a checkpoint is opened
    assert blob["state"]["learner"] == name


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_pickles_and_copies_continue_exactly(name):
    stream = random_stream(60, seed=16)
    original = build(name)
    feed(original, stream, stop=30)
    copied = pickle.loads(pickle.dumps(original))
    rebuilt = learner_from_state(original.get_state())
    for learner in (original, copied, rebuilt):
        feed(learner, stream, start=30)
    assert_same_state(copied.get_state(), original.get_state())
    assert_same_state(rebuilt.get_state(), original.get_state())


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_wrong_dimension_names_the_field(name):
    learner = build(name)
    good, bad = np.zeros((2, D)), np.zeros((2, D + 1))
    with pytest.raises(ValueError, match="negatives"):
        learner.learn_triplets(good, good + 1, bad)
    pair_error = r"\bu\b" if learner.capabilities.learns("pair") else "kind"
    with pytest.raises(ValueError, match=pair_error):
        learner.learn_pairs(bad, good, [True, False])
    with pytest.raises(ValueError, match=r"\bx\b"):
        learner.embed(bad)
    with pytest.raises(ValueError, match="items: expected shape"):
        learner.learn("triplet", good)


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_one_array_of_items_is_learned_and_screened_as_the_roles_are(name):
    # learn(kind, items) keeps the items as one array instead of one matrix per role (the
    # service and replays take this path): same model, same masks, same skip counts.
    a, p, neg, _ = random_stream(30, seed=5)
    a[4, 1], neg[9] = np.nan, a[9]  # one non-finite, one degenerate triplet
    quadruplets = np.stack([a, p, a[::-1], neg], axis=1)
    quadruplets[12, 3] = quadruplets[12, 2]  # c = d: degenerate
    quadruplets[13, 2:] = quadruplets[13, :2]  # {c, d} = {a, b}: contradicts itself
    for kind, items in (("triplet", np.stack([a, p, neg], axis=1)), ("quadruplet", quadruplets)):
        learner, by_roles = build(name), build(name)
        if not learner.capabilities.learns(kind):
            continue
        used = learner.learn(kind, items)
        method = by_roles.learn_triplets if kind == "triplet" else by_roles.learn_quadruplets
        assert np.array_equal(used, method(*(items[:, r] for r in range(items.shape[1]))))
        # Quadruplets: a's NaN row also sits at c of row 25, and rows 12 and 13 are degenerate.
        assert learner.skipped == by_roles.skipped, kind
        expected = {"triplet": 1, "quadruplet": 2}[kind]
        assert learner.skipped == {"non_finite": expected, "degenerate": expected}, kind
        assert learner.constraints_seen == by_roles.constraints_seen == 30
        assert_same_state(learner.get_state()["model"], by_roles.get_state()["model"])
    with pytest.raises(ValueError, match=r"items: expected shape \(n, 3, 10\) for triplets"):
        build(name).learn("triplet", quadruplets)


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_non_finite_constraints_are_skipped_and_counted(name):
    learner, clean = build(name), build(name)
    a, p, neg, similar = random_stream(20, seed=17)
    dirty_a = a.copy()
    dirty_a[[3, 8], 0] = [np.nan, np.inf]
    keep = np.setdiff1d(np.arange(20), [3, 8])
    used = feed(learner, (dirty_a, p, neg, similar))
    feed(clean, (a[keep], p[keep], neg[keep], similar[keep]))
    assert not used[[3, 8]].any()
    assert learner.skipped["non_finite"] == 2
    assert learner.constraints_learned == 18
    assert_same_state(learner.get_state()["model"], clean.get_state()["model"])


@pytest.mark.parametrize("name", LEARNER_NAMES)
def test_embeddings_have_one_row_per_item_and_depth(name):
    learner = build(name)
    emb = learner.embed(np.ones((3, D)))
    assert emb.dtype == np.float32 and emb.shape[:2] == (learner.n_depths, 3)
    assert learner.alpha.shape == (learner.n_depths,) and learner.alpha.sum() == pytest.approx(1)
