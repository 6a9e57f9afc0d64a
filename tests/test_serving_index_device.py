"""Where the serving index searches: the learner's configured device, declared by the service's
configuration and handed to the snapshot builder; on the CPU /v1/classify answers as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from service_support import make_stream, start_service, train_reference

from oahu.inference import classify, index_gallery
from oahu.inference.matmul import MatmulIndex
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.service.serving.app import Service
from oahu.service.serving.snapshot import build_snapshot
from oahu.streams.stream_file import ConstraintStream

N = 200
NO_CUDA = "no CUDA device here; the CPU tests run the same index code on device 'cpu'"


def test_the_index_device_follows_the_learners_configured_device():
    assert ServiceConfig(learner="oahu", learner_params={"device": "cpu"}).index_device() == "cpu"
    assert ServiceConfig(learner="lego").index_device() == "cpu"  # no torch device of its own
    auto = ServiceConfig(learner="oahu").index_device()  # a torch learner's default: "auto"
    assert auto == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, TestClient, Path]]:
    stream_file = make_stream(tmp_path_factory.mktemp("stream"), N, seed=5)
    service = start_service(
        stream_file, tmp_path_factory.mktemp("state"), N, learner_params={"device": "cpu"}
    )
    with TestClient(service.app) as client:
        yield service, client, stream_file
    service.shutdown()


def test_a_cpu_learner_serves_from_a_cpu_index_and_classify_answers_as_before(served):
    service, client, stream_file = served
    assert service.publisher.index_device == "cpu"
    index = service.publisher.current.index
    assert isinstance(index, MatmulIndex) and index.device == torch.device("cpu")
    stream = ConstraintStream.load(stream_file)
    reference = train_reference(stream, device="cpu")
    dev, test = stream.dev_idx, stream.test_idx[:64]
    gallery = index_gallery(reference, stream.X[dev], stream.y[dev])  # today's CPU index
    expected = classify(gallery.index, reference.embed(stream.X[test]), reference.alpha, k=5)
    body = {"items": [{"x": stream.X[i].tolist()} for i in test], "k": 5}
    served_predictions = client.post("/v1/classify", json=body).json()["predictions"]
    assert [p["label"] for p in served_predictions] == expected.labels.tolist()
    scores = [[p["scores"][str(c)] for c in expected.classes] for p in served_predictions]
    np.testing.assert_allclose(scores, expected.scores, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_cuda_snapshot_classifies_as_the_cpu_snapshot(tmp_path: Path):
    rng = np.random.default_rng(0)
    gallery = ItemStore(dim=16)
    gallery.add(
        [f"g{i}" for i in range(3000)], rng.normal(size=(3000, 16)), y=rng.integers(0, 7, 3000)
    )
    catalog = Catalog(ItemStore(dim=16), gallery, tmp_path / "overlay.npz")
    state = learner_to_bytes(make_learner("oahu", 16, device="cuda"))
    on_cpu = build_snapshot(state, catalog, version=1, index_device="cpu")
    on_gpu = build_snapshot(state, catalog, version=1, index_device="cuda")
    assert on_gpu.index.device.type == "cuda"
    queries = on_cpu.learner.embed(rng.normal(size=(50, 16)).astype(np.float32))
    want = classify(on_cpu.index, queries, on_cpu.alpha, k=5)
    got = classify(on_gpu.index, queries, on_gpu.alpha, k=5)
    assert (got.labels == want.labels).mean() >= 0.98  # near-exact ties may swap
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-3, atol=1e-3)
