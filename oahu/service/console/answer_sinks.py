"""Where the console's accepted answers go: the service's durable input path.

An answer is a triplet constraint message that also names its question (``question``) and who
gave it (``annotator``). It is stored durably before the person is told it was accepted:

- with a file source, appended and ``fsync``ed to the answers log in the checkpoint directory
  (:class:`AnswersFileSink`), which the learner process reads as a second partition;
- with a Kafka source, produced to the service's own input topic and acknowledged by the
  brokers (``acks="all"``) (:class:`AnswersKafkaSink`).

A sink also remembers the questions answered (the file sink from the log, so across restarts;
the Kafka sink for the process's life), so that a retried answer is told ``duplicate`` at once
and not sent again. That is a courtesy: an answer that reaches the stream twice anyway (a crash
between the append and the response, two services) is learned once because the learner skips
a question it has consumed (:class:`oahu.connectors.answered.AnsweredQuestions` in its
checkpoint).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from oahu.connectors.answered import AnsweredQuestions
from oahu.connectors.answers_log import ANSWERS_FILE, AnswersLog
from oahu.service.config import ServiceConfig

#: Longest wait for the brokers to acknowledge an answer before telling the person to retry.
KAFKA_ACK_TIMEOUT_SECONDS = 10.0


class AnswerNotStored(RuntimeError):
    """The answer could not be stored durably (503: the person may send it again)."""


class AnswerSink:
    """Stores answers durably, each question's once; ``target`` says where (a file path or a
    Kafka topic). Subclasses write (``_append``); this base keeps the questions answered and
    lets one answer at a time in, so two answers to one question cannot both be appended.

    >>> class Memory(AnswerSink):
    ...     def _append(self, question, message): self.stored.append(message)
    >>> sink = Memory("memory"); sink.stored = []
    >>> sink.submit("q1", b"{}"), sink.submit("q1", b"{}"), sink.is_answered("q1"), sink.stored
    (True, False, True, [b'{}'])
    """

    def __init__(self, target: str, answered: AnsweredQuestions | None = None) -> None:
        self.target = target
        self.answered = AnsweredQuestions() if answered is None else answered
        self._lock = threading.Lock()

    def is_answered(self, question: str) -> bool:
        return question in self.answered

    def submit(self, question: str, message: bytes) -> bool:
        """Store ``message``, the answer to ``question``, durably; False (nothing stored) when
        the question was answered already. :class:`AnswerNotStored` when it cannot be stored."""
        with self._lock:
            if question in self.answered:
                return False
            self._append(question, message)
            self.answered.add(question)
            return True

    def _append(self, question: str, message: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release the file or the producer."""


class AnswersFileSink(AnswerSink):
    """Appends answers to the answers log at ``path`` (:class:`AnswersLog`), whose answered
    questions it starts from."""

    def __init__(self, path: str | Path) -> None:
        self.log = AnswersLog(path)
        super().__init__(str(Path(path).resolve()), self.log.questions)

    def _append(self, question: str, message: bytes) -> None:
        try:
            self.log.append(message)
        except OSError as exc:  # a full or failing disk: nothing was stored
            msg = f"the answer could not be written to {self.target}: {exc}"
            raise AnswerNotStored(msg) from None

    def close(self) -> None:
        self.log.close()


class AnswersKafkaSink(AnswerSink):
    """Produces answers to ``topic`` and waits for the brokers' acknowledgement; the producer
    (``options``: the service's ``--kafka-option`` settings) is made on first use and again
    after a failure, so a broker that is down costs the answers of that time only."""

    def __init__(self, topic: str, bootstrap: str, options: dict[str, Any]) -> None:
        super().__init__(topic)
        self.bootstrap = bootstrap
        self.options = {**options, "acks": "all"}  # an accepted answer is on every replica
        self._sink: Any = None

    def _append(self, question: str, message: bytes) -> None:
        from oahu.connectors.kafka_sink import KafkaSink

        try:
            if self._sink is None:
                self._sink = KafkaSink(self.target, self.bootstrap, config=self.options)
            # keyed by question: two answers to one question land on one partition, in order
            future = self._sink.send(message, key=question.encode())
            future.get(timeout=KAFKA_ACK_TIMEOUT_SECONDS)
        except Exception as exc:  # kafka-python's errors vary by version and cause
            self._drop_producer()
            raise AnswerNotStored(
                f"the brokers did not acknowledge the answer on {self.target}: {exc!r}; "
                "send it again"
            ) from None

    def _drop_producer(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            try:
                sink.close(timeout=0)
            except Exception:  # a broken producer may fail to close too
                pass

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close(timeout=KAFKA_ACK_TIMEOUT_SECONDS)


def answer_sink(config: ServiceConfig) -> AnswerSink:
    """The sink for the service's source: its input topic, or the answers log."""
    if config.is_kafka:
        from kafka import KafkaProducer

        bootstrap, topic, _ = config.kafka_target()
        return AnswersKafkaSink(topic, bootstrap, config.kafka_options(KafkaProducer))
    return AnswersFileSink(Path(config.checkpoint_dir) / ANSWERS_FILE)
