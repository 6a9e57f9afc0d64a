"""Prequential accuracy: rolling, per depth and combined, checkpointed."""

import numpy as np

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
