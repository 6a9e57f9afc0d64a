"""benchmarks/constraint_graph_cost.py times the graph of today against a git revision of it,
and says whether both ended in the same state."""

from __future__ import annotations

from benchmarks.constraint_graph_cost import main, module_at
from oahu.learners.oahu import constraint_graph


def test_a_revision_of_the_graph_loads_beside_todays():
    then = module_at("HEAD")
    assert then is not constraint_graph and then.ConstraintGraph is not (
        constraint_graph.ConstraintGraph
    )


def test_both_are_timed_at_each_batch_size_and_end_in_the_same_state(tmp_path):
    out = main(
        [
            "--dataset=digits",
            "--constraints=1500",
            "--warm-up=500",
            "--strict-constraints=200",
            "--item-memory=128",
            "--batch-sizes",
            "1",
            "64",
            "--rounds=1",
            "--against=HEAD",
            f"--out={tmp_path / 'cost.json'}",
        ]
    )
    assert [run["batch_size"] for run in out["runs"]] == [1, 64]
    assert [run["timed_triplets"] for run in out["runs"]] == [200, 1000]
    for run in out["runs"]:
        assert set(run["us_per_triplet"]) == {"HEAD", "now"}
        assert all(t > 0 for t in run["us_per_triplet"].values())
        assert run["same_state"] and run["ratio"] > 0
    assert (tmp_path / "cost.json").exists()
