"""The replay reservoir: bounded, uniform over the stream, deterministic, checkpointed."""

import numpy as np
import pytest

from oahu.learners.oahu.replay_memory import ReplayReservoir


def triplets(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32)[:, None, None].repeat(3, 1)


def test_keeps_everything_until_full_then_stays_at_capacity() -> None:
    memory = ReplayReservoir(5, 1, np.random.default_rng(0))
    memory.add(triplets(3))
    assert (memory.size, memory.seen) == (3, 3)
    assert sorted(memory.rows[:3, 0, 0].tolist()) == [0.0, 1.0, 2.0]
    memory.add(triplets(100, start=3))
    assert (memory.size, memory.seen) == (5, 103)
    assert set(memory.rows[:, 0, 0].tolist()) <= set(range(103))


@pytest.mark.parametrize("batch", [1, 7, 100])
def test_every_triplet_is_held_with_probability_capacity_over_seen(batch: int) -> None:
    # Algorithm R keeps each of n offered items with probability k/n, whatever the batching.
    capacity, n, runs = 10, 100, 2000
    held = np.zeros(n)
    rng = np.random.default_rng(1)
    for _ in range(runs):
        memory = ReplayReservoir(capacity, 1, rng)
        for start in range(0, n, batch):
            memory.add(triplets(min(batch, n - start), start))
        held[memory.rows[:, 0, 0].astype(int)] += 1
    frequency = held / runs
    # Binomial(2000, 0.1): sd 0.0067; the first and the last items alike.
    assert np.abs(frequency - capacity / n).max() < 0.04
    assert frequency[:10].mean() == pytest.approx(frequency[-10:].mean(), abs=0.03)


def test_sample_draws_held_triplets_and_nothing_when_empty() -> None:
    memory = ReplayReservoir(4, 1, np.random.default_rng(0))
    assert memory.sample(3).shape == (0, 3, 1)
    memory.add(triplets(2, start=7))
    drawn = memory.sample(50)
    assert drawn.shape == (50, 3, 1) and set(drawn[:, 0, 0].tolist()) == {7.0, 8.0}
    # A strict step's one draw is the draw of an array of one, without the array.
    state = memory.rng.bit_generator.state
    expected = np.random.default_rng(0)
    expected.bit_generator.state = state
    for _ in range(20):
        one = memory.sample(1)
        assert np.array_equal(one, memory.rows[expected.integers(0, memory.size, size=1)])


def test_state_round_trip_continues_identically() -> None:
    a = ReplayReservoir(6, 1, np.random.default_rng(3))
    a.add(triplets(20))
    b = ReplayReservoir(6, 1, np.random.default_rng(3))
    b.set_state(a.get_state())
    b.rng.bit_generator.state = a.rng.bit_generator.state
    a.add(triplets(20, start=20))
    b.add(triplets(20, start=20))
    assert np.array_equal(a.rows, b.rows) and a.seen == b.seen == 40
    with pytest.raises(ValueError, match="replay memory"):
        ReplayReservoir(2, 1, np.random.default_rng(0)).set_state(a.get_state())
