"""The learning curve the console draws: a bounded, downsampled history of the learner's reports.

The learner process reports its status up to twenty times a second for as long as the service
runs, over streams of any length. :class:`LearningHistory` keeps at most ``capacity`` of those
reports as points, from the first to the latest: when it is full it drops every other point and
from then on keeps one report in twice as many. Memory is therefore bounded by ``capacity``
whatever the stream's length, and the curve always spans the whole run, more coarsely as it
grows (the newest point is always shown as it stands, in ``latest``).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

DEFAULT_CAPACITY = 512
RATE_WINDOW_SECONDS = 5.0  # the current learning rate is measured over this much of the past


@dataclass(frozen=True, slots=True)
class Point:
    """One report as the console draws it: when (``time``, seconds since the epoch), how far
    (``seen``: constraints the learner has seen, the x axis of the prequential curve), the
    combined and per-depth prequential accuracy (None for learners without them) and the hedge
    weights α per depth."""

    time: float
    seen: int
    accuracy: float | None
    depth_accuracy: tuple[float | None, ...]
    alpha: tuple[float | None, ...]

    @classmethod
    def of(cls, status: dict[str, Any], now: float) -> Point:
        diagnostics = status.get("diagnostics") or {}
        depths = diagnostics.get("depth_prequential_accuracy") or ()
        seen = int(status.get("constraints_seen", 0))
        if seen == 0:  # no prediction made yet: an accuracy of 0 would be a false start
            depths = [None] * len(depths)
        return cls(
            now,
            seen,
            _finite(status.get("prequential_accuracy")) if seen else None,
            tuple(_finite(a) for a in depths),
            tuple(_finite(a) for a in status.get("alpha") or ()),
        )


def _finite(value: Any) -> float | None:
    """``value`` as a float, None when there is none or it is not finite (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class LearningHistory:
    """At most ``capacity`` points of the learner's reports, spanning the whole run.

    Reports that show the learner further than the one before are numbered 0, 1, 2, ...; the
    history keeps those whose number is a multiple of ``stride``, which doubles each time the
    history fills up (and so loses every other point): the kept points stay evenly spaced.

    >>> history = LearningHistory(capacity=4)
    >>> for seen in range(1, 11):
    ...     history.record({"constraints_seen": seen, "prequential_accuracy": seen / 10,
    ...                     "alpha": [0.5, 0.5]}, now=float(seen))
    >>> [p.seen for p in history.points()], history.stride
    ([1, 5, 9], 4)
    >>> curve = history.curve()
    >>> curve["seen"], curve["rate"]
    ([1, 5, 9], [None, 1.0, 1.0])
    >>> history.latest.seen, history.recent_rate()
    (10, 1.0)
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 2:
            raise ValueError(f"capacity: at least 2 points, got {capacity!r}")
        self.capacity = capacity
        self.stride = 1
        self.version = 0  # changes whenever the kept points do: a reader's cache key
        self.latest: Point | None = None
        self._points: list[tuple[int, Point]] = []  # (number, point)
        self._reports = 0  # reports that showed progress, numbered from 0
        self._recent: deque[Point] = deque()  # the reports of the last RATE_WINDOW_SECONDS
        self._lock = threading.Lock()

    def record(self, status: dict[str, Any], now: float | None = None) -> None:
        """Take one learner report (a ``/v1/model`` status)."""
        point = Point.of(status, time.time() if now is None else now)
        with self._lock:
            previous = self.latest
            self.latest = point
            self._recent.append(point)
            while self._recent[0].time < point.time - RATE_WINDOW_SECONDS:
                self._recent.popleft()
            if previous is not None and point.seen == previous.seen:
                return  # nothing learned since: the curve has no new x
            if self._points and point.seen < self._points[-1][1].seen:
                # the learner went back to an earlier checkpoint (a rewind after an error):
                # the points past it describe a model that no longer exists
                self._points = [(n, p) for n, p in self._points if p.seen <= point.seen]
                self.version += 1
            number, self._reports = self._reports, self._reports + 1
            if number % self.stride:
                return
            self._points.append((number, point))
            if len(self._points) >= self.capacity:
                self.stride *= 2
                self._points = [(n, p) for n, p in self._points if n % self.stride == 0]
            self.version += 1

    def recent_rate(self) -> float | None:
        """Constraints seen per second over the last few seconds of reports (None without two
        reports in that window)."""
        with self._lock:
            if len(self._recent) < 2:
                return None
            first, last = self._recent[0], self._recent[-1]
        elapsed = last.time - first.time
        return max(0.0, (last.seen - first.seen) / elapsed) if elapsed > 0 else None

    def points(self) -> list[Point]:
        with self._lock:
            return [p for _, p in self._points]

    def curve(self) -> dict[str, Any]:
        """The kept points as columns, with the learning rate (constraints/s) between each point
        and the one before it (None for the first)."""
        points = self.points()
        rate: list[float | None] = [None]
        for before, after in itertools.pairwise(points):
            elapsed = after.time - before.time
            rate.append((after.seen - before.seen) / elapsed if elapsed > 0 else None)
        n_depths = max((len(p.alpha) for p in points), default=0)
        return {
            "time": [p.time for p in points],
            "seen": [p.seen for p in points],
            "accuracy": [p.accuracy for p in points],
            "depth_accuracy": [
                [p.depth_accuracy[d] if d < len(p.depth_accuracy) else None for p in points]
                for d in range(n_depths)
            ],
            "alpha": [
                [p.alpha[d] if d < len(p.alpha) else None for p in points] for d in range(n_depths)
            ],
            "rate": rate[: len(points)],
        }
