"""Keeping the learner process running: queries outlive it.

When the learner process dies (a crash, ``kill -9``, the out-of-memory killer, an error it
reports), the serving process goes on answering from its last snapshot and starts a new learner
process from the last checkpoint, exactly as a restart of the whole service would: the records
after that checkpoint are learned again by the new process and by nobody else, so each is still
learned once (docs/delivery.md). Restarts wait a backoff that doubles from
``FIRST_DELAY_SECONDS`` to ``MAX_DELAY_SECONDS`` and starts again from the first once a process
has run ``STABLE_SECONDS``. A learner that keeps dying is a crash loop (``CRASH_LOOP_RESTARTS``
restarts within ``CRASH_LOOP_WINDOW_SECONDS``): it is still restarted, and said in ``/readyz``,
``/v1/model``, the log and ``oahu_learner_crash_loop``, never hidden.

A learner process that exits cleanly (code 0: the end of a file with ``--exit-at-end``, or a
stop the service asked for) is not restarted: the service ends with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from oahu.service.catalog import ItemChange
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.process import LearnerProcess

log = logging.getLogger(__name__)

FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 60.0
STABLE_SECONDS = 60.0
CRASH_LOOP_RESTARTS = 5
CRASH_LOOP_WINDOW_SECONDS = 300.0


class RestartBackoff:
    """How long to wait before the next restart, and whether the restarts are a crash loop.

    ``failed(ran)`` records a failure of a process that ran ``ran`` seconds and returns the
    delay before its replacement: ``first`` after a stable run (``stable`` seconds or more),
    doubled after each quick failure, at most ``most``. ``crash_loop`` is true while ``loop``
    restarts fall within the last ``window`` seconds.

    >>> clock = iter([0.0, 1.0, 2.0, 500.0]).__next__
    >>> backoff = RestartBackoff(first=1.0, most=4.0, stable=60.0, loop=3, window=300.0,
    ...                          clock=clock)
    >>> [backoff.failed(ran=0.5) for _ in range(3)], backoff.crash_loop(now=2.0)
    ([1.0, 2.0, 4.0], True)
    >>> backoff.failed(ran=120.0), backoff.crash_loop(now=500.0)
    (1.0, False)
    """

    def __init__(
        self,
        first: float = FIRST_DELAY_SECONDS,
        most: float = MAX_DELAY_SECONDS,
        stable: float = STABLE_SECONDS,
        loop: int = CRASH_LOOP_RESTARTS,
        window: float = CRASH_LOOP_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first, self.most, self.stable = first, most, stable
        self.loop, self.window = loop, window
        self.clock = clock
        self._quick = 0  # failures in a row of processes that ran less than ``stable``
        self._failures: deque[float] = deque(maxlen=loop)

    def failed(self, ran: float) -> float:
        self._failures.append(self.clock())
        self._quick = self._quick + 1 if ran < self.stable else 1
        return min(self.first * 2.0 ** (self._quick - 1), self.most)

    def crash_loop(self, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        return len(self._failures) == self.loop and now - self._failures[0] <= self.window


class LearnerSupervisor:
    """The learner process the serving process keeps running: ``spawn()`` makes a new (not yet
    started) :class:`LearnerProcess` from the latest checkpoint, ``first`` is the one to start
    with. See the module docstring; ``poll`` does the restarting.

    It stands where a ``LearnerProcess`` stood: ``status``, ``report_age``, ``alive``,
    ``forward``, ``wait_items`` and ``stop`` act on the current process. ``finished`` is set once
    the learner has ended cleanly (or ``stop`` was called); ``error`` is the latest failure,
    ``restarts`` counts the processes started after a failure.
    """

    def __init__(
        self,
        first: LearnerProcess,
        spawn: Callable[[], LearnerProcess],
        metrics: ServiceMetrics,
        backoff: RestartBackoff | None = None,
    ) -> None:
        self.current = first
        self.spawn = spawn
        self.metrics = metrics
        self.backoff = backoff or RestartBackoff()
        self.finished = threading.Event()
        self._last_error: str | None = None  # of the processes before ``current``
        self.restarts = 0
        self.restarting_at: float | None = None  # monotonic time of the next start, if waiting
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # held while ``current`` is replaced
        self._started_at = 0.0
        metrics.learner_running.set_function(lambda: 1.0 if self.alive else 0.0)
        metrics.learner_crash_loop.set_function(lambda: 1.0 if self.crash_loop else 0.0)

    # ------------------------------------------------------------------ the current process
    @property
    def status(self) -> dict[str, Any]:
        return self.current.status

    @property
    def report_age(self) -> float | None:
        return self.current.report_age

    @property
    def alive(self) -> bool:
        return self.current.alive

    @property
    def error(self) -> str | None:
        """Why the latest learner process failed: the current one's reason as soon as it has
        failed, before ``poll`` notices."""
        current = self.current
        return current.error if current.finished.is_set() and current.error else self._last_error

    @property
    def down(self) -> bool:
        """Whether the current learner process has failed and its replacement has not started
        yet (``current`` may already name the replacement, for the moment before its start)."""
        current = self.current
        failed = current.finished.is_set() and current.error is not None
        return failed or self.restarting_at is not None

    @property
    def crash_loop(self) -> bool:
        return self.backoff.crash_loop()

    def forward(self, change: ItemChange) -> None:
        # A change while no process runs is in the overlay file, which the next one reads.
        with self._lock:
            self.current.forward(change)

    def wait_items(self, version: int, timeout: float) -> bool:
        return self.current.wait_items(version, timeout)

    def state(self) -> dict[str, Any]:
        """What ``/readyz`` and ``/v1/model`` say about learning: whether a learner process
        runs, why not, the restarts and whether they are a crash loop."""
        waiting = self.restarting_at
        return {
            "running": self.alive,
            "restarts": self.restarts,
            "crash_loop": self.crash_loop,
            "last_error": self.error,
            "restart_in_s": None if waiting is None else max(0.0, waiting - time.monotonic()),
        }

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        self._started_at = time.monotonic()
        self._start(self.current)

    def _start(self, process: LearnerProcess) -> None:
        process.start()
        # ``finished`` follows a clean end at once, also for a service run without ``poll``
        threading.Thread(
            target=self._finish_on_clean_end, args=(process,), name="oahu-learner-end", daemon=True
        ).start()

    def _finish_on_clean_end(self, process: LearnerProcess) -> None:
        process.finished.wait()
        if process.error is None:
            self.finished.set()

    def stop(self) -> None:
        """Stop restarting, ask the current process to stop cleanly and wait for it."""
        self._stopping.set()
        self.restarting_at = None
        self.current.stop()
        self.finished.set()

    def poll(self) -> None:
        """Notice a failed learner process and start its replacement once its delay is over.

        The service's main thread calls this a few times a second: a process is started with
        the stop signals ignored for the moment of its spawn, and only the main thread may
        change signal handlers.
        """
        current = self.current
        if self._stopping.is_set() or self.finished.is_set() or not current.finished.is_set():
            return
        if current.error is None:  # a clean end (``finished`` is set): the service ends with it
            return
        now = time.monotonic()
        if self.restarting_at is None:
            self._last_error = current.error
            ran = now - self._started_at
            delay = self.backoff.failed(ran)
            self.restarting_at = now + delay
            log.error(
                "the learner process failed after %.1f s (%s%d restarts so far); serving goes "
                "on from the last snapshot, and a new learner process starts from the last "
                "checkpoint in %.1f s",
                ran,
                "a crash loop: " if self.crash_loop else "",
                self.restarts,
                delay,
            )
            return
        if now < self.restarting_at:
            return
        try:
            replacement = self.spawn()
        except Exception as exc:  # e.g. an unreadable checkpoint: said, and tried again later
            log.exception("could not prepare a new learner process")
            current.error = f"could not prepare a new learner process: {exc!r}"
            self.restarting_at = None  # counted as one more failure
            return
        # counted first: a started replacement that has not reported yet is then known as one
        self.restarts += 1
        self.metrics.learner_restarts.inc()
        with self._lock:
            self.current = replacement
        self._started_at = time.monotonic()
        self._start(replacement)
        self.restarting_at = None
        log.warning("learner process restarted (pid %s)", replacement.pid)
