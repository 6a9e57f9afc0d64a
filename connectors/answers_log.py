"""The answers log: people's answers to the service's questions, durable before they are
acknowledged.

One constraint message (JSON, ``connectors/MESSAGES.md``) per line, in ``ANSWERS_FILE`` of the
checkpoint directory. The serving process is its one writer (:class:`AnswersLog`): each answer
is written and ``fsync``ed before the person is told it was accepted, so an accepted answer
survives any crash. The learner process reads it as a second partition beside its stream file
(:class:`oahu.connectors.answers_source.WithAnswers`), line numbers as offsets.

A crash in the middle of a write can leave the last line without its newline: the reader never
delivers such a line, and the writer cuts it off when it opens the log (that answer was never
acknowledged, so nobody was told it counts).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from oahu.connectors.answered import AnsweredQuestions, question_of

log = logging.getLogger(__name__)

ANSWERS_FILE = "answers.jsonl"


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AnswersLog:
    """Appends messages to the answers log at ``path``, one line each, durably.

    Opening it cuts off a torn last line and reads back how many lines it holds (``lines``, the
    offset of the next) and the question ids they answer (``questions``).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / ANSWERS_FILE
    >>> answers = AnswersLog(path)
    >>> answers.append(b'{"v":1,"kind":"triplet","question":"q1"}'), answers.lines
    (0, 1)
    >>> with open(path, "ab") as fh:  # a crash in the middle of the next write
    ...     _ = fh.write(b'{"v":1,"kind":"tri')
    >>> answers.close()
    >>> again = AnswersLog(path)
    >>> again.lines, list(again.questions), path.read_bytes()
    (1, ['q1'], b'{"v":1,"kind":"triplet","question":"q1"}\\n')
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        existed = self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if not existed:  # its name is durable too, not only what is written in it
            _fsync_directory(self.path.parent)
        self.lines = 0
        self.questions = AnsweredQuestions()
        self._size = self._read_back()

    def _read_back(self) -> int:
        """Count the complete lines and collect their question ids; cut off a torn last line.
        Returns the size of the complete lines."""
        complete = 0
        with open(self.path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # only the last line can lack its newline
                complete += len(line)
                self.lines += 1
                question = question_of(line)
                if question is not None:
                    self.questions.add(question)
        torn = os.fstat(self._fd).st_size - complete
        if torn:
            log.warning(
                "%s: cutting off a torn last line (%d bytes, an answer whose write a crash "
                "interrupted; it was never acknowledged)", self.path, torn,
            )  # fmt: skip
            os.ftruncate(self._fd, complete)
            os.fsync(self._fd)
        return complete

    def append(self, message: bytes) -> int:
        """Write ``message`` as the next line and ``fsync`` it; returns its offset (line number).

        A write that fails part way is undone, so the log never holds a torn line between
        complete ones.
        """
        if b"\n" in message or b"\r" in message:
            raise ValueError("answers log: a message must be one line")
        data = message + b"\n"
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)
        offset, self.lines = self.lines, self.lines + 1
        return offset

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
