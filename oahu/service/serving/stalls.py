"""Stalls of the serving process: measured, told apart, and named where they happen.

A query is late when the thread that must handle it cannot run. Two threads handle a query: the
HTTP event loop (reads the request, writes the answer) and the query worker (embeds and searches,
:mod:`~oahu.service.serving.queries`). Either can be held up by its own work, or the whole
process can be (a garbage collection, the GIL held by one long C call, no CPU for the process).
:class:`StallWatch` tells these apart, so that an operator who sees a slow request in
``oahu_http_request_duration_seconds`` can tell which it was:

* the event loop beats every ``tick`` seconds (a callback that schedules the next one); how late
  each beat comes is ``oahu_event_loop_lag_seconds``;
* the query worker says when it starts and ends answering a group of queries;
* a watchdog thread wakes every ``tick``. How late it wakes is ``oahu_serving_pause_seconds``:
  the time no thread of the process could run Python. When the event loop has not beaten, or the
  worker has been answering one group, for ``threshold`` seconds, the watchdog takes that
  thread's stack there and then, logs it (one WARNING per stall) and counts the stall in
  ``oahu_serving_stalls_total{thread}``; a pause of the whole process that long is logged and
  counted as ``thread="process"`` (the threads it held up are counted too, with the stack they
  were stopped at).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback

from prometheus_client import Counter, Histogram

log = logging.getLogger(__name__)

TICK_SECONDS = 0.01
STALL_SECONDS = 0.1


class StallWatch:
    """Watches the serving process's event loop and query worker for stalls.

    >>> import time
    >>> from oahu.service.metrics import ServiceMetrics
    >>> m = ServiceMetrics()
    >>> watch = StallWatch(m.event_loop_lag, m.serving_pause, m.serving_stalls, threshold=0.1)
    >>> watch.start()
    >>> watch.begin("queries"); time.sleep(0.3); watch.end("queries")
    >>> m.registry.get_sample_value("oahu_serving_stalls_total", {"thread": "queries"})
    1.0
    >>> watch.stop()
    """

    def __init__(
        self,
        lag: Histogram,
        pause: Histogram,
        stalls: Counter,
        threshold: float = STALL_SECONDS,
        tick: float = TICK_SECONDS,
    ) -> None:
        self.lag, self.pause, self.stalls = lag, pause, stalls
        self.threshold, self.tick = threshold, tick
        # thread name -> (thread ident, since when it has not shown progress)
        self._marks: dict[str, tuple[int, float]] = {}
        self._reported: dict[str, float] = {}  # thread name -> ``since`` of its last report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oahu-stall-watch", daemon=True)

    # ------------------------------------------------------------------ watched threads
    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make ``loop`` beat every ``tick``; call it from the loop's own thread."""
        ident = threading.get_ident()

        def beat(due: float) -> None:
            now = time.monotonic()
            self.lag.observe(max(0.0, now - due))
            self._marks["http"] = (ident, now + self.tick)  # the next beat is due then
            loop.call_later(self.tick, beat, now + self.tick)

        loop.call_soon(beat, time.monotonic())

    def begin(self, thread: str) -> None:
        """The calling thread (``thread`` by name) starts a piece of work."""
        self._marks[thread] = (threading.get_ident(), time.monotonic())

    def end(self, thread: str) -> None:
        """The calling thread finished its piece of work."""
        self._marks.pop(thread, None)

    # ------------------------------------------------------------------ watchdog
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        due = time.monotonic() + self.tick
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            now = time.monotonic()
            late = now - due
            self.pause.observe(max(0.0, late))
            due = now + self.tick
            if late >= self.threshold:
                self._report("process", late, None)
            for name, (ident, since) in list(self._marks.items()):
                if now - since >= self.threshold and self._reported.get(name) != since:
                    self._reported[name] = since
                    self._report(name, now - since, ident)

    def _report(self, thread: str, seconds: float, ident: int | None) -> None:
        self.stalls.labels(thread=thread).inc()
        if ident is None:
            log.warning(
                "serving process paused %.0f ms: no thread ran (garbage collection, the GIL "
                "held by a long C call, or no CPU; load average %.1f)",
                seconds * 1000,
                _load_average(),
            )
            return
        frame = sys._current_frames().get(ident)
        where = "".join(traceback.format_stack(frame, limit=6)) if frame else "(thread gone)\n"
        what = "event loop blocked" if thread == "http" else "query worker busy"
        log.warning("%s for %.0f ms so far, at:\n%s", what, seconds * 1000, where.rstrip())


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
