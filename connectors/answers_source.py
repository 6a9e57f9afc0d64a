"""A stream file and the answers log, read as one source of two partitions.

The service's file source (partition 0) is a finished file; people's answers to its questions
arrive meanwhile in the answers log (:mod:`oahu.connectors.answers_log`), which this source
tails as partition 1, offsets its line numbers. The learn loop checkpoints and seeks each
partition's offset as it does a Kafka topic's, so after a restart both continue after the last
record the checkpointed model learned.

The log is read only when it has grown (one ``read`` per poll when it has not), and only
complete, newline-terminated lines are delivered: a line being written is read once its
newline is there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from oahu.connectors.file_source import FileSource
from oahu.connectors.source import PartitionCallback, SourceRecord

log = logging.getLogger(__name__)

STREAM_PARTITION = 0
ANSWERS_PARTITION = 1
_CHUNK = 1 << 16


def _ignore(partitions: list[int]) -> None:
    """The stream file's own announcement: :class:`WithAnswers` announces both partitions."""


class WithAnswers:
    """``stream`` (partition 0) and the answers log at ``answers`` (partition 1, tailed).

    Answers come first in a poll (a person waits to see one learned; the file has no hurry).
    ``exhausted`` once the file is and no complete line of the log is unread.

    >>> import tempfile
    >>> from oahu.connectors.answers_log import AnswersLog
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "s.txt").write_bytes(b'{"v":1}\\n{"v":2}\\n')
    16
    >>> writer = AnswersLog(d / "answers.jsonl")
    >>> src = WithAnswers(FileSource(d / "s.txt"), d / "answers.jsonl")
    >>> [(r.partition, r.offset, r.value) for r in src.poll(10)], src.exhausted
    ([(0, 0, b'{"v":1}'), (0, 1, b'{"v":2}')], True)
    >>> writer.append(b'{"v":1,"question":"q1"}')
    0
    >>> src.exhausted, src.lag()
    (False, {0: 0, 1: 1})
    >>> [(r.partition, r.offset, r.value) for r in src.poll(10)], src.exhausted
    ([(1, 0, b'{"v":1,"question":"q1"}')], True)
    """

    def __init__(self, stream: FileSource, answers: str | os.PathLike[str]) -> None:
        self.stream = stream
        self.path = Path(answers)
        self.source = os.fspath(answers)
        self._fh: BinaryIO | None = None
        self._next = 0  # offset (line number) of the next line to deliver
        self._lines: list[bytes] = []  # complete lines read, not delivered yet
        self._partial = b""  # the start of a line whose newline has not been read yet
        self._committed: int | None = None
        self._on_assign: PartitionCallback | None = None
        self._assigned = False
        stream.listen(_ignore, _ignore)

    # ------------------------------------------------------------------ the protocol
    @property
    def ready(self) -> bool:
        return self.stream.ready

    @property
    def connected(self) -> bool:
        return self.stream.connected

    @property
    def not_ready_reason(self) -> str | None:
        return self.stream.not_ready_reason

    @property
    def seconds_since_contact(self) -> float:
        return self.stream.seconds_since_contact

    @property
    def exhausted(self) -> bool:
        if not self.stream.exhausted:
            return False
        self._read_lines(1)
        return not self._lines

    @property
    def assignment(self) -> list[int]:
        return [STREAM_PARTITION, ANSWERS_PARTITION]

    def listen(self, on_assign: PartitionCallback, on_revoke: PartitionCallback) -> None:
        """``on_assign([0, 1])`` runs at the first poll; a file never revokes a partition."""
        self._on_assign = on_assign

    def poll(self, max_records: int = 500, timeout: float = 0.0) -> list[SourceRecord]:
        """The answers not delivered yet, then the stream file's next records: at most
        ``max_records`` in all. ``timeout`` is never waited on (as a file source's)."""
        if not self._assigned:
            self._assigned = True
            if self._on_assign is not None:
                self._on_assign(self.assignment)
        self._read_lines(max_records)
        answers, self._lines = self._lines[:max_records], self._lines[max_records:]
        first, self._next = self._next, self._next + len(answers)
        records = [
            SourceRecord(self.source, ANSWERS_PARTITION, first + i, value)
            for i, value in enumerate(answers)
        ]
        if len(records) < max_records:
            records += self.stream.poll(max_records - len(records), timeout)
        return records

    def commit(self, offsets: Mapping[int, int]) -> bool:
        if STREAM_PARTITION in offsets:
            self.stream.commit({STREAM_PARTITION: offsets[STREAM_PARTITION]})
        if ANSWERS_PARTITION in offsets:
            self._committed = int(offsets[ANSWERS_PARTITION])
        return True

    def committed(self, partition: int) -> int | None:
        if partition == ANSWERS_PARTITION:
            return self._committed
        return self.stream.committed(partition)

    def seek(self, offsets: Mapping[int, int]) -> None:
        if STREAM_PARTITION in offsets:
            self.stream.seek({STREAM_PARTITION: offsets[STREAM_PARTITION]})
        if ANSWERS_PARTITION in offsets:
            self._seek_answers(int(offsets[ANSWERS_PARTITION]))

    def lag(self) -> dict[int, int]:
        """The stream file's lag, and the complete lines of the log not delivered yet."""
        unread = len(self._lines)
        if self._open() is not None:
            assert self._fh is not None
            rest = self._partial
            position, size = self._fh.tell(), os.fstat(self._fh.fileno()).st_size
            for start in range(position, size, _CHUNK):
                rest += os.pread(self._fh.fileno(), min(_CHUNK, size - start), start)
                unread += rest.count(b"\n")
                rest = rest.rpartition(b"\n")[2]
        return {**self.stream.lag(), ANSWERS_PARTITION: unread}

    def close(self) -> None:
        self.stream.close()
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # ------------------------------------------------------------------ the log
    def _open(self) -> BinaryIO | None:
        """The log, open for reading (None until the serving process has created it)."""
        if self._fh is None and self.path.exists():
            self._fh = open(self.path, "rb", buffering=0)  # every read sees what was appended
        return self._fh

    def _read_lines(self, wanted: int) -> None:
        """Read the log on until ``wanted`` complete lines wait to be delivered, or its end."""
        fh = self._open()
        while fh is not None and len(self._lines) < wanted:
            chunk = fh.read(_CHUNK)
            if not chunk:
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            self._lines += lines

    def _seek_answers(self, offset: int) -> None:
        """Continue at line ``offset``: the log is read again from its start, up to there."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._lines, self._partial, skipped = [], b"", 0
        fh = self._open()
        while fh is not None and skipped < offset:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            kept = offset - skipped  # lines of this chunk still to skip
            self._lines = lines[kept:]
            skipped += min(kept, len(lines))
        self._next = skipped
        if skipped < offset:
            log.warning(
                "%s holds %d complete lines, fewer than the checkpoint's offset %d: was it "
                "replaced? Continuing after its last line", self.path, skipped, offset,
            )  # fmt: skip
