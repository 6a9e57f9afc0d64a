"""Versioned blobs on a Kafka topic: a model snapshot or an item overlay, larger than a message,
written in chunks and read back whole, checked, newest first.

A blob is split into chunks of at most ``CHUNK_BYTES`` (Kafka's default message limit is 1 MB),
each one record on partition 0 with headers naming the blob's ``version``, the chunk's
``index`` and ``count`` and the blob's ``sha256``, the first also its ``meta`` (JSON). Records
are keyed by the chunk index, and the topic is compacted (:func:`ensure_topic`): the broker
keeps the newest record of each key, so the newest complete blob stays readable from the start
of the topic for as long as the topic lives, without the history before it. A reader
(:class:`BlobReader`) starts at the beginning, assembles the chunks of each version and hands
out a blob only when every chunk is there and its checksum holds; a version older than one
already handed out is dropped.

>>> chunks = split_blob(b"abcdefgh", 3)
>>> [c for c in chunks], assemble([(i, len(chunks), c) for i, c in enumerate(chunks)])
([b'abc', b'def', b'gh'], b'abcdefgh')
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["CHUNK_BYTES", "Blob", "BlobReader", "BlobWriter", "assemble", "ensure_topic"]

CHUNK_BYTES = 512 * 1024
# How long a client waits for the brokers before it fails (kafka-python's own default is 30 s):
# a replica whose brokers are unreachable says so in /readyz after this long, as the constraint
# source does (connectors/kafka_source.py). --kafka-option bootstrap_timeout_ms=N overrides it.
BOOTSTRAP_TIMEOUT_MS = 10_000
# Compaction settings: segments roll often enough that superseded versions are cleaned within
# minutes, so a new reader reads little more than the newest blob.
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.1",
    "max.message.bytes": str(2 * CHUNK_BYTES),
}


@dataclass(frozen=True)
class Blob:
    """One whole versioned blob, as written: ``meta`` is the writer's JSON object."""

    version: int
    payload: bytes
    meta: dict[str, Any] = field(default_factory=dict)


def split_blob(payload: bytes, size: int = CHUNK_BYTES) -> list[bytes]:
    """``payload`` in chunks of at most ``size`` bytes (one empty chunk for an empty payload)."""
    return [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]


def assemble(chunks: Sequence[tuple[int, int, bytes]]) -> bytes | None:
    """The payload from ``(index, count, bytes)`` chunks, or None while one is missing."""
    if not chunks:
        return None
    count = chunks[0][1]
    parts: dict[int, bytes] = {index: data for index, n, data in chunks if n == count}
    if len(parts) != count or set(parts) != set(range(count)):
        return None
    return b"".join(parts[i] for i in range(count))


def ensure_topic(bootstrap: str, topic: str, options: dict[str, Any] | None = None) -> None:
    """Create ``topic`` compacted, one partition, replicated up to three brokers, unless it
    exists (then it is left as it is)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(options or {}))
    try:
        if topic in admin.list_topics():
            return
        brokers = len(admin.describe_cluster().get("brokers", [])) or 1
        new = NewTopic(topic, 1, min(3, brokers), topic_configs=TOPIC_CONFIG)
        try:
            admin.create_topics([new])
        except TopicAlreadyExistsError:
            pass  # made meanwhile by another writer
    finally:
        admin.close()


class BlobWriter:
    """Writes blobs to ``topic`` (created compacted if missing), each acknowledged by every
    in-sync replica (``acks="all"``) before the writer counts it ``written``.

    ``write`` returns at once; Kafka's producer sends in the background. A blob that cannot be
    sent is logged (and said to ``write``'s ``done``): the next one supersedes it anyway.
    """

    def __init__(self, bootstrap: str, topic: str, options: dict[str, Any] | None = None) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        ensure_topic(bootstrap, topic, _only(options, "admin"))
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            max_request_size=2 * CHUNK_BYTES,
            linger_ms=5,
            **_only(options, "producer"),
        )

    def write(
        self,
        version: int,
        payload: bytes,
        meta: dict[str, Any] | None = None,
        done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        """Send ``payload`` as blob ``version`` with ``meta`` (JSON; in the first chunk's
        headers); ``done(None)`` once the broker has every chunk, ``done(error)`` if not."""
        chunks = split_blob(payload)
        digest = hashlib.sha256(payload).hexdigest().encode()
        meta_bytes = json.dumps(meta or {}, sort_keys=True, default=str).encode()
        futures = []
        for index, chunk in enumerate(chunks):
            headers = [
                ("version", str(version).encode()),
                ("index", str(index).encode()),
                ("count", str(len(chunks)).encode()),
                ("sha256", digest),
            ]
            if index == 0:
                headers.append(("meta", meta_bytes))
            futures.append(
                self._producer.send(
                    self.topic, value=chunk, key=str(index).encode(), headers=headers, partition=0
                )
            )
        # Chunks go in order on one partition: the last acknowledged means all were written.
        report = _ReportOnce(self.topic, version, done)
        futures[-1].add_callback(lambda _: report(None))
        for future in futures:
            future.add_errback(report)

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout)

    def close(self) -> None:
        self._producer.close(timeout=5)


class _ReportOnce:
    """Says how one blob's write ended, once, however many of its chunks failed."""

    def __init__(
        self, topic: str, version: int, done: Callable[[BaseException | None], None] | None
    ) -> None:
        self.topic, self.version, self.done = topic, version, done
        self._lock = threading.Lock()
        self._said = False

    def __call__(self, error: BaseException | None) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        if error is not None:
            log.warning("blob %d could not be written to %s: %r", self.version, self.topic, error)
        if self.done is not None:
            self.done(error)


class BlobReader:
    """Reads the blobs of ``topic`` from its start; ``poll`` returns the complete, checked blobs
    that arrived (newer than any returned before), oldest first.

    ``end_reached`` is true once the reader has read everything the topic held when it started:
    then a caller knows it holds the newest blob there was (a new replica's catch-up).
    """

    def __init__(self, bootstrap: str, topic: str, options: dict[str, Any] | None = None) -> None:
        from kafka import KafkaConsumer, TopicPartition

        ensure_topic(bootstrap, topic, _only(options, "admin"))  # compacted, before anyone writes
        self.topic = topic
        self._partition = TopicPartition(topic, 0)
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            max_partition_fetch_bytes=4 * CHUNK_BYTES,
            **_only(options, "consumer"),
        )
        self._consumer.assign([self._partition])
        self._consumer.seek_to_beginning(self._partition)
        self._end: int | None = None
        self._position = 0
        self._latest = 0  # the newest version returned
        self._pending: dict[int, list[tuple[int, int, bytes]]] = {}
        self._meta: dict[int, dict[str, Any]] = {}
        self.newest_seen = 0  # the newest version any chunk named, complete or not
        self.corrupt = 0  # blobs whose checksum failed (dropped)

    @property
    def end_reached(self) -> bool:
        return self._end is not None and self._position >= self._end

    def poll(self, timeout: float = 0.5) -> list[Blob]:
        if self._end is None:
            self._end = self._consumer.end_offsets([self._partition])[self._partition]
        batches = self._consumer.poll(timeout_ms=int(timeout * 1000))
        out: list[Blob] = []
        for record in batches.get(self._partition, []):
            self._position = record.offset + 1
            blob = self._take(record)
            if blob is not None:
                out.append(blob)
        if not batches:
            self._position = max(self._position, self._consumer.position(self._partition))
        return out

    def _take(self, record: Any) -> Blob | None:
        headers = {k: v for k, v in (record.headers or [])}
        try:
            version = int(headers["version"])
            index, count = int(headers["index"]), int(headers["count"])
            digest = headers["sha256"].decode()
            meta = json.loads(headers["meta"]) if "meta" in headers else None
        except (KeyError, ValueError) as exc:
            log.warning("%s offset %d is not a blob chunk (%r): skipped", self.topic,
                        record.offset, exc)  # fmt: skip
            return None
        self.newest_seen = max(self.newest_seen, version)
        if version <= self._latest:
            return None
        chunks = self._pending.setdefault(version, [])
        chunks.append((index, count, bytes(record.value or b"")))
        if meta is not None:
            self._meta[version] = meta
        payload = assemble(chunks)
        if payload is None:
            return None
        del self._pending[version]
        meta = self._meta.pop(version, {})
        if hashlib.sha256(payload).hexdigest() != digest:
            log.error("%s: blob %d fails its checksum: dropped", self.topic, version)
            self.corrupt += 1
            return None
        self._latest = version
        for old in [v for v in self._pending if v < version]:  # superseded, never completed
            del self._pending[old]
            self._meta.pop(old, None)
        return Blob(version, payload, meta)

    def close(self) -> None:
        self._consumer.close()


def _only(options: dict[str, Any] | None, client: str) -> dict[str, Any]:
    """The ``--kafka-option`` settings that kafka-python's ``client`` takes, over our
    ``bootstrap_timeout_ms``."""
    chosen: dict[str, Any] = {"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
    if not options:
        return chosen
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    known = {"admin": KafkaAdminClient, "producer": KafkaProducer, "consumer": KafkaConsumer}
    return chosen | {k: v for k, v in options.items() if k in known[client].DEFAULT_CONFIG}
