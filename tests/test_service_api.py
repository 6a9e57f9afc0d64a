"""The HTTP API of an in-process service learning from a digits stream file."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from service_support import (
    assert_same_model,
    make_stream,
    train_reference,
    wait_until,
)
from service_support import start_service as start_file_service

from oahu.experiments.evaluation import evaluate
from oahu.inference import classify, index_gallery
from oahu.learners.oahu.config import OAHUConfig
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.serving import api
from oahu.service.serving.app import Service
from oahu.service.serving.queries import embed_each
from oahu.streams.stream_file import ConstraintStream

N = 400
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stream(tmp_path_factory.mktemp("stream"), N, seed=3)


def start_service(stream_file: Path, state: Path, **changes: object) -> Service:
    return start_file_service(
        stream_file,
        state,
        N,
        auth_token=TOKEN,
        max_request_bytes=200_000,
        max_batch_items=64,
        **changes,
    )


@pytest.fixture(scope="module")
def running(
    stream_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, TestClient]]:
    service = start_service(stream_file, tmp_path_factory.mktemp("state"))
    with TestClient(service.app) as client:
        yield service, client
    service.shutdown()


def test_classify_contract_and_accuracy(running: tuple[Service, TestClient], stream_file: Path):
    _, client = running
    stream = ConstraintStream.load(stream_file)
    test = stream.test_idx
    predictions = []
    for start in range(0, len(test), 64):  # the whole test split, max_batch_items at a time
        body = {"items": [{"x": stream.X[i].tolist()} for i in test[start : start + 64]]}
        response = client.post("/v1/classify", json=body)
        assert response.status_code == 200
        predictions += response.json()["predictions"]
    assert len(predictions) == len(test)
    assert set(predictions[0]["scores"]) == {str(c) for c in range(10)}
    labels = np.array([p["label"] for p in predictions])
    # kNN over the learned depths on held-out digits: far better than chance (0.1); measured
    # 0.972 on all 898 test items with the default learner (0.875 with the paper's)
    assert (labels == stream.y[test]).mean() > 0.95
    # the predicted label is the argmax of the class scores (Eq. 25)
    for p in predictions:
        assert p["label"] == int(max(p["scores"], key=p["scores"].get))


def test_classify_answers_exactly_what_the_replay_evaluation_measures(running, stream_file):
    """/v1/classify and oahu replay's evaluation are one kNN: the same learner, gallery, index
    kind and scoring give the same predictions and class scores for the same queries."""
    _, client = running
    stream = ConstraintStream.load(stream_file)
    reference = train_reference(stream)  # the served model (test_the_served_model_is_...)
    test, dev = stream.test_idx, stream.dev_idx
    gallery = index_gallery(reference, stream.X[dev], stream.y[dev])
    expected = classify(gallery.index, reference.embed(stream.X[test]), reference.alpha, k=5)
    served = []
    for start in range(0, len(test), 64):
        body = {"items": [{"id": str(i)} for i in test[start : start + 64]], "k": 5}
        served += client.post("/v1/classify", json=body).json()["predictions"]
    assert [p["label"] for p in served] == expected.labels.tolist()
    scores = [[p["scores"][str(c)] for c in expected.classes] for p in served]
    # Batches of 64 queries and one of 898 round distances differently (by ~1e-7), which Eq. 24's
    # min-max scaling over a query's five neighbours can grow to ~4e-5 in a score
    np.testing.assert_allclose(scores, expected.scores, rtol=1e-4, atol=1e-4)
    report = evaluate(reference, stream.X, stream.y, stream.dev_idx, stream.test_idx, n_pairs=200)
    assert report.error == np.mean(expected.labels != stream.y[test])


def test_queries_by_id_equal_inline_queries(running: tuple[Service, TestClient], stream_file):
    _, client = running
    stream = ConstraintStream.load(stream_file)
    ids = stream.test_idx[:5]
    by_id = client.post("/v1/embed", json={"items": [{"id": str(i)} for i in ids]}).json()
    inline = client.post("/v1/embed", json={"items": [{"x": stream.X[i].tolist()} for i in ids]})
    assert inline.json()["embeddings"] == by_id["embeddings"]
    emb = np.array(by_id["embeddings"])
    served = running[0].publisher.current.learner  # the default OAHU: L + 1 = n_depths heads
    assert served.n_depths == OAHUConfig().n_depths
    # items, depths (L + 1), embedding dimension: the digits' 64 features on their principal axes
    # and their norm, one more coordinate ("auto" preprocessing of items of at most 200 features)
    assert emb.shape == (5, served.n_depths, 65)
    assert served.network.embedding_dim == 65
    np.testing.assert_allclose(np.linalg.norm(emb, axis=-1), 1.0, atol=1e-5)  # unit sphere
    assert sum(by_id["alpha"]) == pytest.approx(1.0)


def test_the_served_model_is_the_model_trained_on_the_stream(running, stream_file: Path):
    service, client = running
    stream = ConstraintStream.load(stream_file)
    reference = train_reference(stream)
    assert_same_model(service.publisher.current.learner, reference)
    model = client.get("/v1/model").json()
    assert model["learner"] == "oahu"
    assert model["updates"] == model["constraints_consumed"] == N
    assert model["utilization"] == pytest.approx(reference.utilization)
    assert model["alpha"] == pytest.approx(reference.alpha.tolist())
    assert model["snapshot"]["updates"] == N
    assert model["diagnostics"] == reference.diagnostics()
    assert len(model["depth_loss"]) == reference.n_depths == OAHUConfig().n_depths
    # What an operator watches to see the model improve : a float in [0, 1].
    assert model["prequential_accuracy"] == reference.diagnostics()["prequential_accuracy"]
    assert isinstance(model["prequential_accuracy"], float)
    assert 0.0 <= model["prequential_accuracy"] <= 1.0
    assert model["items"]["gallery"] == len(stream.dev_idx)


def test_verify_and_retrieve(running: tuple[Service, TestClient], stream_file: Path):
    _, client = running
    stream = ConstraintStream.load(stream_file)
    dev = stream.dev_idx
    same = dev[stream.y[dev] == stream.y[dev[0]]][:2]
    pairs = [{"left": {"id": str(same[0])}, "right": {"id": str(same[0])}}]
    out = client.post("/v1/verify", json={"pairs": pairs, "threshold": 0.5}).json()["results"]
    assert out[0] == {"similar": True, "vote": pytest.approx(1.0), "score": pytest.approx(0.0)}
    response = client.post("/v1/retrieve", json={"items": [{"id": str(dev[0])}], "k": 3})
    hits = response.json()["results"][0]
    assert len(hits) == 3
    assert hits[0]["id"] == str(dev[0])  # an item's nearest gallery item is itself
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"items": [{"x": [0.0] * 3}]}, ["body", "items", 0, "x"]),  # wrong dimension
        ({"items": [{"id": "no-such-item"}]}, ["body", "items", 0, "id"]),
        ({"items": [{"x": [0.0] * 64, "id": "1"}]}, ["body", "items", 0]),  # both given
        ({"items": []}, ["body", "items"]),
        ({"items": [{"x": [0.0] * 64}], "k": 0}, ["body", "k"]),
        ({"items": [{"x": [0.0] * 64}] * 65}, ["body", "items"]),  # over max_batch_items
        ({"items": [{"x": "abc"}]}, ["body", "items", 0, "x"]),
    ],
)
def test_malformed_queries_get_422_naming_the_field(running, body, loc):
    _, client = running
    response = client.post("/v1/classify", json=body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc


def test_non_finite_values_and_oversized_bodies(running):
    _, client = running
    raw = '{"items": [{"x": [' + ", ".join(["0.5"] * 63 + ["NaN"]) + "]}]}"
    response = client.post(
        "/v1/classify", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    # the feature itself is named, and its value echoed as JSON can carry it
    assert response.json()["detail"][0]["loc"] == ["body", "items", 0, "x", 63]
    assert response.json()["detail"][0]["input"] == "nan"
    huge = json.dumps({"items": [{"x": [0.25] * 64}] * 4000})  # > max_request_bytes
    assert client.post("/v1/classify", content=huge).status_code == 413
    malformed = client.post(
        "/v1/classify", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"


def test_write_endpoints_need_the_token_and_items_survive_a_restart(stream_file, tmp_path):
    service = start_service(stream_file, tmp_path)
    item = {"id": "new-1", "x": [1.0] * 64, "label": 7}
    with TestClient(service.app) as client:
        assert client.post("/v1/items", json={"items": [item]}).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert client.post("/v1/items", json={"items": [item]}, headers=wrong).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        unlabelled = {"items": [{"id": "u", "x": [1.0] * 64}]}
        response = client.post("/v1/items", json=unlabelled, headers=auth)
        assert response.json()["detail"][0]["loc"] == ["body", "items", 0, "label"]
        added = client.post("/v1/items", json={"items": [item]}, headers=auth)
        assert added.status_code == 200 and added.json()["items_version"] == 1
        # the gallery is re-indexed in the background; the new item becomes its own neighbour
        wait_until(
            lambda: (
                client.post("/v1/retrieve", json={"items": [{"id": "new-1"}], "k": 1}).json()[
                    "results"
                ][0][0]["id"]
                == "new-1"
            ),
            30,
            "the re-indexed gallery",
        )
        gone = client.request("DELETE", "/v1/items", json={"ids": ["gone"]}, headers=auth)
        assert gone.status_code == 404
    service.shutdown()
    restarted = Service(ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(tmp_path)))
    assert "new-1" in restarted.catalog.gallery and restarted.catalog.version == 1
    assert (
        restarted.status["constraints_consumed"] == N
    )  # resumes after the stream, learns nothing twice
    learner, progress = read_checkpoint(checkpoint_path(tmp_path))
    assert progress.items_version == 1 and learner.updates == N


def test_health_readiness_and_metrics(running):
    _, client = running
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and all(ready.json()["checks"].values())
    client.post("/v1/classify", json={"items": [{"x": [0.0] * 3}]})
    text = client.get("/metrics").text
    assert f"oahu_constraints_consumed_total {N}.0" in text
    assert f"oahu_constraints_learned_total {N}.0" in text
    assert f"oahu_model_updates {N}.0" in text
    assert 'oahu_consumer_lag{partition="0"} 0.0' in text
    last = OAHUConfig().n_depths - 1
    assert f'oahu_hedge_weight{{depth="{last}"}}' in text
    assert 'oahu_depth_loss{depth="0"}' in text
    assert "oahu_prequential_accuracy " in text  # the gauges of OAHU's declared diagnostics
    assert f'oahu_depth_prequential_accuracy{{depth="{last}"}}' in text
    assert "oahu_checkpoint_age_seconds" in text and "oahu_gallery_items 899.0" in text
    assert 'oahu_gc_pause_seconds_count{generation="0"}' in text  # every collection is timed
    assert (
        'oahu_http_request_duration_seconds_count{endpoint="/v1/classify",method="POST",'
        'status="422"}' in text
    )
    assert client.get("/docs").status_code == 200
    assert "/v1/classify" in client.get("/openapi.json").json()["paths"]


def test_the_embed_answer_is_the_json_of_its_values(running, stream_file: Path) -> None:
    """Written in slices off the event loop, the answer is byte for byte the JSONResponse of
    the values it holds, as it was when the loop wrote it in one piece."""
    service, client = running
    stream = ConstraintStream.load(stream_file)
    x = stream.X[stream.test_idx[:3]]
    body = {"items": [{"x": x[0].tolist()}, {"id": str(stream.test_idx[1])}, {"x": x[2].tolist()}]}
    response = client.post("/v1/embed", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    snap = service.publisher.current
    assert response.json()["model"] == snap.meta()
    emb = embed_each(snap.learner, x)  # as the service embeds: one item at a time
    expected = JSONResponse(
        {
            "embeddings": emb.transpose(1, 0, 2).tolist(),
            "alpha": snap.alpha.tolist(),
            "metric": snap.learner.metric,
            "model": snap.meta(),
        }
    )
    assert response.content == expected.body


def test_a_large_embed_answer_leaves_the_event_loop_responsive(
    stream_file: Path, tmp_path, monkeypatch
):
    """4,096 items at every depth take ~200 ms to write as JSON; written on the event loop, that
    was one beat of the loop ~200 ms late (``oahu_event_loop_lag_seconds``), and every other
    request waited. The answer is now written on another thread while the loop keeps answering.

    Which thread writes it is asserted, not how late the loop's beats were: on a loaded 2-core
    machine a beat can be late for reasons of its own (another process, a collection)."""
    service = start_file_service(stream_file, tmp_path, N, max_batch_items=4096)
    body = {"items": [{"id": str(i % N)} for i in range(4096)]}
    writers: list[threading.Thread] = []
    write = api.embed_json

    def recorded_write(*args):
        writers.append(threading.current_thread())
        return write(*args)

    monkeypatch.setattr(api, "embed_json", recorded_write)

    async def embed_while_beating() -> tuple[httpx.Response, int, threading.Thread]:
        transport = httpx.ASGITransport(app=service.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://oahu") as client:
            await client.post("/v1/embed", json=body)  # the first query warms the model up
            big = asyncio.create_task(client.post("/v1/embed", json=body))
            answered = 0
            while not big.done():
                assert (await client.get("/healthz")).status_code == 200
                answered += 1
                await asyncio.sleep(0.005)
            return await big, answered, threading.current_thread()

    try:
        response, answered, loop_thread = asyncio.run(embed_while_beating())
        assert response.status_code == 200
        assert len(response.json()["embeddings"]) == 4096
        assert len(response.content) > 5_000_000  # large indeed: ~10 MB of JSON
        assert len(writers) == 2 and all(w is not loop_thread for w in writers)
        assert answered > 3  # the loop answered other requests while the big one was made
    finally:
        service.shutdown()
