"""The combine-rule benchmark runs both rules on a development stream and reports each run."""

from __future__ import annotations

import json

from benchmarks.group_combine_rule import main


def test_a_short_run_scores_each_rule_and_sharding_on_validation_queries(tmp_path):
    out = tmp_path / "rules.json"
    report = main(["--constraints", "300", "--seeds", "100", "--batch-sizes", "1", "--every", "8",
                   "--rules", "mean", "sum", "--jobs", "1", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == report
    runs = {run["rule"]: run for run in report["runs"]}
    assert set(runs) == {"mean", "sum"}
    for run in runs.values():
        assert run["sharding"] == "blocks" and run["seed"] == 100
        assert 0 < run["validation_errors"] < run["n_validation"]
