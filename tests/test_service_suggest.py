"""Active learning in the service: ``POST /v1/suggest`` against a real in-process service
learning from a digits stream, ``oahu suggest`` against it over HTTP, and (marked ``kafka``) the
whole loop through a real broker: questions published, answered as ordinary triplet messages,
learned."""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_support import ServiceProcess, free_port, make_stream, wait_until
from service_support import start_service as start_file_service

from oahu.cli.main import main as oahu_main
from oahu.service.config import ServiceConfig
from oahu.service.config_flags import add_arguments
from oahu.service.config_sources import resolve_config
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.app import Service
from oahu.service.serving.inputs import MAX_POOL, MAX_SUGGEST_BATCH, SUGGEST_STRATEGIES
from oahu.service.serving.queries import NotReady
from oahu.service.serving.suggest import Busy, Suggester, SuggestRequest, gallery_points
from oahu.service.serving.suggestion_sink import SuggestionSink, suggest_target
from oahu.streams.stream_file import ConstraintStream

N = 400
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_stream(tmp_path_factory.mktemp("stream"), N, seed=7)


@pytest.fixture(scope="module")
def stream(stream_file: Path) -> ConstraintStream:
    return ConstraintStream.load(stream_file)


@pytest.fixture(scope="module")
def running(
    stream_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, TestClient]]:
    service = start_file_service(stream_file, tmp_path_factory.mktemp("state"), N, auth_token=TOKEN)
    with TestClient(service.app) as client:
        yield service, client
    service.shutdown()


@pytest.fixture(scope="module")
def client(running: tuple[Service, TestClient]) -> TestClient:
    return running[1]


def suggest(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/suggest", json=body, headers=AUTH)


def questions(answer: dict[str, Any]) -> list[tuple[str, frozenset[str]]]:
    """Each question as (anchor, {first, second}): the same question whichever option is first."""
    return [(q["anchor"], frozenset((q["first"], q["second"]))) for q in answer["suggestions"]]


def check_questions(answer: dict[str, Any], k: int, pool: set[str]) -> None:
    assert len(answer["suggestions"]) == k
    assert len(set(questions(answer))) == k  # k distinct questions
    for q in answer["suggestions"]:
        assert q["kind"] == "triplet"
        assert {q["anchor"], q["first"], q["second"]} <= pool
        assert q["anchor"] not in (q["first"], q["second"]) and q["first"] != q["second"]
        assert isinstance(q["score"], float) and math.isfinite(q["score"])


# ---------------------------------------------------------------------- answers
@pytest.mark.parametrize("strategy", SUGGEST_STRATEGIES)
def test_questions_from_the_gallery(running, stream: ConstraintStream, strategy: str) -> None:
    service, client = running
    response = suggest(client, pool="gallery", batch=25, kind="triplet", strategy=strategy, seed=3)
    assert response.status_code == 200, response.text
    answer = response.json()
    gallery = {str(i) for i in stream.dev_idx}  # the file source's development items
    check_questions(answer, 25, gallery)
    assert answer["pool_items"] == len(gallery)
    assert (answer["strategy"], answer["seed"], answer["published_to"]) == (strategy, 3, None)
    snap = service.publisher.current
    assert answer["model"] == {"snapshot": snap.version, "updates": N}
    assert 0 < answer["seconds"] < 30
    # one snapshot and one seed choose the same questions again
    again = suggest(client, pool="gallery", batch=25, strategy=strategy, seed=3).json()
    if again["model"] == answer["model"]:
        assert again["suggestions"] == answer["suggestions"]


def test_the_model_is_named_as_every_endpoint_names_it(running, stream: ConstraintStream) -> None:
    """/v1/suggest names the snapshot its questions come from in the same ``model`` object as
    /v1/classify does for that snapshot, so a client reads one format from every endpoint."""
    service, client = running
    body = {"items": [{"x": stream.X[stream.test_idx[0]].tolist()}]}
    before = client.post("/v1/classify", json=body).json()["model"]
    answer = suggest(client, pool="gallery", batch=3, seed=1).json()
    after = client.post("/v1/classify", json=body).json()["model"]
    assert before == after  # the learner has consumed the whole stream: one snapshot throughout
    assert answer["model"] == before
    assert before == {"snapshot": service.publisher.current.version, "updates": N}


def test_the_default_strategy_kind_and_seed(client: TestClient) -> None:
    first = suggest(client, pool="gallery", batch=5).json()
    second = suggest(client, pool="gallery", batch=5).json()
    assert first["strategy"] == "joint-entropy" and first["suggestions"][0]["kind"] == "triplet"
    # without a seed the service draws one and says which, so an answer can be reproduced
    assert 0 <= first["seed"] < 2**63 and first["seed"] != second["seed"]
    again = suggest(client, pool="gallery", batch=5, seed=first["seed"]).json()
    if again["model"] == first["model"]:
        assert again["suggestions"] == first["suggestions"]


def test_the_gallery_is_read_from_the_snapshot_as_the_learner_transforms_it(
    running, stream: ConstraintStream
) -> None:
    """The gallery's points are its snapshot embeddings scaled by √α: Learner.transform of its
    items, without embedding them again."""
    service, _ = running
    snap = service.publisher.current
    ids, points = gallery_points(snap, seed=0)
    assert ids == [str(i) for i in stream.dev_idx]
    expected = snap.learner.transform(stream.X[stream.dev_idx])
    np.testing.assert_allclose(points, expected, rtol=1e-5, atol=1e-6)


def test_questions_from_a_list_of_ids(client: TestClient, stream: ConstraintStream) -> None:
    # ids of the item store (the stream's test items are not in the gallery), as ints and strings
    pool = [int(i) if n % 2 else str(i) for n, i in enumerate(stream.test_idx[:40])]
    answer = suggest(client, pool=pool, batch=30, strategy="uncertainty", seed=1)
    assert answer.status_code == 200, answer.text
    check_questions(answer.json(), 30, {str(i) for i in pool})
    assert answer.json()["pool_items"] == 40
    # a pool of three items makes three questions, each anchored on one of them
    three = [str(i) for i in stream.test_idx[:3]]
    answer = suggest(client, pool=three, batch=3).json()
    check_questions(answer, 3, set(three))
    assert {q["anchor"] for q in answer["suggestions"]} == set(three)


def test_the_token_is_required(client: TestClient) -> None:
    response = client.post("/v1/suggest", json={"pool": "gallery", "batch": 1})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


# ---------------------------------------------------------------------- refusals
POOL3 = ["0", "1", "2"]
REFUSED = [
    # (body, loc, words of the message)
    ({"pool": ["0", "1", "no-such-item", "3"], "batch": 2}, ["pool", 2], "unknown item id"),
    ({"pool": [], "batch": 2}, ["pool"], "the pool is empty"),
    ({"pool": ["0", "1"], "batch": 1}, ["pool"], "at least 3 items"),
    ({"pool": "everything", "batch": 1}, ["pool"], '"gallery" or a list of 3'),
    ({"pool": ["0", 0, "1"], "batch": 1}, ["pool"], "in the pool twice"),
    ({"pool": ["0", True, "1"], "batch": 1}, ["pool", 1], "not a boolean"),
    ({"pool": "gallery", "batch": 0}, ["batch"], "greater than or equal to 1"),
    ({"pool": "gallery", "batch": MAX_SUGGEST_BATCH + 1}, ["batch"], "less than or equal"),
    ({"pool": "gallery", "batch": 2.5}, ["batch"], "valid integer"),
    ({"pool": "gallery"}, ["batch"], "Field required"),
    ({"pool": POOL3, "batch": 4}, ["batch"], "only 3 distinct questions"),
    ({"pool": "gallery", "batch": 1, "kind": "quadruplet"}, ["kind"], "quadruplets are planned"),
    ({"pool": "gallery", "batch": 1, "kind": "pair"}, ["kind"], "only triplet questions"),
    ({"pool": "gallery", "batch": 1, "strategy": "entropy"}, ["strategy"], "joint-entropy"),
    ({"pool": "gallery", "batch": 1, "seed": -1}, ["seed"], "greater than or equal to 0"),
    ({"pool": "gallery", "batch": 1, "sead": 1}, ["sead"], "Extra inputs"),
]


@pytest.mark.parametrize(("body", "loc", "words"), REFUSED)
def test_refusals_name_the_field(client: TestClient, body: dict, loc: list, words: str) -> None:
    response = client.post("/v1/suggest", json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail[0]["loc"] == ["body", *loc], detail
    assert words in detail[0]["msg"], detail


def test_every_unknown_id_is_named(client: TestClient) -> None:
    pool = ["0", "ghost-a", "1", "ghost-b"]
    detail = suggest(client, pool=pool, batch=1).json()["detail"]
    assert [(d["loc"], d["input"]) for d in detail] == [
        (["body", "pool", 1], "ghost-a"),
        (["body", "pool", 3], "ghost-b"),
    ]
    assert "2 of the pool's ids are unknown" in detail[0]["msg"]


def test_items_the_model_cannot_embed_are_named(client: TestClient) -> None:
    """Finite features near float32's limit overflow the model's arithmetic (as for queries)."""
    huge = {"items": [{"id": "huge", "x": [3e38] * 64}], "gallery": False}
    assert client.post("/v1/items", json=huge, headers=AUTH).status_code == 200
    detail = suggest(client, pool=["0", "huge", "1"], batch=1).json()["detail"]
    assert [(d["loc"], d["input"]) for d in detail] == [(["body", "pool", 1], "huge")]
    assert "embedding of this item is not finite" in detail[0]["msg"]


def test_a_pool_larger_than_the_bound_is_refused_by_its_size(client: TestClient) -> None:
    body = {"pool": list(range(MAX_POOL + 1)), "batch": 1}
    response = client.post("/v1/suggest", json=body, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "pool"]
    assert "at most 50000" in response.json()["detail"][0]["msg"]


def test_a_similarity_learner_cannot_suggest(stream_file: Path, tmp_path: Path) -> None:
    """OASIS learns a bilinear similarity: no distance, no triplet questions (422 on kind)."""
    service = start_file_service(stream_file, tmp_path / "state", N, learner="oasis")
    try:
        with TestClient(service.app) as client:
            response = client.post("/v1/suggest", json={"pool": "gallery", "batch": 3})
            assert response.status_code == 422
            [error] = response.json()["detail"]
            assert error["loc"] == ["body", "kind"]
            assert "'oasis'" in error["msg"] and "not a distance" in error["msg"]
    finally:
        service.shutdown()


def test_busy_and_not_ready_are_503(running) -> None:
    service, _ = running
    idle = Suggester(service.publisher, service.catalog, max_waiting=2)  # never started
    request = SuggestRequest(None, 1, "random", 0)
    for _ in range(3):  # one being answered and two waiting
        idle.submit(request)
    with pytest.raises(Busy, match="3 suggestion requests"):
        idle.submit(request)

    class NoSnapshot:
        current = None

    empty = Suggester(NoSnapshot(), service.catalog)  # type: ignore[arg-type]
    empty.start()
    try:
        with pytest.raises(NotReady):
            empty.submit(request).result(timeout=10)
    finally:
        empty.stop()


# ---------------------------------------------------------------------- schema and metrics
def test_the_schema_lists_the_endpoint_its_answers_and_limits(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    post = schema["paths"]["/v1/suggest"]["post"]
    assert set(post["responses"]) == {"200", "401", "413", "415", "422", "503"}
    assert post["security"] == [{"HTTPBearer": []}]
    body = schema["components"]["schemas"]["SuggestQuery"]
    assert body["additionalProperties"] is False and body["required"] == ["pool", "batch"]
    gallery, ids = body["properties"]["pool"]["oneOf"]
    assert gallery == {"type": "string", "enum": ["gallery"]}
    assert (ids["minItems"], ids["maxItems"], ids["uniqueItems"]) == (3, MAX_POOL, True)
    batch = body["properties"]["batch"]
    assert (batch["minimum"], batch["maximum"]) == (1, MAX_SUGGEST_BATCH)
    assert body["properties"]["kind"]["enum"] == ["triplet"]
    assert body["properties"]["strategy"]["enum"] == list(SUGGEST_STRATEGIES)


def test_the_cli_offers_the_selection_cores_strategies() -> None:
    """`oahu suggest` keeps its own list (a client should not load torch to start)."""
    from oahu.active import STRATEGIES
    from oahu.cli import suggest as cli

    assert cli.STRATEGIES == STRATEGIES == SUGGEST_STRATEGIES


def test_metrics_count_questions_and_time_answers(client: TestClient) -> None:
    def value(text: str, line: str) -> float:
        found = [s for s in text.splitlines() if s.startswith(line + " ")]
        return float(found[0].split()[-1]) if found else 0.0

    served = 'oahu_suggestions_total{strategy="random"}'
    timed = 'oahu_suggest_duration_seconds_count{strategy="random"}'
    before = client.get("/metrics").text
    assert suggest(client, pool="gallery", batch=7, strategy="random").status_code == 200
    assert suggest(client, pool="gallery", batch=0, strategy="random").status_code == 422
    after = client.get("/metrics").text
    assert value(after, served) == value(before, served) + 7
    assert value(after, timed) == value(before, timed) + 1  # answered requests only
    for strategy in SUGGEST_STRATEGIES:  # every series from the start
        assert f'oahu_suggestions_total{{strategy="{strategy}"}}' in after
    assert "oahu_suggestions_published_total 0.0" in after
    assert 'endpoint="/v1/suggest"' in after  # the request histogram has it too


# ---------------------------------------------------------------------- while learning
def test_suggestions_are_answered_while_the_learner_keeps_consuming(tmp_path: Path) -> None:
    """Suggestions come from the current snapshot on a thread of their own: the learner process
    goes on consuming meanwhile, and later answers come from newer models."""
    n = 6000
    stream_file = make_stream(tmp_path, n, seed=2)
    config = ServiceConfig(
        source=stream_file.as_uri(), checkpoint_dir=str(tmp_path / "state"), reindex_interval=0.2
    )
    service = Service(config)
    service.start()
    try:
        consumed = lambda: service.status["constraints_consumed"]  # noqa: E731
        wait_until(lambda: service.publisher.current and consumed() > 0, 60, "learning")
        with TestClient(service.app) as client:
            seen: list[tuple[int, int, int]] = []  # (consumed before, model's updates, after)
            # Ask until an answer came from a newer model than the first (the learner reports
            # its progress in steps, so a few quick answers on a loaded machine may all fall
            # within one), the stream ends, or a minute passes.
            deadline = time.monotonic() + 60
            while consumed() < n and time.monotonic() < deadline:
                if len(seen) >= 2 and seen[-1][1] > seen[0][1] and seen[-1][2] > seen[0][0]:
                    break
                before = consumed()
                response = client.post("/v1/suggest", json={"pool": "gallery", "batch": 50})
                assert response.status_code == 200, response.text
                seen.append((before, response.json()["model"]["updates"], consumed()))
                time.sleep(0.05)
        assert len(seen) >= 2, f"the stream of {n} ended before two answers: {seen}"
        assert seen[-1][2] > seen[0][0]  # consumption went on around the answers
        assert any(before < n for before, _, _ in seen)  # answered while learning
        # answers follow the model: later snapshots have learned more
        assert seen[-1][1] > seen[0][1]
    finally:
        service.shutdown()


# ---------------------------------------------------------------------- oahu suggest
@pytest.fixture(scope="module")
def url(running) -> Iterator[str]:
    """The running service's app over real HTTP (uvicorn in a thread)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            running[0].app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "uvicorn")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_cli_prints_one_question_per_line(url: str, stream: ConstraintStream, capsys) -> None:
    code = oahu_main(["suggest", "--url", url, "--token", TOKEN, "--batch", "6", "--seed", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [line.split("\t") for line in out.splitlines()]
    assert len(lines) == 6 and all(len(line) == 4 for line in lines)
    gallery = {str(i) for i in stream.dev_idx}
    for anchor, first, second, score in lines:
        assert {anchor, first, second} <= gallery and anchor not in (first, second)
        float(score)
    assert "6 questions (joint-entropy, seed 4)" in err


def test_cli_json_and_ids_from_a_file(url, stream, tmp_path, capsys, monkeypatch) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("# items to ask about\n" + "\n".join(map(str, stream.test_idx[:12])) + "\n\n")
    monkeypatch.setenv("OAHU_AUTH_TOKEN", TOKEN)  # the token, as `oahu run` reads it too
    code = oahu_main(
        ["suggest", "--url", url, "--batch", "4", "--ids", str(ids), "--strategy", "random",
         "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    answer = json.loads(out)
    check_questions(answer, 4, {str(i) for i in stream.test_idx[:12]})
    assert answer["strategy"] == "random" and answer["pool_items"] == 12


def test_cli_errors_name_the_cause(url: str, tmp_path: Path, capsys) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("0\n1\nnobody\n")
    code = oahu_main(["suggest", "--url", url, "--token", TOKEN, "--batch", "2", "--ids", str(ids)])
    assert code == 2
    assert "refused the request: pool[2]: unknown item id 'nobody'" in capsys.readouterr().err
    code = oahu_main(["suggest", "--url", url, "--token", TOKEN, "--batch", "1001"])
    assert code == 2 and "batch: Input should be less than or equal to 1000" in (
        capsys.readouterr().err
    )
    assert oahu_main(["suggest", "--url", url, "--token", "wrong", "--batch", "1"]) == 2
    assert "bearer token is required (give --token" in capsys.readouterr().err
    closed = f"http://127.0.0.1:{free_port()}"
    assert oahu_main(["suggest", "--url", closed, "--batch", "1"]) == 1
    assert f"cannot reach the service at {closed}" in capsys.readouterr().err
    assert oahu_main(["suggest", "--url", url, "--batch", "1", "--timeout", "-1"]) == 2
    assert "timeout: must be > 0 seconds, got -1.0" in capsys.readouterr().err


# ---------------------------------------------------------------------- --suggest-topic
def test_suggest_topic_setting() -> None:
    kafka = "kafka://127.0.0.1:9092/constraints?group=g"
    config = ServiceConfig(source=kafka, suggest_topic="questions")
    assert suggest_target(config) == ("127.0.0.1:9092", "questions")
    other = ServiceConfig(suggest_topic="kafka://10.0.0.1:9093/questions")
    assert suggest_target(other) == ("10.0.0.1:9093", "questions")
    assert suggest_target(ServiceConfig()) is None
    with pytest.raises(ValueError, match="suggest_topic: 'questions' names a topic on the sourc"):
        ServiceConfig(suggest_topic="questions")  # the default source is a file
    with pytest.raises(ValueError, match="suggest_topic: a Kafka topic name"):
        ServiceConfig(source=kafka, suggest_topic="two words")
    with pytest.raises(ValueError, match="suggest_topic: expected kafka://HOST:PORT/TOPIC"):
        ServiceConfig(suggest_topic="kafka://nowhere")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--source", kafka, "--suggest-topic", "q"])
    assert resolve_config(args, environ={}).suggest_topic == "q"
    assert resolve_config(
        parser.parse_args([]), {"OAHU_SUGGEST_TOPIC": "kafka://h:1/q"}
    ).suggest_topic


def test_an_unreachable_broker_costs_only_the_publication() -> None:
    """The sink's thread meets the missing broker, not the request: the questions it could not
    publish are counted, and the next answer tries again with a new producer."""
    metrics = ServiceMetrics()
    sink = SuggestionSink(
        "questions", f"127.0.0.1:{free_port()}", metrics, {"api_version_auto_timeout_ms": 500}
    )
    sink.start()
    try:
        started = time.perf_counter()
        sink.publish([(b"r", b"{}")] * 3)
        sink.publish([(b"s", b"{}")] * 2)
        assert time.perf_counter() - started < 0.1  # publish only queues
        failures = metrics.suggestion_publish_failures
        wait_until(lambda: failures._value.get() == 5, 30, "5 counted failures")
    finally:
        sink.stop(timeout=5)


def test_service_metrics_without_strategies_still_render() -> None:
    assert b"oahu_suggestions_published_total 0.0" in ServiceMetrics().render()


@pytest.mark.kafka
def test_questions_are_published_answered_by_id_and_learned(kafka_bootstrap, tmp_path) -> None:
    """The loop: the service suggests and publishes; a tool reads a question, a person answers,
    the answer goes to the input topic as an ordinary triplet message by id and is learned."""
    from test_service_kafka import create_topic, read_topic, unique

    from oahu.connectors.kafka_sink import KafkaSink

    stream_file = make_stream(tmp_path, 100, seed=4)
    stream = ConstraintStream.load(stream_file)
    source, questions_topic, group = unique("suggest-in"), unique("suggest-out"), unique("g")
    for topic in (source, questions_topic):
        create_topic(kafka_bootstrap, topic, 1)
    proc = ServiceProcess(
        ["--source", f"kafka://{kafka_bootstrap}/{source}?group={group}", "--items",
         str(stream_file), "--gallery", str(stream_file), "--checkpoint-dir",
         str(tmp_path / "state"), "--reindex-interval", "0.2", "--suggest-topic",
         questions_topic],
        tmp_path / "service.log",
    )  # fmt: skip
    try:
        proc.wait_serving()
        response = None
        for _ in range(50):  # the first snapshot may still be on its way
            response = proc_post(proc, {"pool": "gallery", "batch": 12, "seed": 5})
            if response.status_code != 503:
                break
            time.sleep(0.2)
        assert response is not None and response.status_code == 200, response.text
        answer = response.json()
        assert answer["published_to"] == questions_topic
        records = read_topic(kafka_bootstrap, questions_topic, 12, timeout_ms=20_000)
        assert len(records) == 12
        published = [json.loads(r.value) for r in records]
        assert {r.key for r in records} == {answer["request"].encode()}
        assert [m["rank"] for m in published] == list(range(12))
        for message, q in zip(published, answer["suggestions"], strict=True):
            assert message["type"] == "suggestion" and message["kind"] == "triplet"
            assert (message["anchor"], message["first"], message["second"]) == (
                {"id": q["anchor"]}, {"id": q["first"]}, {"id": q["second"]}
            )  # fmt: skip
            assert message["model"] == answer["model"] and message["of"] == 12
        # the annotator: the option of the anchor's class is the closer one
        label = {str(i): int(stream.y[i]) for i in range(stream.n_items)}
        answers = []
        for m in published:
            a, f, s = m["anchor"]["id"], m["first"]["id"], m["second"]["id"]
            closer, farther = (f, s) if label[f] == label[a] or label[s] != label[a] else (s, f)
            triplet = {"v": 1, "kind": "triplet", "anchor": {"id": a},
                       "positive": {"id": closer}, "negative": {"id": farther}}  # fmt: skip
            answers.append(json.dumps(triplet).encode())
        sink = KafkaSink(source, kafka_bootstrap)
        sink.send_many(answers)
        sink.flush()
        sink.close()
        model = proc.wait_consumed(12)
        assert model["constraints_consumed"] == 12
        metrics = proc.get("/metrics").text
        assert "oahu_constraints_learned_total 12.0" in metrics
        assert "oahu_suggestions_published_total 12.0" in metrics
        assert 'oahu_suggestions_total{strategy="joint-entropy"} 12.0' in metrics
    finally:
        assert proc.terminate() == 0, proc.output()


def proc_post(proc: ServiceProcess, body: dict[str, Any]) -> Any:
    import httpx

    return httpx.post(proc.base + "/v1/suggest", json=body, timeout=60.0)
