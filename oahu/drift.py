"""Concept-drift detection on a learner's prequential mistakes (docs/algorithms.md, "Concept
drift").

Before a learner updates on a constraint it either ranks it right or not (the prequential
outcome, :mod:`oahu.learners.oahu.prequential`). While the concept holds, the rate of mistakes
falls or stays
flat as the model learns; when the notion of similarity changes, constraints the model had
learned start to be ranked wrongly and the rate jumps. :class:`DriftMonitor` feeds each mistake
stream (the α-combined metric's and each depth's) to one of river's detectors —
``river.drift.ADWIN`` by default, ``PageHinkley`` or ``KSWIN`` on request — and reports a
detection as a drift only when the mistake rate went *up* (a detector also fires when a model
gets better, which is no reason to adapt) and stays up: over the ``CONFIRM`` constraints after
the detection it must exceed the rate before it by ``MIN_RISE`` (ours; see below).

Checkpoints. river's detectors keep state that cannot be saved as plain values (ADWIN's is a
Rust object), so a monitor keeps the outcomes each detector has been fed since it was last
restarted and rebuilds it by feeding them again: the restored detector is the same, and a resumed
learner detects at the same constraints as one that never stopped (the outcomes of a block not
yet fed, ``FEED``, are kept too). The kept outcomes are bounded: after a detection a detector
restarts empty (the next change is one from the new concept), and once ``history`` outcomes are
kept it restarts from the latest half of them (ours; a concept older than ``history``
constraints is not the one a drift departs from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

if TYPE_CHECKING:
    from river.base import DriftDetector

DetectorName = Literal["adwin", "page-hinkley", "kswin"]
COMBINED = "combined"  # the signal of the α-combined metric (a one-depth learner's only one)

# A detection is a drift once the mistake rate over the CONFIRM constraints after it exceeds the
# rate before it by MIN_RISE (ours). The paper's benchmark streams are not flat even without
# drift: a seed that links two large groups of items brings a burst of derived constraints of
# one kind, and river's detectors rightly see those bursts. They pass within a few hundred
# constraints; a change of concept does not, so the longer the confirmation the more a burst is
# diluted. Measured on development seeds 100-102 of both datasets (benchmarks/README.md, "Concept
# drift"): over 400 constraints after a detection, stationary streams of 100,000 constraints rose
# by at most 0.047 and abrupt drifts by 0.25-0.33; over 200 (our first choice) bursts reached
# 0.072 there and 0.12 on a held-out seed, a false alarm. MIN_RISE sits 3x above the former.
CONFIRM = 400
MIN_RISE = 0.15
# A detection not confirmed leaves its "before" rate as the reference of the next detection if
# that one comes within CARRY constraints (ours): a gradual drift makes the detector fire at
# small steps of the rise, none of which alone is MIN_RISE, and without the carried reference
# each step would be measured against the previous step's level instead of the old concept's.
CARRY = 2000
# The detectors are fed in blocks of FEED outcomes (ours): one Python call per outcome and signal
# is what detection costs, and a block spares the per-call work around it. A drift is acted on
# at most FEED - 1 constraints after the one that confirmed it (its index stays exact).
FEED = 16
_BEFORE = 200  # the latest outcomes at a detection count as after it, not before
_MAX_EVENTS = 1000  # events listed (the counts stay exact beyond that)

# river is imported when a detector is made, not with this module: importing river.drift brings
# in river's datasets and with them scikit-learn and SciPy (over a second), which a process that
# only serves a snapshot (no detector in it) would pay at every start for nothing.
_ARGUMENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "adwin": ("ADWIN", {}),  # river's defaults: δ = 0.002
    # mode="up": only a rising mistake rate is a change worth reporting.
    "page-hinkley": ("PageHinkley", {"mode": "up"}),
    "kswin": ("KSWIN", {"seed": 0}),
}
DETECTORS: tuple[str, ...] = tuple(_ARGUMENTS)


def _require_known(name: str) -> None:
    if name not in _ARGUMENTS:
        raise ValueError(f"drift_detector: unknown {name!r}; choose one of {', '.join(DETECTORS)}")


def make_detector(name: str) -> DriftDetector:
    """A fresh river detector called ``name`` (one of :data:`DETECTORS`).

    >>> type(make_detector("adwin")).__name__, make_detector("adwin").delta
    ('ADWIN', 0.002)
    """
    _require_known(name)
    from river import drift

    cls, kwargs = _ARGUMENTS[name]
    return getattr(drift, cls)(**kwargs)


@dataclass(frozen=True)
class DriftEvent:
    """A confirmed rise of a mistake rate.

    ``constraint``: index (from 0, in the order the learner ranked them) of the constraint whose
    outcome confirmed the drift; ``suspected_at``: the one at which the detector fired;
    ``signal``: ``"combined"`` or ``"depth:L"``; ``mistakes_before``: the mistake rate before
    the detection, ``mistakes_after``: over the constraints that confirmed it.
    """

    constraint: int
    suspected_at: int
    signal: str
    mistakes_before: float
    mistakes_after: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Watch:
    """One detector on one mistake stream, the outcomes that rebuild it, and the confirmation
    of its latest detection."""

    def __init__(self, detector: str, history: int, confirm: int, min_rise: float) -> None:
        self.name = detector
        self.limit = history
        self.confirm = confirm
        self.min_rise = min_rise
        # Made at the first outcome fed (`_rebuilt`), not here: a learner rebuilt to answer
        # queries (a serving snapshot) never feeds one, and so never imports river.
        self.detector: DriftDetector | None = None
        self.outcomes: list[bool] = []
        # (mistake rate before, constraint index, mistakes since, outcomes since, first index
        # that counts, whether the update starting there is still to be looked at) while a
        # detection waits for its confirmation
        self.pending: tuple[float, int, int, int, int, bool] | None = None
        # (mistake rate before, constraint index) of the latest unconfirmed detection
        self.reference: tuple[float, int] | None = None

    def restart(self, outcomes: list[bool]) -> None:
        """Start again from ``outcomes``: the detector is rebuilt from them when the next
        outcome comes."""
        self.detector = None
        self.outcomes = outcomes

    def _rebuilt(self) -> DriftDetector:
        detector = make_detector(self.name)
        for outcome in self.outcomes:  # detections while rebuilding are history, not news
            detector.update(outcome)
        self.detector = detector
        return detector

    def feed(
        self, mistakes: Sequence[bool], first: int, ends: Sequence[int]
    ) -> list[tuple[int, int, float, float]]:
        """Feed the outcomes of constraints ``first``, ``first + 1``, ..., each with the end
        (exclusive) of the update that ranked it, ``ends``; ``(index, suspected_at, before,
        after)`` of each drift they confirm."""
        found = []
        for (index, mistake), end in zip(enumerate(mistakes, first), ends, strict=True):
            detector = self.detector if self.detector is not None else self._rebuilt()
            self.outcomes.append(mistake)
            detector.update(mistake)
            # The common case, nothing pending, detected or to trim, costs only these tests.
            if (
                self.pending is None
                and not detector.drift_detected
                and len(self.outcomes) < self.limit
            ):
                continue
            rise = self._settle(mistake, index, end, detector.drift_detected)
            if rise is not None:
                found.append((index, *rise))
        return found

    def _settle(
        self, mistake: bool, index: int, end: int, detected: bool
    ) -> tuple[int, float, float] | None:
        """After outcome ``index`` (of the update ending before ``end``) was fed, ``detected``
        whether the detector fired on it: count it towards a pending confirmation, start one on
        a detection, trim the kept outcomes; ``(suspected_at, before, after)`` when it confirms
        a drift.

        A confirmation counts the outcomes of later updates only: the rest of the detecting
        update was ranked by the same model, so a burst of hard constraints there says nothing
        of whether the model fails to learn them (in strict mode the next constraint is the
        next update). Nor does the first later update when it holds more than one constraint:
        its model has taken one step on the burst, where a strict learner has taken a step on
        each of the burst's constraints before it ranks the next, so a burst that spans the two
        updates around the detection would confirm itself."""
        if self.pending is not None:
            before, since, errors, count, counts_from, first_update = self.pending
            if index < counts_from:
                return None
            if first_update:
                first_update = False
                if end - index > 1:  # index == counts_from: this update's first constraint
                    self.pending = (before, since, errors, count, end, first_update)
                    return None
            errors, count = errors + mistake, count + 1
            self.pending = (before, since, errors, count, counts_from, first_update)
            if count == self.confirm:
                self.pending = None
                if errors / count - before >= self.min_rise:
                    self.reference = None
                    return since, before, errors / count
                self.reference = (before, index)
        elif detected:
            latest = min(_BEFORE, len(self.outcomes) // 2)
            older, recent = self.outcomes[: -latest or None], self.outcomes[-latest:]
            before = float(np.mean(older)) if older else 0.0
            if self.reference is not None and index - self.reference[1] <= CARRY:
                before = min(before, self.reference[0])
            if latest and float(np.mean(recent)) > before:  # a fall is no drift to adapt to
                self.pending = (before, index, 0, 0, end, True)
            # The next change is measured against what follows this one.
            self.restart([])
            return None
        if len(self.outcomes) >= self.limit:
            self.restart(self.outcomes[-(self.limit // 2) :])
        return None

    def get_state(self) -> dict[str, Any]:
        return {
            "outcomes": torch.tensor(self.outcomes, dtype=torch.bool),
            "pending": list(self.pending) if self.pending is not None else None,
            "reference": list(self.reference) if self.reference is not None else None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.restart([bool(v) for v in state["outcomes"].tolist()])
        pending = state["pending"]
        self.pending = None
        if pending is not None:
            # Monitors saved before updates were told apart counted from the next constraint,
            # and those saved before the first later update was looked at counted it.
            before, since, errors, count, *rest = pending
            start = int(rest[0]) if rest else int(since) + 1
            first_update = bool(rest[1]) if len(rest) > 1 else False
            self.pending = (float(before), int(since), int(errors), int(count), start, first_update)
        reference = state.get("reference")
        self.reference = None if reference is None else (float(reference[0]), int(reference[1]))


class DriftMonitor:
    """river drift detectors on the prequential mistakes of each signal (the α-combined metric
    first, then each depth).

    Parameters
    ----------
    detector : ``"adwin"`` (default), ``"page-hinkley"`` or ``"kswin"``.
    signals : names of the mistake streams, ``"combined"`` first.
    history : outcomes kept per signal to rebuild its detector (see the module docstring).
    confirm, min_rise : a detection is a drift when the mistake rate over the ``confirm``
        constraints after it is at least ``min_rise`` above the rate before it (ours).
    feed : outcomes are fed to the detectors in blocks of this many (ours; see ``FEED``).

    >>> monitor = DriftMonitor("adwin", ["combined"])
    >>> rng = np.random.default_rng(0)
    >>> mistakes = np.concatenate([rng.random(3000) < 0.05, rng.random(1000) < 0.5])
    >>> events = monitor.update(mistakes[:, None])
    >>> [(e.signal, 3000 <= e.suspected_at < e.constraint < 3500) for e in events]
    [('combined', True)]
    >>> restored = DriftMonitor("adwin", ["combined"]); restored.set_state(monitor.get_state())
    >>> restored.events == monitor.events and restored.seen == 4000
    True
    """

    def __init__(
        self,
        detector: str,
        signals: Sequence[str],
        history: int = 8192,
        confirm: int = CONFIRM,
        min_rise: float = MIN_RISE,
        feed: int = FEED,
    ) -> None:
        _require_known(detector)  # a clear error here, not at the first outcome
        if not signals or signals[0] != COMBINED:
            raise ValueError(f"signals: the first must be {COMBINED!r}, got {list(signals)!r}")
        if int(history) < 2:
            raise ValueError(f"history: must be an integer >= 2, got {history!r}")
        self.detector = detector
        self.signals = tuple(signals)
        self.history = int(history)
        if int(feed) < 1:
            raise ValueError(f"feed: must be an integer >= 1, got {feed!r}")
        if int(confirm) < 1 or not 0.0 <= float(min_rise) <= 1.0:
            raise ValueError(
                f"confirm, min_rise: need confirm >= 1 and min_rise in [0, 1], got "
                f"{confirm!r}, {min_rise!r}"
            )
        self._watches = [
            _Watch(detector, self.history, int(confirm), float(min_rise)) for _ in self.signals
        ]
        self.feed = int(feed)
        self.seen = 0  # outcomes taken per signal
        self._waiting: list[list[bool]] = []  # taken, not yet fed (fewer than `feed`)
        self._waiting_ends: list[int] = []  # the end of the update that ranked each
        self.events: list[DriftEvent] = []
        self.counts = dict.fromkeys(self.signals, 0)

    def update(
        self,
        mistakes: np.ndarray | Sequence[Sequence[bool]],
        update_sizes: Sequence[int] | None = None,
    ) -> list[DriftEvent]:
        """Take outcomes in stream order: ``mistakes`` (n, n_signals) bool, an array or rows,
        True where the signal ranked the constraint wrongly; ``update_sizes``: the sizes of the
        consecutive updates that learned them (summing to n), each update's constraints all
        ranked by the model before it (``[n]``: one micro-batch update); None: each constraint
        ranked by the model that learned the ones before it (strict). They reach the detectors
        in blocks of ``feed``; returns the drifts the blocks fed now confirm, in order."""
        if isinstance(mistakes, np.ndarray):
            if mistakes.ndim != 2 or mistakes.shape[1] != len(self.signals):
                raise ValueError(
                    f"mistakes: expected shape (n, {len(self.signals)}), got {mistakes.shape}"
                )
            rows = mistakes.astype(bool, copy=False).tolist()
        else:
            rows = [[bool(v) for v in row] for row in mistakes]
            if any(len(row) != len(self.signals) for row in rows):
                raise ValueError(
                    f"mistakes: expected rows of {len(self.signals)} outcomes, got lengths "
                    f"{sorted({len(row) for row in rows})}"
                )
        first = self.seen
        if update_sizes is None:
            ends = list(range(first + 1, first + len(rows) + 1))
        else:
            sizes = [int(size) for size in update_sizes]
            if any(size < 1 for size in sizes) or sum(sizes) != len(rows):
                raise ValueError(
                    f"update_sizes: expected positive sizes summing to {len(rows)} (the rows of "
                    f"mistakes), got {sizes!r}"
                )
            if len(sizes) == 1:  # one update, every step's case: no array work on a strict step
                ends = [first + len(rows)] * len(rows)
            else:
                ends = np.repeat(first + np.cumsum(sizes), sizes).tolist()
        self._waiting.extend(rows)
        self.seen += len(rows)
        self._waiting_ends.extend(ends)
        if len(self._waiting) < self.feed:
            return []
        return self._feed_waiting()

    def _feed_waiting(self) -> list[DriftEvent]:
        first = self.seen - len(self._waiting)
        columns = list(zip(*self._waiting, strict=True))
        ends = self._waiting_ends
        self._waiting, self._waiting_ends = [], []
        found = [
            (index, position, DriftEvent(index, suspected, signal, before, after))
            for position, (signal, watch, column) in enumerate(
                zip(self.signals, self._watches, columns, strict=True)
            )
            for index, suspected, before, after in watch.feed(column, first, ends)
        ]
        if not found:
            return []
        events = [event for *_, event in sorted(found, key=lambda f: f[:2])]
        for event in events:
            self.counts[event.signal] += 1
        # rare: the list is not copied on every block
        self.events = (self.events + events)[-_MAX_EVENTS:]
        return events

    def get_state(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "signals": list(self.signals),
            "watches": {
                signal: watch.get_state()
                for signal, watch in zip(self.signals, self._watches, strict=True)
            },
            "seen": self.seen,
            "waiting": torch.tensor(self._waiting, dtype=torch.bool).reshape(-1, len(self.signals)),
            "waiting_ends": list(self._waiting_ends),
            "events": [e.to_dict() for e in self.events],
            "counts": dict(self.counts),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if list(state["signals"]) != list(self.signals) or state["detector"] != self.detector:
            raise ValueError(
                f"drift: checkpoint watches {state['signals']!r} with {state['detector']!r}, "
                f"this learner {list(self.signals)!r} with {self.detector!r}"
            )
        for signal, watch in zip(self.signals, self._watches, strict=True):
            watch.set_state(state["watches"][signal])
        self.seen = int(state["seen"])
        self._waiting = [[bool(v) for v in row] for row in state["waiting"].tolist()]
        first = self.seen - len(self._waiting)
        # Monitors saved before updates were told apart: each outcome its own update.
        self._waiting_ends = [
            int(e) for e in state.get("waiting_ends", range(first + 1, self.seen + 1))
        ]
        self.events = [DriftEvent(**e) for e in state["events"]]
        self.counts = {s: int(state["counts"].get(s, 0)) for s in self.signals}
