"""Dead letters: messages that could not become constraints, kept with why and where from.

The consumer never stops on a bad message; it writes a ``DeadLetter`` to a sink and moves on.
``DeadLetterFile`` appends JSON Lines; ``DeadLetterKafka`` republishes the original bytes to a
dead-letter topic with the reason and origin in the record headers, so the message can be
inspected or replayed with ordinary Kafka tools.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
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

log = logging.getLogger(__name__)

#: The most bytes of a record's value a dead letter carries to Kafka: below the producer's and
#: the broker's 1 MiB defaults with room for the headers. Longer values are truncated (their
#: size and SHA-256 go in headers); a letter Kafka still refuses goes to the fallback file.
MAX_DEAD_LETTER_VALUE = 900 * 1024
_MAX_DETAIL = 1000  # characters of ``detail`` kept in a header

#: A valid constraint of a kind the learner cannot learn (a pair for a learner of triplets).
UNSUPPORTED_KIND = "unsupported_kind"
#: A valid constraint with items in a modality other than the one the learner learns
#: (``DEFAULT_MODALITY``): a cross-modal constraint given to a single-modality service.
UNSUPPORTED_MODALITY = "unsupported_modality"
#: A record whose learning raised when it was learned by itself (an error the decoder and the
#: resolver let through); ``detail`` carries the error.
LEARN_ERROR = "learn_error"
#: A record that was being learned when the learner process crashed, again and again.
CRASH_LOOP = "crash_loop"
#: A person's answer to a question whose answer the model consumed already (the same answer
#: appended twice, or two answers to one question): only the first counts.
DUPLICATE_ANSWER = "duplicate_answer"
#: Every reason a record is dead-lettered for: the decoder's, a learner's refusal of its kind
#: or of its items' modalities, the learn loop's own two for records that break the learner, and
#: a repeated answer.
DEAD_LETTER_REASONS = (
    *REASONS,
    UNSUPPORTED_KIND,
    UNSUPPORTED_MODALITY,
    LEARN_ERROR,
    CRASH_LOOP,
    DUPLICATE_ANSWER,
)


@dataclass(frozen=True)
class DeadLetter:
    """A rejected message: ``reason`` (one of ``DEAD_LETTER_REASONS``), ``detail``, where it came
    from (``source`` topic or file, ``partition``, ``offset``), the original bytes (None for a
    Kafka tombstone, a record without a value) and when it was rejected (``ts``, seconds since
    the epoch).

    >>> letter = DeadLetter("bad_kind", "kind='quad'", "constraints", 0, 7, b"{}", ts=1.0)
    >>> DeadLetter.from_json(letter.to_json()) == letter
    True
    """

    reason: str
    detail: str
    source: str
    partition: int
    offset: int
    value: bytes | None
    ts: float

    @classmethod
    def of(
        cls, record: SourceRecord, reason: str, detail: str, ts: float | None = None
    ) -> DeadLetter:
        """The letter for ``record``, rejected for ``reason`` (``ts``: now unless given)."""
        return cls(
            reason,
            detail,
            record.source,
            record.partition,
            record.offset,
            record.value,
            time.time() if ts is None else ts,
        )

    @classmethod
    def from_error(
        cls, error: DecodeError, record: SourceRecord, ts: float | None = None
    ) -> DeadLetter:
        return cls.of(record, error.reason, error.detail, ts)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; the original bytes as base64 under ``value_b64``."""
        out = asdict(self)
        value = out.pop("value")
        out["value_b64"] = None if value is None else base64.b64encode(value).decode("ascii")
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DeadLetter:
        fields = dict(obj)
        value = fields.pop("value_b64")
        fields["value"] = None if value is None else base64.b64decode(value)
        return cls(**fields)

    def headers(self) -> list[tuple[str, bytes]]:
        """Kafka record headers carrying everything but the value."""
        return [
            ("reason", self.reason.encode()),
            ("detail", self.detail[:_MAX_DETAIL].encode()),
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

    ``config`` is passed to the producer (security settings and the like). A value longer than
    ``max_value_bytes`` is cut to that length, with headers ``truncated``, ``original_size`` and
    ``sha256`` (of the whole value), so that no letter is too large to send; a tombstone's
    letter has an empty value and the header ``tombstone``. A letter Kafka
    refuses all the same (at send, or when its delivery fails) is written whole to ``fallback``
    (a ``DeadLetterFile``) and logged, so it is still recorded and the consumer moves on;
    ``fallbacks`` counts them.
    """

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str | list[str],
        config: Mapping[str, Any] | None = None,
        max_value_bytes: int = MAX_DEAD_LETTER_VALUE,
        fallback: DeadLetterSink | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.max_value_bytes = max_value_bytes
        self.fallback = fallback
        self._sink = KafkaSink(topic, bootstrap_servers, config=config)

    def _deliver(self, letter: DeadLetter) -> None:
        value, headers = letter.value, letter.headers()
        if value is None:  # Kafka records need a key or a value: an empty one, marked
            value, headers = b"", [*headers, ("tombstone", b"1")]
        if len(value) > self.max_value_bytes:
            headers += [
                ("truncated", b"1"),
                ("original_size", str(len(value)).encode()),
                ("sha256", hashlib.sha256(value).hexdigest().encode()),
            ]
            value = value[: self.max_value_bytes]
        try:
            future = self._sink.send(value, headers=headers)
        except Exception as error:  # e.g. MessageSizeTooLargeError, raised before sending
            self._fall_back(letter, error)
        else:
            future.add_errback(lambda error: self._fall_back(letter, error))

    def _fall_back(self, letter: DeadLetter, error: BaseException) -> None:
        log.error(
            "dead letter of %s[%d]@%d (%s) not delivered to %s: %s; %s",
            letter.source, letter.partition, letter.offset, letter.reason, self.topic, error,
            "written to the fallback file" if self.fallback else "no fallback file: lost",
        )  # fmt: skip
        if self.fallback is not None:
            self.fallback.write(letter)

    @property
    def fallbacks(self) -> int:
        """Letters written to the fallback file."""
        return 0 if self.fallback is None else sum(self.fallback.counts.values())

    def flush(self) -> None:
        self._sink.flush()
        if self.fallback is not None:
            self.fallback.flush()

    def close(self) -> None:
        self._sink.close()
        if self.fallback is not None:
            self.fallback.close()
