"""Dead letters: messages that could not become constraints, kept with why and where from.

The consumer never stops on a bad message; it writes a ``DeadLetter`` to a sink and moves on.
``DeadLetterFile`` appends JSON Lines; ``DeadLetterKafka`` republishes the original bytes to a
dead-letter topic with the reason and origin in the record headers, so the message can be
inspected or replayed with ordinary Kafka tools.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from oahu.connectors.constraint import REASONS, DecodeError
from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.source import SourceRecord

#: A valid constraint of a kind the learner cannot learn (a pair for a learner of triplets).
UNSUPPORTED_KIND = "unsupported_kind"
#: Every reason a record is dead-lettered for: the decoder's, and a learner's refusal of its kind.
DEAD_LETTER_REASONS = (*REASONS, UNSUPPORTED_KIND)


@dataclass(frozen=True)
class DeadLetter:
    """A rejected message: ``reason`` (a ``DecodeError`` reason), ``detail``, where it came
    from (``source`` topic or file, ``partition``, ``offset``), the original bytes and when it
    was rejected (``ts``, seconds since the epoch).

    >>> letter = DeadLetter("bad_kind", "kind='quad'", "constraints", 0, 7, b"{}", ts=1.0)
    >>> DeadLetter.from_json(letter.to_json()) == letter
    True
    """

    reason: str
    detail: str
    source: str
    partition: int
    offset: int
    value: bytes
    ts: float

    @classmethod
    def from_error(
        cls, error: DecodeError, record: SourceRecord, ts: float | None = None
    ) -> DeadLetter:
        return cls(
            error.reason,
            error.detail,
            record.source,
            record.partition,
            record.offset,
            record.value,
            time.time() if ts is None else ts,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; the original bytes as base64 under ``value_b64``."""
        out = asdict(self)
        out["value_b64"] = base64.b64encode(out.pop("value")).decode("ascii")
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DeadLetter:
        fields = dict(obj)
        fields["value"] = base64.b64decode(fields.pop("value_b64"))
        return cls(**fields)

    def headers(self) -> list[tuple[str, bytes]]:
        """Kafka record headers carrying everything but the value."""
        return [
            ("reason", self.reason.encode()),
            ("detail", self.detail.encode()),
            ("source", self.source.encode()),
            ("partition", str(self.partition).encode()),
            ("offset", str(self.offset).encode()),
            ("ts", repr(self.ts).encode()),
        ]


class DeadLetterSink:
    """Base of the sinks: counts letters by reason (thread-safe), subclasses deliver them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def write(self, letter: DeadLetter) -> None:
        with self._lock:
            self._deliver(letter)
            self.counts[letter.reason] += 1

    def _deliver(self, letter: DeadLetter) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Make everything written so far durable / delivered."""

    def close(self) -> None:
        self.flush()


class DeadLetterFile(DeadLetterSink):
    """Appends one JSON object per letter to ``path`` and flushes after each.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "dead.jsonl"
    >>> sink = DeadLetterFile(path)
    >>> sink.write(DeadLetter("non_finite", "NaN", "f.jsonl", 0, 3, b"x", ts=2.0))
    >>> sink.close(); sink.counts["non_finite"], json.loads(path.read_text())["offset"]
    (1, 3)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self._fh = open(self.path, "a", encoding="utf-8")  # held open until close()

    def _deliver(self, letter: DeadLetter) -> None:
        self._fh.write(json.dumps(letter.to_json(), separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def read_dead_letters(path: str | os.PathLike[str]) -> list[DeadLetter]:
    """All letters in a ``DeadLetterFile``."""
    with open(path, encoding="utf-8") as fh:
        return [DeadLetter.from_json(json.loads(line)) for line in fh if line.strip()]


class DeadLetterKafka(DeadLetterSink):
    """Produces each letter's original bytes to ``topic``, headers as in ``DeadLetter.headers``.

    ``config`` is passed to the producer (security settings and the like).
    """

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str | list[str],
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self._sink = KafkaSink(topic, bootstrap_servers, config=config)

    def _deliver(self, letter: DeadLetter) -> None:
        self._sink.send(letter.value, headers=letter.headers())

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self._sink.close()
