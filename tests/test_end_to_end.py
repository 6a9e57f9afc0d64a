"""End to end on scikit-learn's digits: the paper's protocol through the real CLI."""

import json
import socket

import pytest

from oahu.cli.main import main
from oahu.experiments.evaluation import evaluate
from oahu.learners.oahu.config import OAHUConfig
from oahu.learners.oahu.learner import OAHU
from oahu.streams import build_stream

EUCLIDEAN_ERROR_SEED0 = 13 / 898  # measured: 13 of 898 test items misclassified by Euclidean 5-NN


def replay_json(capsys, *args: str) -> dict:
    assert (
        main(
            [
                "replay",
                "--dataset",
                "digits",
                "--seed",
                "0",
                "--json",
                "--no-progress",
                "--pairs",
                "2000",
                *args,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # exactly one JSON object on stdout
    return json.loads(out[0])


def test_euclidean_floor(capsys) -> None:
    report = replay_json(capsys, "--learner", "euclidean", "--constraints", "100")
    assert report["error"] == pytest.approx(EUCLIDEAN_ERROR_SEED0)
    assert report["utilization"] == 0.0 and report["diagnostics"] == {}
    assert report["alpha"] == [1.0]


REPORT_KEYS = {  # what scripts outside the project read: a documented contract
    "error",
    "macro_f1",
    "utilization",
    "auc",
    "recall_at",
    "triplets_per_s",
    "alpha",
    "constraints",
    "seed",
    "prequential",
    "depth_error",
    "depth_spread",
}


def start_error_seed0() -> float:
    """The default learner's error before any constraint (the cosine metric of the development
    split's principal axes) on the seed-0 split of ``replay_json``."""
    stream = build_stream("digits", n_constraints=10, seed=0)
    start = OAHU(stream.X.shape[1], device="cpu")
    start.prepare(stream.X[stream.dev_idx])
    return evaluate(start, stream.X, stream.y, stream.dev_idx, stream.test_idx, n_pairs=10).error


def test_oahu_default_learns_on_digits(capsys) -> None:
    report = replay_json(capsys, "--learner", "oahu", "--constraints", "3000", "--device", "cpu")
    # Measured on seed 0 (defaults of this writing): 7 of 898 (0.0078) after 3,000
    # constraints (12 with two mined triplets per constraint instead of four); Euclidean: 13 of
    # 898; the learner's start: 11 of 898. Seeds move a digits learner by several items (its
    # 10-seed curves end 3 to 5 items above their start on some seeds), so what is asserted is
    # that on this seed learning does not hurt: never worse than its own start by more than
    # 0.002, and not worse than Euclidean.
    assert report["error"] <= start_error_seed0() + 0.002
    assert report["error"] <= EUCLIDEAN_ERROR_SEED0
    assert report["macro_f1"] > 0.98  # measured 0.992
    # The margin loss leaves the triplets already ranked right by the margin inactive, and on
    # digits most are (measured U = 0.125); ABTL's U = 1 is the paper preset's (below).
    assert 0.0 < report["utilization"] < 0.5
    assert report["constraints"] == 3000 and report["seed"] == 0
    assert set(report) >= REPORT_KEYS
    assert set(report["recall_at"]) == {"1", "2", "4", "8"}
    depths = OAHUConfig().n_depths
    assert len(report["alpha"]) == depths and sum(report["alpha"]) == pytest.approx(1.0)
    for per_depth in ("depth_error", "depth_spread"):
        assert len(report[per_depth]) == depths
    assert all(0.0 <= e <= 1.0 for e in report["depth_error"])
    assert all(s > 0.5 for s in report["depth_spread"])  # no head collapsed (measured ≈ 1.0)
    # The prequential curve: [constraints seen, rolling accuracy] after each chunk of 1,024.
    curve = report["prequential"]
    assert [n for n, _ in curve] == [1024, 2048, 3000]
    for n, accuracy in curve:
        assert isinstance(n, int) and isinstance(accuracy, float) and 0.0 <= accuracy <= 1.0
    # It gets better as it learns (measured 0.931, 0.944, 0.965) ...
    assert curve[-1][1] > curve[0][1]
    assert report["diagnostics"]["prequential_accuracy"] == curve[-1][1]


def test_paper_preset_runs_and_reports(capsys) -> None:
    report = replay_json(
        capsys, "--learner", "oahu", "--preset", "paper", "--constraints", "500", "--device", "cpu"
    )
    assert len(report["alpha"]) == 6
    assert len(report["diagnostics"]["depth_loss"]) == 6  # what OAHU declares it reports
    assert len(report["depth_error"]) == len(report["depth_spread"]) == 6
    assert 0.0 <= report["error"] <= 1.0
    assert report["utilization"] == 1.0  # ABTL: every triplet changes the model
    assert set(report) >= REPORT_KEYS


def test_self_paced_replay_holds_back_flipped_triplets_and_says_how_many(tmp_path, capsys):
    noisy = tmp_path / "noisy.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "2000", "--seed", "0"]
    assert main([*args, "--noise", "0.3", "--out", str(noisy)]) == 0
    capsys.readouterr()
    base = ["replay", "--stream", str(noisy), "--json", "--no-progress", "--device", "cpu"]
    assert main([*base, "--self-paced", "--pairs", "2000"]) == 0
    paced = json.loads(capsys.readouterr().out)
    assert main([*base, "--pairs", "2000"]) == 0
    plain = json.loads(capsys.readouterr().out)
    held = paced["diagnostics"]["self_paced_held_back"]
    # 600 of the 2,000 are flipped, and the model ranks many of them wrong from its start, so
    # self-paced learning holds back a part of them (measured 87).
    assert 50 <= held <= 600, held
    assert paced["diagnostics"]["self_paced_threshold"] > OAHUConfig().pace_start
    assert plain["diagnostics"]["self_paced_held_back"] == 0
    assert paced["utilization"] < plain["utilization"]  # measured 0.51 and 0.62
    # ... and it costs nothing here: measured 14 and 16 of 898 test items misclassified (13 and
    # 13 with two mined triplets per constraint; 17 without it when digits started from the
    # cosine of their principal axes, without the norm).
    # Equal errors are one BLAS's rounding away from a test item either way, so another CPU may
    # move either by one; more than that would be a cost.
    assert paced["error"] <= plain["error"] + 1 / 898 + 1e-12


def test_a_quadruplet_stream_is_learned_and_scored_by_graded_ndcg(tmp_path, capsys) -> None:
    quads = tmp_path / "quads.npz"
    args = ["make-stream", "--dataset", "digits", "--constraints", "600", "--seed", "0"]
    assert main([*args, "--kind", "quadruplet", "--hierarchy", "shape", "--out", str(quads)]) == 0
    capsys.readouterr()
    base = ["replay", "--stream", str(quads), "--no-progress", "--device", "cpu", "--pairs", "500"]
    assert main([*base, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["constraints"] == 600 and report["learner"] == "oahu"
    assert report["utilization"] > 0.0  # quadruplets moved the model
    assert 0.9 < report["ndcg_at_10"] <= 1.0  # measured 0.95
    assert main(base) == 0
    assert "graded nDCG@10 " in capsys.readouterr().out
    lego = ["replay", "--stream", str(quads), "--no-progress", "--learner", "lego", "--json"]
    assert main(lego) == 2  # LEGO learns no quadruplets
    assert "holds quadruplets" in capsys.readouterr().err


def test_oahu_rejects_a_pair_stream(tmp_path, capsys) -> None:
    path = tmp_path / "pairs.npz"
    assert (
        main(
            [
                "make-stream",
                "--dataset",
                "digits",
                "--constraints",
                "50",
                "--kind",
                "pair",
                "--out",
                str(path),
            ]
        )
        == 0
    )
    assert main(["replay", "--stream", str(path), "--learner", "oahu", "--no-progress"]) == 2
    assert "learns from triplets" in capsys.readouterr().err


def test_bad_settings_are_named(capsys) -> None:
    assert main(["replay", "--learner", "lego", "--batch-size", "4", "--no-progress"]) == 2
    assert "--batch-size: lego has no parameter 'batch_size'" in capsys.readouterr().err
    assert main(["replay", "--set", "nonsense", "--no-progress"]) == 2
    assert "--set: expected KEY=VALUE" in capsys.readouterr().err
    # A misspelt parameter is named with the nearest one, not a traceback from the constructor.
    assert main(["replay", "--set", "margn=0.1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--set: oahu has no parameter 'margn' (did you mean 'margin'?); it takes preset," in err
    assert "Traceback" not in err
    assert main(["replay", "--seed", "-1", "--no-progress"]) == 2
    assert "seed: must be an integer >= 0, got -1" in capsys.readouterr().err
    assert main(["replay", "--pairs", "0", "--constraints", "50", "--no-progress"]) == 2
    assert "n_pairs: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_produce_to_an_unreachable_broker_is_an_error_not_a_traceback(tmp_path, capsys) -> None:
    stream = tmp_path / "s.npz"
    assert (
        main(["make-stream", "--dataset", "digits", "--constraints", "20", "--out", str(stream)])
        == 0
    )
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["produce", "--stream", str(stream), "--to", f"kafka://127.0.0.1:{port}/t"]
    capsys.readouterr()
    assert main([*args, "--kafka-option", "bootstrap_timeout_ms=300"]) == 1
    err = capsys.readouterr().err
    assert f"oahu produce: error: cannot deliver to kafka://127.0.0.1:{port}/t: " in err
    assert "Unable to bootstrap" in err and "Traceback" not in err


def test_a_stream_of_no_constraints_scores_the_start_and_has_no_rate(capsys) -> None:
    """0 constraints: the learner as prepared is evaluated; the rate is null, never Infinity,
    which strict JSON readers (jq, JavaScript) refuse."""
    assert main(["replay", "--constraints", "0", "--json", "--no-progress"]) == 0
    out = capsys.readouterr().out

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    report = json.loads(out, parse_constant=refuse)
    assert report["constraints"] == 0 and report["triplets_per_s"] is None
    assert 0.0 <= report["error"] < 0.05  # the cosine start on digits, learned from nothing
    assert main(["replay", "--constraints", "0", "--no-progress"]) == 0
    assert "training       n/a constraints/s" in capsys.readouterr().out
