"""benchmarks/noise.py and benchmarks/stream_runs.py: a run on a noisy stream, its loss against
the clean stream of the same seed, and a cache that lasts while the learner's parameters do."""

from __future__ import annotations

import json

import pytest

from benchmarks.noise import aggregate, run_one
from benchmarks.stream_runs import cached_run
from oahu.registry import make_learner


def spec(rate: float, model: str = "uniform", seed: int = 0) -> dict:
    return {"dataset": "digits", "model": model, "rate": rate, "seed": seed, "n": 300,
            "label": "oahu"}  # fmt: skip


def test_a_run_learns_the_noisy_stream_and_counts_what_was_made_wrong():
    run = run_one(spec(0.2, "confusable"))
    assert run["flipped"] == 60  # round(0.2 * 300)
    assert 0.0 <= run["error"] <= 1.0 and run["constraints_per_s"] > 0
    assert run_one(spec(0.0))["flipped"] == 0


def test_the_loss_is_against_the_clean_run_of_the_same_seed():
    runs = [
        {**spec(0.0, seed=0), "error": 0.10, "constraints_per_s": 100.0},
        {**spec(0.0, seed=1), "error": 0.20, "constraints_per_s": 300.0},
        {**spec(0.2, seed=0), "error": 0.13, "constraints_per_s": 100.0},
        {**spec(0.2, seed=1), "error": 0.21, "constraints_per_s": 100.0},
    ]
    table = aggregate(runs)["oahu"]
    assert table["clean"]["0"]["mean_error"] == pytest.approx(0.15)
    assert table["uniform"]["0.2"]["loss"] == pytest.approx([0.03, 0.01])
    assert table["uniform"]["0.2"]["mean_loss"] == pytest.approx(0.02)
    assert table["clean"]["0"]["mean_constraints_per_s"] == pytest.approx(200.0)


def test_a_cached_run_lasts_while_the_learners_parameters_do(tmp_path):
    path, calls = tmp_path / "run.json", []

    def run(params: dict) -> dict:
        calls.append(1)
        return {"learner_params": make_learner("oahu", 4, **params).get_params()}

    first = cached_run(path, ("oahu", {"seed": 1}), lambda: run({"seed": 1}))
    again = cached_run(path, ("oahu", {"seed": 1}), lambda: run({"seed": 1}))
    assert len(calls) == 1 and json.loads(json.dumps(first)) == again
    cached_run(path, ("oahu", {"seed": 2}), lambda: run({"seed": 2}))  # other parameters
    assert len(calls) == 2
    assert json.loads(path.read_text())["learner_params"]["seed"] == 2


def test_a_run_made_before_a_parameter_existed_stands_for_its_migrated_value(tmp_path):
    """A run whose learner predates ``mine_ahead`` learned as ``mine_ahead=32`` does (the value
    a checkpoint of then is rebuilt with): it stands for that learner, not for another value."""
    path, calls = tmp_path / "run.json", []

    def run(params: dict) -> dict:
        calls.append(1)
        return {"learner_params": make_learner("oahu", 4, **params).get_params()}

    older = run({"seed": 1, "mine_ahead": 32})
    del older["learner_params"]["mine_ahead"]
    path.write_text(json.dumps(older))
    calls.clear()
    assert cached_run(path, ("oahu", {"seed": 1, "mine_ahead": 32}), lambda: run({})) == older
    assert not calls
    cached_run(path, ("oahu", {"seed": 1, "mine_ahead": 64}), lambda: run({"mine_ahead": 64}))
    assert len(calls) == 1
