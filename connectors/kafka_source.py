"""Consume constraint messages from a Kafka topic with manual offset management.

``KafkaSource`` wraps ``kafka.KafkaConsumer`` (kafka-python 3) for the service loop:

* offsets are never committed automatically: the service commits what it has learned and
  checkpointed (``commit``), and restarts from its checkpoint (``seek``);
* partition moves are reported through ``on_revoke(partitions)`` / ``on_assign(partitions)``
  (partition numbers). kafka-python runs rebalance listeners on its IO thread, where blocking
  consumer calls are refused, so the callbacks run on a helper thread while the IO loop keeps
  going; they may call ``commit`` and ``seek``. They run while ``poll`` is blocked, so they do
  not race with the code that called ``poll``;
* an unreachable broker never raises out of ``poll``: it returns nothing, ``ready`` is False,
  and connection attempts are retried with exponential backoff;
* a broker that stops answering (stopped, frozen, partitioned away) makes ``ready`` False
  within ``stale_after`` seconds, with the cause in ``not_ready_reason``: kafka-python's
  ``poll`` just returns nothing then, so readiness follows the group coordinator's answers to
  the consumer's heartbeats (every 3 s by default), and comes back with them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import AsyncConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaConfigurationError, KafkaError

from oahu.connectors.source import PartitionCallback, SourceRecord

log = logging.getLogger(__name__)


class Backoff:
    """Exponential backoff delays: ``initial``, doubled per failure up to ``maximum``.

    >>> b = Backoff(0.5, 4.0)
    >>> [b.fail() for _ in range(5)], b.reset()
    ([0.5, 1.0, 2.0, 4.0, 4.0], None)
    """

    def __init__(self, initial: float = 0.5, maximum: float = 30.0) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(
                f"initial, maximum: need 0 < initial <= maximum, got {initial}, {maximum}"
            )
        self.initial, self.maximum = float(initial), float(maximum)
        self.failures = 0

    def fail(self) -> float:
        """Record a failure; return how long to wait before the next attempt."""
        delay = min(self.maximum, self.initial * 2.0**self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


class _Listener(AsyncConsumerRebalanceListener):
    """Forwards rebalance events to the caller's callbacks, run off the IO thread."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    async def _forward(self, callback: PartitionCallback | None, partitions: Any) -> None:
        numbers = sorted(tp.partition for tp in partitions if tp.topic == self.source.topic)
        if callback is None or not numbers:
            return
        failure: list[BaseException] = []

        def run() -> None:
            try:
                callback(numbers)
            except BaseException as e:  # reported on the IO thread below
                failure.append(e)

        worker = threading.Thread(target=run, name="kafka-rebalance-callback", daemon=True)
        worker.start()
        # Yield to the IO loop (kafka-python's own awaitable sleep) until the callback is done,
        # so that commits it makes can be carried out meanwhile.
        net = self.source._consumer._net  # type: ignore[union-attr]
        while worker.is_alive():
            await net.sleep(0.005)
        if failure:
            raise failure[0]

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._forward(self.source.on_revoke, revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._forward(self.source.on_assign, assigned)


class KafkaSource:
    """Records of one topic for a consumer group, offsets managed by the caller.

    ``config`` holds extra ``KafkaConsumer`` settings, passed through unchanged
    (``security_protocol``, ``ssl_*``, ``sasl_*``, ``session_timeout_ms``, ...).
    ``auto_offset_reset`` decides where a group without a committed offset starts.
    ``partitions``: manual assignment instead of the group's rebalancing: given the topic's
    partitions, the ones this consumer reads (announced to ``on_assign`` at the first poll and
    never revoked); the group then only stores committed offsets, as a learning group's members
    need (:mod:`oahu.service.group`).
    """

    def __init__(
        self,
        topic: str,
        group_id: str,
        bootstrap_servers: str | list[str],
        *,
        config: Mapping[str, Any] | None = None,
        on_assign: PartitionCallback | None = None,
        on_revoke: PartitionCallback | None = None,
        auto_offset_reset: str = "earliest",
        connect_timeout: float = 10.0,
        backoff: Backoff | None = None,
        stale_after: float = 10.0,
        partitions: Callable[[list[int]], list[int]] | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError(
                f"auto_offset_reset: 'earliest' or 'latest', got {auto_offset_reset!r}"
            )
        self.topic = topic
        self.group_id = group_id
        self.on_assign, self.on_revoke = on_assign, on_revoke
        self._config: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": auto_offset_reset,
            "bootstrap_timeout_ms": int(connect_timeout * 1000),
            **(config or {}),
        }
        if self._config["enable_auto_commit"]:
            raise ValueError("config: enable_auto_commit must stay False (offsets are manual)")
        self._backoff = backoff or Backoff()
        self.stale_after = stale_after
        self._choose = partitions
        self._announce: list[int] | None = None  # manually assigned, not yet announced
        self._consumer: KafkaConsumer | None = None
        self._retry_at = 0.0
        self._healthy = False
        self.last_error: str | None = None

    # ------------------------------------------------------------------ connection
    @property
    def ready(self) -> bool:
        """Connected, the last poll succeeded and the group coordinator answers."""
        return self.not_ready_reason is None

    @property
    def connected(self) -> bool:
        """A consumer exists and its last poll succeeded (what commits need)."""
        return self._consumer is not None and self._healthy

    @property
    def not_ready_reason(self) -> str | None:
        """Why the source cannot deliver records now (None when it can)."""
        if self._consumer is None:
            return f"not connected to Kafka ({self.last_error or 'connecting'})"
        if not self._healthy:
            return f"Kafka {self.last_error or 'poll failed'}"
        silent = self.seconds_since_contact
        if silent > self.stale_after:
            return (
                f"no answer from the Kafka group coordinator for {silent:.0f} s (the broker is "
                "down or frozen, or the group is still rebalancing)"
            )
        return None

    @property
    def seconds_since_contact(self) -> float:
        """Seconds since the group coordinator last answered a heartbeat (or since the group
        was (re)joined); 0.0 while not connected, where ``not_ready_reason`` says so."""
        if self._consumer is None:
            return 0.0
        # kafka-python exposes no accessor for its heartbeat state; this is the one place
        # that reads it (kafka-python 3: KafkaConsumer._coordinator.heartbeat).
        heartbeat = self._consumer._coordinator.heartbeat
        last = max(heartbeat.last_receive, heartbeat.last_reset)
        return max(0.0, time.monotonic() - last)

    @property
    def exhausted(self) -> bool:
        """Never: more records may always arrive."""
        return False

    def listen(self, on_assign: PartitionCallback, on_revoke: PartitionCallback) -> None:
        """Rebalance callbacks (replacing those given to the constructor); call before the
        first ``poll``."""
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def _failed(self, what: str, error: Exception) -> None:
        delay = self._backoff.fail()
        self._retry_at = time.monotonic() + delay
        self._healthy = False
        self.last_error = f"{what}: {error!r}"
        log.warning("kafka %s failed (%r); retrying in %.1fs", what, error, delay)

    def _connect(self) -> bool:
        """Create the consumer if there is none and the backoff allows; True once connected."""
        if self._consumer is not None:
            return True
        if time.monotonic() < self._retry_at:
            return False
        try:
            consumer = KafkaConsumer(**self._config)
            if self._choose is None:
                consumer.subscribe([self.topic], listener=_Listener(self))
            else:
                self._assign(consumer, self._choose)
        except (KafkaConfigurationError, TypeError, ValueError):
            raise  # a bad configuration does not fix itself: fail loudly
        except Exception as e:  # any connection failure: retry later
            self._failed("connect", e)
            return False
        self._consumer = consumer
        self._backoff.reset()
        self._healthy = True
        self.last_error = None
        return True

    def _assign(self, consumer: KafkaConsumer, choose: Callable[[list[int]], list[int]]) -> None:
        """Assign ``choose(the topic's partitions)`` to ``consumer`` (manual assignment)."""
        known = consumer.partitions_for_topic(self.topic)
        if not known:
            consumer.close(autocommit=False)
            raise ConnectionError(f"no partitions known for topic {self.topic!r} yet")
        mine = sorted(choose(sorted(known)))
        consumer.assign([self._tp(p) for p in mine])
        self._announce = mine

    def _require(self) -> KafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("not connected: poll() until ready before using the consumer")
        return self._consumer

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, int(partition))

    # ------------------------------------------------------------------ records
    def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[SourceRecord]:
        """Up to ``max_records`` records, waiting at most ``timeout`` seconds; in offset order
        within each partition. Returns [] (never raises) while the broker is unreachable."""
        if not self._connect():
            time.sleep(max(0.0, min(timeout, self._retry_at - time.monotonic())))
            return []
        assert self._consumer is not None
        if self._announce is not None:
            announce, self._announce = self._announce, None
            if self.on_assign is not None and announce:
                self.on_assign(announce)
        try:
            batches = self._consumer.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        except KafkaError as e:
            self._failed("poll", e)
            return []
        self._healthy = True
        records = []
        for tp in sorted(batches):
            records.extend(
                SourceRecord(tp.topic, tp.partition, r.offset, r.value, r.timestamp / 1000.0, r.key)
                for r in batches[tp]
            )
        return records

    @property
    def assignment(self) -> list[int]:
        """Partitions of the topic currently assigned to this consumer."""
        if self._consumer is None:
            return []
        return sorted(tp.partition for tp in self._consumer.assignment() if tp.topic == self.topic)

    # ------------------------------------------------------------------ offsets
    def commit(self, offsets: Mapping[int, int]) -> bool:
        """Commit ``{partition: next offset to read}`` for the group; False (logged) if the
        commit failed, e.g. because the partition was already reassigned."""
        consumer = self._require()
        to_commit = {self._tp(p): OffsetAndMetadata(int(o), "", -1) for p, o in offsets.items()}
        try:
            consumer.commit(to_commit)
        except KafkaError as e:
            log.warning("kafka commit of %s failed: %r", dict(offsets), e)
            self.last_error = f"commit: {e!r}"
            return False
        return True

    def committed(self, partition: int) -> int | None:
        """The group's committed offset for ``partition`` (None if it has none)."""
        return self._require().committed(self._tp(partition))

    def seek(self, offsets: Mapping[int, int]) -> None:
        """Continue each given (assigned) partition from the given offset."""
        consumer = self._require()
        for partition, offset in offsets.items():
            consumer.seek(self._tp(partition), int(offset))

    def lag(self) -> dict[int, int]:
        """Records left per assigned partition: end offset minus position."""
        consumer = self._require()
        tps = [self._tp(p) for p in self.assignment]
        if not tps:
            return {}
        ends = consumer.end_offsets(tps)
        lags = {}
        for tp in tps:
            position = consumer.position(tp)
            lags[tp.partition] = max(0, ends[tp] - (position or 0))
        return lags

    def close(self) -> None:
        """Leave the group (``on_revoke`` fires for the partitions held) and disconnect."""
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None
        self._healthy = False
