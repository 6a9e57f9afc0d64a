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
from oahu.service.config import ServiceConfig
from oahu.service.serving.app import Service
from oahu.streams.stream_file import ConstraintStream

N = 200


def test_the_index_device_follows_the_learners_configured_device():
    assert ServiceConfig(learner="oahu", learner_params={"device": "cpu"}).index_device() == "cpu"
    assert ServiceConfig(learner="lego").index_device() == "cpu"  # no torch device of its own
    assert ServiceConfig(index="ivf").index_device() == "cpu"  # faiss's index: the CPU's
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
