"""The preprocessed rows of items seen before: the cache itself (first in first out, bounded),
and strict and micro-batch learners that take their rows from it."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from oahu.learners.oahu.item_keys import row_keys
from oahu.learners.oahu.learner import OAHU
from oahu.learners.oahu.projection_cache import ProjectionCache
from oahu.persistence import learner_from_bytes, learner_to_bytes


def row(key: int, width: int = 2) -> np.ndarray:
    return np.full((1, width), key, np.float32)


def kept(cache: ProjectionCache, keys: list[int]) -> list[list[float]] | None:
    """The kept rows of ``keys``, None unless every one is kept."""
    rows, missing = cache.lookup(np.array(keys))
    return None if missing.any() else rows.tolist()


def test_the_oldest_rows_make_room_once_the_budget_is_full() -> None:
    cache = ProjectionCache(width=2, budget=3 * 2 * 4)  # three rows of two float32
    assert cache.capacity == 3
    for key in (5, 6, 7, 8):
        cache.add(np.array([key]), row(key))
    assert len(cache) == 3 and kept(cache, [5]) is None
    assert kept(cache, [8, 6]) == [[8.0, 8.0], [6.0, 6.0]]
    cache.add(np.array([7, 9]), np.concatenate([row(70), row(9)]))  # 7 is kept: not replaced
    assert kept(cache, [7]) == [[7.0, 7.0]]
    assert kept(cache, [6]) is None  # 9 took the oldest row's slot, 6's
    rows, missing = cache.lookup(np.array([9, 6, 8]))
    assert missing.tolist() == [False, True, False]
    assert rows.tolist() == [[9.0, 9.0], [0.0, 0.0], [8.0, 8.0]]
    assert (cache.hits, cache.misses) == (5, 3)  # counted by key: 5; 8, 6; 7; 6; 9, 6, 8


def test_the_arrays_grow_to_the_capacity() -> None:
    cache = ProjectionCache(width=1, budget=3000 * 4)
    keys = np.arange(2500, dtype=np.int64) * 7919
    cache.add(keys, keys[:, None].astype(np.float32))
    assert len(cache) == 2500 and len(cache.rows) == 3000  # 1,024 → 2,048 → 3,000
    rows, missing = cache.lookup(keys[::-1])
    assert not missing.any() and np.array_equal(rows[:, 0], keys[::-1].astype(np.float32))


@given(st.lists(st.integers(0, 12), max_size=60), st.integers(1, 5))
def test_it_keeps_what_a_first_in_first_out_memory_keeps(keys: list[int], capacity: int) -> None:
    """Against a plain reference: each key's row is the first one added for it since it was
    last forgotten, and only the ``capacity`` latest new keys are kept."""
    cache = ProjectionCache(width=1, budget=capacity * 4)
    reference: OrderedDict[int, float] = OrderedDict()
    for step, key in enumerate(keys):
        cache.add(np.array([key]), np.array([[step]], np.float32))
        if key not in reference:
            reference[key] = float(step)
            if len(reference) > capacity:
                reference.popitem(last=False)
    assert len(cache) == len(reference)
    for key, value in reference.items():
        assert kept(cache, [key]) == [[value]]


D = 40
ITEMS = np.random.default_rng(5).random((30, D), dtype=np.float32)


def repeating_triplets(n: int, seed: int) -> np.ndarray:
    """Triplets over 30 items: after the first few dozen every item is known."""
    picks = np.random.default_rng(seed).integers(0, len(ITEMS), size=(n, 3))
    return ITEMS[picks]


def learner(**fields) -> OAHU:
    model = OAHU(D, hidden_width=16, preprocess="pca:8", item_memory=64, replay_memory=32,
                 margin=0.5, device="cpu", **fields)  # fmt: skip
    model.prepare(ITEMS)
    return model


def learn(model: OAHU, t: np.ndarray) -> None:
    model.learn_triplets(t[:, 0], t[:, 1], t[:, 2])


def assert_close_models(a: OAHU, b: OAHU) -> None:
    """Equal up to float rounding: a kept row is what its block computed when the item was new,
    which a BLAS that rounded a row by its position in the block could differ from in the last
    bit (OpenBLAS does not; the tests do not rely on it)."""
    for x, y in zip(a.network.tensors().values(), b.network.tensors().values(), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_a_strict_learner_takes_known_items_rows_from_the_cache() -> None:
    stream = repeating_triplets(400, seed=1)
    cached = learner()
    learn(cached, stream)
    projections = cached.update_step.projections
    assert projections.hits + projections.misses == 3 * cached.updates  # every item of each
    assert projections.hits > 900 and len(projections) == len(ITEMS)
    # The kept rows are the preprocessing's rows of those items.
    scaler = cached.update_step.input_scaler
    expected = scaler.project(scaler.transform(ITEMS, defer_projection=True))
    rows, missing = projections.lookup(row_keys(ITEMS))
    assert not missing.any()
    np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-6)
    fresh = learner()
    fresh.update_step.keep_projections = False
    learn(fresh, stream)
    assert fresh.update_step.projections is None
    assert_close_models(cached, fresh)


def test_a_strict_update_with_a_new_item_projects_its_whole_block() -> None:
    """One row projected alone takes BLAS's matrix-vector kernel, which rounds it otherwise
    than a block of three: a strict update projects its three rows or none."""
    model = learner()
    learn(model, ITEMS[None, [0, 1, 2]])
    blocks: list[int] = []
    step = model.update_step
    projected = step._projected
    step._projected = lambda items: blocks.append(len(items)) or projected(items)
    learn(model, ITEMS[None, [0, 1, 3]])  # two known items and a new one
    learn(model, ITEMS[None, [3, 2, 0]])  # all known
    assert blocks == [3]


def test_micro_batch_updates_project_only_the_items_they_do_not_know() -> None:
    stream = repeating_triplets(200, seed=2)
    cached = learner(batch_size=8, batch_ramp=1)
    blocks: list[int] = []
    step = cached.update_step
    projected = step._projected
    step._projected = lambda items: blocks.append(len(items)) or projected(items)
    learn(cached, stream)
    projections = step.projections
    # Every item of every learned triplet, once (the last few still wait for their update).
    assert projections.hits + projections.misses == 3 * step.learned > 3 * 190
    # The ramp's first updates take one triplet each; later ones project the items they have
    # not met, in one block, and none once all 30 are known.
    assert sum(blocks) == projections.misses and len(projections) == len(ITEMS)
    assert cached.updates > 25 and len(blocks) < cached.updates
    assert projections.hits > 500
    fresh = learner(batch_size=8, batch_ramp=1)
    fresh.update_step.keep_projections = False
    learn(fresh, stream)
    assert_close_models(cached, fresh)


def test_a_restored_learner_projects_again_and_learns_on_alike() -> None:
    stream = repeating_triplets(300, seed=3)
    whole = learner()
    learn(whole, stream)
    first = learner()
    learn(first, stream[:150])
    restored, _ = learner_from_bytes(learner_to_bytes(first))
    assert restored.update_step.projections is None  # not part of a checkpoint
    learn(restored, stream[150:])
    assert restored.update_step.projections.misses >= 1
    assert_close_models(whole, restored)


def test_new_axes_start_a_new_cache() -> None:
    model = learner()
    learn(model, repeating_triplets(20, seed=4))
    before = model.update_step.projections
    scaler = model.update_step.input_scaler
    scaler.components = scaler.components.copy()  # as a new fit would replace them
    learn(model, repeating_triplets(5, seed=5))
    after = model.update_step.projections
    assert after is not before and after.hits + after.misses == 3 * 5


@pytest.mark.parametrize("preprocess", ["none", "standardize"])
def test_without_principal_axes_there_is_nothing_to_keep(preprocess: str) -> None:
    model = OAHU(D, hidden_width=16, preprocess=preprocess, device="cpu")
    if model.needs_prepare:
        model.prepare(ITEMS)
    learn(model, repeating_triplets(20, seed=6))
    assert model.update_step.projections is None
