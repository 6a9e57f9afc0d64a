"""The learner process as the serving process sees it: spawning it, the pipe to it (messages in
:mod:`oahu.service.messages`) and waiting for it to stop.

The spawn arguments stay small and the learner goes through the pipe: multiprocessing writes the
arguments from ``Process.start`` and, when they overflow the pipe buffer, waits for the child
to read them after its imports (seconds), forever if it dies first.

The learner process dies with the serving process: its reader gets end-of-file when the parent
is gone (a ``kill -9`` included) and exits at once, exactly like a crash of the whole service,
so a restart resumes from the last checkpoint and applies every constraint once. The converse
does not hold: the serving process outlives a learner process that dies
(:mod:`oahu.service.serving.supervisor`).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.metrics_core import Metric

from oahu.service.catalog import ItemChange
from oahu.service.messages import (
    STOP_SIGNALS,
    Ack,
    Failure,
    Report,
    Start,
    State,
    Stop,
    ToLearner,
)

log = logging.getLogger(__name__)

_CONTEXT = multiprocessing.get_context("spawn")


class LearnerProcess:
    """The learner process as the serving process sees it.

    ``start`` spawns ``target(*args, inbox, outbox)``, whose first message is ``initial``; a
    reader thread hands learners (:mod:`oahu.persistence` bytes) to ``on_state``, metric
    families to ``on_families`` and keeps the latest ``status`` (also handed to ``on_status``).
    ``forward`` sends an item change, ``wait_items`` waits until it is applied, ``stop`` asks for
    a clean stop and waits for the process to exit. ``finished`` is set once it has exited;
    ``error`` then says why if it failed. ``report_age`` is the seconds since its last report
    (None before the first): a learner loop that stopped reporting is stuck, e.g. in a call to
    a frozen broker.
    """

    def __init__(
        self,
        target: Callable[..., None],
        args: tuple[Any, ...],
        initial: Start,
        status: dict[str, Any],
        on_state: Callable[[bytes], None],
        on_families: Callable[[list[Metric]], None],
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.status = status
        self.on_status = on_status
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
        self._initial: Start | None = initial  # None once sent
        self._acked = 0
        self._acked_cond = threading.Condition()
        self._started = False
        self._reported_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._started and not self.finished.is_set()

    @property
    def report_age(self) -> float | None:
        reported = self._reported_at
        return None if reported is None else time.monotonic() - reported

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
            self._send(Stop())
        self.finished.wait()  # only the reader joins the process: concurrent joins race
        self._inbox_w.close()

    def forward(self, change: ItemChange) -> None:
        """Send an item change (in version order: the catalog calls this under its lock)."""
        if self.alive:  # not started yet: the learner reads the overlay file when it starts
            self._send(change)

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

    def _send(self, message: ToLearner | None) -> None:
        """Send a message (None: only make sure ``initial`` went first)."""
        try:
            with self._send_lock:
                if self._initial is not None:
                    initial, self._initial = self._initial, None
                    self._inbox_w.send(initial)  # waits for the child's imports
                if message is not None:
                    self._inbox_w.send(message)
        except OSError as exc:  # it has exited; the reader reports how
            log.warning("learner process unreachable (%r); %r not delivered", exc, message)

    def _read(self) -> None:
        self._send(None)
        while True:
            try:
                message = self._outbox_r.recv()
            except (EOFError, OSError):
                break
            match message:
                case State(learner):
                    self.on_state(learner)
                case Report(status, families):
                    self._reported_at = time.monotonic()
                    self.status = status
                    self.on_families(families)
                    if self.on_status is not None:
                        self.on_status(status)
                case Ack(version):
                    with self._acked_cond:
                        self._acked = max(self._acked, version)
                        self._acked_cond.notify_all()
                case Failure(detail):
                    self.error = detail
                    log.error("the learner process failed:\n%s", detail)
        self._process.join()
        code = self._process.exitcode
        if code != 0 and self.error is None:
            self.error = f"the learner process exited with code {code}"
            log.error(self.error)
        self._outbox_r.close()
        self.finished.set()
        with self._acked_cond:
            self._acked_cond.notify_all()
