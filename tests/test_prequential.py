"""Prequential accuracy: rolling, per depth and combined, checkpointed."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from river import metrics, utils

from oahu.learners.oahu.prequential import PrequentialAccuracy


def test_rolling_window_forgets_the_oldest() -> None:
    tracker = PrequentialAccuracy(n_depths=1, window=4)
    for correct in [False, False, True, True, True, True]:
        tracker.update(np.array([[correct]]), np.array([correct]))
    assert tracker.combined == 1.0 and tracker.per_depth == [1.0] and tracker.seen == 6
    tracker.update(np.array([[False]]), np.array([False]))
    assert tracker.combined == 0.75


def test_before_any_constraint_it_is_zero() -> None:
    assert PrequentialAccuracy(3, 10).per_depth == [0.0, 0.0, 0.0]


def test_state_round_trip() -> None:
    a = PrequentialAccuracy(2, window=5)
    rng = np.random.default_rng(0)
    for _ in range(12):
        a.update(rng.random((1, 2)) < 0.6, rng.random(1) < 0.7)
    b = PrequentialAccuracy(2, window=5)
    b.set_state(a.get_state())
    assert (b.combined, b.per_depth, b.seen) == (a.combined, a.per_depth, a.seen)
    a.update(np.array([[True, False]]), np.array([True]))
    b.update(np.array([[True, False]]), np.array([True]))
    assert (b.combined, b.per_depth) == (a.combined, a.per_depth)


def _river_reference(n_depths: int, window: int) -> list[utils.Rolling]:
    return [utils.Rolling(metrics.Accuracy, window_size=window) for _ in range(n_depths + 1)]


@settings(max_examples=60, deadline=None)
@given(
    window=st.integers(1, 12),
    n_depths=st.integers(1, 4),
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
    restore_after=st.integers(0, 12),
)
def test_blocks_give_river_rolling_accuracy(window, n_depths, sizes, seed, restore_after):
    # The ring buffer records blocks of any size, larger than the window too, and a restored
    # state goes on as the original: the same means as river's rolling accuracy, outcome by
    # outcome.
    rng = np.random.default_rng(seed)
    tracker = PrequentialAccuracy(n_depths, window)
    reference = _river_reference(n_depths, window)
    for block_index, n in enumerate(sizes):
        depths, combined = rng.random((n, n_depths)) < 0.6, rng.random(n) < 0.7
        tracker.update(depths, combined)
        for row, right in zip(depths.tolist(), combined.tolist(), strict=True):
            for rolling, value in zip(reference, [*row, right], strict=True):
                rolling.update(True, value)
        expected = [float(r.get()) for r in reference]
        assert tracker.per_depth == expected[:-1] and tracker.combined == expected[-1]
        if block_index == restore_after:
            restored = PrequentialAccuracy(n_depths, window)
            restored.set_state(tracker.get_state())
            tracker = restored
    assert tracker.seen == sum(sizes)


def test_strict_steps_into_a_full_window_give_river_rolling_accuracy() -> None:
    # A strict step records one outcome at a time, by its own path once the window is full.
    rng = np.random.default_rng(3)
    tracker = PrequentialAccuracy(n_depths=3, window=7)
    reference = _river_reference(3, 7)
    for _ in range(40):
        depths, combined = rng.random((1, 3)) < 0.5, rng.random(1) < 0.5
        tracker.update(depths, combined)
        for rolling, value in zip(reference, [*depths[0].tolist(), bool(combined[0])], strict=True):
            rolling.update(True, value)
        expected = [float(r.get()) for r in reference]
        assert tracker.per_depth == expected[:-1] and tracker.combined == expected[-1]
    restored = PrequentialAccuracy(n_depths=3, window=7)
    restored.set_state(tracker.get_state())
    assert restored.per_depth == tracker.per_depth and restored.combined == tracker.combined
    assert tracker.seen == 40
