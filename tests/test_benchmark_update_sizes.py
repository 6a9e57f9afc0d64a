"""benchmarks/update_sizes.py: how far each micro-batch update moves the parameters."""

from __future__ import annotations

import json

import pytest

from benchmarks.update_sizes import main


def _windows(tmp_path, *settings: str) -> list[dict]:
    out = tmp_path / "moves.json"
    argv = ["--dataset", "digits", "--seed", "100", "--constraints", "400", "--window", "100"]
    for setting in settings:
        argv += ["--set", setting]
    main([*argv, "--out", str(out)])
    return json.loads(out.read_text())["windows"]


def test_updates_grow_with_the_ramp_and_every_window_is_reported(tmp_path):
    windows = _windows(tmp_path, "batch_size=16", "batch_ramp=10")
    assert [w["end"] for w in windows] == [100, 200, 300, 400]
    # An update takes at most a tenth of what was learned before it, rounded up: 1 at the start;
    # the largest to end within the first 100 starts after 81-90 (9: the one after 91 ends at
    # 101); 16, the batch size, from 151 on.
    assert windows[0]["size_min"] == 1 and windows[0]["size_max"] == 9
    assert windows[1]["size_max"] == 16
    assert windows[2]["size_min"] == windows[2]["size_max"] == 16
    assert windows[3]["size_max"] == 16  # and the stream's end cuts the last update short
    assert all(
        0 <= w["move_p10"] <= w["move_p50"] <= w["move_p90"] <= w["move_max"] for w in windows
    )
    assert all(w["move_max"] > 0 for w in windows)


def test_the_trust_region_bounds_every_micro_batch_move(tmp_path):
    """B2: an update of more than one constraint moves the parameters by at most
    max_step_change of their norm; with a bound that binds, the largest move is the bound."""
    windows = _windows(tmp_path, "batch_size=32", "batch_ramp=1", "max_step_change=0.002")
    # Full updates from the second constraint on (a ramp of 1): every window but the first
    # holds only micro-batches, and each of them moved by the bound.
    assert [w["size_max"] for w in windows] == [32, 32, 32, 32]
    assert all(w["move_p10"] == pytest.approx(0.002, rel=1e-3) for w in windows[1:])
    assert max(w["move_max"] for w in windows) <= 0.002 * (1 + 1e-4)
