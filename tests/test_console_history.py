"""The console's learning history: bounded, evenly spaced over the whole run, cut back on a
rewind, and its JSON encoded once per change."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.service.console.history import LearningHistory, Point
from oahu.service.console.live import CurveCache


def report(seen: int, accuracy: float | None = 0.9, alpha: tuple[float, ...] = (0.5, 0.5)):
    return {
        "constraints_seen": seen,
        "prequential_accuracy": accuracy,
        "alpha": list(alpha),
        "diagnostics": {"depth_prequential_accuracy": [accuracy, accuracy]},
    }


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(2, 64), n=st.integers(1, 3000))
def test_the_history_stays_bounded_and_evenly_spaced_from_the_first_report(capacity, n):
    history = LearningHistory(capacity)
    for seen in range(1, n + 1):
        history.record(report(seen), now=float(seen))
    kept = [p.seen for p in history.points()]
    assert len(kept) < capacity
    assert kept[0] == 1  # the run's start is always there
    # kept: the reports numbered 0, stride, 2 stride, ... (report number = seen - 1)
    assert kept == list(range(1, n + 1, history.stride))[: len(kept)]
    assert n - kept[-1] < history.stride  # and none missing at the end
    # the stride is the smallest power of two that fits the run into the capacity
    assert history.stride == 1 or math.ceil(n / (history.stride // 2)) >= capacity - 1
    assert history.latest is not None and history.latest.seen == n


def test_reports_without_progress_add_no_point_and_a_rewind_drops_the_points_past_it():
    history = LearningHistory(capacity=100)
    for seen in (10, 20, 20, 20, 30, 40):
        history.record(report(seen), now=float(seen))
    assert [p.seen for p in history.points()] == [10, 20, 30, 40]
    history.record(report(25), now=50.0)  # back to an earlier checkpoint
    assert [p.seen for p in history.points()] == [10, 20, 25]


def test_no_accuracy_before_the_first_constraint_and_none_for_non_finite_values():
    start = Point.of(report(0, accuracy=0.0), now=0.0)
    assert start.accuracy is None and start.depth_accuracy == (None, None)
    later = Point.of(report(5, accuracy=float("nan"), alpha=(float("inf"), 0.25)), now=1.0)
    assert later.accuracy is None and later.alpha == (None, 0.25)
    baseline = Point.of({"constraints_seen": 3, "alpha": [1.0]}, now=2.0)  # no diagnostics
    assert baseline.accuracy is None and baseline.depth_accuracy == () and baseline.alpha == (1.0,)


def test_the_curve_gives_the_rate_between_points_and_is_encoded_once_per_change():
    history = LearningHistory(capacity=100)
    cache = CurveCache(history)
    for t, seen in enumerate((100, 300, 600)):
        history.record(report(seen, alpha=(0.2, 0.8)), now=10.0 + 2 * t)
    curve = json.loads(cache.get())
    assert curve["seen"] == [100, 300, 600]
    assert curve["rate"] == [None, 100.0, 150.0]  # 200 and 300 constraints in 2 s
    assert curve["alpha"] == [[0.2] * 3, [0.8] * 3]
    assert curve["depth_accuracy"] == [[0.9] * 3, [0.9] * 3]
    encoded = cache.get()
    assert cache.get() is encoded  # unchanged history: the same bytes, not encoded again
    history.record(report(600), now=20.0)  # no progress: no new point
    assert cache.get() is encoded
    history.record(report(700), now=21.0)
    assert json.loads(cache.get())["seen"] == [100, 300, 600, 700]
    # the rate now: over the reports of the last 5 s only (600 at 20 s, 700 at 21 s)
    assert history.recent_rate() == 100.0
