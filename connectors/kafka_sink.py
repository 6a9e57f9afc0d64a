"""Produce raw messages to a Kafka topic (``oahu produce``, dead letters), optionally paced."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

# Batch for throughput: a few ms of linger costs nothing for a bulk producer.
DEFAULT_PRODUCER_CONFIG: dict[str, Any] = {"linger_ms": 5, "batch_size": 256 * 1024}


class RateLimiter:
    """Paces calls to at most ``rate`` per second on average, sleeping only when more than
    ``slack`` seconds ahead of schedule (so high rates do not turn into many tiny sleeps).

    >>> now = [0.0]
    >>> def advance(seconds): now[0] += seconds
    >>> limiter = RateLimiter(10.0, clock=lambda: now[0], sleep=advance)
    >>> for _ in range(21): limiter.wait()
    >>> round(now[0], 6)  # 21 calls at 10/s: the last one is due at t = 2 s
    2.0
    """

    def __init__(
        self,
        rate: float,
        slack: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate: must be positive (messages per second), got {rate!r}")
        self.interval = 1.0 / float(rate)
        self.slack = float(slack)
        self._clock, self._sleep = clock, sleep
        self._due: float | None = None

    def wait(self) -> None:
        now = self._clock()
        due = now if self._due is None else max(self._due, now - self.slack)
        if due - now > self.slack:
            self._sleep(due - now)
        self._due = due + self.interval


class KafkaSink:
    """Sends bytes to ``topic``; ``rate`` (messages per second) paces sending when set.

    ``config`` is passed to ``kafka.KafkaProducer`` on top of ``DEFAULT_PRODUCER_CONFIG``
    (security_protocol, ssl_*, sasl_*, acks, ...). Delivery is asynchronous: call ``flush``
    to wait until everything sent so far is acknowledged.
    """

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str | list[str],
        *,
        rate: float | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.sent = 0
        self._limiter = None if rate is None else RateLimiter(rate, slack=0.005)
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap_servers, **{**DEFAULT_PRODUCER_CONFIG, **(config or {})}
        )

    def send(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> FutureRecordMetadata:
        """Send one record; the future says when it is acknowledged or why it failed."""
        if self._limiter is not None:
            self._limiter.wait()
        future = self._producer.send(
            self.topic, value=value, key=key, headers=headers, partition=partition
        )
        self.sent += 1
        return future

    def send_many(self, values: Iterable[bytes], key: bytes | None = None) -> int:
        """Send every value (same key for all); returns how many were sent."""
        n = 0
        for value in values:
            self.send(value, key=key)
            n += 1
        return n

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        self._producer.close(timeout=timeout)
