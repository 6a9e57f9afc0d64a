"""benchmarks/learning_curves.py: one pass per learner and seed, evaluated at each size, cached
while the learner's parameters stay the same."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import learning_curves
from benchmarks.learning_curves import aggregate, run_cached, throughput, window_rates
from benchmarks.stream_runs import probed_params, same_learner

SIZES = [60, 200]


@pytest.fixture(scope="module")
def oahu_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    return runs, run_cached("digits", "oahu (default)", 0, SIZES, runs)


def test_a_run_evaluates_the_learner_at_each_size_as_it_stands(oahu_run):
    _, run = oahu_run
    assert [p["constraints"] for p in run["points"]] == [0, *SIZES]  # 0: as prepared
    for point in run["points"]:
        assert 0.0 <= point["error"] <= 1.0 and 0.0 <= point["macro_f1"] <= 1.0
        assert len(point["depth_error"]) == len(point["depth_spread"]) == 3  # L = 2: three depths
        assert np.isclose(sum(point["alpha"]), 1.0)
        assert 0.0 <= point["prequential_accuracy"] <= 1.0
    # α at the start, every 1,000 constraints and at every size (here no multiple of 1,000).
    assert [n for n, _ in run["alpha"]] == [0, 60, 200]
    assert run["alpha"][0][1] == pytest.approx([1 / 3] * 3)
    assert run["prequential"][-1][0] == 200


def test_a_cached_run_is_reused_until_the_learners_parameters_change(oahu_run, monkeypatch):
    runs, _ = oahu_run
    (path,) = runs.glob("digits-oahu-default-s0-N200.json")
    stored = json.loads(path.read_text())
    stored["points"][0]["error"] = 0.5  # a mark: a reused run keeps it
    path.write_text(json.dumps(stored))
    assert run_cached("digits", "oahu (default)", 0, SIZES, runs)["points"][0]["error"] == 0.5
    changed = dict(learning_curves.LEARNERS)
    changed["oahu (default)"] = ("oahu", {"margin": 0.2})  # as if a default had changed
    monkeypatch.setattr(learning_curves, "LEARNERS", changed)
    again = run_cached("digits", "oahu (default)", 0, SIZES, runs)
    assert again["points"][0]["error"] != 0.5 and again["learner_params"]["margin"] == 0.2


def test_learners_that_do_not_depend_on_n_are_flat_lines(tmp_path, oahu_run):
    euclidean = run_cached("digits", "euclidean", 0, SIZES, tmp_path)
    assert len(euclidean["points"]) == 1  # evaluated once, drawn at every size
    table = aggregate([euclidean, oahu_run[1]], SIZES)
    flat = table["euclidean"]["sizes"]
    assert flat["60"]["error"]["mean"] == flat["200"]["error"]["mean"]
    learned = table["oahu (default)"]["sizes"]
    assert learned["200"]["error"]["per_seed"] == [oahu_run[1]["points"][2]["error"]]
    assert learned["0"]["error"]["per_seed"] == [oahu_run[1]["points"][0]["error"]]
    assert "0" not in flat  # Euclidean and OPML have no start of their own


def test_a_run_records_learning_time_and_memory_along_the_stream(oahu_run):
    _, run = oahu_run
    assert [n for n, *_ in run["progress"]] == [0, 60, 200]
    seconds = [s for _, s, _ in run["progress"]]
    assert seconds == sorted(seconds) and seconds[-1] <= run["wall_seconds"]
    assert all(mb > 50 for *_, mb in run["progress"])  # torch alone is more than that


def test_speed_over_windows_is_constraints_over_learning_seconds():
    # 100 constraints in the first second, 100 in the next two.
    run = {"progress": [(0, 0.0, 10.0), (100, 1.0, 11.0), (200, 3.0, 12.0)]}
    assert window_rates(run, 2) == [(100, pytest.approx(100.0)), (200, pytest.approx(50.0))]
    assert throughput([run]) == {
        "first_tenth_per_s": pytest.approx(100.0),
        "last_tenth_per_s": pytest.approx(50.0),
        "last_over_first": pytest.approx(0.5),
        "peak_resident_mb": 12.0,
    }


def test_a_micro_batch_learner_is_recorded_at_whole_updates(tmp_path, monkeypatch):
    changed = {**learning_curves.LEARNERS, "oahu (B=64)": ("oahu", {"batch_size": 64})}
    monkeypatch.setattr(learning_curves, "LEARNERS", changed)
    monkeypatch.setattr(learning_curves, "ALPHA_EVERY", 100)
    run = run_cached("digits", "oahu (B=64)", 0, [300], tmp_path)
    assert [n for n, _ in run["alpha"]] == [0, 128, 256, 300]  # every 100, rounded up to 64s


def test_a_run_stored_with_the_count_an_auto_settles_to_is_the_same_learner() -> None:
    """A strict run stored with ``replay=1`` learned as ``replay="auto"`` does in strict mode,
    and stands for it; a micro-batch run stored with ``replay=1`` does not, as "auto" replays
    none there."""
    strict = probed_params("oahu", {})
    batch = probed_params("oahu", {"batch_size": 256})
    assert strict["replay"] == batch["replay"] == "auto"
    assert same_learner({**strict, "replay": 1}, "oahu", {})
    assert not same_learner({**strict, "replay": 0}, "oahu", {})
    assert same_learner({**batch, "replay": 0}, "oahu", {"batch_size": 256})
    assert not same_learner({**batch, "replay": 1}, "oahu", {"batch_size": 256})
