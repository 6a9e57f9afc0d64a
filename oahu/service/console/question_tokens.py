"""Signed questions: what the annotation page hands back with an answer.

Every question the console asks travels to the browser as a token the service signed
(HMAC-SHA256): a fresh random question id, the three item ids, the snapshot version it was asked
under and when. An answer then names a question the service asked, about the items it asked
about, and nothing a client makes up; the service keeps no table of questions asked.

The key is created once in the checkpoint directory (``KEY_FILE``, mode 0600), so tokens stay
valid across restarts of the service.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

KEY_FILE = "console.key"
KEY_BYTES = 32
#: How long after it was asked a question's answer is taken: later, the model and the items
#: have moved on, and the page asks again.
QUESTION_TTL_SECONDS = 3600.0


class BadToken(ValueError):
    """A token the service did not sign, or not a token at all."""


@dataclass(frozen=True)
class AskedQuestion:
    """Is ``anchor`` more similar to ``first`` or to ``second``? As asked: ``question`` is its
    random id, ``snapshot`` the snapshot version that chose it, ``asked_at`` seconds since the
    epoch."""

    question: str
    anchor: str
    first: str
    second: str
    snapshot: int
    asked_at: float

    @classmethod
    def new(
        cls, anchor: str, first: str, second: str, snapshot: int, asked_at: float
    ) -> AskedQuestion:
        """A question with a fresh random id (64 bits: no two questions share one)."""
        return cls(secrets.token_hex(8), anchor, first, second, snapshot, asked_at)


def load_key(directory: str | os.PathLike[str]) -> bytes:
    """The signing key in ``directory``, made (mode 0600) when there is none.

    A new key is written to a temporary file and linked into place, so two processes starting
    at once end up with the same key and nobody reads a half-written one.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> key = load_key(d)
    >>> len(key), load_key(d) == key, oct((d / KEY_FILE).stat().st_mode & 0o777)
    (32, True, '0o600')
    """
    path = Path(directory) / KEY_FILE
    if not path.exists():
        temp = path.with_name(f".{KEY_FILE}.{os.getpid()}.tmp")  # swept at start if left over
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:  # another process made it first: theirs is the key
            pass
        finally:
            temp.unlink()
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{path}: a console key is {KEY_BYTES} bytes, this file {len(key)}; remove it to "
            "make a new one (questions asked before then can no longer be answered)"
        )
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class QuestionTokens:
    """Signs questions into tokens and reads them back.

    >>> tokens = QuestionTokens(b"k" * 32)
    >>> asked = AskedQuestion("9b1f", "17", "4", "90", snapshot=3, asked_at=1.5)
    >>> token = tokens.sign(asked)
    >>> tokens.verify(token) == asked
    True
    >>> QuestionTokens(b"x" * 32).verify(token)
    Traceback (most recent call last):
    ...
    oahu.service.console.question_tokens.BadToken: its signature does not match
    """

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def sign(self, asked: AskedQuestion) -> str:
        payload = json.dumps(astuple(asked), separators=(",", ":")).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def verify(self, token: str) -> AskedQuestion:
        """The question ``token`` names; :class:`BadToken` saying why when this service did not
        sign it."""
        parts = token.split(".")
        if len(parts) != 2:
            raise BadToken("not a question token")
        try:
            payload, mac = _unb64(parts[0]), _unb64(parts[1])
        except (binascii.Error, ValueError):
            raise BadToken("not a question token") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise BadToken("its signature does not match")
        return _question(json.loads(payload))  # signed by this service: well formed


def _question(fields: Any) -> AskedQuestion:
    question, anchor, first, second, snapshot, asked_at = fields
    return AskedQuestion(question, anchor, first, second, int(snapshot), float(asked_at))
