"""A learning group of three members on a real Kafka topic of three partitions, killed with
``kill -9`` (a random member, at random points) and re-formed from its last cut each time:
no record lost or learned twice, offsets committed, and the model the one-process replay of the
logged schedule learns."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from group_support import assert_each_once, checkpointed, leader, prepared, replayed, start_of
from kafka import KafkaConsumer, TopicPartition
from service_support import assert_same_model, gone, make_stream
from test_service_kafka import create_topic, read_topic, unique

from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import encode_stream
from oahu.service.catalog import ItemChange, base_items
from oahu.service.config import ServiceConfig
from oahu.service.group.schedule import learn_values, read_schedule
from oahu.service.serving.process import LearnerProcess
from oahu.streams.stream_file import load_stream

N_RECORDS = 1500
MEMBERS = 3


def _pids(rank0: LearnerProcess) -> list[int]:
    """Rank 0 and the members it spawned (its children)."""
    children = []
    for task in Path(f"/proc/{rank0.pid}/task").iterdir():
        children += [int(p) for p in (task / "children").read_text().split()]
    return [rank0.pid, *children]


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _wait_consumed(rank0: LearnerProcess, at_least: int, seconds: float) -> None:
    def done() -> bool:
        return rank0.status.get("constraints_consumed", 0) >= at_least

    _wait(done, seconds, f"{at_least} records consumed")


@pytest.mark.timeout(180)
def test_kill_9_of_random_members_loses_and_repeats_nothing(kafka_bootstrap, tmp_path):
    stream_file = make_stream(tmp_path, N_RECORDS, seed=3)
    stream = load_stream(stream_file)
    values = encode_stream(stream_file)
    topic, group = unique("learning-group"), unique("g")
    create_topic(kafka_bootstrap, topic, MEMBERS)
    sink = KafkaSink(topic, kafka_bootstrap)
    for i, value in enumerate(values):
        sink.send(value, partition=i % MEMBERS)
    sink.flush()
    sink.close()
    config = ServiceConfig(
        source=f"kafka://{kafka_bootstrap}/{topic}?group={group}", items=str(stream_file),
        checkpoint_dir=str(tmp_path / "state"), learners=MEMBERS, combine_every=4,
        checkpoint_every=97, learner_nice=0, group_timeout=5.0,
    )  # fmt: skip
    new = prepared(stream)
    rng = np.random.default_rng(11)
    kill_points = sorted(rng.choice(np.arange(100, N_RECORDS - 300), 3, replace=False))
    killed = []
    for point in kill_points:
        rank0 = leader(config, start_of(config, new))
        _wait_consumed(rank0, point, 60)
        pids = _pids(rank0)
        assert len(pids) == MEMBERS
        victim = int(rng.choice(pids))
        os.kill(victim, signal.SIGKILL)
        killed.append((pids.index(victim), rank0.status["constraints_consumed"]))
        assert rank0.finished.wait(30)  # the whole group goes down, rank 0 exits non-zero
        assert rank0.error is not None
        for pid in pids:  # no member outlives the group
            _wait(lambda pid=pid: gone(pid), 10, f"pid {pid} to exit")
    rank0 = leader(config, start_of(config, new))
    _wait_consumed(rank0, N_RECORDS, 90)
    rank0.stop()  # a clean stop: the final cut, then exit 0
    assert rank0.error is None, rank0.error
    # At least one real mid-stream crash. On an idle machine the re-formed group can finish
    # the stream before a later kill lands; that kill then crashes it between the last record
    # and a clean stop's final cut, which exactly-once must survive too.
    assert min(c for _, c in killed) < N_RECORDS
    print("killed (rank, constraints consumed):", killed)

    model, progress = checkpointed(config)
    per_partition = N_RECORDS // MEMBERS
    assert progress.offsets == {p: per_partition for p in range(MEMBERS)}
    assert progress.consumed == N_RECORDS  # each record counted once across the restarts
    assert model.constraints_seen == N_RECORDS
    offsets = [(p, o) for p in range(MEMBERS) for o in range(per_partition)]
    assert_each_once(config, MEMBERS, offsets)
    rounds = read_schedule(config.checkpoint_dir, MEMBERS)
    assert sum(r.restart for r in rounds) == len(kill_points) + 1  # the first start, then each
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group)
    committed = [consumer.committed(TopicPartition(topic, p)) for p in range(MEMBERS)]
    consumer.close()
    assert committed == [per_partition] * MEMBERS

    by_offset = {
        (r.partition, r.offset): r.value for r in read_topic(kafka_bootstrap, topic, N_RECORDS)
    }
    items, _ = base_items(config)
    replay = replayed(
        config, MEMBERS, new(),
        lambda learner, pairs: learn_values(learner, [by_offset[o] for o in pairs], items),
    )  # fmt: skip
    assert_same_model(model, replay, atol=1e-5)


@pytest.mark.timeout(120)
def test_item_changes_reach_every_member_and_an_idle_member_blocks_nothing(
    kafka_bootstrap, tmp_path
):
    """Items added through the serving process reach rank 0, which hands them to every member
    at a round boundary: constraints naming them are learned on every partition, none
    dead-lettered as unknown. Member 2's partition stays empty throughout, and the others'
    rounds go on without it."""
    stream_file = make_stream(tmp_path, 50, seed=4)
    stream = load_stream(stream_file)
    topic, group = unique("group-items"), unique("g")
    create_topic(kafka_bootstrap, topic, 3)
    config = ServiceConfig(
        source=f"kafka://{kafka_bootstrap}/{topic}?group={group}", items=str(stream_file),
        checkpoint_dir=str(tmp_path / "state"), learners=3, combine_every=4, learner_nice=0,
        poll_timeout=0.1,
    )  # fmt: skip
    (tmp_path / "state").mkdir()
    rank0 = leader(config, start_of(config, prepared(stream)))
    _wait(lambda: "constraints_consumed" in rank0.status, 60, "the group to report")
    new = np.random.default_rng(0).random((6, stream.n_features)).astype(np.float32)
    rank0.forward(ItemChange(1, [f"new-{i}" for i in range(6)], new, np.arange(6)))
    assert rank0.wait_items(1, 30)
    sink = KafkaSink(topic, kafka_bootstrap)
    for i in range(20):
        a, p, n = (f"new-{(i + k) % 6}" for k in range(3))
        message = {"v": 1, "kind": "triplet", "anchor": {"id": a}, "positive": {"id": p},
                   "negative": {"id": n}}  # fmt: skip
        sink.send(json.dumps(message).encode(), partition=i % 2)
    sink.flush()
    sink.close()
    _wait_consumed(rank0, 20, 60)
    rank0.stop()
    assert rank0.error is None, rank0.error
    model, progress = checkpointed(config)
    assert progress.offsets == {0: 10, 1: 10}  # nothing ever came to partition 2
    assert not progress.dead_letters  # member 1 knew the new items too
    assert model.constraints_seen == 20
