"""Linked objects end to end: retrieval measured by links, the learner and the CCA reference
replayed on a stream drawn from links, and ``oahu make-stream``/``oahu replay --cross-modal``
on a user's .npz of linked objects (streams/linked.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cross_modal import CONTRACT as LABELLED_CONTRACT
from test_streams_linked import assert_same_linked, check_link_protocol, grouped_links

from oahu.cli.main import main
from oahu.experiments.cross_modal_evaluation import (
    held_out_link_auc,
    link_mean_average_precision,
    link_recall_at,
    link_relevance,
)
from oahu.experiments.cross_modal_replay import (
    HeldOutRetrieval,
    evaluate_cross_modal,
    fit_reference,
    replay_cross_modal,
)
from oahu.streams.cross_modal import load_cross_modal_stream
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.linked import load_linked

# The keys `oahu replay --cross-modal --json` prints for labelled objects, and so for linked.
CONTRACT = LABELLED_CONTRACT | {"recall_ab", "recall_ba"}


# ---------------------------------------------------------------------- measures, by hand
def test_link_relevance_marks_each_link_between_the_objects_it_joins():
    a, b, relevant = link_relevance(np.array([[5, 1], [2, 1], [5, 9], [2, 4]]))
    assert a.tolist() == [2, 5] and b.tolist() == [1, 4, 9]
    assert relevant.tolist() == [[True, True, False], [True, False, True]]


def test_link_map_and_recall_by_hand():
    d = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    relevant = np.array([[False, True, False, True], [False, False, False, True]])
    # Query 0 finds its links at ranks 2 and 4: AP = (1/2 + 2/4) / 2 = 1/2; query 1 at rank 1.
    assert link_mean_average_precision(d, relevant) == pytest.approx(0.75)
    assert link_recall_at(d, relevant, ks=(1, 2)) == {"1": 0.5, "2": 1.0}


def test_held_out_link_auc_by_hand():
    a = np.array([[0.0], [1.0], [2.0]])
    b = np.array([[0.0], [1.1], [5.0]])
    relevant = np.array(
        [[True, False, False], [False, True, False], [False, False, False]], dtype=bool
    )
    # The two links are at squared distances 0 and 0.01; every one of the 7 unlinked pairs
    # is farther: whichever two are sampled, the ranking is perfect.
    assert held_out_link_auc(a, b, relevant) == 1.0
    flipped = np.array([[False, False, True]] + [[False] * 3] * 2)
    # The one link, (0, 2), at squared distance 25, is farther than any unlinked pair: AUC 0.
    assert held_out_link_auc(a, b, flipped) == 0.0


# ---------------------------------------------------------------------- what is evaluated
def test_retrieval_of_linked_objects_is_over_the_test_links_objects():
    s = build_cross_modal_stream(grouped_links(), 100, 0)
    test = HeldOutRetrieval(s)
    links = s.test_links
    assert test.objects[0].tolist() == sorted(set(links[:, 0].tolist()))
    assert test.objects[1].tolist() == sorted(set(links[:, 1].tolist()))
    assert (
        np.isin(test.objects[0], s.test_idx).all() and np.isin(test.objects[1], s.test_idx_b).all()
    )
    assert int(test.relevant.sum()) == len(links) == s.meta["n_test_links"]


def test_the_embedding_that_places_each_link_together_is_scored_perfect():
    # Object i of A and object i of B are linked and at the same point; no other pair is.
    from oahu.streams.linked import LinkedObjects

    rng = np.random.default_rng(0)
    points = rng.normal(size=(40, 3))
    objects = LinkedObjects(("a", "b"), (points, points), np.c_[0:40, 0:40])
    s = build_cross_modal_stream(objects, 10, 0)
    report = evaluate_cross_modal(s, lambda x, m: x, None)
    assert report["map_ab"] == report["map_ba"] == 1.0 and report["link_auc"] == 1.0
    assert report["recall_ab"] == {"1": 1.0, "10": 1.0} and report["error"] is None


# ---------------------------------------------------------------------- learning from links
def _random_ranking(stream) -> dict:
    """The scores of points drawn at random for every object: a random ranking's."""

    def embed(x: np.ndarray, m: int) -> np.ndarray:
        return np.random.default_rng([m, len(x)]).normal(size=(len(x), 8))

    return evaluate_cross_modal(stream, embed, None)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_learner_finds_the_hidden_groups_from_the_links(seed):
    s = build_cross_modal_stream(grouped_links(), 2000, seed)
    check_link_protocol(s)
    ours, cca, chance = (
        replay_cross_modal(s, "oahu", seed),
        replay_cross_modal(s, "cca", seed),
        _random_ranking(s),
    )
    # Measured: oahu mAP 0.51-0.59 each way and AUC 0.84-0.85 on seeds 0 and 1; CCA 0.47-0.55
    # and 0.80-0.83; random points 0.19-0.24 and 0.50-0.55.
    for key in ("map_ab", "map_ba"):
        assert ours[key] > 2 * chance[key] and cca[key] > 1.8 * chance[key]
    assert ours["link_auc"] > 0.8 and cca["link_auc"] > 0.75 and chance["link_auc"] < 0.6
    assert ours["hamming_map_ab"] > 2 * chance["map_ab"]
    assert CONTRACT - {"dataset"} <= set(ours) and ours["error"] is None and cca["error"] is None
    assert ours["constraints"] == 2000 and ours["code_bits"] in (16, 32, 64, 128)


def test_cca_is_fitted_on_the_development_links_pairs():
    from oahu.learners.cross_modal.cca import CanonicalReference

    s = build_cross_modal_stream(grouped_links(), 10, 0)
    ref = fit_reference(s, "cca", 0)
    links = s.dev_links
    same = CanonicalReference(ref.n_components, "cca", code_bits=ref.code_bits).fit(
        s.X[0][links[:, 0]], s.X[1][links[:, 1]]
    )
    x = s.X[0][:5]
    np.testing.assert_allclose(ref.embed(x, 0), same.embed(x, 0))
    assert ref.code_bits == min(64, 10, 6, len(links) - 1) == 6


# ---------------------------------------------------------------------- the command line
@pytest.fixture
def linked_file(tmp_path):
    objects = grouped_links()
    path = tmp_path / "drugs.npz"
    np.savez(path, XA=objects.X[0], XB=objects.X[1], links=objects.links,
             names=np.array(objects.names))  # fmt: skip
    return path


@pytest.mark.parametrize("suffix", ["npz", "jsonl"])
def test_make_stream_writes_the_stream_the_api_draws_from_the_links(
    tmp_path, capsys, linked_file, suffix
):
    out = tmp_path / f"s.{suffix}"
    args = ["make-stream", "--cross-modal", "--dataset", str(linked_file), "--constraints",
            "400", "--seed", "3", "--pair-share", "0.25", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    expected = build_cross_modal_stream(load_linked(linked_file), 400, 3, 0.25)
    meta = expected.meta
    assert capsys.readouterr().out == (
        "wrote 400 cross-modal constraints (100 pairs, 300 triplets) over drugs: 120 objects in "
        "drug (10 features) and 80 in target (6) (60 and 40 development), linked by "
        f"{meta['n_links']} links ({meta['n_dev_links']} development, {meta['n_test_links']} "
        f"test, {meta['n_unused_links']} between a development and a test object, unused) to "
        f"{out}\n"
    )
    assert_same_linked(expected, load_cross_modal_stream(out))


@pytest.mark.parametrize(
    ("arrays", "extra", "message"),
    [
        (
            {"y": np.zeros(4, int)},
            [],
            "holds both 'y' (class labels) and 'links' (linked pairs); a file holds one",
        ),
        ({"links": None}, [], "holds neither 'y' nor 'links'"),
        (
            {},
            ["--within-share", "0.2"],
            "--within-share: not with linked objects (",
        ),
        ({"links": np.array([[0, 0], [9, 1]])}, [], "array 'links': link 1 (row 1), column 0"),
        ({"links": np.array([[0, 0], [0, 0]])}, [], "array 'links': link 1 repeats link 0"),
        ({"XB": np.ones((1, 2))}, [], "array 'XB': 1 object; the protocol splits"),
        ({}, ["--views", "a,b"], "--views: not with a paired file"),
    ],
)
def test_make_stream_refuses_linked_files_it_cannot_use(tmp_path, capsys, arrays, extra, message):
    good = {"XA": np.eye(4), "XB": np.ones((3, 2)), "links": np.array([[0, 0], [1, 2]])}
    path = tmp_path / "l.npz"
    np.savez(path, **{k: v for k, v in {**good, **arrays}.items() if v is not None})
    out = tmp_path / "s.npz"
    args = ["make-stream", "--cross-modal", "--dataset", str(path), *extra, "--out", str(out)]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_replay_reports_the_same_keys_on_linked_objects(tmp_path, capsys, linked_file):
    args = ["replay", "--cross-modal", "--dataset", str(linked_file), "--constraints", "1500",
            "--seed", "1", "--json"]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert CONTRACT <= set(report) and report["error"] is None
    assert report["dataset"] == "drugs" and report["modalities"] == ["drug", "target"]
    assert report["map_ab"] > 0.4 and report["link_auc"] > 0.75
    # The stream file of the same arguments replays to the same report.
    stream = tmp_path / "s.jsonl"
    made = ["make-stream", "--cross-modal", "--dataset", str(linked_file), "--constraints",
            "1500", "--seed", "1", "--out", str(stream)]  # fmt: skip
    assert main(made) == 0
    capsys.readouterr()
    assert main(["replay", "--cross-modal", "--stream", str(stream), "--seed", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    for key in ("map_ab", "map_ba", "link_auc", "hamming_map_ab", "code_bits"):
        assert again[key] == report[key], key
    assert main(["replay", "--cross-modal", "--stream", str(stream), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "link AUC" in text and "kNN error      none (linked objects have no labels" in text


def test_replay_with_cca_and_refusing_the_annotator_on_linked_objects(capsys, linked_file):
    args = ["replay", "--cross-modal", "--dataset", str(linked_file), "--learner", "cca", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["constraints"] == 0 and report["code_bits"] == 6 and report["error"] is None
    assert report["map_ab"] > 0.4
    active = ["replay", "--cross-modal", "--dataset", str(linked_file), "--oracle", "active"]
    assert main(active) == 2
    assert "--oracle: the simulated annotator answers from class labels" in capsys.readouterr().err
