"""The records being learned, named on disk, so that a crash points at them.

Before the learn loop processes a poll's records it names them in ``in-flight.json`` in the
checkpoint directory, and it clears the name once they are processed. A learner process that
dies in between (a segfault in native code, the kernel's OOM killer, an error that escapes)
leaves the name behind, and the next start reads it as a :class:`Recovery`:

* the records that were in flight become *suspects*: they are learned again one at a time,
  each named alone in the file while it is learned;
* a record that was in flight alone at a crash gets a *strike*; at :data:`CRASH_LOOP_STRIKES`
  strikes it is dead-lettered with reason ``crash_loop`` instead of learned, so a poison pill
  that escapes the decoder cannot block its partition forever.

Two strikes rather than one: a record can be in flight alone at a crash that is not its fault
(an operator's ``kill -9``); the same record twice in a row is no accident.

The file is replaced atomically but not fsynced: it has to outlive the process, not the machine
(a machine that loses power says nothing about a record), and it is written twice per poll.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oahu.connectors.source import SourceRecord

log = logging.getLogger(__name__)

IN_FLIGHT_FILE = "in-flight.json"
#: Crashes with a record in flight alone after which it is dead-lettered (reason ``crash_loop``).
CRASH_LOOP_STRIKES = 2

Ranges = dict[int, tuple[int, int]]  # partition -> (first, last) offset, inclusive


def offset_ranges(records: Iterable[SourceRecord]) -> Ranges:
    """The first and last offset of ``records`` in each partition.

    >>> offset_ranges([SourceRecord("t", 0, 5, b""), SourceRecord("t", 1, 2, b""),
    ...                SourceRecord("t", 0, 9, b"")])
    {0: (5, 9), 1: (2, 2)}
    """
    ranges: Ranges = {}
    for r in records:
        first, last = ranges.get(r.partition, (r.offset, r.offset))
        ranges[r.partition] = (min(first, r.offset), max(last, r.offset))
    return ranges


def _union(a: Mapping[int, tuple[int, int]], b: Mapping[int, tuple[int, int]]) -> Ranges:
    out = dict(a)
    for p, (first, last) in b.items():
        if p in out:
            first, last = min(first, out[p][0]), max(last, out[p][1])
        out[p] = (first, last)
    return out


def _ranges_to_json(ranges: Ranges) -> dict[str, list[int]]:
    return {str(p): list(span) for p, span in sorted(ranges.items())}


def _ranges_from_json(obj: object) -> Ranges:
    return {int(p): (int(a), int(b)) for p, (a, b) in dict(obj).items()}  # type: ignore[call-overload]


@dataclass
class Recovery:
    """What the last run's crash says about records: ``suspects`` (offset ranges per partition)
    to learn one at a time, and ``strikes``: crashes each record was in flight alone at.

    >>> recovery = Recovery({0: (10, 19)}, {(0, 12): 2})
    >>> recovery.isolates([SourceRecord("t", 0, 9, b"")]), recovery.isolates(
    ...     [SourceRecord("t", 0, 15, b"")])
    (False, True)
    >>> recovery.crash_looping(SourceRecord("t", 0, 12, b""))
    True
    >>> recovery.passed({0: 20}); recovery
    Recovery(suspects={}, strikes={})
    """

    suspects: Ranges = field(default_factory=dict)
    strikes: dict[tuple[int, int], int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.suspects or self.strikes)

    def isolates(self, records: Sequence[SourceRecord]) -> bool:
        """Whether any of ``records`` is a suspect (then all of them are learned alone)."""
        if not self.suspects:  # the usual case: nothing to look at record by record
            return False
        for r in records:
            span = self.suspects.get(r.partition)
            if span is not None and span[0] <= r.offset <= span[1]:
                return True
        return False

    def crash_looping(self, record: SourceRecord) -> bool:
        """Whether ``record`` was in flight alone at enough crashes to be dead-lettered."""
        return self.strikes.get((record.partition, record.offset), 0) >= CRASH_LOOP_STRIKES

    def suspect(self, ranges: Ranges) -> None:
        """Add the records in ``ranges`` (:func:`offset_ranges`) to the suspects."""
        self.suspects = _union(self.suspects, ranges)

    def passed(self, offsets: Mapping[int, int]) -> None:
        """Forget what lies before ``offsets`` (each partition's next offset): processed."""
        self.suspects = {
            p: span for p, span in self.suspects.items() if span[1] >= offsets.get(p, 0)
        }
        self.strikes = {
            (p, o): n for (p, o), n in self.strikes.items() if o >= offsets.get(p, 0)
        }  # fmt: skip

    def to_json(self) -> dict[str, object]:
        return {
            "suspects": _ranges_to_json(self.suspects),
            "strikes": [[p, o, n] for (p, o), n in sorted(self.strikes.items())],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> Recovery:
        strikes = {(int(p), int(o)): int(n) for p, o, n in list(obj["strikes"])}
        return cls(_ranges_from_json(obj["suspects"]), strikes)


class InFlight:
    """The in-flight file of the learn loop in ``directory`` (see the module docstring).

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> InFlight(directory).begin({0: (7, 8)}, Recovery())  # then the process dies
    >>> InFlight(directory).recover()  # the next start
    Recovery(suspects={0: (7, 8)}, strikes={})
    >>> InFlight(directory).begin({0: (8, 8)}, Recovery({0: (7, 8)}), alone=True)  # dies again
    >>> InFlight(directory).recover()
    Recovery(suspects={0: (7, 8)}, strikes={(0, 8): 1})
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / IN_FLIGHT_FILE
        self._temp = self.path.with_name(f".{IN_FLIGHT_FILE}.tmp")
        self._on_disk = self.path.exists()

    def recover(self) -> Recovery:
        """The recovery the file left by the last run calls for (empty when it ended cleanly);
        an unreadable file is reported and ignored: it only ever narrows a search."""
        if not self.path.exists():
            return Recovery()
        try:
            saved = json.loads(self.path.read_bytes())
            recovery = Recovery.from_json(saved)
            in_flight = _ranges_from_json(saved["in_flight"])
            alone = bool(saved["alone"])
        except (ValueError, KeyError, TypeError, OSError) as exc:
            log.error("%s is unreadable (%r); ignored", self.path, exc)
            return Recovery()
        if not in_flight:
            return recovery  # suspects left to learn alone, no crash since
        recovery.suspects = _union(recovery.suspects, in_flight)
        if alone:
            ((p, (o, _)),) = in_flight.items()
            recovery.strikes[p, o] = recovery.strikes.get((p, o), 0) + 1
        log.warning(
            "the last run crashed while learning %s offsets %s; learning them one at a time "
            "(a record in flight alone at %d crashes is dead-lettered as crash_loop)",
            "the record at" if alone else "the records at",
            {p: f"{a}-{b}" for p, (a, b) in in_flight.items()},
            CRASH_LOOP_STRIKES,
        )
        return recovery

    def begin(self, ranges: Ranges, recovery: Recovery, alone: bool = False) -> None:
        """Name the records in ``ranges`` (:func:`offset_ranges`) as in flight (``alone``: one
        record learned by itself), with the ``recovery`` still under way."""
        self._write({**recovery.to_json(), "in_flight": _ranges_to_json(ranges), "alone": alone})

    def end(self, recovery: Recovery) -> None:
        """Nothing is in flight: keep what ``recovery`` still has to do, or no file at all."""
        if recovery:
            self._write({**recovery.to_json(), "in_flight": {}, "alone": False})
        elif self._on_disk:
            self.path.unlink(missing_ok=True)
            self._on_disk = False

    def _write(self, content: dict[str, object]) -> None:
        self._temp.write_text(json.dumps(content))
        os.replace(self._temp, self.path)
        self._on_disk = True
