"""Questions already answered: the ids that make a person's answer count once.

An answer to one of the service's questions travels as an ordinary constraint message with a
``question`` key (its question id) on top (``connectors/MESSAGES.md`` allows unknown keys). The
same answer can reach the stream twice: a browser retries after a crash between the durable
append and the response, or two consoles answer the same question. Whoever keeps an
:class:`AnsweredQuestions` learns the first message of a question and skips the others.

Finding the id costs a message without one a byte search only (:func:`question_of`): the main
stream's messages never carry the key, and are never parsed for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

#: Question ids remembered: the oldest are forgotten beyond this many. An answer arrives again
#: within moments of the first (a retry, a second console), never 100,000 answers later.
MAX_ANSWERED = 100_000
#: The bytes every message with a question id holds: others are never parsed for one.
QUESTION_KEY = b'"question"'


def question_of(value: bytes | None) -> str | None:
    """The question id a message answers, or None (no ``question`` key, not JSON, not a
    non-empty string).

    >>> question_of(b'{"v":1,"kind":"triplet","question":"q1"}')
    'q1'
    >>> question_of(b'{"v":1,"kind":"triplet"}'), question_of(b"OA\\x01"), question_of(None)
    (None, None, None)
    >>> question_of(b'{"question": 7}'), question_of(b'{"question":"q1"')  # garbled: not ours
    (None, None)
    """
    if value is None or QUESTION_KEY not in value:
        return None
    try:
        message = json.loads(value)
    except ValueError:  # the decoder dead-letters it as undecodable
        return None
    question = message.get("question") if isinstance(message, dict) else None
    return question if isinstance(question, str) and question else None


class AnsweredQuestions:
    """An insertion-ordered set of question ids holding at most ``limit`` (the oldest go).

    >>> answered = AnsweredQuestions(["a", "b"], limit=3)
    >>> answered.add("c"), answered.add("a"), "a" in answered
    (True, False, True)
    >>> answered.add("d"), list(answered)  # "a" is the oldest: forgotten
    (True, ['b', 'c', 'd'])
    >>> AnsweredQuestions(list(answered), limit=3) == answered
    True
    """

    def __init__(self, ids: Iterable[str] = (), limit: int = MAX_ANSWERED) -> None:
        self.limit = limit
        self._ids: dict[str, None] = {}
        for question in ids:
            self.add(question)

    def add(self, question: str) -> bool:
        """Remember ``question``; False when it was remembered already."""
        if question in self._ids:
            return False
        self._ids[question] = None
        if len(self._ids) > self.limit:
            del self._ids[next(iter(self._ids))]  # dicts keep insertion order: the oldest
        return True

    def __contains__(self, question: object) -> bool:
        return question in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AnsweredQuestions):
            return NotImplemented
        return list(self._ids) == list(other._ids)

    def __repr__(self) -> str:
        return f"AnsweredQuestions({len(self)} ids, limit={self.limit})"
