"""benchmarks/table3.py: aggregation, the t-test win/tie/loss rule, the report and the run cache,
on hand-made run records (plus one real, tiny ``oahu replay`` run for the cache)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.table3 import (
    Row,
    aggregate,
    collect,
    compare,
    default_rows,
    markdown_report,
    markdown_table,
    plot_summary,
    replace_block,
    replay_command,
    run_path,
    table_rows,
    win_tie_loss,
)


def record(seed: int, error: float, seconds: float = 2.0, constraints: int = 4000) -> dict:
    """The fields of an ``oahu replay --json`` report that Table 3 reads."""
    return {
        "seed": seed,
        "error": error,
        "macro_f1": 1.0 - error,
        "utilization": 0.5,
        "auc": 0.9,
        "recall_at": {"1": 0.8, "2": 0.9, "4": 0.95, "8": 1.0},
        "train_seconds": seconds,
        "constraints": constraints,
    }


ROWS = [Row("lego", "lego"), Row("rdml", "rdml"), Row("oasis", "oasis"), Row("oahu", "oahu")]
ERRORS = {
    "lego": [0.20, 0.21, 0.22],  # clearly worse than OAHU
    "rdml": [0.10, 0.13, 0.11],  # within OAHU's spread
    "oasis": [0.05, 0.06, 0.04],  # clearly better
    "oahu": [0.10, 0.11, 0.12],
}


@pytest.fixture
def table() -> dict:
    results = {label: [record(s, e) for s, e in enumerate(errs)] for label, errs in ERRORS.items()}
    results["lego"][2] = record(2, 0.22, seconds=5.0, constraints=10_000)
    return aggregate(ROWS, results, "fashion-mnist")


def test_means_and_sample_standard_deviations(table):
    lego = table["rows"]["lego"]
    assert lego["error"]["mean"] == pytest.approx(0.21)
    assert lego["error"]["std"] == pytest.approx(0.01)  # ddof = 1: sqrt((0.01² + 0.01²) / 2)
    assert lego["macro_f1"]["mean"] == pytest.approx(0.79)
    assert lego["recall_at_1"] == {"mean": pytest.approx(0.8), "std": pytest.approx(0.0), "n": 3}
    # seconds per 1,000 constraints: 2 s / 4,000 twice and 5 s / 10,000 → 0.5 each
    assert lego["s_per_1k"]["mean"] == pytest.approx(0.5)
    assert lego["per_s"]["mean"] == pytest.approx(2000.0)
    assert lego["seeds"] == [0, 1, 2]


def test_win_tie_loss_by_two_sided_t_test(table):
    versus = {label: table["rows"][label]["oahu_vs"]["oahu"] for label in ("lego", "rdml", "oasis")}
    assert {label: v["outcome"] for label, v in versus.items()} == {
        "lego": "win",
        "rdml": "tie",
        "oasis": "loss",
    }
    # Student's t with pooled variance 1e-4: t = -0.1 / sqrt(1e-4 · 2/3)
    assert versus["lego"]["t"] == pytest.approx(-0.1 / math.sqrt(1e-4 * 2 / 3))
    assert versus["lego"]["p_value"] < 0.05 <= versus["rdml"]["p_value"]
    assert "oahu_vs" not in table["rows"]["oahu"]  # OAHU is not compared with itself


def test_constant_errors_still_give_an_outcome():
    assert compare([0.1, 0.1], [0.1, 0.1])["outcome"] == "tie"  # the t statistic is undefined
    assert compare([0.1, 0.1], [0.2, 0.2])["outcome"] == "win"
    assert compare([0.3, 0.3], [0.2, 0.2])["outcome"] == "loss"
    assert compare([0.1], [0.9])["outcome"] == "tie"  # one run a side: never significant


def test_win_tie_loss_counts_across_datasets(table):
    digits = json.loads(json.dumps(table))  # a second dataset where OAHU ties LEGO
    digits["rows"]["lego"]["oahu_vs"]["oahu"]["outcome"] = "tie"
    counts = win_tie_loss([table, digits])
    assert counts["lego"]["oahu"] == {"win": 1, "tie": 1, "loss": 0}
    assert counts["oasis"]["oahu"] == {"win": 0, "tie": 0, "loss": 2}


def test_report_puts_the_papers_numbers_beside_ours(table):
    table.update(command="python -m benchmarks.table3", constraints=10_000)
    for label, cells in table["rows"].items():
        cells["command"] = f"oahu replay --learner {label} --seed S"
    report = markdown_report([table])
    lego_line = next(line for line in report.splitlines() if line.startswith("| lego |"))
    assert "| 0.210 ± 0.010 |" in lego_line
    assert "oahu: **win**" in lego_line
    assert lego_line.endswith("| 0.35±0.01 / 0.64±0.00 / 0.58±0.00 |")
    assert "| lego | 1/0/0 |" in report


def test_readme_block_is_replaced_and_the_rest_kept():
    text = "# Benchmarks\n\n## Other\nkept\n"
    once = replace_block(text, "table3", "Table 3", "first")
    twice = replace_block(once + "\n## After\nalso kept\n", "table3", "Table 3", "second")
    assert once.startswith(text.rstrip("\n"))
    assert "first" not in twice and "second" in twice
    assert "kept\n" in twice and twice.endswith("## After\nalso kept\n")


def test_default_rows_are_the_paper_oahu_and_the_default_one():
    paper, default = default_rows()[-2:]
    assert (paper.label, paper.args) == ("oahu", ("--preset", "paper"))
    assert (default.label, default.slug, default.args) == ("oahu (default)", "oahu-default", ())


def test_runs_are_cached_by_their_exact_command_and_the_learners_defaults(tmp_path):
    row = Row("euclidean", "euclidean")
    first = collect([row], "digits", 100, [0], tmp_path)["euclidean"][0]
    path = run_path(tmp_path, "digits", row, 100, 0)
    stored = json.loads(path.read_text())
    assert stored["command"] == replay_command(row, "digits", 100, 0)
    assert 0.0 < first["error"] < 0.1 and first["constraints"] == 100
    stored["result"]["error"] = 0.5  # a cached record is read back, not recomputed
    path.write_text(json.dumps(stored))
    assert collect([row], "digits", 100, [0], tmp_path)["euclidean"][0]["error"] == 0.5
    # Made while a default of the learner was another: run again, and stored with today's.
    assert stored["learner_defaults"] == {"preprocess": "none"}
    stored["learner_defaults"] = {"preprocess": "unit"}
    path.write_text(json.dumps(stored))
    assert collect([row], "digits", 100, [0], tmp_path)["euclidean"][0]["error"] == first["error"]
    assert json.loads(path.read_text())["learner_defaults"] == {"preprocess": "none"}


def test_baselines_run_with_their_development_split_choice(tmp_path):
    best = {
        "lego": {"params": {"preprocess": "standardize+unit", "learning_rate": 0.01}},
        "euclidean": {"params": {"preprocess": "unit"}},  # a reference point, never applied
    }
    (tmp_path / "tune_baselines-digits.json").write_text(json.dumps({"best": best}))
    rows = {r.label: r for r in table_rows("digits", [], None, tmp_path)}
    assert rows["lego"].args == (
        "--set",
        "preprocess=standardize+unit",
        "--set",
        "learning_rate=0.01",
    )
    assert rows["euclidean"].args == () and rows["rdml"].args == ()
    assert rows["euclidean (center+unit)"].args == ("--set", "preprocess=center+unit")
    assert rows["oahu"].args == ("--preset", "paper")
    overridden = table_rows("digits", ["lego=--set learning_rate=1"], ["lego"], tmp_path)
    assert [(r.label, r.args) for r in overridden] == [("lego", ("--set", "learning_rate=1"))]
    assert table_rows("fashion-mnist", [], ["lego"], tmp_path)[0].args == ()


def test_unseen_class_retrieval_compares_recall_at_1():
    runs = {
        "euclidean": [dict(record(s, 0.1), recall_at=r) for s, r in enumerate((0.90, 0.91, 0.92))],
        "oahu": [dict(record(s, 0.2), recall_at=r) for s, r in enumerate((0.95, 0.96, 0.97))],
    }
    for label in runs:  # Recall@2..8 as well, so the table can show them
        for run in runs[label]:
            run["recall_at"] = {"1": run["recall_at"], "2": 0.98, "4": 0.99, "8": 1.0}
    table = aggregate(
        [Row("euclidean", "euclidean"), Row("oahu", "oahu")], runs, "letter", "classes"
    )
    assert table["compared"] == "1 - recall_at_1" and table["paper"] is None
    # OAHU's error is worse, but its R@1 is better, and R@1 is what this protocol compares.
    assert table["rows"]["euclidean"]["oahu_vs"]["oahu"]["outcome"] == "win"
    line = next(ln for ln in markdown_table(table).splitlines() if ln.startswith("| oahu |"))
    assert line.startswith("| oahu | 0.960 ± 0.010 | 0.980 ± 0.000 | 0.990 ± 0.000 |")


def test_summary_puts_datasets_side_by_side_and_marks_where_the_default_beats_all(table):
    other = json.loads(json.dumps(table))
    other["dataset"], other["paper"] = "letter", None
    table["rows"]["oahu (default)"] = dict(table["rows"]["oahu"])
    other["rows"]["oahu (default)"] = dict(other["rows"]["oasis"])  # level with OASIS: no win
    table.update(command="c", constraints=10)
    other.update(command="c", constraints=10)
    for t in (table, other):
        for cells in t["rows"].values():
            cells["command"] = "x"
    report = markdown_report([table, other])
    assert report.startswith("Mean test error of every row on every dataset")
    assert "\n| Method | fashion-mnist | letter |\n" in report
    # On fashion-mnist OASIS (0.05) beats the default (0.11): no star; on letter it ties.
    assert "| oahu (default) | 0.1100 | **0.0500** |" in report
    # The paper has Fashion-MNIST numbers (not letter): its error follows ours in brackets.
    assert "| oasis | **0.0500** (paper 0.21) | **0.0500** |" in report


def test_summary_plot_is_a_png_of_every_dataset(table, tmp_path):
    table["rows"]["euclidean"] = dict(table["rows"]["lego"])  # the floor every bar is over
    other = json.loads(json.dumps(table))
    other["dataset"] = "letter"
    plot_summary([table, other], tmp_path / "summary.png")
    data = (tmp_path / "summary.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
