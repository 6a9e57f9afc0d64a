"""Constraint messages: encode to JSON or binary, decode either (the format is detected).

``decode`` turns one message into a ``Constraint``; ``decode_batch`` turns many into array
batches for throughput, keeping stream order. Both report bad input as ``DecodeError`` with a
stable ``reason`` (see ``oahu.connectors.constraint.REASONS``). Formats: ``connectors/MESSAGES.md``.

>>> msg = encode_binary(Constraint("triplet", ids=("5", "6", "7")))
>>> decode(msg).ids == decode(encode_json(decode(msg))).ids == ("5", "6", "7")
True
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from oahu.connectors.binary_codec import (
    MAGIC,
    decode_binary,
    decode_binary_run,
    decode_uniform,
    encode_binary,
    parse_header,
)
from oahu.connectors.constraint import (
    MISSING_LABEL,
    REASONS,
    Constraint,
    ConstraintBatch,
    DecodeError,
)
from oahu.connectors.json_codec import decode_json, encode_json

__all__ = [
    "MISSING_LABEL",
    "REASONS",
    "Constraint",
    "ConstraintBatch",
    "DecodeError",
    "DecodedBatch",
    "decode",
    "decode_batch",
    "encode_binary",
    "encode_json",
]

_JSON_START = frozenset(b"{ \t\r\n")


def decode(buf: bytes) -> Constraint:
    """Decode one message in either format; raises ``DecodeError``."""
    if not isinstance(buf, bytes | bytearray | memoryview):
        raise DecodeError("undecodable", f"expected bytes, got {type(buf).__name__}")
    buf = bytes(buf)
    if buf[:2] == MAGIC:
        return decode_binary(buf)
    if buf and buf[0] in _JSON_START:
        return decode_json(buf)
    raise DecodeError("undecodable", "neither a JSON object nor a binary constraint message")


@dataclass
class DecodedBatch:
    """``batches``: maximal runs of same-layout constraints, in input order (one batch for a
    homogeneous stream). ``errors``: (input index, error) for every message that was dropped."""

    batches: list[ConstraintBatch] = field(default_factory=list)
    errors: list[tuple[int, DecodeError]] = field(default_factory=list)

    @property
    def n_decoded(self) -> int:
        return sum(len(b) for b in self.batches)


def decode_batch(values: Sequence[bytes]) -> DecodedBatch:
    """Decode many messages to array batches; bad messages become errors, never exceptions.

    >>> msgs = [encode_binary(Constraint("triplet", ids=(str(i), "1", "2"))) for i in range(3)]
    >>> out = decode_batch([*msgs, b"junk"])
    >>> [len(b) for b in out.batches], out.batches[0].ids[:, 0].tolist(), out.errors[0][0]
    ([3], [0, 1, 2], 3)
    """
    values = list(values)
    if not values:
        return DecodedBatch()
    uniform = decode_uniform(values)
    if uniform is not None:
        batch, errors = uniform
        return DecodedBatch([] if batch is None else [batch], errors)
    return _decode_runs(values)


def _json_layout(c: Constraint) -> Hashable:
    return ("json", c.kind, c.by_id, c.dim, c.labels is not None, c.ts is not None)


def _decode_runs(values: list[bytes]) -> DecodedBatch:
    out = DecodedBatch()
    run_key: Hashable = None
    run_index: list[int] = []
    run_items: list = []  # raw bytes for a binary run, Constraints for a JSON run

    def flush() -> None:
        if not run_index:
            return
        index = np.asarray(run_index, dtype=np.int64)
        if run_key[0] == "json":  # type: ignore[index]
            out.batches.append(_stack(run_items, index))
        else:
            batch, errors = decode_binary_run(run_key[1], run_items, index)  # type: ignore[index]
            out.batches.extend([] if batch is None else [batch])
            out.errors.extend(errors)
        run_index.clear()
        run_items.clear()

    for i, buf in enumerate(values):
        buf = bytes(buf)
        try:
            if buf[:2] == MAGIC:
                layout = parse_header(buf)
                if len(buf) != layout.size:
                    decode_binary(buf)  # raises the size error with its detail
                key, item = ("binary", layout), buf
            else:
                item = decode(buf)
                key = _json_layout(item)
        except DecodeError as e:
            out.errors.append((i, e))
            continue
        if key != run_key:
            flush()
            run_key = key
        run_index.append(i)
        run_items.append(item)
    flush()
    out.errors.sort(key=lambda e: e[0])
    return out


def _stack(constraints: list[Constraint], index: np.ndarray) -> ConstraintBatch:
    """Constraints of one layout (as decoded from JSON) as one array batch."""
    first = constraints[0]
    ts = None
    if first.ts is not None:
        ts = np.array([c.ts for c in constraints], dtype=np.float64)
    labels = None
    if first.labels is not None:
        labels = np.array(
            [[MISSING_LABEL if v is None else v for v in c.labels or ()] for c in constraints],
            dtype=np.int64,
        )
    return ConstraintBatch(
        first.kind,
        index=index,
        ids=np.array([c.ids for c in constraints], dtype=str) if first.by_id else None,
        x=None if first.by_id else np.stack([c.x for c in constraints]),  # type: ignore[misc]
        labels=labels,
        similar=np.array([c.similar for c in constraints]) if first.kind == "pair" else None,
        ts=ts,
    )
