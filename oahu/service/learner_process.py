"""The learn loop in its own process, and the pipe between it and the serving process.

A strict OAHU step is ~100 small torch operations with Python in between, so a learner thread
holds the GIL ~95 % of the time; in the serving process it starves the HTTP event loop and the
query thread (measured: p99 of /v1/classify in seconds). The consumer, learner, checkpoints,
commits and dead letters therefore run in a child process (spawned, so nothing of the parent's
threads or native thread pools is inherited). The two talk over two one-way pipes:

* learner → serving: ``state`` (the learner as :mod:`oahu.persistence` bytes, when a new
  snapshot is due; the serving process builds the gallery index itself), ``report`` (the status for
  /v1/model and the learner's metric families for /metrics), ``ack`` (an item change applied),
  ``error`` (a traceback, before it exits 1);
* serving → learner: ``start`` (first: the learner state and stream progress to continue from),
  ``items`` (an ``ItemChange`` made through the API; the serving process wrote it durably
  first), ``stop`` (finish the update, checkpoint, commit, exit 0).

The spawn arguments stay small and the state goes through the pipe: multiprocessing writes the
arguments from ``Process.start`` and, when they overflow the pipe buffer, waits for the child
to read them after its imports (seconds), forever if it dies first.

The learner process dies with the serving process: its reader gets end-of-file when the parent
is gone (a ``kill -9`` included) and exits at once, exactly like a crash of the whole service,
so a restart resumes from the last checkpoint and applies every constraint once.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from oahu.learner import Learner
from oahu.persistence import learner_to_bytes
from oahu.service.catalog import ItemChange
from oahu.service.metrics import LearningMetrics
from oahu.service.snapshot import ReindexSchedule

log = logging.getLogger(__name__)

STATE, REPORT, ACK, ERROR = "state", "report", "ack", "error"  # learner → serving
START, ITEMS, STOP = "start", "items", "stop"  # serving → learner
EXIT_ORPHANED = 3  # the learner process's exit code when the serving process vanished
REPORT_INTERVAL_SECONDS = 0.05  # status reports at most this often, unless forced
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_CONTEXT = multiprocessing.get_context("spawn")


class ParentLink:
    """The learner process's end of the pipe: states when a snapshot is due, throttled status
    reports with the metric families, acks. Thread-safe (rebalance callbacks checkpoint from
    the Kafka client's thread)."""

    def __init__(
        self, conn: Connection, schedule: ReindexSchedule, metrics: LearningMetrics
    ) -> None:
        self.conn = conn
        self.schedule = schedule
        self.metrics = metrics
        self._lock = threading.Lock()
        self._reported_at = 0.0

    def offer(self, learner: Learner, force: bool = False) -> bool:
        """Send the learner's state if a new snapshot is due (``StateOutlet``)."""
        if not self.schedule.due(learner.updates, force):
            return False
        self._send(STATE, learner_to_bytes(learner))
        return True

    def report(self, status: dict[str, Any], force: bool = False) -> None:
        """Send the status and metrics, unless one went out less than an interval ago."""
        now = time.monotonic()
        if not force and now - self._reported_at < REPORT_INTERVAL_SECONDS:
            return
        self._reported_at = now
        self._send(REPORT, (status, self.metrics.families()))

    def ack(self, version: int) -> None:
        self._send(ACK, version)

    def fail(self, detail: str) -> None:
        self._send(ERROR, detail)

    def _send(self, kind: str, payload: Any) -> None:
        try:
            with self._lock:
                self.conn.send((kind, payload))
        except OSError:  # the serving process is gone; the reader thread ends this process
            pass


def listen(inbox: Connection, apply: Callable[[ItemChange], None], link: ParentLink,
           stop: threading.Event) -> None:  # fmt: skip
    """The learner process's reader: apply item changes, stop on request, and exit at once
    when the serving process is gone (end of file before a stop)."""
    while True:
        try:
            kind, payload = inbox.recv()
        except (EOFError, OSError):
            os._exit(EXIT_ORPHANED)  # like a crash of the whole service: no checkpoint
        if kind == ITEMS:
            apply(payload)
            link.ack(payload.version)
        elif kind == STOP:
            stop.set()
            return


class LearnerProcess:
    """The learner process as the serving process sees it.

    ``start`` spawns ``target(*args, inbox, outbox)``, whose first message is ``initial``; a
    reader thread hands learners (:mod:`oahu.persistence` bytes) to ``on_state``, metric
    families to ``on_families`` and keeps the latest ``status``.
    ``forward`` sends an item change, ``wait_items`` waits until it is applied, ``stop`` asks for
    a clean stop and waits for the process to exit. ``finished`` is set once it has exited;
    ``error`` then says why if it failed.
    """

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple[Any, ...],
        initial: Any,
        status: dict[str, Any],
        on_state: Callable[[bytes], None],
        on_families: Callable[[list[Any]], None],
    ) -> None:
        self.status = status
        self.on_state = on_state
        self.on_families = on_families
        self.error: str | None = None
        self.finished = threading.Event()
        self._inbox_r, self._inbox_w = _CONTEXT.Pipe(duplex=False)  # serving → learner
        self._outbox_r, self._outbox_w = _CONTEXT.Pipe(duplex=False)  # learner → serving
        self._process = _CONTEXT.Process(
            target=target,
            args=(*args, self._inbox_r, self._outbox_w),
            name="oahu-learner",
            daemon=False,  # it must finish its checkpoint even while the parent exits
        )
        self._reader = threading.Thread(target=self._read, name="oahu-learner-link", daemon=True)
        self._send_lock = threading.Lock()
        self._initial: Any = initial  # None once sent
        self._acked = 0
        self._acked_cond = threading.Condition()
        self._started = False

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._started and not self.finished.is_set()

    def start(self) -> None:
        """Spawn the process."""
        # Ignored signals stay ignored across exec (handled ones do not, nor does a blocked
        # mask): a Ctrl-C or SIGTERM to the process group while the child still imports must
        # not kill it half-started. It installs its own handlers first thing; our stop message
        # covers what it missed. Here the window is the few milliseconds of fork and exec.
        previous = [signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS]
        try:
            self._process.start()
        finally:
            for sig, handler in zip(STOP_SIGNALS, previous, strict=True):
                if handler is not None:  # None: installed outside Python, left alone
                    signal.signal(sig, handler)
        self._started = True
        # our copies of the child's ends: closing them lets each side see the other's exit
        self._inbox_r.close()
        self._outbox_w.close()
        self._reader.start()

    def stop(self) -> None:
        """Ask the learner to stop (finish the update, checkpoint, commit) and wait for it."""
        if not self._started:
            return
        if not self.finished.is_set():
            self._send(STOP, None)
        self.finished.wait()  # only the reader joins the process: concurrent joins race
        self._inbox_w.close()

    def forward(self, change: ItemChange) -> None:
        """Send an item change (in version order: the catalog calls this under its lock)."""
        if self.alive:  # not started yet: the learner reads the overlay file when it starts
            self._send(ITEMS, change)

    def wait_items(self, version: int, timeout: float) -> bool:
        """Wait until the learner has applied item changes up to ``version``."""
        deadline = time.monotonic() + timeout
        with self._acked_cond:
            while self._acked < version and self.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._acked_cond.wait(left)
            return self._acked >= version

    def _send(self, kind: str | None, payload: Any = None) -> None:
        """Send a message (``kind`` None: only make sure ``initial`` went first)."""
        try:
            with self._send_lock:
                if self._initial is not None:
                    initial, self._initial = self._initial, None
                    self._inbox_w.send((START, initial))  # waits for the child's imports
                if kind is not None:
                    self._inbox_w.send((kind, payload))
        except OSError as exc:  # it has exited; the reader reports how
            log.warning("learner process unreachable (%r); %s not delivered", exc, kind)

    def _read(self) -> None:
        self._send(None)
        while True:
            try:
                kind, payload = self._outbox_r.recv()
            except (EOFError, OSError):
                break
            if kind == STATE:
                self.on_state(payload)
            elif kind == REPORT:
                self.status, families = payload
                self.on_families(families)
            elif kind == ACK:
                with self._acked_cond:
                    self._acked = max(self._acked, payload)
                    self._acked_cond.notify_all()
            elif kind == ERROR:
                self.error = payload
                log.error("the learner process failed:\n%s", payload)
        self._process.join()
        code = self._process.exitcode
        if code != 0 and self.error is None:
            self.error = f"the learner process exited with code {code}"
            log.error(self.error)
        self._outbox_r.close()
        self.finished.set()
        with self._acked_cond:
            self._acked_cond.notify_all()
