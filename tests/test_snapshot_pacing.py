"""A snapshot's gallery is embedded in slices with a rest after each (oahu/service/serving/
snapshot.py): a rebuild takes the CPU in short bursts, and OAHU's slices give the embeddings one
call gives, to the bit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from service_support import wait_until

from oahu.learners.oahu.learner import OAHU
from oahu.persistence import learner_to_bytes
from oahu.service.catalog import Catalog
from oahu.service.item_store import ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving import snapshot as snapshot_module
from oahu.service.serving.snapshot import (
    BURST_SHARE,
    GALLERY_SLICE,
    SnapshotPublisher,
    embed_gallery,
)

N_ITEMS = 2 * GALLERY_SLICE + 1000  # three slices, the last one short


def learned_oahu(x: np.ndarray) -> OAHU:
    learner = OAHU(x.shape[1], hidden_width=16, device="cpu", seed=3)
    learner.prepare(x)
    rng = np.random.default_rng(1)
    learner.learn_triplets(*x[rng.integers(0, len(x), size=(3, 50))])
    return learner


def test_slices_give_one_calls_embeddings_and_rest_after_each() -> None:
    x = np.random.default_rng(0).normal(size=(N_ITEMS, 12)).astype(np.float32)
    learner = learned_oahu(x)
    worked: list[float] = []
    sliced = embed_gallery(learner, x, worked.append)
    assert len(worked) == 3 and all(seconds > 0 for seconds in worked)
    assert np.array_equal(sliced, learner.embed(x, role="gallery"))
    assert np.array_equal(embed_gallery(learner, x[:100], worked.append), learner.embed(x[:100]))
    assert len(worked) == 3  # a gallery of one slice or less is embedded at once


class BuilderClock:
    """The builder's clock and sleep: time passes only when the builder sleeps or embeds (by
    ``tick`` per embedding call), so its work and its rests are known exactly and told apart;
    the builder's wall-clock time (``time.time``) stays real."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.now = 1000.0
        self.embeddings = 0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    monotonic = perf_counter

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def embedded(self) -> None:
        self.embeddings += 1
        self.now += self.tick


def test_the_builder_rests_as_long_as_it_works_and_counts_only_the_work(
    tmp_path: Path, monkeypatch
) -> None:
    x = np.random.default_rng(2).normal(size=(N_ITEMS, 12)).astype(np.float32)
    learner = learned_oahu(x)
    expected = learner.embed(x, role="gallery")
    gallery = ItemStore(dim=12)
    gallery.add([str(i) for i in range(N_ITEMS)], x, y=np.arange(N_ITEMS) % 5)
    metrics = ServiceMetrics()
    publisher = SnapshotPublisher(
        Catalog(ItemStore(dim=12), gallery, tmp_path / "overlay.npz"), metrics
    )
    clock = BuilderClock(tick=0.25)
    real_embed = OAHU.embed

    def embed(self: OAHU, *args: Any, **kwargs: Any) -> np.ndarray:
        out = real_embed(self, *args, **kwargs)
        clock.embedded()  # each call is tick seconds of work on the builder's clock
        return out

    monkeypatch.setattr(snapshot_module, "time", clock)  # the builder's module only
    monkeypatch.setattr(OAHU, "embed", embed)
    publisher.start()
    try:
        publisher.submit(learner_to_bytes(learner, queries_only=True))
        wait_until(lambda: publisher.current is not None, 60, "the first snapshot")
    finally:
        publisher.stop()
    snap = publisher.current
    assert snap.index.n_items == N_ITEMS
    assert np.array_equal(snap.embeddings, expected)
    # One rest per slice, each the prescribed multiple of that slice's work: as long again at
    # a burst share of one half.
    assert clock.slept == [pytest.approx(0.25 * (1 / BURST_SHARE - 1))] * 3
    # The build's work is its embedding, without the rests it took between slices.
    work = metrics.registry.get_sample_value("oahu_gallery_reindex_duration_seconds_sum")
    assert clock.embeddings >= 3
    assert work == pytest.approx(clock.embeddings * 0.25)
