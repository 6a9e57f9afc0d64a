"""benchmarks/device_steps_quality.py: the two engines compared end to end, and traced."""

from __future__ import annotations

import json

from benchmarks.device_steps_quality import main


def test_the_trace_starts_at_rounding_for_the_paper_preset(tmp_path):
    out = tmp_path / "rows.jsonl"
    argv = ["--dataset", "digits", "--constraints", "40", "--preset", "paper", "--seed", "0"]
    main([*argv, "--trace", "1", "40", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["constraints"] for r in rows] == [1, 40]
    # One paper step, computed in two float32 orders: at most rounding apart (on some CPU the
    # two orders may even agree to the bit).
    assert 0 <= rows[0]["relative_difference"] < 1e-6
    assert rows[0]["max_weight_difference"] < 1e-6
    assert all(r["preset"] == "paper" and r["seed"] == 0 for r in rows)


def test_each_seed_gets_a_row_per_engine(tmp_path):
    out = tmp_path / "rows.jsonl"
    main(["--dataset", "digits", "--constraints", "30", "--seed", "0", "1", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["seed"], r["engine"]) for r in rows] == [
        (0, "update"),
        (0, "device"),
        (1, "update"),
        (1, "device"),
    ]
    assert all(0 <= r["error"] <= 1 and r["updates"] == 30 for r in rows)
