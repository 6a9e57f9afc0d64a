"""The annotator loop (oahu.experiments.active_loop) and ``oahu replay --oracle``: the simulated
annotator's answers by hand, the label accounting, checkpoints, determinism, and the CLI on
digits."""

from __future__ import annotations

import json

import numpy as np
import pytest

import oahu.experiments.active_loop as active_loop
from oahu.cli.main import main
from oahu.experiments.active_loop import (
    NEITHER,
    ORACLES,
    active_learning,
    annotate,
    answered_triplets,
)
from oahu.registry import make_learner
from oahu.streams.benchmark_stream import build_stream

# ------------------------------------------------------------------ the annotator by hand

LABELS = np.array([0, 0, 1, 1, 0, 2])


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ((0, 1, 2), 1),  # the first option shares the anchor's class
        ((0, 2, 4), 4),  # the second does
        ((2, 0, 3), 3),  # another anchor, another class
        ((0, 1, 4), NEITHER),  # both share it
        ((0, 2, 5), NEITHER),  # neither does
        ((5, 0, 2), NEITHER),  # an anchor alone in its class
    ],
)
def test_the_annotator_names_the_option_of_the_anchors_class(question, answer):
    assert annotate(LABELS, np.array([question])).tolist() == [answer]


def test_answers_become_triplets_anchor_closer_farther():
    q = np.array([[0, 1, 2], [0, 2, 4], [0, 1, 4]])
    assert answered_triplets(q, annotate(LABELS, q)).tolist() == [[0, 1, 2], [0, 4, 2]]


def test_noise_flips_a_seeded_share_of_answers_and_leaves_neither_alone():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 400)
    q = np.array([rng.choice(400, 3, replace=False) for _ in range(4000)])
    clean = annotate(y, q)
    noisy = annotate(y, q, noise=0.2, rng=np.random.default_rng(1))
    assert (noisy[clean == NEITHER] == NEITHER).all()
    named = clean != NEITHER
    flipped = noisy[named] != clean[named]
    assert flipped.mean() == pytest.approx(0.2, abs=0.03)
    # A flipped answer names the other option.
    other = q[named][:, 1] + q[named][:, 2] - clean[named]
    assert (noisy[named][flipped] == other[flipped]).all()
    again = annotate(y, q, noise=0.2, rng=np.random.default_rng(1))
    assert again.tolist() == noisy.tolist()
    assert (annotate(y, q, noise=1.0, rng=np.random.default_rng(2))[named] == other).all()


def test_a_noisy_annotator_needs_a_generator_and_a_rate():
    with pytest.raises(ValueError, match="rng"):
        annotate(LABELS, np.array([[0, 1, 2]]), noise=0.1)
    with pytest.raises(ValueError, match="noise"):
        annotate(LABELS, np.array([[0, 1, 2]]), noise=1.5, rng=np.random.default_rng(0))


# ------------------------------------------------------------------ the loop


def digits_learner():
    return make_learner("oahu", 64, seed=0)


@pytest.mark.parametrize("oracle", ["active", "uncertainty"])
def test_the_loop_spends_the_budget_exactly(oracle):
    reached: list[int] = []
    stream, stats = active_learning(
        digits_learner(),
        "digits",
        oracle,
        budget=330,
        batch=40,
        seed=0,
        initial=100,
        checkpoints=[0, 100, 150, 330, 400],
        at_checkpoint=lambda n, s: reached.append(n),
    )
    assert stats.labels_used == 330
    # 100 initial, then rounds of at most 40 cut at the checkpoint 150: 40, 10, then 4 x 40, 20.
    assert stats.rounds == 2 + 5
    assert reached == [0, 100, 150, 330]
    assert 100 < stats.answered <= 330  # the 100 initial labels all gave a constraint
    assert stats.constraints == stats.answered
    assert len(stream) == 100 and stats.suggest_seconds > 0


def test_the_learner_learns_only_the_answered_triplets(monkeypatch):
    learner = digits_learner()
    learned: list[np.ndarray] = []
    original = learner.learn

    def spy(kind, items, similar=None):
        learned.append(np.asarray(items))
        return original(kind, items, similar)

    monkeypatch.setattr(learner, "learn", spy)
    stream, stats = active_learning(learner, "digits", "active", 200, 50, 0, initial=100)
    # The initial stream goes through replay (one call per chunk), then one call per round
    # with answers; every learned triplet's anchor shares the closer item's class only.
    answers = np.concatenate(learned[1:])
    assert len(answers) == stats.answered - 100
    X = stream.X[stream.dev_idx]
    y = stream.y[stream.dev_idx]
    row = {X[i].tobytes(): i for i in range(len(X))}
    for anchor, closer, farther in answers:
        a, c, f = (row[v.tobytes()] for v in (anchor, closer, farther))
        assert y[a] == y[c] != y[f]


def test_the_loop_is_deterministic_per_seed():
    runs = [
        active_learning(digits_learner(), "digits", "active", 260, 40, seed, initial=100)[1]
        for seed in (3, 3)
    ]
    assert runs[0].answered == runs[1].answered and runs[0].rounds == runs[1].rounds


def test_questions_are_never_asked_twice(monkeypatch):
    asked: list[tuple[int, int, int]] = []
    original = active_loop.suggest

    def spy(*args, **kw):
        out = original(*args, **kw)
        asked.extend((s.anchor, *sorted((s.first, s.second))) for s in out)
        return out

    monkeypatch.setattr(active_loop, "suggest", spy)
    active_learning(digits_learner(), "digits", "uncertainty", 400, 60, 0, initial=100)
    assert len(asked) == 300 == len(set(asked))


def test_random_is_the_protocols_stream_of_the_budget():
    stream, stats = active_learning(digits_learner(), "digits", "random", 300, 40, 0)
    assert (stats.labels_used, stats.answered, stats.constraints, stats.rounds) == (
        300,
        300,
        300,
        0,
    )
    assert stream.constraints.tolist() == build_stream("digits", 300, 0).constraints.tolist()


def test_a_stream_source_gives_the_initial_constraints_and_the_labels():
    source = build_stream("digits", 400, 1)
    stream, stats = active_learning(digits_learner(), source, "active", 150, 25, 1, initial=100)
    assert stream.constraints.tolist() == source.constraints[:100].tolist()
    assert stats.labels_used == 150


def test_a_budget_below_the_warm_start_is_only_protocol():
    _, stats = active_learning(digits_learner(), "digits", "active", 80, 25, 0, initial=100)
    assert (stats.labels_used, stats.rounds, stats.answered) == (80, 0, 80)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"oracle": "oracle"}, "oracle"),
        ({"budget": 0}, "budget"),
        ({"batch": 0}, "batch"),
        ({"initial": -1}, "initial"),
        ({"noise": 2.0}, "noise"),
        ({"oracle": "random", "noise": 0.1}, "noise"),
    ],
)
def test_bad_settings_name_the_field(kw, field):
    args = {"oracle": "active", "budget": 200, "batch": 20, "seed": 0, **kw}
    with pytest.raises(ValueError, match=field):
        active_learning(digits_learner(), "digits", **args)


def test_a_learner_of_samples_cannot_learn_answers():
    with pytest.raises(ValueError, match="triplets"):
        active_learning(make_learner("opml", 64), "digits", "active", 200, 20, 0)


def test_oracles_name_the_strategies():
    assert ORACLES == {"active": "joint-entropy", "uncertainty": "uncertainty", "random": None}


# ------------------------------------------------------------------ the CLI


def replay_json(capsys, *args: str) -> dict:
    code = main(
        ["replay", "--dataset", "digits", "--json", "--no-progress", "--pairs", "500", *args]
    )
    assert code == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    return json.loads(line)


def test_cli_active_loop_on_digits(capsys):
    report = replay_json(capsys, "--oracle", "active", "--budget", "800", "--batch", "50")
    assert report["labels_used"] == 800
    assert 500 < report["answered"] <= 800
    assert report["constraints"] == report["answered"]
    assert report["oracle"] == "active" and report["batch"] == 50
    for key in ("error", "macro_f1", "utilization", "auc", "recall_at", "triplets_per_s", "alpha"):
        assert key in report
    assert 0.0 <= report["error"] < 0.1


def test_cli_random_oracle_is_the_protocol(capsys):
    report = replay_json(capsys, "--oracle", "random", "--budget", "600")
    assert report["labels_used"] == report["answered"] == report["constraints"] == 600
    plain = replay_json(capsys, "--constraints", "600")
    assert report["error"] == plain["error"]


def test_cli_noise_is_seeded(capsys):
    args = ("--oracle", "uncertainty", "--budget", "600", "--batch", "50", "--oracle-noise", "0.3")
    assert replay_json(capsys, *args)["error"] == replay_json(capsys, *args)["error"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "800"], "--budget: only with --oracle"),
        (["--oracle", "active", "--batch", "0"], "--batch"),
        (["--oracle", "active", "--oracle-noise", "1.5"], "--oracle-noise"),
        (["--oracle", "random", "--oracle-noise", "0.1"], "--oracle-noise"),
        (["--oracle", "active", "--learner", "oasis"], "inner product"),
    ],
)
def test_cli_bad_oracle_settings_are_named(capsys, args, message):
    assert main(["replay", "--dataset", "digits", "--no-progress", *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_help_documents_the_oracle(capsys):
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = capsys.readouterr().out
    for flag in ("--oracle", "--budget", "--batch K", "--oracle-noise"):
        assert flag in text


# ------------------------------------------------------------------ benchmarks/active.py


def test_benchmark_run_and_targets():
    from benchmarks.active import aggregate, run_one

    run = run_one(
        {"dataset": "digits", "oracle": "active", "seed": 0, "budgets": [520, 600], "batch": 40}
    )
    assert [p["labels"] for p in run["points"]] == [520, 600]
    assert run["labels_used"] == 600 and run["rounds"] == 3  # 20 (to 520), 40, 40

    def fake(oracle: str, seed: int, errors: list[float]) -> dict:
        budgets = zip((5000, 10000), errors, strict=True)
        points = [{"labels": n, "error": e, "macro_f1": 1 - e} for n, e in budgets]
        return {"oracle": oracle, "seed": seed, "points": points, "answered": 1,
                "suggest_seconds": 0.0}  # fmt: skip

    result = aggregate(
        [
            fake("active", 0, [0.12, 0.11]),
            fake("active", 1, [0.14, 0.13]),
            fake("random", 0, [0.14, 0.125]),
            fake("random", 1, [0.15, 0.135]),
            fake("uncertainty", 0, [0.13, 0.12]),
            fake("uncertainty", 1, [0.13, 0.12]),
        ]
    )
    cell = result["table"]["active"]["budgets"]["5000"]
    assert cell["mean_error"] == pytest.approx(0.13) and cell["std_error"] == pytest.approx(0.01)
    target = result["targets"]["active_5000_vs_random_10000"]
    assert target == {"active": pytest.approx(0.13), "random": pytest.approx(0.13), "met": True}
    beats = result["targets"]["active_beats_uncertainty"]
    assert beats["5000"]["met"] is False and beats["10000"]["met"] is False
