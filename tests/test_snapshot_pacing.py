"""A snapshot's gallery is embedded in slices with a rest after each (oahu/service/serving/
snapshot.py): a rebuild takes the CPU in short bursts, and OAHU's slices give the embeddings one
call gives, to the bit."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from oahu.learners.oahu.learner import OAHU
from oahu.persistence import learner_to_bytes
from oahu.service.catalog import Catalog, ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving import snapshot as snapshot_module
from oahu.service.serving.snapshot import GALLERY_SLICE, SnapshotPublisher, embed_gallery

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


def test_the_builder_rests_as_long_as_it_works_and_counts_only_the_work(
    tmp_path: Path, monkeypatch
) -> None:
    x = np.random.default_rng(2).normal(size=(N_ITEMS, 12)).astype(np.float32)
    learner = learned_oahu(x)
    gallery = ItemStore(dim=12)
    gallery.add([str(i) for i in range(N_ITEMS)], x, y=np.arange(N_ITEMS) % 5)
    metrics = ServiceMetrics()
    publisher = SnapshotPublisher(
        Catalog(ItemStore(dim=12), gallery, tmp_path / "overlay.npz"), metrics
    )
    slept: list[float] = []
    real_sleep = snapshot_module.time.sleep

    def sleep(seconds: float) -> None:  # time is one module: count the builder's sleeps only
        if threading.current_thread().name == "oahu-reindex":
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(snapshot_module.time, "sleep", sleep)
    publisher.start()
    try:
        publisher.submit(learner_to_bytes(learner, queries_only=True))
        assert publisher.wait_for(1, timeout=60)
    finally:
        publisher.stop()
    snap = publisher.current
    assert snap.index.n_items == N_ITEMS
    assert np.array_equal(snap.embeddings, learner.embed(x, role="gallery"))
    assert len(slept) == 3  # one rest per slice, each as long as the slice's work (share 0.5)
    work = metrics.registry.get_sample_value("oahu_gallery_reindex_duration_seconds_sum")
    assert sum(slept) < work  # the rests, not counted as work, are shorter than the whole build
