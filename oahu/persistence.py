"""Saving and loading learners: the one format of checkpoints, ``oahu replay --save-model``, the
pipe between the service's two processes, pickling and the Python API.

A saved learner is one header line and a payload::

    oahu-learner 2 sha256=<64 hex digits> size=<payload bytes>\n
    <payload: torch.save({"format_version": 1, "state": Learner.get_state(), "extra": {...}})>

The payload holds only plain containers and tensors, so it loads with ``torch.load(...,
weights_only=True)``: opening one never executes code from it. The header's SHA-256 and size are
checked before the payload is read at all: a flipped, truncated or foreign byte anywhere is
refused with :class:`LearnerFileError` (a ``ValueError`` naming the file), never loaded as a
silently different model (torch's zip reader checks no checksum). Files of earlier releases,
the bare payload without a header, still load, with a warning that they are unverified.
``state["params"]`` is the learner's ``get_params()``, and rebuilding a learner calls its class
with those parameters, as its ``migrate_params`` maps a checkpoint of an earlier release onto
them, before ``set_state``.

>>> from oahu.learners.baselines.rdml import RDML
>>> rdml = RDML(n_features=2, learning_rate=0.2)
>>> _ = rdml.learn_pairs([[2.0, 0.0]], [[0.0, 0.0]], [True])
>>> copy, extra = learner_from_bytes(learner_to_bytes(rdml, extra={"offset": 1}))
>>> copy, extra, copy.metric_matrix.tolist() == rdml.metric_matrix.tolist()
(RDML(n_features=2, learning_rate=0.2), {'offset': 1}, True)
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

from oahu.learner import Learner
from oahu.registry import CROSS_MODAL_NAMES, cross_modal_class, learner_class
from oahu.streams.atomic import atomic_open

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # of the payload's blob


def learner_from_state(state: dict[str, Any], device: str | None = None) -> Learner:
    """A new learner holding ``state`` (``Learner.get_state``), built from its parameters.

    ``device`` replaces the device the learner was saved with, for learners that have one. A
    cross-modal model (:data:`oahu.registry.CROSS_MODAL_NAMES`) is rebuilt by its class's
    ``from_state``.
    """
    if state.get("learner") in CROSS_MODAL_NAMES:
        return cross_modal_class(state["learner"]).from_state(state)
    cls = learner_class(state["learner"])
    params = cls.migrate_params(state["params"])
    if device is not None and cls.capabilities.torch_device:
        params["device"] = device
    learner = cls(n_features=state["n_features"], **params)
    learner.set_state(state)
    return learner


class LearnerFileError(ValueError):
    """A saved learner that cannot be loaded: corrupt, truncated, or not a learner at all.

    The message is one line naming the file (or "the data") and what is wrong with it.
    """


HEADER_MAGIC = b"oahu-learner"
ENVELOPE_VERSION = 2  # the header line; format 1 was the bare payload (no checksum)
_HEADER = re.compile(rb"oahu-learner (\d+) sha256=([0-9a-f]{64}) size=(\d+)")
_HEADER_MAX = 128  # bytes within which the header line ends
_ZIP_MAGIC = b"PK\x03\x04"  # how torch.save's payload, and so a file of an earlier release, starts


def verified_payload(data: bytes, where: str = "the data") -> tuple[bytes, bool]:
    """The payload of saved learner ``data`` once its checksum matches, and whether it was
    verified (False: a file of an earlier release, which has no checksum).

    Raises :class:`LearnerFileError` naming ``where`` when the header or checksum do not match.

    >>> verified_payload(b"PK\\x03\\x04 an earlier release's zip")
    (b"PK\\x03\\x04 an earlier release's zip", False)
    >>> try:
    ...     verified_payload(b"oahu-learner 2 sha256=" + b"0" * 64 + b" size=3\\nhi")
    ... except LearnerFileError as error:
    ...     print(error)
    the data: truncated or extended learner file: 2 payload bytes, the header records 3
    """
    if data.startswith(_ZIP_MAGIC):
        return data, False
    if not data.startswith(HEADER_MAGIC):
        shown = data[:16]
        raise LearnerFileError(
            f"{where}: not an oahu learner file ({len(data)} bytes starting {shown!r})"
        )
    line_end = data.find(b"\n", 0, _HEADER_MAX)
    header = _HEADER.fullmatch(data[:line_end]) if line_end >= 0 else None
    if header is None:
        raise LearnerFileError(
            f"{where}: corrupt learner file: unreadable header {data[:_HEADER_MAX]!r}"
        )
    version, digest, size = int(header[1]), header[2].decode(), int(header[3])
    if version != ENVELOPE_VERSION:
        raise LearnerFileError(
            f"{where}: learner file of version {version}, this oahu reads {ENVELOPE_VERSION}"
        )
    payload = data[line_end + 1 :]
    if len(payload) != size:
        raise LearnerFileError(
            f"{where}: truncated or extended learner file: {len(payload)} payload bytes, the "
            f"header records {size}"
        )
    actual = hashlib.sha256(payload).hexdigest()
    if actual != digest:
        raise LearnerFileError(
            f"{where}: corrupt learner file: its {size} payload bytes have SHA-256 "
            f"{actual[:12]}..., the header records {digest[:12]}..."
        )
    return payload, True


def read_blob(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked payload of the learner file ``path`` as plain data (``format_version``,
    ``state``, ``extra``), read with ``weights_only=True`` and no learner rebuilt: to inspect a
    file. Raises :class:`LearnerFileError` as :func:`load_learner` does."""
    return _load_blob(Path(path).read_bytes(), str(path))[0]


def _load_blob(data: bytes, where: str) -> tuple[Any, bool]:
    """The checked payload of ``data`` as plain data, and whether its checksum was verified."""
    payload, verified = verified_payload(data, where)
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True), verified
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ...
        unverified = "" if verified else " (an earlier release's file, without a checksum)"
        raise LearnerFileError(
            f"{where}: unreadable learner file{unverified}: {_unreadable(exc)}"
        ) from None


def _unreadable(exc: BaseException) -> str:
    """What torch's reader said, without its advice to load with ``weights_only=False``
    (executing code from a file that failed a check is never the remedy)."""
    text = str(exc).strip()
    first = text.splitlines()[0].split(". ")[0][:160] if text else ""
    if "weights_only" in text or not first:
        return type(exc).__name__
    return f"{type(exc).__name__}: {first}"


def _decode(data: bytes, where: str, device: str | None) -> tuple[Learner, dict[str, Any]]:
    blob, verified = _load_blob(data, where)
    if not isinstance(blob, dict) or not isinstance(blob.get("state"), dict):
        raise LearnerFileError(f"{where}: holds no saved learner (no 'state')")
    if blob.get("format_version") != FORMAT_VERSION:
        raise LearnerFileError(
            f"format_version: {where} has {blob.get('format_version')!r}, "
            f"this oahu reads {FORMAT_VERSION}"
        )
    try:
        learner = learner_from_state(blob["state"], device)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise LearnerFileError(
            f"{where}: holds a learner this oahu cannot rebuild: {_unreadable(exc)}"
        ) from exc
    if not verified:
        log.warning(
            "%s: saved by an earlier oahu without a checksum: loaded unverified "
            "(the next save adds one)",
            where,
        )
    return learner, dict(blob.get("extra") or {})


def learner_to_bytes(
    learner: Learner, extra: dict[str, Any] | None = None, queries_only: bool = False
) -> bytes:
    """``learner`` (and optional plain ``extra`` data) as bytes: a header line with the SHA-256
    and size of the payload, then the payload (``torch.save`` of plain data). ``queries_only``:
    only what answering queries needs (``Learner.get_state``), e.g. for a serving snapshot."""
    state = learner.get_state(queries_only=queries_only)
    blob = {"format_version": FORMAT_VERSION, "state": state, "extra": extra or {}}
    payload = io.BytesIO()
    torch.save(blob, payload)
    data = payload.getvalue()
    digest = hashlib.sha256(data).hexdigest().encode()
    header = b"%s %d sha256=%s size=%d\n" % (HEADER_MAGIC, ENVELOPE_VERSION, digest, len(data))
    return header + data


def learner_from_bytes(data: bytes, device: str | None = None) -> tuple[Learner, dict[str, Any]]:
    """The learner and ``extra`` of :func:`learner_to_bytes`'s output; raises
    :class:`LearnerFileError` if ``data`` is corrupt."""
    return _decode(data, "the data", device)


def save_learner(
    learner: Learner, path: str | os.PathLike[str], extra: dict[str, Any] | None = None
) -> None:
    """Write ``learner`` (and ``extra``) to ``path`` atomically: a crash leaves the old file or
    the complete new one. The file carries the SHA-256 of its payload."""
    data = learner_to_bytes(learner, extra)
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def load_learner(
    path: str | os.PathLike[str], device: str | None = None
) -> tuple[Learner, dict[str, Any]]:
    """The learner and ``extra`` saved by :func:`save_learner`.

    Raises :class:`LearnerFileError` (naming ``path``) when the file is corrupt, truncated or no
    learner file; a file of an earlier release (no checksum) loads with a warning.
    """
    return _decode(Path(path).read_bytes(), str(path), device)


def restore(data: bytes) -> Learner:
    """The learner of :func:`learner_to_bytes`'s output (how a pickled learner is read back)."""
    return learner_from_bytes(data)[0]
