"""Serving replicas: ``oahu run --publish-model`` sends snapshots and item changes to Kafka,
``oahu serve`` replicas follow them and answer exactly as the learner service does for the same
snapshot, survive ``kill -9`` statelessly and follow the learner service across its restarts
(a real broker, tests/conftest.py; every service a real subprocess)."""

from __future__ import annotations

import hashlib
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from service_support import ServiceProcess, free_port, make_stream, wait_until

from oahu.connectors.blob_topic import BOOTSTRAP_TIMEOUT_MS, CHUNK_BYTES, BlobReader, BlobWriter
from oahu.service.serving.model_publishing import latest_version
from oahu.streams.stream_file import ConstraintStream

pytestmark = pytest.mark.kafka


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def read_all(reader: BlobReader, timeout: float = 30.0) -> list:
    blobs, deadline = [], time.monotonic() + timeout
    while not reader.end_reached and time.monotonic() < deadline:
        blobs += reader.poll(0.2)
    assert reader.end_reached
    return blobs


def test_blobs_are_chunked_checked_and_read_back_whole_newest_first(kafka_bootstrap):
    topic = unique("blobs")
    big = np.random.default_rng(0).bytes(3 * CHUNK_BYTES + 1000)  # four chunks
    writer = BlobWriter(kafka_bootstrap, topic)
    done: list = []
    writer.write(1, big, {"snapshot": 7}, done.append)
    writer.write(2, b"small", {"snapshot": 8}, done.append)
    writer.flush(30)
    writer.close()
    assert done == [None, None]
    # what a reader must refuse: a blob whose checksum fails, and one whose chunks never all came
    raw = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    wrong = hashlib.sha256(b"something else").hexdigest().encode()
    for version, index, count, digest in ((3, 0, 1, wrong), (4, 0, 2, wrong)):
        headers = [("version", str(version).encode()), ("index", str(index).encode()),
                   ("count", str(count).encode()), ("sha256", digest), ("meta", b"{}")]  # fmt: skip
        raw.send(topic, value=b"junk", key=str(index).encode(), headers=headers, partition=0)
    raw.flush(30)
    raw.close()
    reader = BlobReader(kafka_bootstrap, topic)
    blobs = read_all(reader)
    reader.close()
    assert [(b.version, b.meta) for b in blobs] == [(1, {"snapshot": 7}), (2, {"snapshot": 8})]
    assert blobs[0].payload == big and blobs[1].payload == b"small"
    assert reader.corrupt == 1
    # a new writer continues after every version seen, the incomplete one included
    assert latest_version(kafka_bootstrap, topic) == 4


def test_unreachable_brokers_fail_a_reader_within_the_bootstrap_timeout():
    """A replica's follower says why it cannot read the topics once its reader fails; that is
    after our bootstrap timeout (10 s), not kafka-python's 30 s."""
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        BlobReader(f"127.0.0.1:{free_port()}", unique("blobs"))
    assert time.monotonic() - started < 2 * BOOTSTRAP_TIMEOUT_MS / 1000


def answers(base: str, body: dict, retrieve: dict) -> tuple[dict, dict]:
    classified = httpx.post(base + "/v1/classify", json=body, timeout=30).json()
    retrieved = httpx.post(base + "/v1/retrieve", json=retrieve, timeout=30).json()
    return classified, retrieved


def same_snapshot(learner: ServiceProcess, replica: ServiceProcess, body: dict) -> bool:
    """Whether ``replica`` answers from the snapshot the learner service answers from."""
    try:
        mine = httpx.post(learner.base + "/v1/classify", json=body, timeout=10).json()
        theirs = httpx.post(replica.base + "/v1/classify", json=body, timeout=10)
    except httpx.HTTPError:
        return False
    return theirs.status_code == 200 and theirs.json()["model"] == mine["model"]


@pytest.mark.timeout(400)
def test_replicas_answer_as_the_learner_does_and_survive_kill_9(kafka_bootstrap, tmp_path):
    n = 3000
    stream_file = make_stream(tmp_path, n, seed=4)
    stream = ConstraintStream.load(stream_file)
    topic = f"kafka://{kafka_bootstrap}/{unique('model')}"
    serve = ["--model-topic", topic, "--gallery", str(stream_file)]
    scratch = tmp_path / "tmp"  # the replicas' temporary directory, where their scratch goes
    scratch.mkdir()
    in_scratch = {"TMPDIR": str(scratch)}
    early = ServiceProcess(serve, tmp_path / "early.log", command="serve", env=in_scratch)
    # a replica started before anything was published is up, and not ready
    ready = wait_until(lambda: early.get("/readyz"), 60, "the early replica's HTTP API")
    assert ready.status_code == 503 and "no snapshot" in ready.json()["causes"]["snapshot"]
    run = ["--source", stream_file.as_uri(), "--checkpoint-dir", str(tmp_path / "state"),
           "--publish-model", topic, "--reindex-interval", "0.2"]  # fmt: skip
    learner = ServiceProcess(run, tmp_path / "learner.log")
    learner.wait_consumed(n)
    replicas = [early] + [
        ServiceProcess(serve, tmp_path / f"replica{i}.log", command="serve", env=in_scratch)
        for i in (1, 2)
    ]
    body = {"items": [{"x": stream.X[i].tolist()} for i in stream.test_idx[:40]]}
    retrieve = {"items": [{"id": str(i)} for i in stream.test_idx[:5]], "k": 5}
    for replica in replicas:
        wait_until(lambda: same_snapshot(learner, replica, body), 60, "the replica")  # noqa: B023
        assert replica.get("/readyz").status_code == 200
    expected = answers(learner.base, body, retrieve)
    assert expected[0]["model"]["updates"] == n
    for replica in replicas:
        assert answers(replica.base, body, retrieve) == expected  # same snapshot, same answers

    # an item added to the learner service reaches every replica, under one snapshot number
    new = {"items": [{"id": "new-item", "x": stream.X[stream.test_idx[0]].tolist(), "label": 3}],
           "gallery": True}  # fmt: skip
    assert httpx.post(learner.base + "/v1/items", json=new, timeout=30).status_code == 200
    probe = {"items": [{"id": "new-item"}], "k": 1}

    def has_new_item(base: str) -> dict | None:
        answer = httpx.post(base + "/v1/retrieve", json=probe, timeout=10)
        found = answer.status_code == 200 and answer.json()["results"][0][0]["id"] == "new-item"
        return answer.json() if found else None

    seen = wait_until(lambda: has_new_item(learner.base), 30, "the learner's new item")
    for replica in replicas:
        assert wait_until(lambda: has_new_item(replica.base), 10, "the item") == seen  # noqa: B023
    # a replica takes no writes
    refused = httpx.post(replicas[1].base + "/v1/items", json=new, timeout=30)
    assert refused.status_code == 403 and "replica" in refused.json()["detail"]
    # its console is there, read-only: the live view follows the learner's reports
    page = replicas[1].get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    answer = {"token": "t", "annotator": "ann", "choice": "first"}
    refused = httpx.post(replicas[1].base + "/v1/console/answers", json=answer, timeout=30)
    assert refused.status_code == 403
    live = httpx.get(replicas[1].base + "/v1/console/live", timeout=30).json()
    assert live["now"]["constraints_consumed"] == n and live["now"]["snapshot"]["snapshot"] >= 1

    # kill -9 and a restart on the same port: serving the learner's snapshot within 30 s
    victim = replicas[1]
    folders = set(scratch.iterdir())
    assert len(folders) == 3  # one scratch folder per replica
    victim.kill()
    started = time.monotonic()
    again = ServiceProcess(serve, tmp_path / "again.log", port=victim.port, command="serve",
                           env=in_scratch)  # fmt: skip
    wait_until(lambda: same_snapshot(learner, again, body), 30, "the restarted replica")
    assert time.monotonic() - started < 30
    # the killed replica could not remove its folder: the one started after it did
    now = set(scratch.iterdir())
    assert len(folders - now) == 1 and len(now - folders) == 1
    assert answers(again.base, body, retrieve) == answers(learner.base, body, retrieve)

    # the learner service restarts: its snapshots start again from 1 and replicas follow
    assert learner.terminate() == 0
    learner = ServiceProcess(run, tmp_path / "learner2.log", port=learner.port)
    learner.wait_serving()
    wait_until(lambda: same_snapshot(learner, again, body), 60, "a replica after the restart")
    metrics = learner.get("/metrics").text
    assert "oahu_model_publications_total" in metrics
    published = [line for line in metrics.splitlines()
                 if line.startswith("oahu_model_publications_total")]  # fmt: skip
    assert float(published[0].split()[1]) >= 1
    for process in (learner, again, replicas[0], replicas[2]):
        assert process.terminate() == 0, process.output()
    assert list(scratch.iterdir()) == []  # each replica shut down removed its own


def test_serve_refuses_to_start_without_what_it_needs(tmp_path: Path, capsys):
    from oahu.cli.main import main

    topic = "kafka://127.0.0.1:9/t"
    assert main(["serve", "--model-topic", topic]) == 2
    assert "oahu serve: error: gallery: oahu serve needs --gallery" in capsys.readouterr().err
    assert main(["serve", "--gallery", str(tmp_path / "g.npz")]) == 2
    assert "model_topic: oahu serve needs --model-topic" in capsys.readouterr().err
    assert main(["serve", "--model-topic", "http://x/t", "--gallery", "g.npz"]) == 2
    err = capsys.readouterr().err
    assert "model_topic: expected kafka://HOST:PORT/TOPIC, got 'http://x/t'" in err
