"""The learner process's end of the pipe to the serving process (messages in
:mod:`oahu.service.messages`): when to send the learner for a new snapshot, throttled status
reports with the metric families, acknowledgements of item changes, and the reader that applies
the serving process's messages. :class:`ServingLink` is what the learn loop needs of it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Protocol

from prometheus_client.metrics_core import Metric

from oahu.learner import Learner
from oahu.persistence import learner_to_bytes
from oahu.service.catalog import ItemChange
from oahu.service.messages import (
    EXIT_ORPHANED,
    Ack,
    Failure,
    Report,
    State,
    Stop,
    ToServing,
)

REPORT_INTERVAL_SECONDS = 0.05  # status reports at most this often, unless forced


class ServingLink(Protocol):
    """Where the learn loop hands the learner and its status (:class:`ParentLink`)."""

    def offer(self, learner: Learner, force: bool = False) -> bool:
        """Hand over the learner if a new snapshot is due (``force``: in any case)."""
        ...

    def report(
        self, status: dict[str, Any], families: Callable[[], list[Metric]], force: bool = False
    ) -> None:
        """Report the status and metrics (``force``: even if a report went out a moment ago)."""
        ...


class ReindexSchedule:
    """When a learner is due for a new snapshot: after ``every`` updates or ``interval`` seconds
    (if the model changed at all), or when forced.

    >>> schedule = ReindexSchedule(every=10, interval=60.0)
    >>> schedule.due(0, force=True), schedule.due(5), schedule.due(10), schedule.due(10)
    (True, False, True, False)
    """

    def __init__(self, every: int = 1000, interval: float = 5.0) -> None:
        self.every = every
        self.interval = interval
        self._updates = -1
        self._at = 0.0

    def due(self, updates: int, force: bool = False) -> bool:
        """Whether to hand over the learner at ``updates`` now (and, if so, count it as done)."""
        changed = updates != self._updates
        elapsed = time.monotonic() - self._at >= self.interval
        if not (force or (changed and (updates - self._updates >= self.every or elapsed))):
            return False
        self._updates, self._at = updates, time.monotonic()
        return True


class ParentLink:
    """What the learner process sends the serving process. Thread-safe: rebalance callbacks
    checkpoint (and so report) from the Kafka client's thread."""

    def __init__(self, conn: Connection, schedule: ReindexSchedule) -> None:
        self.conn = conn
        self.schedule = schedule
        self._lock = threading.Lock()
        self._reported_at = 0.0

    def offer(self, learner: Learner, force: bool = False) -> bool:
        """Send the learner if a new snapshot is due; True if it was sent."""
        if not self.schedule.due(learner.updates, force):
            return False
        # what queries need only: OAHU's memories are most of a checkpoint's 16 MB
        self._send(State(learner_to_bytes(learner, queries_only=True)))
        return True

    def report(
        self, status: dict[str, Any], families: Callable[[], list[Metric]], force: bool = False
    ) -> None:
        """Send the status and the metric ``families()``, unless a report went out less than an
        interval ago."""
        now = time.monotonic()
        if not force and now - self._reported_at < REPORT_INTERVAL_SECONDS:
            return
        self._reported_at = now
        self._send(Report(status, families()))

    def ack(self, version: int) -> None:
        self._send(Ack(version))

    def fail(self, detail: str) -> None:
        self._send(Failure(detail))

    def _send(self, message: ToServing) -> None:
        try:
            with self._lock:
                self.conn.send(message)
        except OSError:  # the serving process is gone; the reader thread ends this process
            pass


def listen(
    inbox: Connection, apply: Callable[[ItemChange], None], link: ParentLink, stop: threading.Event
) -> None:
    """The learner process's reader: apply item changes, stop on request, and exit at once
    when the serving process is gone (end of file before a stop)."""
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            os._exit(EXIT_ORPHANED)  # like a crash of the whole service: no checkpoint
        if isinstance(message, ItemChange):
            apply(message)
            link.ack(message.version)
        elif isinstance(message, Stop):
            stop.set()
            return
