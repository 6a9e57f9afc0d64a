"""A snapshot whose index searches on a GPU classifies as one searching on the CPU. Apart from
tests/test_serving_index_device.py, which needs the HTTP stack, so that a GPU machine without it
runs this one."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

from oahu.inference import classify, index_gallery
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.catalog import Catalog
from oahu.service.item_store import ItemStore
from oahu.service.serving.snapshot import Snapshot, build_snapshot

NO_CUDA = "no CUDA device here; the CPU test runs the same snapshot and index code on 'cpu'"
ITEMS, FEATURES = 3000, 16


class Built(NamedTuple):
    snapshot: Snapshot
    queries: np.ndarray  # (depths, 50, dim), embedded by the snapshot's learner
    X: np.ndarray  # the gallery's items and labels
    y: np.ndarray


def build(index_device: str, learner_device: str, tmp_path: Path) -> Built:
    """A snapshot of an untrained OAHU learner on ``learner_device`` over a random labelled
    gallery, its index on ``index_device``."""
    rng = np.random.default_rng(0)
    gallery = ItemStore.from_arrays(
        [f"g{i}" for i in range(ITEMS)],
        rng.normal(size=(ITEMS, FEATURES)),
        rng.integers(0, 7, ITEMS),
    )
    catalog = Catalog(ItemStore(dim=FEATURES), gallery, tmp_path / f"{index_device}.npz")
    learner = make_learner("oahu", FEATURES, device=learner_device, preprocess="none")
    snapshot = build_snapshot(learner_to_bytes(learner), catalog, 1, index_device=index_device)
    queries = snapshot.learner.embed(rng.normal(size=(50, FEATURES)).astype(np.float32))
    _, X, y = gallery.snapshot()
    return Built(snapshot, queries, X, y)


def test_a_cpu_snapshot_classifies_as_its_learner_and_gallery_do(tmp_path: Path):
    snapshot, queries, X, y = build("cpu", "cpu", tmp_path)
    assert snapshot.index is not None and snapshot.index.device == torch.device("cpu")
    expected = classify(index_gallery(snapshot.learner, X, y).index, queries, snapshot.alpha, k=5)
    got = classify(snapshot.index, queries, snapshot.alpha, k=5)
    assert got.labels.tolist() == expected.labels.tolist()
    np.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_cuda_snapshot_classifies_as_the_cpu_snapshot(tmp_path: Path):
    on_cpu, queries, _, _ = build("cpu", "cuda", tmp_path)
    on_gpu = build("cuda", "cuda", tmp_path).snapshot
    assert on_gpu.index is not None and on_gpu.index.device.type == "cuda"
    want = classify(on_cpu.index, queries, on_cpu.alpha, k=5)  # type: ignore[arg-type]
    got = classify(on_gpu.index, queries, on_gpu.alpha, k=5)
    assert (got.labels == want.labels).mean() >= 0.98  # near-exact ties may swap
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-3, atol=1e-3)
