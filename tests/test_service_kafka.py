"""``oahu run`` and ``oahu produce`` against a real Kafka broker (tests/conftest.py).

Each test uses its own topic and group. Services run as subprocesses, so crashes are real
SIGKILLs and shutdowns real SIGTERMs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic
from service_support import (
    REPO,
    ServiceProcess,
    assert_same_model,
    make_stream,
    train_reference,
    wait_until,
)

from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import encode_constraints, encode_stream
from oahu.learners.oahu.config import OAHUConfig
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.streams.stream_file import ConstraintStream

pytestmark = pytest.mark.kafka

# Static membership: a restarted member takes its old place at once instead of waiting for the
# dead one's session to time out.
FAST_GROUP = ["--kafka-option", "session_timeout_ms=6000", "--kafka-option",
              "heartbeat_interval_ms=500"]  # fmt: skip


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, stream: Path, *extra: str) -> subprocess.Popen:
    """``oahu produce`` as a subprocess (the CLI under test)."""
    return subprocess.Popen(
        [sys.executable, "-m", "oahu.cli.main", "produce", "--stream", str(stream),
         "--to", f"kafka://{bootstrap}/{topic}", *extra],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, cwd=REPO,
    )  # fmt: skip


def service(bootstrap: str, topic: str, group: str, stream: Path, state: Path, *extra: str):
    return ServiceProcess(
        ["--source", f"kafka://{bootstrap}/{topic}?group={group}", "--items", str(stream),
         "--gallery", str(stream), "--checkpoint-dir", str(state), "--reindex-interval", "0.2",
         *FAST_GROUP, *extra],
        state.parent / f"{state.name}.log",
    )  # fmt: skip


def read_topic(bootstrap: str, topic: str, n: int, timeout_ms: int = 10_000) -> list:
    """Up to ``n`` records of ``topic`` from its start (fewer if none comes for
    ``timeout_ms``)."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=timeout_ms,
    )  # fmt: skip
    records = []
    for record in consumer:
        records.append(record)
        if len(records) == n:
            break
    consumer.close()
    return records


def test_consumed_model_equals_the_replayed_model_and_metrics(kafka_bootstrap, tmp_path):
    stream_file = make_stream(tmp_path, 800, seed=11)
    topic, state = unique("replay"), tmp_path / "state"
    assert produce(kafka_bootstrap, topic, stream_file, "--format", "json").wait(60) == 0
    proc = service(
        kafka_bootstrap, topic, unique("g"), stream_file, state, "--checkpoint-every", "300"
    )
    proc.wait_consumed(800)
    wait_until(lambda: proc.model()["lag"] == {"0": 0}, 30, "lag 0")
    # A checkpoint is written after the records that made it due are learned, and reported with
    # the metrics: the consumed count can reach 800 before it is (a loaded machine showed it).
    wait_until(
        lambda: proc.model()["checkpoint"]["constraints_consumed"] >= 300, 30, "a checkpoint"
    )
    metrics = proc.get("/metrics").text
    assert proc.terminate() == 0  # SIGTERM: checkpoint, commit, exit 0
    learner, progress = read_checkpoint(checkpoint_path(state))
    stream = ConstraintStream.load(stream_file)
    assert_same_model(learner, train_reference(stream))
    assert progress.offsets == {0: 800} and progress.consumed == 800
    for line in (
        "oahu_constraints_consumed_total 800.0",
        "oahu_constraints_learned_total 800.0",
        'oahu_consumer_lag{partition="0"} 0.0',
        "oahu_model_updates 800.0",
        "oahu_source_ready 1.0",
        "oahu_gallery_items 899.0",
    ):
        assert line in metrics, line
    values = _samples(metrics)
    assert values["oahu_constraints_used_total"] / 800 == pytest.approx(
        values["oahu_constraint_utilization"]
    )
    config = OAHUConfig()  # the default OAHU's L + 1 depths
    alpha = [values[f'oahu_hedge_weight{{depth="{d}"}}'] for d in range(config.n_depths)]
    assert f'oahu_hedge_weight{{depth="{config.n_depths}"}}' not in values
    floor = config.smoothing / config.n_depths  # the α floor
    assert sum(alpha) == pytest.approx(1.0) and min(alpha) >= floor - 1e-9
    assert 0.0 <= values["oahu_prequential_accuracy"] <= 1.0
    assert values["oahu_update_duration_seconds_count"] >= 1
    assert values["oahu_checkpoint_duration_seconds_count"] >= 1
    assert 0 <= values["oahu_checkpoint_age_seconds"] < 60
    assert values["oahu_gallery_reindex_timestamp_seconds"] > 0
    assert 'oahu_http_request_duration_seconds_count{endpoint="/v1/model",method="GET",' \
           'status="200"}' in metrics  # fmt: skip


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_kill_9_at_random_points_applies_every_constraint_once(kafka_bootstrap, tmp_path):
    n = 1500
    stream_file = make_stream(tmp_path, n, seed=5)
    topic, group, state = unique("crash"), unique("g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    producer = produce(kafka_bootstrap, topic, stream_file, "--rate", "200")
    member = ["--kafka-option", f"group_instance_id={unique('member')}", "--checkpoint-every",
              "97", "--poll-records", "50"]  # fmt: skip
    kill_points = sorted(np.random.default_rng(7).choice(np.arange(100, n - 200), 3, False))
    killed_at = []
    for point in kill_points:
        proc = service(kafka_bootstrap, topic, group, stream_file, state, *member)
        killed_at.append(proc.wait_consumed(int(point))["constraints_consumed"])
        proc.kill()
    assert producer.wait(60) == 0
    proc = service(kafka_bootstrap, topic, group, stream_file, state, *member)
    final = proc.wait_consumed(n)
    assert proc.terminate() == 0
    # real mid-stream crashes, each past its point; not necessarily in order: a process counts
    # on from its checkpoint, so one killed soon after a restart can have counted fewer than
    # the one before it did (points 849 and 921 once: killed at 972, then at 922)
    assert all(point <= at < n for point, at in zip(kill_points, killed_at, strict=True))
    assert final["constraints_consumed"] == n  # each record counted once across 4 processes
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n} and progress.consumed == n
    assert_same_model(learner, train_reference(ConstraintStream.load(stream_file)))


def test_poison_messages_go_to_the_dead_letter_topic(kafka_bootstrap, tmp_path):
    stream_file = make_stream(tmp_path, 300, seed=2)
    stream = ConstraintStream.load(stream_file)
    good = encode_stream(stream_file, "binary")
    x = stream.X[0].tolist()
    nan_json = '{"v":1,"kind":"triplet","anchor":{"x":[NaN' + ",0.5" * 63 + ']},"positive":'
    poison = {
        "undecodable": b"\x00\x01garbage",
        "unknown_version": b'{"v":7,"kind":"triplet","anchor":{"id":"1"},"positive":{"id":"2"}'
        b',"negative":{"id":"3"}}',
        "bad_kind": b'{"v":1,"kind":"quad","anchor":{"id":"1"}}',
        "bad_dimension": (
            b'{"v":1,"kind":"triplet","anchor":{"x":[1,2,3]},"positive":{"x":[1,2,3]},'
            b'"negative":{"x":[3,2,1]}}'
        ),
        "non_finite": (
            nan_json + '{"x":' + str(x) + '},"negative":{"x":' + str(x[::-1]) + "}}"
        ).encode(),
        "unknown_item": b'{"v":1,"kind":"triplet","anchor":{"id":"1"},"positive":{"id":"2"},'
        b'"negative":{"id":"no-such-item"}}',
    }
    binary_v9 = bytearray(good[0])
    binary_v9[2] = 9
    poison["unknown_version: binary"] = bytes(binary_v9)
    # Each of these once crashed the learner process and blocked the partition.
    poison["undecodable: tombstone"] = None
    poison["undecodable: label beyond int64"] = (
        b'{"v":1,"kind":"triplet","anchor":{"id":"1","label":9223372036854775808},'
        b'"positive":{"id":"2"},"negative":{"id":"3"}}'
    )
    huge_dim = bytearray(encode_constraints("triplet", x=stream.X[stream.constraints[:1]])[0])
    huge_dim[8:12] = (2**32 - 1).to_bytes(4, "little")  # the header's dim field
    poison["undecodable: dimension near 2**32"] = bytes(huge_dim)
    poison["undecodable: nested 100,000 deep"] = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    # interleave: poison message i goes after good message 25 * i
    messages, expected = [], {}
    for i, value in enumerate(good):
        messages.append(value)
        if i % 25 == 0 and i // 25 < len(poison):
            name, bad = list(poison.items())[i // 25]
            expected[len(messages)] = (name.split(":")[0], bad)
            messages.append(bad)
    assert len(expected) == len(poison)
    topic, state = unique("poison"), tmp_path / "state"
    sink = KafkaSink(topic, kafka_bootstrap)
    for value in messages:  # a tombstone (no value) must have a key
        sink.send(value, key=b"tombstone" if value is None else None)
    sink.flush()
    sink.close()
    proc = service(kafka_bootstrap, topic, unique("g"), stream_file, state)
    model = proc.wait_consumed(len(messages))
    metrics = proc.get("/metrics").text
    assert proc.terminate() == 0
    letters = read_topic(kafka_bootstrap, topic + ".dead-letter", len(expected))
    got = {}
    for r in letters:
        headers = {k: v.decode() for k, v in r.headers}
        value = None if headers.get("tombstone") else r.value
        got[int(headers["offset"])] = (headers["reason"], value)
        assert headers["source"] == topic and headers["partition"] == "0" and headers["detail"]
    assert got == expected
    reasons = [reason for reason, _ in expected.values()]
    assert model["dead_letters"] == {r: reasons.count(r) for r in reasons}
    assert 'oahu_dead_letters_total{reason="unknown_version"} 2.0' in metrics
    assert 'oahu_dead_letters_total{reason="undecodable"} 5.0' in metrics
    assert model["constraints_learned"] == 300
    learner, _ = read_checkpoint(checkpoint_path(state))
    assert_same_model(learner, train_reference(stream))  # the good ones, learned in order


def test_two_consumers_split_partitions_and_a_rebalance_loses_nothing(kafka_bootstrap, tmp_path):
    stream_file = make_stream(tmp_path, 1200, seed=9)
    values = encode_stream(stream_file)
    topic, group = unique("split"), unique("g")
    create_topic(kafka_bootstrap, topic, 4)
    sink = KafkaSink(topic, kafka_bootstrap)

    def send(rows: range) -> None:
        for i in rows:
            sink.send(values[i], partition=i % 4)
        sink.flush()

    send(range(0, 400))
    a = service(kafka_bootstrap, topic, group, stream_file, tmp_path / "a")
    a.wait_consumed(400)
    b = service(kafka_bootstrap, topic, group, stream_file, tmp_path / "b")
    b.wait_serving()
    wait_until(lambda: len(b.model()["offsets"]) == 2, 60, "b to own two partitions")
    send(range(400, 800))
    wait_until(
        lambda: a.model()["constraints_consumed"] + b.model()["constraints_consumed"] == 800,
        60, "both members to consume the second batch",
    )  # fmt: skip
    a_mid, b_mid = a.model(), b.model()
    assert b_mid["constraints_consumed"] > 0 and a_mid["constraints_consumed"] > 400
    assert b.terminate() == 0  # b leaves: its partitions go back to a
    send(range(800, 1200))
    wait_until(lambda: a.model()["constraints_consumed"] == 1200 - b_mid["constraints_consumed"],
               60, "a to consume everything b did not")  # fmt: skip
    assert a.terminate() == 0
    sink.close()
    _, pa = read_checkpoint(checkpoint_path(tmp_path / "a"))
    _, pb = read_checkpoint(checkpoint_path(tmp_path / "b"))
    assert pa.consumed + pb.consumed == 1200  # nothing lost, nothing consumed twice
    assert {p: max(pa.offsets.get(p, 0), pb.offsets.get(p, 0)) for p in range(4)} == {
        p: 300 for p in range(4)
    }
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group)
    from kafka import TopicPartition

    committed = [consumer.committed(TopicPartition(topic, p)) for p in range(4)]
    consumer.close()
    assert committed == [300] * 4


def test_queries_while_learning_are_all_answered_and_consistent(kafka_bootstrap, tmp_path):
    n = 1500
    stream_file = make_stream(tmp_path, n, seed=4)
    stream = ConstraintStream.load(stream_file)
    topic, state = unique("serve"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    proc = service(kafka_bootstrap, topic, unique("g"), stream_file, state)
    proc.wait_serving()
    producer = produce(kafka_bootstrap, topic, stream_file, "--rate", "500")
    queries = [{"x": stream.X[i].tolist()} for i in stream.test_idx[:8]]
    answers = asyncio.run(_query_while_learning(proc.base, queries, proc))
    assert producer.wait(60) == 0
    final = proc.wait_consumed(n)
    assert proc.terminate() == 0
    assert answers and all(status == 200 for status, _ in answers)
    by_snapshot: dict[int, list] = {}
    for _, body in answers:
        by_snapshot.setdefault(body["model"]["snapshot"], []).append(body)
    assert len(by_snapshot) >= 3  # the model visibly changed while it was being queried
    for bodies in by_snapshot.values():  # one snapshot, one answer: never a half-updated model
        assert all(b["predictions"] == bodies[0]["predictions"] for b in bodies)
        assert len({b["model"]["updates"] for b in bodies}) == 1
    assert final["constraints_consumed"] == n


async def _query_while_learning(base: str, items: list, proc: ServiceProcess) -> list:
    answers: list = []

    async def client(http: httpx.AsyncClient) -> None:
        for _ in range(400):
            response = await http.post("/v1/classify", json={"items": items})
            answers.append((response.status_code, response.json()))
            if response.json()["model"]["updates"] >= 1500:
                return

    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        await asyncio.gather(*(client(http) for _ in range(8)))
    return answers


def test_items_posted_to_the_api_resolve_in_constraints_sent_after_the_answer(
    kafka_bootstrap, tmp_path
):
    """The learner process gets each item change before POST /v1/items answers."""
    stream_file = make_stream(tmp_path, 20, seed=1)
    stream = ConstraintStream.load(stream_file)
    topic, state = unique("items"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    proc = service(kafka_bootstrap, topic, unique("g"), stream_file, state)
    proc.wait_serving()
    new = [{"id": f"live-{i}", "x": stream.X[i].tolist(), "label": 1} for i in range(3)]
    assert httpx.post(proc.base + "/v1/items", json={"items": new}).status_code == 200
    sink = KafkaSink(topic, kafka_bootstrap)
    sink.send_many(
        [b'{"v":1,"kind":"triplet","anchor":{"id":"live-0"},"positive":{"id":"live-1"},'
         b'"negative":{"id":"live-2"}}'] * 5
    )  # fmt: skip
    sink.flush()
    sink.close()
    model = proc.wait_consumed(5)
    assert proc.terminate() == 0
    assert model["dead_letters"] == {} and model["constraints_learned"] == 5
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.items_version == 1 and learner.constraints_learned == 5


def test_an_unreachable_broker_means_not_ready_never_a_crash(tmp_path: Path):
    stream_file = make_stream(tmp_path, 10, seed=0)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    quick = ["--kafka-option", "bootstrap_timeout_ms=1000"]  # fail each attempt fast
    proc = service(dead, "t", "g", stream_file, tmp_path / "state", *quick)
    answer = wait_until(lambda: proc.get("/readyz"), 60, "the HTTP API")
    assert answer.status_code == 503 and answer.json()["checks"]["source"] is False
    assert proc.get("/healthz").json() == {"status": "ok"}
    time.sleep(2)  # connection attempts keep failing meanwhile
    assert proc.proc.poll() is None and proc.get("/readyz").status_code == 503
    assert proc.terminate() == 0


@pytest.fixture
def own_broker(tmp_path_factory):
    """A broker of this test's own (bootstrap, pid), which it may freeze without touching the
    session's."""
    run_dir = tmp_path_factory.mktemp("own-kafka")
    kafka_sh = ["bash", str(REPO / "scripts" / "kafka" / "kafka.sh")]
    started = subprocess.run([*kafka_sh, "start", str(run_dir)], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    status = subprocess.run([*kafka_sh, "status", str(run_dir)], capture_output=True, text=True)
    _, bootstrap, pid = status.stdout.split()
    try:
        yield bootstrap, int(pid)
    finally:
        os.kill(int(pid), signal.SIGCONT)  # a stopped JVM cannot exit
        subprocess.run([*kafka_sh, "stop", str(run_dir)], capture_output=True, timeout=120)


def test_readiness_follows_a_frozen_broker_and_consumption_resumes(own_broker, tmp_path):
    """SIGSTOP on the broker's JVM: /readyz turns 503 within 15 s and names the cause, the
    metrics an operator alerts on grow; SIGCONT: ready again and the stream is learned on."""
    bootstrap, broker_pid = own_broker
    stream_file = make_stream(tmp_path, 400, seed=12)
    topic, state = unique("frozen"), tmp_path / "state"
    assert produce(bootstrap, topic, stream_file, "--limit", "200").wait(60) == 0
    proc = service(bootstrap, topic, unique("g"), stream_file, state)
    proc.wait_consumed(200)
    wait_until(lambda: proc.get("/readyz").status_code == 200, 30, "ready")
    os.kill(broker_pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    wait_until(lambda: proc.get("/readyz").status_code == 503, 20, "503 after the freeze")
    assert time.monotonic() - frozen_at <= 15
    body = proc.get("/readyz").json()
    assert body["ready"] is False and body["causes"]  # e.g. "no answer from the Kafka group ..."
    assert "Kafka" in " ".join(body["causes"].values()) or "learner_reporting" in body["causes"]
    time.sleep(5)  # still frozen: still not ready
    assert proc.get("/readyz").status_code == 503
    values = _samples(proc.get("/metrics").text)
    assert values["oahu_ready"] == 0.0
    assert max(values["oahu_source_contact_age_seconds"],
               values["oahu_learner_report_age_seconds"]) > 10  # fmt: skip
    os.kill(broker_pid, signal.SIGCONT)
    wait_until(lambda: proc.get("/readyz").status_code == 200, 60, "ready after the thaw")
    assert produce(bootstrap, topic, stream_file, "--start", "200").wait(60) == 0
    proc.wait_consumed(400)
    assert proc.terminate() == 0
    assert "source not ready" in proc.output() and "source ready again" in proc.output()
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed == 400
    assert_same_model(learner, train_reference(ConstraintStream.load(stream_file)))
