"""benchmarks/projection_cache.py: a learner with and without the projections it kept."""

from __future__ import annotations

from benchmarks.projection_cache import run


def test_a_run_counts_its_updates_from_the_cache_and_digests_its_weights():
    kept = run(True, constraints=2_000, seed=0)
    assert kept["hits"] + kept["misses"] == 3 * 2_000 and kept["hits"] > 0  # items
    assert 0 < kept["items_kept"] <= kept["misses"]
    projected = run(False, constraints=2_000, seed=0)
    assert (projected["hits"], projected["misses"], projected["items_kept"]) == (0, 0, 0)
    assert len(kept["weights_sha256"]) == len(projected["weights_sha256"]) == 64
    assert min(kept["whole_per_s"], projected["whole_per_s"]) > 0


def test_a_micro_batch_run_counts_every_item_it_learned():
    kept = run(True, constraints=3_000, seed=0, batch_size=64)
    # The ramp's updates grow to three; the last constraints may still wait for theirs.
    assert 3 * 2_990 <= kept["hits"] + kept["misses"] <= 3 * 3_000 and kept["hits"] > 0
    assert 0 < kept["items_kept"] <= kept["misses"]
