"""KafkaSource, KafkaSink and DeadLetterKafka against a real broker (tests/conftest.py)."""

from __future__ import annotations

import hashlib
import socket
import uuid
from collections.abc import Callable

import numpy as np
import pytest
from kafka import KafkaAdminClient, KafkaConsumer

from oahu.connectors.binary_codec import encode_binary_batch
from oahu.connectors.dead_letter import (
    DeadLetter,
    DeadLetterFile,
    DeadLetterKafka,
    read_dead_letters,
)
from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.kafka_source import Backoff, KafkaSource
from oahu.connectors.messages import (
    Constraint,
    ConstraintBatch,
    DecodeError,
    decode,
    decode_batch,
    encode_json,
)
from oahu.connectors.source import SourceRecord

MAX_ROUNDS = 60  # bound on poll rounds; each waits at most 0.5 s


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def triplet_messages(n: int, start: int = 0) -> list[bytes]:
    ids = np.arange(start, start + n, dtype=np.int64)[:, None] + np.array([0, 1, 2]) * 1000
    return encode_binary_batch(ConstraintBatch("triplet", np.arange(n), ids=ids))


def read_records(bootstrap: str, topic: str, n: int) -> list:
    """The first ``n`` records of ``topic`` (fetches large enough for 1 MiB records)."""
    reader = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None,
        fetch_max_bytes=4 << 20, max_partition_fetch_bytes=4 << 20,
    )  # fmt: skip
    records: list = []
    for _ in range(MAX_ROUNDS):
        for batch in reader.poll(timeout_ms=500).values():
            records.extend(batch)
        if len(records) >= n:
            break
    reader.close()
    return records


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    sink = KafkaSink(topic, bootstrap)
    for value in values:
        sink.send(value, partition=partition)
    sink.flush()
    sink.close()
    assert sink.sent == len(values)


def poll_until(
    sources: list[KafkaSource], done: Callable[[], bool], got: list[SourceRecord] | None = None
) -> list[SourceRecord]:
    """Poll every source in turn until ``done()``; fail after MAX_ROUNDS rounds."""
    got = [] if got is None else got
    for _ in range(MAX_ROUNDS):
        for source in sources:
            got.extend(source.poll(max_records=500, timeout=0.5))
        if done():
            return got
    pytest.fail(f"condition not reached after {MAX_ROUNDS} poll rounds; got {len(got)} records")


def consume(source: KafkaSource, n: int) -> list[SourceRecord]:
    got: list[SourceRecord] = []
    return poll_until([source], lambda: len(got) >= n, got)


@pytest.mark.kafka
def test_consumes_every_record_with_offsets_and_lag(kafka_bootstrap: str) -> None:
    topic = unique("constraints")
    values = triplet_messages(300)
    produce(kafka_bootstrap, topic, values)
    source = KafkaSource(topic, unique("group"), kafka_bootstrap)
    got = consume(source, 300)
    assert source.ready and source.assignment == [0]
    assert [r.offset for r in got] == list(range(300))
    assert [r.value for r in got] == values
    assert {(r.source, r.partition) for r in got} == {(topic, 0)}
    assert all(r.timestamp is not None and r.timestamp > 1e9 for r in got)
    (batch,) = decode_batch([r.value for r in got]).batches
    assert batch.ids[:, 0].tolist() == list(range(300))
    assert source.lag() == {0: 0}  # every record read: the position is the end offset
    source.close()
    assert not source.ready


@pytest.mark.kafka
def test_lag_counts_what_is_left(kafka_bootstrap: str) -> None:
    topic = unique("lag")
    produce(kafka_bootstrap, topic, triplet_messages(40))
    source = KafkaSource(topic, unique("group"), kafka_bootstrap)
    got: list[SourceRecord] = []
    for _ in range(MAX_ROUNDS):
        got += source.poll(max_records=15 - len(got), timeout=0.5)
        if len(got) == 15:
            break
    assert [r.offset for r in got] == list(range(15))
    assert source.lag() == {0: 25}
    consume(source, 25)
    assert source.lag() == {0: 0}
    source.close()


@pytest.mark.kafka
def test_commit_then_reopen_resumes_from_the_committed_offset(kafka_bootstrap: str) -> None:
    topic, group = unique("resume"), unique("group")
    produce(kafka_bootstrap, topic, triplet_messages(50))
    first = KafkaSource(topic, group, kafka_bootstrap)
    consume(first, 50)
    assert first.commit({0: 20})
    assert first.committed(0) == 20
    first.close()
    second = KafkaSource(topic, group, kafka_bootstrap)
    got = consume(second, 30)
    assert [r.offset for r in got] == list(range(20, 50))
    second.close()


@pytest.mark.kafka
def test_seek_and_seek_on_assign(kafka_bootstrap: str) -> None:
    topic = unique("seek")
    values = triplet_messages(40)
    produce(kafka_bootstrap, topic, values)
    assigned: list[list[int]] = []

    def on_assign(partitions: list[int]) -> None:  # what the service does with its checkpoint
        assigned.append(partitions)
        source.seek({p: 30 for p in partitions})

    source = KafkaSource(topic, unique("group"), kafka_bootstrap, on_assign=on_assign)
    got = consume(source, 10)
    assert assigned == [[0]]
    assert [r.offset for r in got] == list(range(30, 40)) and got[0].value == values[30]
    source.seek({0: 5})
    got = consume(source, 35)
    assert [r.offset for r in got] == list(range(5, 40))
    source.close()


@pytest.mark.kafka
def test_two_consumers_split_partitions_and_hand_over_at_the_commit(kafka_bootstrap: str) -> None:
    topic, group = unique("split"), unique("group")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics({topic: {"num_partitions": 2}}, wait_for_metadata=True)
    admin.close()
    for p in (0, 1):
        produce(kafka_bootstrap, topic, triplet_messages(10, start=100 * p), partition=p)

    events: dict[str, list[tuple[str, list[int]]]] = {"a": [], "b": []}
    consumed: dict[int, int] = {}  # partition -> next offset, as the service would track it

    def callbacks(name: str) -> dict[str, Callable[[list[int]], None]]:
        def on_revoke(partitions: list[int]) -> None:
            events[name].append(("revoke", partitions))
            if name == "a":  # checkpoint + commit before giving partitions away
                assert a.commit({p: consumed[p] for p in partitions if p in consumed})

        def on_assign(partitions: list[int]) -> None:
            events[name].append(("assign", partitions))

        return {"on_revoke": on_revoke, "on_assign": on_assign}

    a = KafkaSource(topic, group, kafka_bootstrap, **callbacks("a"))
    got_a = consume(a, 20)
    assert a.assignment == [0, 1] and events["a"] == [("assign", [0, 1])]
    for r in got_a:
        consumed[r.partition] = r.next_offset
    assert consumed == {0: 10, 1: 10}

    b = KafkaSource(topic, group, kafka_bootstrap, **callbacks("b"))
    late: list[SourceRecord] = []
    poll_until([a, b], lambda: len(a.assignment) == len(b.assignment) == 1, late)
    assert late == []  # b starts at a's commit: nothing is read twice
    assert sorted(a.assignment + b.assignment) == [0, 1]
    assert events["a"] == [("assign", [0, 1]), ("revoke", [0, 1]), ("assign", a.assignment)]
    assert events["b"] == [("assign", b.assignment)]

    for p in (0, 1):
        produce(kafka_bootstrap, topic, triplet_messages(5, start=100 * p + 10), partition=p)
    got = poll_until([a, b], lambda: len(late) >= 10, late)
    by_partition = {p: [r.offset for r in got if r.partition == p] for p in (0, 1)}
    assert by_partition == {0: list(range(10, 15)), 1: list(range(10, 15))}
    b.close()
    a.close()


@pytest.mark.kafka
def test_dead_letters_land_in_the_dead_letter_topic(kafka_bootstrap: str) -> None:
    topic, dlq = unique("input"), unique("dead")
    good = encode_json(Constraint("pair", ids=("1", "2"), similar=True))
    values = [good, b'{"v": 7}', b"\xffgarbage", good]
    produce(kafka_bootstrap, topic, values)
    source = KafkaSource(topic, unique("group"), kafka_bootstrap)
    sink = DeadLetterKafka(dlq, kafka_bootstrap)
    for record in consume(source, 4):
        try:
            decode(record.value)
        except DecodeError as error:
            sink.write(DeadLetter.from_error(error, record))
    sink.close()
    source.close()
    assert sink.counts == {"unknown_version": 1, "undecodable": 1}

    letters = read_records(kafka_bootstrap, dlq, 2)
    assert [r.value for r in letters] == [b'{"v": 7}', b"\xffgarbage"]
    headers = [dict(r.headers) for r in letters]
    assert [h["reason"] for h in headers] == [b"unknown_version", b"undecodable"]
    assert [h["offset"] for h in headers] == [b"1", b"2"]
    assert {h["source"] for h in headers} == {topic.encode()}
    assert {h["partition"] for h in headers} == {b"0"}
    assert all(h["detail"] for h in headers)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_broker_backs_off_instead_of_raising() -> None:
    source = KafkaSource(
        "t",
        "g",
        f"127.0.0.1:{closed_port()}",
        connect_timeout=0.2,
        backoff=Backoff(initial=0.05, maximum=0.1),
    )
    for _ in range(3):
        assert source.poll(timeout=0.2) == []
    assert not source.ready and source.assignment == []
    assert source.last_error is not None and source.last_error.startswith("connect")
    assert source._backoff.failures >= 2  # retried, with growing delays
    with pytest.raises(RuntimeError, match="not connected"):
        source.lag()
    source.close()


def test_bad_configuration_fails_loudly() -> None:
    source = KafkaSource("t", "g", "127.0.0.1:1", config={"no_such_setting": 1})
    with pytest.raises(Exception, match="no_such_setting"):
        source.poll(timeout=0.1)
    with pytest.raises(ValueError, match="enable_auto_commit"):
        KafkaSource("t", "g", "127.0.0.1:1", config={"enable_auto_commit": True})


@pytest.mark.kafka
def test_a_dead_letter_too_large_for_kafka_is_truncated_or_kept_in_the_fallback_file(
    kafka_bootstrap: str, tmp_path
) -> None:
    """A letter is never lost for its size: cut to fit with its size and hash in headers, and
    one Kafka refuses all the same goes whole to the fallback file, so an
    oversized letter is kept somewhere whatever the broker's limits."""
    dlq = unique("dead")
    big = bytes(range(256)) * 4100  # 1,049,600 bytes: above the producer's 1 MiB
    letter = DeadLetter("undecodable", "x" * 5000, "in", 0, 7, big, ts=1.0)
    tombstone = DeadLetter("undecodable", "expected bytes, got NoneType", "in", 0, 8, None, 2.0)
    sink = DeadLetterKafka(dlq, kafka_bootstrap, fallback=DeadLetterFile(tmp_path / "a.jsonl"))
    sink.write(letter)
    sink.write(tombstone)
    sink.close()
    assert sink.fallbacks == 0 and sink.counts == {"undecodable": 2}
    cut, empty = read_records(kafka_bootstrap, dlq, 2)
    headers = dict(cut.headers)
    assert cut.value == big[: len(cut.value)] and len(cut.value) < 1 << 20
    assert headers["truncated"] == b"1" and headers["original_size"] == str(len(big)).encode()
    assert headers["sha256"] == hashlib.sha256(big).hexdigest().encode()
    assert len(headers["detail"]) == 1000 and headers["offset"] == b"7"
    assert empty.value == b"" and dict(empty.headers)["tombstone"] == b"1"

    # A limit above what the producer may send: Kafka refuses, the fallback file keeps it whole.
    refused = DeadLetterKafka(
        dlq, kafka_bootstrap, max_value_bytes=2 << 20, fallback=DeadLetterFile(tmp_path / "b.jsonl")
    )
    refused.write(letter)
    refused.close()
    assert refused.fallbacks == 1 and read_dead_letters(tmp_path / "b.jsonl") == [letter]
