"""benchmarks/throughput_windows.py: learners side by side over windows of one stream."""

from __future__ import annotations

import pytest

from benchmarks.throughput_windows import overlap_rate, parse_config, run, tenth_rate


def test_a_configuration_is_a_preset_and_settings():
    assert parse_config("default:batch_size=256,replay=2") == (
        None,
        {"batch_size": 256, "replay": 2},
    )
    assert parse_config("paper") == ("paper", {})
    with pytest.raises(ValueError, match="'tuned' is neither default nor paper"):
        parse_config("tuned")


def test_a_tenth_is_its_constraints_over_its_seconds():
    # 100 constraints in the first second, 100 in the next two: 100/s, then 50/s.
    assert tenth_rate([100, 200], [1.0, 3.0], first=True) == pytest.approx(100.0)
    assert tenth_rate([100, 200], [1.0, 3.0], first=False) == pytest.approx(50.0)


def test_the_overlap_rate_counts_the_constraints_learned_in_those_seconds():
    # Started at wall-clock 10 s: 100 constraints by 11 s, 200 by 13 s (50/s in between).
    run_ = {"started_at": 10.0, "window_ends": [100, 200], "window_seconds": [1.0, 3.0]}
    assert overlap_rate(run_, 10.0, 11.0) == pytest.approx(100.0)
    assert overlap_rate(run_, 10.5, 11.5) == pytest.approx((125 - 50) / 1.0)
    assert overlap_rate(run_, 11.0, 13.0) == pytest.approx(50.0)


def test_a_micro_batch_run_is_timed_at_whole_updates():
    result = run("default:batch_size=64", constraints=1_000, windows=4, seed=0)
    assert result["window_ends"] == [256, 512, 768, 1_000]  # 250, 500, 750 up to 64s
    assert len(result["triplets_per_s"]) == 4 and min(result["triplets_per_s"]) > 0
    assert result["learner_params"]["batch_size"] == 64
    seconds = result["window_seconds"]
    assert len(seconds) == 4 and seconds == sorted(seconds) and result["started_at"] > 0
