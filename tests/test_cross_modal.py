"""The cross-modal learner, its binary codes, the offline references, the cross-modal metrics
and `oahu replay --cross-modal`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cross_decomposition import CCA

from oahu.experiments.cross_modal_active import cross_modal_oracle, cross_modal_questions
from oahu.experiments.cross_modal_evaluation import link_auc, mean_average_precision, recall_at
from oahu.experiments.cross_modal_replay import replay_cross_modal
from oahu.learners.cross_modal import BinaryCodes, CrossModalOAHU, hamming_distances, pack_codes
from oahu.learners.cross_modal.cca import CanonicalReference
from oahu.learners.cross_modal.loss import PAIR_THRESHOLD, constraint_gradients
from oahu.streams.packaged_datasets import is_cached

needs_mfeat = pytest.mark.skipif(
    not is_cached("mfeat"), reason="mfeat is not cached: run `oahu datasets fetch mfeat`"
)


# ---------------------------------------------------------------------- codes
@settings(max_examples=50, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_hamming_distances_count_differing_bits(m, n, n_bytes, seed):
    rng = np.random.default_rng(seed)
    a = rng.random((m, 8 * n_bytes)) < 0.5
    b = rng.random((n, 8 * n_bytes)) < 0.5
    expected = (a[:, None, :] != b[None, :, :]).sum(-1)
    assert hamming_distances(pack_codes(a), pack_codes(b)).tolist() == expected.tolist()


def test_hamming_distances_refuse_codes_of_different_lengths():
    with pytest.raises(ValueError, match="codes: expected"):
        hamming_distances(np.zeros((2, 1), np.uint8), np.zeros((2, 2), np.uint8))


def test_code_length_hedge_discounts_the_lengths_that_ranked_wrongly():
    codes = BinaryCodes(2, lengths=(8, 16), beta=0.5, seed=0)
    # A triplet whose positive is the anchor itself and whose negative is its opposite: every
    # hyperplane separates the anchor from the negative, none from the positive.
    z = np.array([[1.0, 0.5], [1.0, 0.5], [-1.0, -0.5]], dtype=np.float32)
    assert codes.observe(z, None).tolist() == [0.0, 0.0]
    # The same triplet with positive and negative swapped: both lengths wrong, once.
    assert codes.observe(z[[0, 2, 1]], None).tolist() == [1.0, 1.0]
    assert codes.weights.tolist() == [0.5, 0.5]
    assert codes.chosen_bits == 8  # a tie goes to the shorter code
    codes.mistakes[0] += 1  # one more mistake of the 8-bit code
    assert codes.weights.tolist() == pytest.approx([1 / 3, 2 / 3])
    assert codes.chosen_bits == 16


def test_code_projections_learn_to_separate_a_triplet():
    codes = BinaryCodes(4, lengths=(8,), seed=1)
    rng = np.random.default_rng(0)
    anchor = rng.normal(size=4)
    # A violated triplet: the positive is near the anchor's opposite, the negative near it.
    z = np.stack([anchor, -anchor + 0.3 * rng.normal(size=4), anchor + 0.3 * rng.normal(size=4)])
    z = z.astype(np.float32)

    def relaxed_margin():
        t = np.tanh(z @ codes.projections[0].T)
        return (t[0] @ t[1] - t[0] @ t[2]) / 8

    before = relaxed_margin()
    for _ in range(50):
        codes.learn(z, None)
    assert relaxed_margin() > before + 0.1


def test_code_lengths_must_be_distinct_multiples_of_eight():
    with pytest.raises(ValueError, match="code_bits"):
        BinaryCodes(4, lengths=(8, 12))
    with pytest.raises(ValueError, match="code_bits"):
        BinaryCodes(4, lengths=(8, 8))


# ---------------------------------------------------------------------- the learner
@pytest.mark.parametrize("similar", [None, True, False])
def test_constraint_gradients_are_the_mean_over_depths_of_the_losses_gradients(similar):
    rng = np.random.default_rng(3)
    n_items = 3 if similar is None else 2
    f = [rng.normal(size=(3, 4)) * 0.5 for _ in range(n_items)]
    parts, active, _, _ = constraint_gradients(f, similar, 0.1, np.full(3, 1 / 3))
    t = [torch.tensor(x, requires_grad=True) for x in f]
    if similar is None:
        loss = torch.relu(((t[0] - t[1]) ** 2).sum(-1) - ((t[0] - t[2]) ** 2).sum(-1) + 0.1)
    else:
        d = ((t[0] - t[1]) ** 2).sum(-1)
        sign = 1.0 if similar else -1.0
        loss = torch.relu(sign * (d - PAIR_THRESHOLD) + 0.1)
    loss.mean().backward()
    for part, tensor in zip(parts, t, strict=True):
        assert part == pytest.approx(tensor.grad.numpy(), abs=1e-12)
    assert active.tolist() == (loss.detach().numpy() > 0).tolist()


def test_pair_gradients_by_hand():
    f = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])]  # D = 2 > threshold 1
    linked, active, wrong, combined = constraint_gradients(f, True, 0.1, np.ones(1))
    assert [p.tolist() for p in linked] == [[[2.0, -2.0]], [[-2.0, 2.0]]]
    assert (active.tolist(), wrong.tolist(), combined) == ([True], [True], 1.0)
    unlinked, active, wrong, combined = constraint_gradients(f, False, 0.1, np.ones(1))
    assert [p.tolist() for p in unlinked] == [[[0.0, 0.0]], [[0.0, 0.0]]]  # far enough
    assert (active.tolist(), wrong.tolist(), combined) == ([False], [False], 0.0)


def _toy_model(**params) -> CrossModalOAHU:
    rng = np.random.default_rng(0)
    model = CrossModalOAHU({"img": 6, "txt": 3}, embedding_dim=4, hidden_width=8, **params)
    model.prepare("img", rng.normal(size=(40, 6)))
    model.prepare("txt", rng.normal(size=(40, 3)))
    return model


def test_embeddings_of_both_modalities_lie_in_one_space_weighted_by_alpha():
    model = _toy_model()
    x = np.random.default_rng(1).normal(size=(5, 3))
    points = model.embed(x, "txt")
    assert points.shape == (5, model.n_depths * 4)
    # Each depth's unit embedding scaled by √α(l): squared norms sum to Σα = 1.
    assert (points**2).sum(1) == pytest.approx(np.ones(5), abs=1e-5)


def test_inputs_are_checked_naming_the_field():
    model = _toy_model()
    with pytest.raises(ValueError, match="modality: one of"):
        model.embed(np.zeros((1, 3)), "audio")
    with pytest.raises(ValueError, match=r"v: expected shape \(n, 3\) for modality 'txt'"):
        model.learn_pair(np.zeros(6), np.zeros(4), ("img", "txt"), True)
    with pytest.raises(ValueError, match="anchor: non-finite"):
        model.learn_triplet([np.nan] * 6, np.zeros(3), np.ones(3), ("img", "txt", "txt"))
    with pytest.raises(ValueError, match="n_features"):
        CrossModalOAHU({"img": 6})
    fresh = CrossModalOAHU({"img": 6, "txt": 3})
    with pytest.raises(ValueError, match="prepare"):
        fresh.learn_pair(np.zeros(6), np.zeros(3), ("img", "txt"), True)


@pytest.mark.parametrize(
    "param, value",
    [
        ("learning_rate", 0.0),
        ("margin", -0.1),
        ("beta", 1.0),
        ("replay", -1),
        ("embedding_dim", 0),
        ("code_bits", (8, 12)),
        ("preprocess", "zscore"),
        ("seed", -1),
    ],
)
def test_bad_parameters_are_refused_naming_them(param, value):
    name = "code_bits" if param == "code_bits" else param.split("_")[0]
    with pytest.raises(ValueError, match=name):
        CrossModalOAHU({"img": 6, "txt": 3}, **{param: value})


def test_the_same_seed_gives_the_same_model():
    rng = np.random.default_rng(5)
    items = [(rng.normal(size=6), rng.normal(size=3), rng.normal(size=3)) for _ in range(50)]
    models = [_toy_model(seed=7) for _ in range(2)]
    for model in models:
        for a, p, n in items:
            model.learn_triplet(a, p, n, ("img", "txt", "txt"))
    probe = rng.normal(size=(4, 6))
    assert models[0].embed(probe, "img") == pytest.approx(models[1].embed(probe, "img"))
    assert models[0].alpha.tolist() == models[1].alpha.tolist()


def test_learning_a_triplet_moves_the_anchor_towards_its_positive():
    model = _toy_model(replay=0)
    rng = np.random.default_rng(2)
    a, p, n = rng.normal(size=6), rng.normal(size=3), rng.normal(size=3)

    def margin():
        ea = model.embed(a, "img")
        ep, en = model.embed(np.stack([p, n]), "txt")
        return ((ea - en) ** 2).sum() - ((ea - ep) ** 2).sum()

    if margin() > 0:  # make it a triplet the model gets wrong
        p, n = n, p
    before = margin()
    assert before < 0
    for _ in range(20):
        model.learn_triplet(a, p, n, ("img", "txt", "txt"))
    assert margin() > before + 0.1


# ---------------------------------------------------------------------- references
def test_closed_form_cca_finds_scikit_learns_correlations():
    rng = np.random.default_rng(0)
    shared = rng.normal(size=(500, 2))
    a = np.hstack([shared + 0.3 * rng.normal(size=(500, 2)), rng.normal(size=(500, 3))])
    b = np.hstack([shared @ [[1.0, 0.5], [-0.5, 1.0]], rng.normal(size=(500, 2))])
    ours = CanonicalReference(2, regularization=0.0, code_bits=4).fit(a, b)
    pa, pb = CCA(2, max_iter=5000).fit(a, b).transform(a, b)
    theirs = [abs(np.corrcoef(pa[:, k], pb[:, k])[0, 1]) for k in range(2)]
    assert ours.correlations[:2] == pytest.approx(theirs, abs=1e-3)


def test_reference_refuses_unpaired_views():
    with pytest.raises(ValueError, match="view_b: must pair row for row"):
        CanonicalReference(2).fit(np.zeros((5, 3)), np.zeros((4, 3)))


# ---------------------------------------------------------------------- metrics
def test_mean_average_precision_by_hand():
    # Query 0 (class 0) ranks gallery [0, 1, 2] = classes [0, 1, 0]: AP = (1 + 2/3) / 2.
    d = np.array([[0.1, 0.2, 0.3]])
    assert mean_average_precision(d, np.array([0]), np.array([0, 1, 0])) == pytest.approx(5 / 6)


def test_hamming_ties_are_broken_at_random_not_by_index():
    # Every gallery item at the same distance: index order would put the relevant one first.
    d = np.zeros((1, 200), dtype=np.int32)
    gallery = np.r_[0, np.ones(199, dtype=int)]
    assert mean_average_precision(d, np.array([0]), gallery) < 0.5


def test_recall_and_auc():
    d = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    assert recall_at(d, np.array([1, 1]), np.array([0, 1, 0]), ks=(1, 2)) == {"1": 0.0, "2": 1.0}
    # Link AUC by hand: four objects of two classes, the B view a shifted copy of A's.
    a = np.array([[0.0], [1.0], [0.1], [0.9]])
    labels = np.array([0, 1, 0, 1])
    assert link_auc(a, a + 0.01, labels, n_pairs=8) == 1.0
    # Scores that cannot tell linked from unlinked pairs: an AUC of one half.
    assert link_auc(np.zeros((4, 1)), np.zeros((4, 1)), labels, n_pairs=8) == 0.5


# ---------------------------------------------------------------------- end to end
@needs_mfeat
def test_mfeat_cross_modal_learner_beats_cca_after_a_few_thousand_constraints():
    from oahu.streams.cross_modal_protocol import build_cross_modal_stream
    from oahu.streams.views import load_views

    stream = build_cross_modal_stream(load_views("mfeat"), 4000, seed=11)
    ours = replay_cross_modal(stream, "oahu", seed=11)
    cca = replay_cross_modal(stream, "cca", seed=11)
    assert min(ours["map_ab"], ours["map_ba"]) > max(cca["map_ab"], cca["map_ba"])
    assert ours["link_auc"] > 0.85
    assert ours["hamming_by_bits"]["64"][0] > cca["hamming_map_ab"]
    assert ours["code_bits"] in (16, 32, 64, 128)


@needs_mfeat
def test_active_questions_are_cross_modal_and_spend_the_budget():
    from oahu.streams.cross_modal_protocol import build_cross_modal_stream
    from oahu.streams.views import load_views

    stream = build_cross_modal_stream(load_views("mfeat"), 1000, seed=3)
    pairs = cross_modal_oracle(stream, "active", budget=800, batch=100, seed=3)
    # Pair questions are always answered: one constraint per label.
    assert len(pairs) == pairs.meta["oracle"]["answered"] == 800
    assert (pairs.kinds[500:] == 0).all()
    assert (pairs.modality[500:, 0] != pairs.modality[500:, 1]).all()
    linked = pairs.y[pairs.constraints[500:, 0]] == pairs.y[pairs.constraints[500:, 1]]
    assert (pairs.similar[500:] == linked).all()
    taught = cross_modal_oracle(stream, "active", budget=800, batch=100, seed=3, kinds="triplets")
    assert taught.meta["oracle"]["labels_used"] == 800
    assert len(taught) == taught.meta["oracle"]["answered"] < 800
    asked = taught.constraints[500:]
    assert len(asked) > 0 and (taught.kinds[500:] == 1).all()
    # An answered question: anchor in one modality, both options in the other, the positive
    # of the anchor's class and the negative not.
    mods = taught.modality[500:]
    assert ((mods[:, 1] != mods[:, 0]) & (mods[:, 2] == mods[:, 1])).all()
    y = taught.y
    assert (y[asked[:, 0]] == y[asked[:, 1]]).all() and (y[asked[:, 0]] != y[asked[:, 2]]).all()
    random = cross_modal_oracle(stream, "random", budget=800, seed=3)
    assert len(random) == 800 and (random.constraints == stream.constraints[:800]).all()


def test_cross_modal_questions_pair_an_anchor_with_items_of_the_other_pool():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(40, 3)), rng.normal(size=(30, 3))
    q = cross_modal_questions((a, b), 10, rng, anchors=20, neighbours=4, kinds="triplets")
    assert len(q) == 10
    in_a = q < 40
    assert (in_a[:, 0] != in_a[:, 1]).all() and (in_a[:, 1] == in_a[:, 2]).all()
    pairs = cross_modal_questions((a, b), 10, rng, anchors=20, neighbours=4)
    assert (pairs[:, 2] == -1).all() and ((pairs[:, 0] < 40) != (pairs[:, 1] < 40)).all()
    both = cross_modal_questions((a, b), 30, rng, anchors=20, neighbours=4, kinds="both")
    assert len(both) == 30 and (both[:, 2] == -1).any() and (both[:, 2] >= 0).any()


def _replay(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "oahu.cli.main", "replay", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


CONTRACT = {
    "map_ab",
    "map_ba",
    "hamming_map_ab",
    "hamming_map_ba",
    "code_bits",
    "link_auc",
    "error",
    "constraints",
    "seed",
    "learner",
    "dataset",
}


@needs_mfeat
@pytest.mark.parametrize("learner", ["oahu", "cca"])
def test_replay_cross_modal_prints_the_contract_keys(learner):
    done = _replay(
        "--dataset",
        "mfeat",
        "--cross-modal",
        "--constraints",
        "600",
        "--seed",
        "1",
        "--learner",
        learner,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert CONTRACT <= set(report)
    assert report["dataset"] == "mfeat" and report["modalities"] == ["pix", "fou"]
    assert 0.0 < report["map_ab"] <= 1.0 and 0.5 < report["link_auc"] <= 1.0
    if learner == "cca":
        assert report["code_bits"] == 64 and report["constraints"] == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--cross-modal", "--batch-size", "4"], "--batch-size: not with --cross-modal"),
        (["--learner", "cca"], "--learner cca: an offline reference for --cross-modal only"),
        (["--cross-modal", "--learner", "lego"], "--learner: with --cross-modal one of"),
        (["--views", "pix,fou"], "--views: only with --cross-modal"),
    ],
)
def test_replay_refuses_what_cross_modal_does_not_take(args, message):
    done = _replay("--dataset", "mfeat", "--constraints", "10", *args)
    assert done.returncode != 0
    assert message in done.stderr


# ---------------------------------------------------------------------- checkpoints
def test_a_saved_model_loads_and_goes_on_learning_as_the_original(tmp_path):
    from oahu.persistence import LearnerFileError, load_learner, save_learner

    rng = np.random.default_rng(8)

    def triplets(n):
        return [(rng.normal(size=6), rng.normal(size=3), rng.normal(size=3)) for _ in range(n)]

    model = _toy_model(seed=2)
    for a, p, n in triplets(30):
        model.learn_triplet(a, p, n, ("img", "txt", "txt"))
    save_learner(model, tmp_path / "model.oahu")
    copy, _ = load_learner(tmp_path / "model.oahu")
    assert type(copy) is CrossModalOAHU and copy.get_params() == model.get_params()
    probe = rng.normal(size=(4, 3))
    assert copy.embed(probe, "txt") == pytest.approx(model.embed(probe, "txt"), abs=0)
    assert (copy.codes(probe, "txt", 32) == model.codes(probe, "txt", 32)).all()
    for a, p, n in triplets(30):  # the reservoir and its random draws came along
        model.learn_triplet(a, p, n, ("img", "txt", "txt"))
        copy.learn_triplet(a, p, n, ("img", "txt", "txt"))
    assert copy.embed(probe, "txt") == pytest.approx(model.embed(probe, "txt"), abs=1e-6)
    assert copy.constraints_seen == model.constraints_seen == 60
    data = bytearray((tmp_path / "model.oahu").read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "bad.oahu").write_bytes(bytes(data))
    with pytest.raises(LearnerFileError):
        load_learner(tmp_path / "bad.oahu")


def test_a_queries_only_copy_embeds_but_refuses_to_learn():
    from oahu.persistence import learner_from_bytes, learner_to_bytes

    model = _toy_model()
    copy, _ = learner_from_bytes(learner_to_bytes(model, queries_only=True))
    x = np.ones((2, 6))
    assert copy.embed(x, "img") == pytest.approx(model.embed(x, "img"), abs=0)
    with pytest.raises(ValueError, match="queries only"):
        copy.learn_pair(np.zeros(6), np.zeros(3), ("img", "txt"), True)


@needs_mfeat
def test_a_cross_modal_stream_file_replays_and_saves_its_model(tmp_path):
    from oahu.persistence import load_learner

    path = tmp_path / "kz.npz"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "oahu.cli.main",
            "make-stream",
            "--dataset",
            "mfeat",
            "--cross-modal",
            "--views",
            "kar,zer",
            "--constraints",
            "300",
            "--out",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    done = _replay(
        "--stream", str(path), "--cross-modal", "--json", "--save-model", str(tmp_path / "kz.oahu")
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["modalities"] == ["kar", "zer"]
    model, extra = load_learner(tmp_path / "kz.oahu")
    assert model.modalities == ("kar", "zer") and model.constraints_seen == 300
    assert json.loads(extra["stream_meta"])["views"] == ["kar", "zer"]
    single = _replay("--stream", str(path))
    assert single.returncode != 0
    assert "a cross-modal stream; replay it with --cross-modal" in single.stderr


# ---------------------------------------------------------------------- the gallery
def test_the_gallery_finds_what_exhaustive_ranking_finds():
    from oahu.inference.cross_modal import CrossModalGallery

    model = _toy_model(seed=4)
    rng = np.random.default_rng(9)
    txt, img = rng.normal(size=(40, 3)), rng.normal(size=(5, 6))
    gallery = CrossModalGallery(model, bits=32)
    gallery.add("txt", [f"t{i}" for i in range(40)], txt, labels=np.arange(40) % 4)
    assert (gallery.size("txt"), gallery.size("img"), len(gallery)) == (40, 0, 40)
    found = gallery.retrieve(img, from_="img", to="txt", k=5)
    d = ((model.embed(img, "img")[:, None] - model.embed(txt, "txt")[None]) ** 2).sum(-1)
    assert found.distances == pytest.approx(np.sort(d, axis=1)[:, :5], abs=1e-4)
    assert (found.labels == np.vectorize(lambda s: int(s[1:]) % 4)(found.ids)).all()
    by_code = gallery.retrieve(img, "img", "txt", k=40, hamming=True)
    h = hamming_distances(model.codes(img, "img", 32), model.codes(txt, "txt", 32))
    assert (by_code.distances == np.sort(h, axis=1)).all()
    distance, linked = gallery.verify(img[:2], txt[:2], "img", "txt")
    assert distance == pytest.approx(np.diag(d[:2, :2]), abs=1e-5)
    assert (linked == (distance < PAIR_THRESHOLD)).all()
    assert gallery.retrieve(txt[:5], "txt", "img", k=3).ids.shape == (5, 0)  # an empty gallery
    with pytest.raises(ValueError, match="to: one of"):
        gallery.retrieve(img, "img", "audio")
    with pytest.raises(ValueError, match="bits: one of"):
        CrossModalGallery(model, bits=24)
    with pytest.raises(ValueError, match="need items in two of them"):
        gallery.suggest(3)


def test_the_gallery_suggests_questions_across_its_modalities():
    from oahu.inference.cross_modal import CrossModalGallery

    model = _toy_model(seed=4)
    rng = np.random.default_rng(2)
    gallery = CrossModalGallery(model)
    gallery.add("img", [f"i{k}" for k in range(30)], rng.normal(size=(30, 6)))
    gallery.add("txt", [f"t{k}" for k in range(20)], rng.normal(size=(20, 3)))
    pairs = gallery.suggest(8, seed=1)
    assert len(pairs) == 8 and len(set(pairs)) == 8
    for src, anchor, dst, first, second in pairs:
        assert {src, dst} == {"img", "txt"} and second is None
        assert anchor[0] == src[0] and first[0] == dst[0]
    triplets = gallery.suggest(5, seed=1, kinds="triplets")
    assert all(q[4] is not None and q[4][0] == q[2][0] for q in triplets)
    assert gallery.suggest(8, seed=1) == pairs  # seeded


@needs_mfeat
def test_a_view_narrower_than_64_gives_cca_sign_codes_of_its_width():
    from oahu.streams.cross_modal_protocol import build_cross_modal_stream
    from oahu.streams.views import load_views

    stream = build_cross_modal_stream(load_views("mfeat", ("mor", "fou")), 10, seed=0)
    report = replay_cross_modal(stream, "cca", seed=0)
    assert report["code_bits"] == 6  # mor's six morphological features: six components
    assert report["hamming_map_ab"] > 0.2  # ten classes: a random ranking is near 0.1
