"""OAHU as a learner: modes, determinism, checkpoints and bad input, for the paper's algorithm and
for oahu's default learner (replay, mining, prequential accuracy, the step-size decay)."""

import math
import re

import numpy as np
import pytest
import torch

from oahu.learners.oahu.config import PRESETS, OAHUConfig
from oahu.learners.oahu.learner import OAHU
from oahu.persistence import load_learner, read_blob, save_learner

D = 12
ITEMS = np.random.default_rng(7).random((200, D), dtype=np.float32)  # unlabelled, for prepare
KINDS = ("paper", "default")


def small(kind: str = "default", **kw) -> OAHU:
    """A small learner of either kind, prepared on ``ITEMS`` (which the default one needs)."""
    if kind == "paper":
        params = dict(preset="paper", hidden_width=16, embedding_dim=6, device="cpu")
    else:
        params = dict(hidden_width=16, preprocess="pca:8", item_memory=64, device="cpu")
        params.update(replay_memory=32, margin=0.5)  # active constraints on random data
    params.update(kw)
    model = OAHU(D, **params)
    if model.needs_prepare:
        model.prepare(ITEMS)
    return model


@pytest.fixture
def triplets() -> np.ndarray:
    return np.random.default_rng(0).random((40, 3, D), dtype=np.float32)


def learn(model: OAHU, t: np.ndarray) -> np.ndarray:
    return model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])


def assert_same_model(a: OAHU, b: OAHU) -> None:
    for (name, x), y in zip(a.network.tensors().items(), b.network.tensors().values(), strict=True):
        assert torch.equal(x, y), name
    assert np.array_equal(a.alpha, b.alpha)
    assert a.diagnostics() == b.diagnostics()


def assert_same_state(a: OAHU, b: OAHU) -> None:
    assert_same_model(a, b)
    assert (a.updates, a.constraints_seen, a.constraints_used) == (
        b.updates,
        b.constraints_seen,
        b.constraints_used,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_strict_one_call_equals_one_triplet_per_call(kind, triplets) -> None:
    together, one_by_one = small(kind), small(kind)
    learn(together, triplets)
    for t in triplets:
        one_by_one.learn_triplets(t[0], t[1], t[2])
    assert_same_state(together, one_by_one)
    assert together.updates == len(triplets)


@pytest.mark.parametrize("kind", KINDS)
def test_micro_batch_of_one_equals_strict_bit_for_bit(kind, triplets) -> None:
    strict = small(kind)  # both configurations are strict by default
    assert strict.config.batch_size == 1
    micro = small(kind, batch_size=1)
    learn(strict, triplets)
    for start in range(0, len(triplets), 7):  # arbitrary chunking of the stream
        learn(micro, triplets[start : start + 7])
    assert_same_state(strict, micro)


def far_into_a_stream(model: OAHU) -> OAHU:
    """The learner as if it had learned 100,000 constraints: past the ramp of its update sizes."""
    model.update_step.learned = 100_000
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_micro_batch_takes_one_update_per_batch(kind, triplets) -> None:
    model = far_into_a_stream(small(kind, batch_size=16))
    used = learn(model, triplets)
    assert model.updates == 3  # 16 + 16 + 8
    assert model.alpha.sum() == pytest.approx(1.0)
    assert model.prequential.seen == len(triplets)  # every new triplet is scored, batched or not
    if kind == "paper":
        assert used.all() and model.utilization == 1.0  # ABTL: every triplet is active


def test_a_streams_first_updates_grow_to_the_batch_size(triplets) -> None:
    """An update takes at most a batch_ramp-th of the constraints learned before it (B3): with
    a ramp of 10, from 40 new constraints with B = 16, updates of 1 until 11 are learned, then 2
    (to 21), 3 (to 33) and 4 (to 40, the last one cut): 11 + 5 + 4 + 2 updates."""
    model = small("default", batch_size=16, batch_ramp=10)
    learn(model, triplets)
    assert model.updates == 22 and model.update_step.learned == 40
    learn(model, np.concatenate([triplets] * 4))  # 40 → 200 learned: sizes 4 ... 16
    sizes, t = [], 40
    while t < 200:
        sizes.append(min(16, -(-t // 10), 200 - t))
        t += sizes[-1]
    assert model.updates == 22 + len(sizes) and sizes[-2] == 16
    # By default a thousandth: 40 constraints are 40 updates of one; updates take two from the
    # 1,001st constraint on and reach 16 from the 15,001st.
    default = small("default", batch_size=16)
    learn(default, triplets)
    assert default.config.batch_ramp == 1000 and default.updates == 40
    sizes = [default.update_step.update_size(t) for t in (1_000, 1_001, 15_000, 15_001)]
    assert sizes == [1, 2, 15, 16]


def test_a_micro_batch_replays_and_mines_in_proportion_to_its_size(triplets) -> None:
    """B new triplets bring replay · B replayed and up to mined · B mined ones, as B strict
    updates would."""
    rng = np.random.default_rng(1)
    items, classes = rng.random((24, D), dtype=np.float32), np.arange(24) % 4
    anchors = rng.integers(0, 24, size=200)
    positives = [rng.choice(np.flatnonzero(classes == classes[a])) for a in anchors]
    negatives = [rng.choice(np.flatnonzero(classes != classes[a])) for a in anchors]
    model = small("default", batch_size=8, replay=1)
    learn(model, items[np.stack([anchors, positives, negatives], 1)])  # four classes revealed
    step = model.update_step
    new = step.project(triplets[:8])
    rows, slots = step.with_memories(new)
    # "auto" mines four per constraint for these 12 features: more than two mined would give
    # (measured 32; 16 with mined=2)
    assert model.config.replay == 1 and model.config.mined == "auto"
    assert step.config.mined == 4
    assert rows.shape[0] == 8 + 8 + len(slots) and 16 < len(slots) <= 32


def test_auto_replays_one_per_constraint_in_strict_mode_and_none_in_a_micro_batch(
    triplets,
) -> None:
    """``replay="auto"``: a strict update learns one replayed constraint beside its new one, a
    micro-batch update none; the learner's parameters keep "auto", its step the count."""
    strict, batch = small("default"), small("default", batch_size=8)
    assert strict.get_params()["replay"] == batch.get_params()["replay"] == "auto"
    assert (strict.update_step.config.replay, batch.update_step.config.replay) == (1, 0)
    for model, size in ((strict, 1), (batch, 8)):
        learn(model, triplets)  # something to replay
        step = model.update_step
        rows, slots = step.with_memories(step.project(triplets[:size]))
        assert rows.shape[0] == size * (1 + step.config.replay) + len(slots)
    # By the batch size, not by each update's: the micro-batch learner's first updates take
    # one constraint each (the ramp) and replay none either, nor keep any to replay.
    assert strict.update_step.update_size() == batch.update_step.update_size() == 1
    assert strict.update_step.replay.size > 0 and batch.update_step.replay.size == 0


def test_a_micro_batch_hedges_once_per_constraint(triplets) -> None:
    """The hedge discounts a depth by β to the number of new constraints it ranked wrongly, so
    a batch moves α as far as its constraints would one by one (H2)."""
    # Heads of their own (not residual): the depths rank differently from the start.
    model = far_into_a_stream(
        small("default", batch_size=40, n_hidden_layers=2, residual_heads=False)
    )
    step = model.update_step
    start = step.alpha.copy()
    learn(model, triplets)
    wrong = step.mistakes.sum(1)  # (L+1,): how many of the 40 each depth ranked wrongly
    assert wrong.max() > wrong.min()  # the depths differ
    factor = model.config.beta ** (wrong - wrong.min())
    expected = start * factor / (start * factor).sum()  # the floor s/(L+1) does not bind here
    assert model.alpha == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_model_different_seed_different_model(kind, triplets) -> None:
    a, b, c = small(kind, seed=5), small(kind, seed=5), small(kind, seed=6)
    for m in (a, b, c):
        learn(m, triplets)
    assert_same_state(a, b)
    assert not torch.equal(a.network.weights[0], c.network.weights[0])


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_continues_exactly(kind, tmp_path, triplets) -> None:
    # The default learner's replay reservoir, constraint graph, generator and prequential
    # windows are part of its state: a restart continues as if it never stopped.
    whole, first = small(kind, seed=1), small(kind, seed=1)
    learn(whole, triplets)
    learn(first, triplets[:20])
    path = tmp_path / "oahu.pt"
    save_learner(first, path, {"offset": 20})
    raw = read_blob(path)  # no code runs when a checkpoint is opened
    assert raw["state"]["learner"] == "oahu"
    resumed, extra = load_learner(path)
    assert extra == {"offset": 20}
    assert resumed.config == first.config
    learn(resumed, triplets[20:])
    assert_same_state(whole, resumed)


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_dimension_raises_naming_the_field(kind) -> None:
    model = small(kind)
    good = np.zeros((2, D), dtype=np.float32)
    with pytest.raises(ValueError, match=r"negatives: expected shape \(n, 12\)"):
        model.learn_triplets(good, good, np.zeros((2, D + 1)))
    with pytest.raises(ValueError, match="lengths differ"):
        model.learn_triplets(good, good, good[:1])
    assert model.constraints_seen == 0


@pytest.mark.parametrize("kind", KINDS)
def test_non_finite_and_degenerate_triplets_are_skipped_and_counted(kind, triplets) -> None:
    model, clean = small(kind), small(kind)
    a, p, n = (triplets[:6, i].copy() for i in range(3))
    a[1, 3] = np.nan
    p[2, 0] = np.inf
    n[4] = a[4]  # anchor identical to the negative
    before = {k: v.clone() for k, v in model.network.tensors().items()}
    used = model.learn_triplets(a, p, n)
    assert not used[[1, 2, 4]].any()
    assert model.skipped == {"non_finite": 2, "degenerate": 1}
    assert model.constraints_seen == 6 and model.constraints_learned == 3
    # The skipped rows left no trace: same as learning the three good ones alone.
    keep = [0, 3, 5]
    clean.learn_triplets(a[keep], p[keep], n[keep])
    assert_same_model(model, clean)
    assert not torch.equal(before["head0"], model.network.head0)


@pytest.mark.parametrize("kind", KINDS)
def test_non_finite_loss_never_reaches_the_weights(kind, triplets) -> None:
    model = small(kind)
    a, p, n = (triplets[:3, i].copy() for i in range(3))
    a[1] = 3e38  # finite input whose embedding overflows
    used = model.learn_triplets(a, p, n)
    assert not used[1]
    assert model.skipped == {"non_finite_loss": 1}
    assert all(torch.isfinite(v).all() for v in model.network.tensors().values())
    assert np.isfinite(model.alpha).all()
    # ... nor the memories that later updates learn from.
    memories = model.update_step.replay, model.update_step.graph
    assert all(np.isfinite(memory.rows).all() for memory in memories)


@pytest.mark.parametrize("kind", KINDS)
def test_embeddings_are_unit_vectors_per_depth(kind, triplets) -> None:
    model = small(kind)
    learn(model, triplets)
    emb = model.embed(triplets[:, 0])
    assert emb.shape == ((6, 40, 6) if kind == "paper" else (3, 40, 8))  # default: L = 2
    assert emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=-1), 1.0, atol=1e-5)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="learning_rate: must be a number > 0, got -1"):
        OAHU(4, learning_rate=-1)
    with pytest.raises(ValueError, match="batch_size"):
        OAHU(4, batch_size=0)
    with pytest.raises(ValueError, match="preset: unknown 'nope'"):
        OAHU(4, preset="nope")
    with pytest.raises(ValueError, match="n_features"):
        OAHU(0)
    with pytest.raises(ValueError, match="loss: must be one of 'margin', 'abtl', got 'l2'"):
        OAHU(4, loss="l2")
    with pytest.raises(ValueError, match="replay: must be 'auto' or an integer >= 0, got -1"):
        OAHU(4, replay=-1)
    with pytest.raises(ValueError, match="item_memory: must be an integer >= 1, got 0"):
        OAHU(4, item_memory=0)
    for field in ("mined", "replay"):
        for wrong in (-1, "many", "AUTO", 2.5, True):
            message = f"{field}: must be 'auto' or an integer >= 0, got {wrong!r}"
            with pytest.raises(ValueError, match=re.escape(message)):
                OAHU(4, **{field: wrong})


@pytest.mark.parametrize(
    ("n_features", "mined", "learned_with"),
    [
        (12, "auto", 4),
        (200, "auto", 4),
        (201, "auto", 2),
        (784, "auto", 2),
        (12, 3, 3),
        (784, 0, 0),
    ],
)
def test_auto_mines_four_triplets_up_to_200_features_and_two_above(
    n_features, mined, learned_with, tmp_path
) -> None:
    """The update step learns with the count; the learner's parameters keep what was asked,
    so that a saved model rebuilds the same choice."""
    model = OAHU(n_features, mined=mined, preprocess="none", hidden_width=8, device="cpu")
    assert model.update_step.config.mined == learned_with
    assert model.get_params()["mined"] == mined
    rng = np.random.default_rng(0)
    a, p, n = rng.random((3, 30, n_features), dtype=np.float32)
    model.learn_triplets(a, p, n)
    save_learner(model, tmp_path / "m.oahu")
    restored, _ = load_learner(tmp_path / "m.oahu")
    assert restored.update_step.config.mined == learned_with
    assert restored.get_params()["mined"] == mined


def test_paper_preset_is_section_4_3_2() -> None:
    model = OAHU(4, preset="paper")
    cfg = model.config
    assert (cfg.n_hidden_layers, cfg.hidden_width, cfg.embedding_dim) == (5, 100, 50)
    assert (cfg.beta, cfg.smoothing, cfg.learning_rate, cfg.tau) == (0.99, 0.1, 0.3, 0.1)
    assert (cfg.loss, cfg.hedge_signal, cfg.depth_weighting) == ("abtl", "loss", "alpha")
    assert (cfg.replay, cfg.mined, cfg.lr_decay, cfg.residual_heads) == (0, 0, 0.0, False)
    assert (cfg.preprocess, cfg.head0_init, cfg.init) == ("none", "random", "kaiming")
    assert model.alpha.tolist() == pytest.approx([1 / 6] * 6)
    assert not model.needs_prepare


def test_default_is_ours() -> None:
    model = OAHU(784)
    cfg = model.config
    assert cfg == OAHUConfig() and model.preset is None
    assert (cfg.loss, cfg.hedge_signal, cfg.residual_heads, cfg.head0_init) == (
        "margin",
        "mistakes",
        True,
        "identity",
    )
    assert model.needs_prepare  # its principal-axes projection is fitted on unlabelled items
    assert model.network.n_features == model.network.embedding_dim == 200
    with pytest.raises(ValueError, match=r"call learner\.prepare\(X\)"):
        model.learn_triplets(*np.random.default_rng(0).random((3, 1, 784), dtype=np.float32))


def test_default_starts_as_the_cosine_metric_of_the_principal_axes(triplets) -> None:
    # E0 = I on the projection and every residual head at zero: every depth is E0's metric.
    model = small()
    emb = model.embed(triplets[:, 0])
    projected = model.input_scaler.transform(triplets[:, 0])
    expected = projected / np.linalg.norm(projected, axis=1, keepdims=True)
    for depth in emb:
        assert np.allclose(depth, expected, atol=1e-6)


def test_prequential_accuracy_scores_each_new_triplet_before_learning_it() -> None:
    model = small(margin=0.05)
    anchor = ITEMS[:1]
    # The positive is the anchor itself, nudged: every depth ranks it right, whatever it learns.
    right = model.learn_triplets(anchor, anchor + 1e-3, ITEMS[1:2])
    assert model.prequential.per_depth == [1.0] * 3 and model.prequential.combined == 1.0
    # Swapped, the same triplet is ranked wrongly by every depth (it was not learned yet).
    model.learn_triplets(anchor, ITEMS[1:2], anchor + 1e-3)
    assert model.prequential.per_depth == [0.5] * 3 and model.prequential.seen == 2
    assert model.diagnostics()["prequential_accuracy"] == 0.5
    assert not right.any()  # ranked right by more than the margin: inactive, nothing changed


def test_hedge_discounts_the_depths_by_their_prequential_mistakes() -> None:
    # All depths start identical (residual heads at zero), so they err together and the hedge
    # keeps α uniform; the paper's hedge on the training loss moves it at once.
    ours, paper = small(), small("paper")
    t = np.random.default_rng(1).random((3, 5, D), dtype=np.float32)
    ours.learn_triplets(*t[:, :1])
    paper.learn_triplets(*t[:, :1])
    assert ours.alpha.tolist() == pytest.approx([1 / 3] * 3)
    assert not np.allclose(paper.alpha, 1 / 6)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_hedge_weights_the_depth_that_ranks_new_constraints_right_more_often(seed) -> None:
    """Over a whole stream (the prequential window covers all of it), the depth with fewer
    prequential mistakes ends with more of α."""
    from oahu.streams.benchmark_stream import build_stream

    stream = build_stream("digits", 1500, seed)
    model = OAHU(stream.n_features, device="cpu", prequential_window=1500, seed=seed)
    model.prepare(stream.X[stream.dev_idx])
    c = stream.constraints
    model.learn_triplets(stream.X[c[:, 0]], stream.X[c[:, 1]], stream.X[c[:, 2]])
    accuracy = model.prequential.per_depth
    assert accuracy[0] != accuracy[1]
    assert (model.alpha[1] > model.alpha[0]) == (accuracy[1] > accuracy[0])


def test_step_size_decays_with_the_triplets_learned(triplets) -> None:
    model = small(learning_rate=0.04, lr_decay=10.0, lr_floor=0.0)
    learn(model, triplets[:30])
    # The 30th update used η / sqrt(1 + 29 / T).
    assert model.diagnostics()["learning_rate"] == pytest.approx(0.04 / math.sqrt(1 + 29 / 10))
    assert small(lr_decay=0.0).config.lr_decay == 0.0


def test_step_size_stops_decaying_at_its_floor(triplets) -> None:
    # T = 10 with a floor of 0.5: 1 / sqrt(1 + t / 10) reaches 0.5 at t = 30, so the 20th
    # update is still on the decay and the 40th on the floor.
    model = small(learning_rate=0.04, lr_decay=10.0, lr_floor=0.5)
    learn(model, triplets[:20])
    assert model.diagnostics()["learning_rate"] == pytest.approx(0.04 / math.sqrt(1 + 19 / 10))
    learn(model, triplets[20:40])
    assert model.diagnostics()["learning_rate"] == pytest.approx(0.04 * 0.5)


def test_a_floor_above_the_decay_changes_nothing_until_it_is_reached(triplets) -> None:
    """Bit for bit: a floor the decay has not reached leaves every step as it was."""
    plain, floored = small(lr_decay=10.0, lr_floor=0.0), small(lr_decay=10.0, lr_floor=0.5)
    for model in (plain, floored):
        learn(model, triplets[:30])
    assert_same_model(plain, floored)


@pytest.mark.parametrize("floor", [-0.1, 1.5, "0.5"])
def test_a_floor_outside_0_1_is_refused(floor) -> None:
    # A number outside [0, 1] names the interval; a string is not a number at all.
    with pytest.raises(ValueError, match=r"lr_floor: must be a number( in \[0, 1\])?, got"):
        OAHU(4, lr_floor=floor)


def test_replay_and_mining_remember_the_stream_within_their_bounds(triplets) -> None:
    model = small(replay_memory=16, item_memory=32)
    for _ in range(3):
        learn(model, triplets)
    assert model.update_step.replay.size == 16 and model.update_step.replay.seen == 120
    assert model.update_step.graph.size == 32  # 120 distinct items offered, 32 held
    quiet = small(replay=0, mined=0)
    learn(quiet, triplets)
    assert quiet.update_step.replay.size == 0 and quiet.update_step.graph.size == 0


def test_a_reservoir_larger_than_the_items_a_stream_names_changes_nothing(triplets) -> None:
    """Bit for bit: until more distinct items arrive than the reservoir holds, its capacity plays
    no part, so figures of streams that never fill the smaller one hold for the larger."""
    # 40 triplets of random items: 120 distinct items, all held by a reservoir of 120 or more.
    exact, roomy, tight = small(item_memory=120), small(item_memory=1000), small(item_memory=60)
    for model in (exact, roomy, tight):
        learn(model, triplets)
        learn(model, triplets)
    assert exact.update_step.graph.size == roomy.update_step.graph.size == 120
    assert_same_model(exact, roomy)
    assert not torch.equal(tight.network.head0, roomy.network.head0)  # once it fills, it counts


@pytest.mark.parametrize("engine, batch_size", [("update", 1), ("update", 8), ("device", 1)])
def test_the_reservoir_grows_once_the_step_size_has_halved(engine, batch_size) -> None:
    """``early_item_memory`` items held until the decay has halved the step (3 · lr_decay = 60
    constraints here), ``item_memory`` after; the growth is kept by a checkpoint."""
    rng = np.random.default_rng(3)
    model = small(
        item_memory=100, early_item_memory=30, lr_decay=20, batch_size=batch_size,
        batch_ramp=1, step_engine=engine,
    )  # fmt: skip
    graph = lambda: model.update_step.graph  # noqa: E731 (a drift may replace it)
    assert model.update_step.items_held(59) == 30 and model.update_step.items_held(60) == 100
    learn(model, rng.random((56, 3, D), dtype=np.float32))  # 168 distinct items
    assert (graph().held_limit, graph().size, graph().capacity) == (30, 30, 100)
    learn(model, rng.random((64, 3, D), dtype=np.float32))  # 192 more, past constraint 60
    assert graph().held_limit == 100
    assert 30 < graph().size <= 100
    again = OAHU(D, **model.get_params())
    again.set_state(model.get_state())
    assert again.update_step.graph.held_limit == 100
    assert np.array_equal(again.update_step.graph.keys, graph().keys)


def test_before_it_grows_the_reservoir_learns_as_one_of_the_early_size(triplets) -> None:
    """Bit for bit: a stream shorter than 3 · lr_decay learns as a fixed reservoir of
    ``early_item_memory`` items, so figures of such streams hold for the growing default; and
    ``early_item_memory=0`` is ``item_memory`` from the start."""
    growing = small(item_memory=100, early_item_memory=32, lr_decay=1000)
    fixed = small(item_memory=32, early_item_memory=0, lr_decay=1000)
    large = small(item_memory=100, early_item_memory=0, lr_decay=1000)
    for model in (growing, fixed, large):
        learn(model, triplets)  # 120 distinct items
        learn(model, triplets)
    assert growing.update_step.graph.size == fixed.update_step.graph.size == 32
    assert large.update_step.graph.size == 100
    assert_same_model(growing, fixed)
    assert not torch.equal(large.network.head0, growing.network.head0)


def test_an_older_checkpoint_keeps_its_fixed_reservoir(triplets) -> None:
    """A default learner saved before the reservoir could grow held ``item_memory`` items from
    the start: rebuilt from its params, it still does."""
    params = small().get_params()
    del params["early_item_memory"]
    rebuilt = OAHU(D, **OAHU.migrate_params(params))
    assert rebuilt.config.early_item_memory == 0
    assert rebuilt.update_step.graph.held_limit == params["item_memory"]


def test_an_older_checkpoint_keeps_mining_32_anchors_ahead(triplets) -> None:
    """A default learner saved before ``mine_ahead`` existed mined 32 anchors at a time: rebuilt
    from its params it still does, however long its stream, and learns as a learner built to
    mine 32 ahead throughout; one mining 128 ahead learns another model. Zero is refused,
    naming the field."""
    params = small().get_params()
    del params["mine_ahead"], params["early_mine_ahead"]
    rebuilt = OAHU(D, **OAHU.migrate_params(params))
    assert rebuilt.update_step.anchors_ahead(10**7) == 32
    rebuilt.prepare(ITEMS)
    explicit = small(mine_ahead=32, early_mine_ahead=0)
    further = small(mine_ahead=128, early_mine_ahead=0)
    for model in (rebuilt, explicit, further):
        learn(model, triplets)
        learn(model, triplets)
    assert_same_model(rebuilt, explicit)
    assert not torch.equal(further.network.head0, explicit.network.head0)
    with pytest.raises(ValueError, match=r"mine_ahead.*0"):
        OAHU(D, mine_ahead=0)
    with pytest.raises(ValueError, match=r"early_mine_ahead.*-1"):
        OAHU(D, early_mine_ahead=-1)


def test_before_the_step_halves_the_default_mines_32_ahead_bit_for_bit(triplets) -> None:
    """Streams shorter than 3 · lr_decay learn as mining 32 anchors ahead throughout did, so
    figures of such streams hold for the default; past it the default mines 128 ahead."""
    default, before = small(), small(mine_ahead=32, early_mine_ahead=0)
    assert (default.config.mine_ahead, default.config.early_mine_ahead) == (128, 32)
    for model in (default, before):
        learn(model, triplets)
        learn(model, triplets)
    assert_same_model(default, before)
    short = small(lr_decay=10.0)  # 30 constraints in, the step has halved
    assert [short.update_step.anchors_ahead(n) for n in (29, 30)] == [32, 128]
    short_before = small(lr_decay=10.0, mine_ahead=32, early_mine_ahead=0)
    for model in (short, short_before):
        learn(model, triplets)
        learn(model, triplets)
    assert not torch.equal(short.network.head0, short_before.network.head0)


@pytest.mark.parametrize("engine, batch_size", [("update", 64), ("device", 1), ("device", 64)])
def test_the_graph_knows_an_item_once_however_the_stream_is_cut(engine, batch_size) -> None:
    """A block's projection rounds an item's row by how many rows it projects at once; the
    graph must still know the item, named in blocks of different sizes, as one item, or its
    similar and dissimilar items are never joined to it (here 800 constraints of digits name
    654 items; keyed by their projections, 1,500 constraints named 835 and blocks of 64 made
    1,558 of them)."""
    from oahu.learners.oahu.item_keys import row_keys
    from oahu.streams.benchmark_stream import build_stream

    stream = build_stream("digits", n_constraints=800, seed=0)
    rows = stream.features(0, len(stream))
    model = OAHU(stream.n_features, batch_size=batch_size, step_engine=engine, device="cpu")
    model.prepare(stream.X[stream.dev_idx])
    model.learn(stream.kind, rows)
    named = set(row_keys(rows).ravel().tolist())
    assert len(named) == 654
    assert set(model.update_step.graph.known) == named


def test_replay_and_mining_change_what_is_learned(triplets) -> None:
    plain, full = small(replay=0, mined=0), small()
    learn(plain, triplets)
    learn(full, triplets)
    assert not torch.equal(plain.network.head0, full.network.head0)


def test_pca_head0_starts_as_the_principal_axes_and_its_zero_rows_stay_zero(triplets) -> None:
    rng = np.random.default_rng(3)
    # Items whose variance is 9, 4 and 1 along three known orthogonal axes and 0 elsewhere
    # (latent coordinates centred and exactly uncorrelated, so the axes are exact).
    axes = np.linalg.qr(rng.standard_normal((D, 3)))[0].T  # (3, D), orthonormal rows
    latent = rng.standard_normal((500, 3))
    latent = np.linalg.qr(latent - latent.mean(0))[0] * np.sqrt(500)
    items = (latent * [3.0, 2.0, 1.0]) @ axes + 0.5
    model = OAHU(
        D,
        preset="paper",
        hidden_width=16,
        embedding_dim=6,
        device="cpu",
        head0_init="pca",
        head0_components=3,
        preprocess="center",
    )
    model.prepare(items.astype(np.float32))
    head0 = model.network.head0.numpy().astype(np.float64)
    # Each of the first three rows is one axis, in order of variance (up to sign).
    assert np.abs(np.abs(head0[:3] @ axes.T) - np.eye(3)).max() < 1e-3
    assert np.count_nonzero(head0[3:]) == 0
    learn(model, triplets)
    assert model.updates == len(triplets)
    after = model.network.head0.numpy()
    assert not np.array_equal(after[:3], head0[:3])  # E0 learned ...
    assert np.count_nonzero(after[3:]) == 0  # ... within the span it started in


def test_pca_head0_takes_at_most_the_axes_the_items_span() -> None:
    model = OAHU(D, preset="paper", hidden_width=16, embedding_dim=6, head0_init="pca")
    model.prepare(np.random.default_rng(0).random((4, D), dtype=np.float32))
    assert np.count_nonzero(np.abs(model.network.head0.numpy()).sum(1)) == 4


def test_prepare_refuses_to_reinitialise_a_trained_model(triplets) -> None:
    model = small()
    learn(model, triplets)
    with pytest.raises(ValueError, match="prepare: fits what learning starts from"):
        model.prepare(triplets[:, 0])
    with pytest.raises(ValueError, match="head0_components: must be <= embedding_dim"):
        small("paper", head0_init="pca", head0_components=7)
    with pytest.raises(ValueError, match=r"head0_init: must be one of .*got 'svd'"):
        small(head0_init="svd")


def test_pca_head0_must_be_prepared_before_learning_and_survives_a_checkpoint(
    tmp_path, triplets
) -> None:
    model = OAHU(D, preset="paper", hidden_width=16, embedding_dim=6, head0_init="pca")
    assert model.needs_prepare
    with pytest.raises(ValueError, match=r"call learner\.prepare"):
        learn(model, triplets)
    assert model.updates == 0
    model.prepare(triplets[:, 0])
    assert not model.needs_prepare
    learn(model, triplets[:5])
    save_learner(model, tmp_path / "m.pt")
    restored, _ = load_learner(tmp_path / "m.pt")
    assert not restored.needs_prepare
    for learner in (model, restored):
        learn(learner, triplets[5:])
    assert_same_state(model, restored)


def test_parameters_are_a_preset_and_the_config_fields() -> None:
    model = OAHU(D, preset="paper", learning_rate=0.01, device="cpu")
    assert model.config == PRESETS["paper"].replace(learning_rate=0.01, device="cpu")
    params = model.get_params()
    assert (params["preset"], params["hidden_width"], params["learning_rate"]) == (
        "paper",
        100,
        0.01,
    )
    assert OAHU(D, **params).config == model.config  # what rebuilding a checkpoint does
    assert OAHU.from_config(D, model.config).config == model.config
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*hidden_widht"):
        OAHU(D, hidden_widht=3)


@pytest.mark.parametrize("batch_size, max_update_size", [(256, None), (16_384, None), (16_384, 0)])
def test_batches_up_to_16384_learn_with_no_other_setting_changed(
    batch_size: int, max_update_size: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same learner handed batches of 256 or 16,384 (a GPU's batch) learns three noisy
    classes: by default a batch of 16,384 is 64 updates of 256 (B4); without that limit it is
    one update. Every update stays within the trust region (‖Δθ‖ ≤ 0.05 ‖θ‖), and held-out
    triplets are ranked right more often after 49,152 constraints than before."""
    rng = np.random.default_rng(0)
    means = rng.normal(size=(3, D)).astype(np.float32)

    def noisy(classes: np.ndarray) -> np.ndarray:
        return means[classes] + rng.normal(size=(len(classes), D)).astype(np.float32)

    def draw(n: int) -> np.ndarray:
        own = rng.integers(0, 3, size=n)
        other = (own + rng.integers(1, 3, size=n)) % 3
        return np.stack([noisy(own), noisy(own), noisy(other)], 1)

    def ranked_right(model: OAHU, t: np.ndarray) -> float:
        e = np.asarray(model.embed(t.reshape(-1, D)))
        e = e.reshape(e.shape[0], len(t), 3, e.shape[-1])  # (depths, triplets, role, dim)
        far = ((e[:, :, :1] - e[:, :, 1:]) ** 2).sum(-1)  # (depths, triplets, [D+, D-])
        combined = np.einsum("l,lts->ts", model.alpha, far)
        return float((combined[:, 0] < combined[:, 1]).mean())

    limit = {} if max_update_size is None else {"max_update_size": max_update_size}
    model = OAHU(D, hidden_width=16, preprocess="pca:8", item_memory=64, replay_memory=32,
                 batch_size=batch_size, device="cpu", **limit)  # fmt: skip
    model.prepare(noisy(np.arange(300) % 3))
    model.update_step.learned = model.config.batch_ramp * batch_size  # past the ramp
    held_out = draw(2000)
    before = ranked_right(model, held_out)
    stream = draw(3 * 16_384)

    def flat() -> torch.Tensor:
        return torch.cat([v.flatten().double() for v in model.network.tensors().values()])

    moves = []
    network_step = model.network.step

    def measured_step(*args, **kwargs):
        theta = flat()
        scale = network_step(*args, **kwargs)
        moves.append(float((flat() - theta).norm() / theta.norm()))
        return scale

    monkeypatch.setattr(model.network, "step", measured_step)
    for start in range(0, len(stream), batch_size):
        learn(model, stream[start : start + batch_size])
    update = 256 if max_update_size is None else batch_size
    assert model.updates == len(moves) == len(stream) // update
    assert max(moves) <= model.config.max_step_change * (1 + 1e-5)
    assert ranked_right(model, held_out) >= before + 0.015


@pytest.mark.parametrize("engine", ["update", "device"])
def test_a_batch_larger_than_an_update_learns_as_its_updates_would(engine: str) -> None:
    """With updates of at most ``max_update_size`` (B4), a batch of 4 × 8 triplets is the
    batch of 8's model bit for bit, from the ramp's first updates of one onwards, handed the
    same calls (a call's end also ends an update); by default that limit is 256, and
    B = 1,024 is B = 256."""
    rng = np.random.default_rng(3)
    stream = rng.random((700, 3, D), dtype=np.float32)
    common = dict(step_engine=engine, batch_ramp=4)
    large = small(batch_size=32, max_update_size=8, **common)
    updates_of_8 = small(batch_size=8, **common)
    for start in range(0, len(stream), 96):  # calls of three batches of 32
        learn(large, stream[start : start + 96])
        learn(updates_of_8, stream[start : start + 96])
    assert large.updates == updates_of_8.updates > len(stream) // 8
    assert_same_state(large, updates_of_8)
    assert large.constraints_per_update == 8
    by_default = OAHU(D, batch_size=1024, device="cpu")
    assert by_default.config.max_update_size == 256
    assert by_default.constraints_per_update == 256
    assert by_default.update_step.update_size(10**7) == 256


def test_an_older_checkpoint_keeps_its_whole_batch_updates() -> None:
    """A default learner saved before the update-size limit learned a batch as one update:
    rebuilt from its params, it still does; a negative limit is refused, naming the field."""
    params = small(batch_size=1024).get_params()
    del params["max_update_size"]
    rebuilt = OAHU(D, **OAHU.migrate_params(params))
    assert rebuilt.config.max_update_size == 0 and rebuilt.constraints_per_update == 1024
    with pytest.raises(ValueError, match=r"max_update_size.*-1"):
        OAHU(D, max_update_size=-1)
