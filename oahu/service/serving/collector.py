"""Python's garbage collector in the serving process: out of the answer path's way, and timed.

A full collection walks every tracked object and holds the GIL throughout, so every query waits
for it. The serving process keeps what start-up built for good (the gallery's ids and their
index, torch's and FastAPI's module state); under load at 300 req/s its longest collections
took over 250 ms (benchmarks/README.md, "Serving latency"). After start-up those objects are
moved out of the collector's reach with :func:`gc.freeze` (they live as long as the process;
reference counting still frees what is not in a cycle), so a collection walks only what queries
and snapshots allocate since. Each collection is timed into
``oahu_gc_pause_seconds{generation}``, so a stall an operator sees in the latency histogram can be
matched with one.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

from prometheus_client import Histogram

log = logging.getLogger(__name__)


class CollectorPauses:
    """Times each garbage collection of the process into ``histogram`` (label ``generation``)
    from :data:`gc.callbacks`; ``close`` stops it.

    >>> from prometheus_client import CollectorRegistry
    >>> registry = CollectorRegistry()
    >>> pauses = CollectorPauses(Histogram("pause_seconds", "GC", ["generation"],
    ...                                    registry=registry))
    >>> _ = gc.collect(2)
    >>> registry.get_sample_value("pause_seconds_count", {"generation": "2"}) >= 1
    True
    >>> pauses.close()
    """

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        # The children of the three generations, bound once: the callback runs at every
        # collection, wherever the collected thread's stack stands, so it makes as few calls as
        # it can (``labels`` takes a lock and builds a key on each call).
        self._by_generation = [histogram.labels(generation=str(g)) for g in range(3)]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self._by_generation[info["generation"]].observe(time.perf_counter() - self._started)

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def freeze_startup_heap() -> int:
    """Collect what start-up left behind, then exempt every surviving object from later
    collections (:func:`gc.freeze`); returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the garbage collector's walks", frozen)
    return frozen
