"""Constraint messages: encode to JSON or binary, decode either (the format is detected).

``decode`` turns one message into a ``Constraint``; ``decode_batch`` turns many into array
batches for throughput, keeping stream order. Both report bad input as ``DecodeError`` with a
stable ``reason`` (see ``oahu.connectors.constraint.REASONS``). ``encode_constraints`` and
``encode_stream`` write rows of constraint arrays, or a stream file's constraints, as messages.
Formats: ``connectors/MESSAGES.md``.

>>> msg = encode_binary(Constraint("triplet", ids=("5", "6", "7")))
>>> decode(msg).ids == decode(encode_json(decode(msg))).ids == ("5", "6", "7")
True
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from oahu.connectors.binary_codec import (
    MAGIC,
    check_size,
    decode_binary,
    decode_binary_run,
    decode_uniform,
    encode_binary,
    encode_binary_batch,
    parse_header,
)
from oahu.connectors.constraint import (
    DEFAULT_MODALITY,
    MISSING_LABEL,
    REASONS,
    Constraint,
    ConstraintBatch,
    DecodeError,
)
from oahu.connectors.json_codec import decode_json, encode_json
from oahu.streams.cross_modal import PAIR, CrossModalStream, load_cross_modal_stream
from oahu.streams.stream_families import OtherStreamFamily
from oahu.streams.stream_file import load_stream

__all__ = [
    "DEFAULT_MODALITY",
    "MISSING_LABEL",
    "REASONS",
    "Constraint",
    "ConstraintBatch",
    "DecodeError",
    "DecodedBatch",
    "decode",
    "decode_batch",
    "encode_binary",
    "encode_constraints",
    "encode_cross_modal",
    "encode_json",
    "encode_stream",
]

_JSON_START = frozenset(b"{ \t\r\n")


def message_format(buf: bytes) -> str:
    """``"binary"`` (starts with the magic bytes) or ``"json"`` (starts with ``{`` or
    whitespace); ``DecodeError("undecodable")`` for anything else.

    >>> message_format(b'{"v": 1}'), message_format(b"OA\x01")
    ('json', 'binary')
    """
    if buf[:2] == MAGIC:
        return "binary"
    if buf[:1] and buf[0] in _JSON_START:
        return "json"
    raise DecodeError("undecodable", "neither a JSON object nor a binary constraint message")


def decode(buf: bytes) -> Constraint:
    """Decode one message in either format; raises ``DecodeError``."""
    buf = _as_bytes(buf)
    return decode_binary(buf) if message_format(buf) == "binary" else decode_json(buf)


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
    try:  # a tombstone (None) or any other non-bytes raises here and is handled per record
        uniform = decode_uniform(values)
    except Exception:  # a decoder bug costs the records it fails on (below), never the batch
        uniform = None
    if uniform is not None:
        batch, errors = uniform
        return DecodedBatch([] if batch is None else [batch], errors)
    return _decode_runs(values)


def _json_layout(c: Constraint) -> Hashable:
    layout = (c.kind, c.by_id, c.dim, c.labels is not None, c.ts is not None)
    return ("json", *layout, c.modalities is not None)


def _decode_runs(values: list[bytes]) -> DecodedBatch:
    out = DecodedBatch()
    run_key: Hashable = None
    run_index: list[int] = []
    run_items: list = []  # raw bytes for a binary run, Constraints for a JSON run

    def flush() -> None:
        if not run_index:
            return
        index = np.asarray(run_index, dtype=np.int64)
        try:
            if run_key[0] == "json":  # type: ignore[index]
                out.batches.append(_stack(run_items, index))
            else:
                layout = run_key[1]  # type: ignore[index]
                batch, errors = decode_binary_run(layout, run_items, index)
                out.batches.extend([] if batch is None else [batch])
                out.errors.extend(errors)
        except Exception as e:  # a decoder bug: the run's records are dead letters
            out.errors.extend((int(i), _unexpected(e)) for i in index)
        run_index.clear()
        run_items.clear()

    for i, buf in enumerate(values):
        try:  # each record's format is told once, then its run decodes it
            buf = _as_bytes(buf)
            if message_format(buf) == "binary":
                layout = parse_header(buf)
                check_size(layout, len(buf))
                key, item = ("binary", layout), buf
            else:
                item = decode_json(buf)
                key = _json_layout(item)
        except DecodeError as e:
            out.errors.append((i, e))
            continue
        except Exception as e:  # a decoder bug: this record's dead letter, not a crash
            out.errors.append((i, _unexpected(e)))
            continue
        if key != run_key:
            flush()
            run_key = key
        run_index.append(i)
        run_items.append(item)
    flush()
    out.errors.sort(key=lambda e: e[0])
    return out


def _as_bytes(value: object) -> bytes:
    """The record's bytes; a Kafka tombstone (None) or any other non-bytes is undecodable."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise DecodeError("undecodable", f"expected bytes, got {type(value).__name__}")
    return bytes(value)


def _unexpected(error: Exception) -> DecodeError:
    return DecodeError("undecodable", f"the decoder failed: {type(error).__name__}: {error}"[:500])


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
        modalities=None
        if first.modalities is None
        else np.array([c.modalities for c in constraints], dtype=str),
    )


def encode_constraints(
    kind: str,
    ids: np.ndarray | None = None,
    x: np.ndarray | None = None,
    similar: np.ndarray | None = None,
    fmt: str = "binary",
    modalities: np.ndarray | None = None,
) -> list[bytes]:
    """One message per row, in order: items by (integer) ``ids`` (n, n_items) or inline ``x``
    (n, n_items, dim), n_items 3, 2 or 4 for a triplet, pair or quadruplet; ``similar`` (n,)
    for pairs; ``fmt`` "binary" or "json"; ``modalities`` (n, n_items) modality names, which
    make the messages version 2 (None: version 1, every item in the default modality).

    >>> encode_constraints("pair", ids=np.array([[4, 2]]), similar=np.array([True]), fmt="json")
    [b'{"v":1,"kind":"pair","left":{"id":"4"},"right":{"id":"2"},"similar":true}']
    >>> [len(m) for m in encode_constraints("quadruplet", ids=np.array([[4, 2, 4, 9]] * 2))]
    [48, 48]
    """
    if fmt not in ("binary", "json"):
        raise ValueError(f"fmt: 'binary' or 'json', got {fmt!r}")
    n = len(ids if ids is not None else x)  # type: ignore[arg-type]
    if modalities is not None:
        modalities = np.asarray(modalities)
    batch = ConstraintBatch(
        kind, np.arange(n), ids=ids, x=x, similar=similar, modalities=modalities
    )
    if fmt == "binary":
        return encode_binary_batch(batch)
    return [encode_json(batch.row(i)) for i in range(n)]


def encode_cross_modal(
    stream: CrossModalStream, start: int = 0, stop: int | None = None, fmt: str = "binary"
) -> list[bytes]:
    """Version-2 messages of a cross-modal stream's constraints ``start:stop``, in stream order,
    pairs and triplets alike, with items by id (the object indices) naming their modality.

    >>> from oahu.streams.cross_modal import PAIR, TRIPLET
    >>> s = CrossModalStream(("img", "txt"), (np.eye(2), np.ones((2, 3))), [0, 1], [0, 1], [],
    ...     [[0, 0, -1], [1, 1, 0]], [[0, 1, -1], [0, 1, 1]], [PAIR, TRIPLET], [True, False])
    >>> encode_cross_modal(s, 0, 1, "json")
    [b'{"v":2,"kind":"pair","left":{"id":"0","modality":"img"},"right":{"id":"0","modality":"txt"},"similar":true}']
    """
    stop = len(stream) if stop is None else stop
    names = np.array(stream.modalities)
    kinds = stream.kinds[start:stop]
    values: list[bytes] = []
    if not len(kinds):
        return values
    bounds = [0, *(np.flatnonzero(np.diff(kinds)) + 1).tolist(), len(kinds)]
    for a, b in itertools.pairwise(bounds):  # one run of one kind at a time
        rows = slice(start + a, start + b)
        pair = kinds[a] == PAIR
        width = 2 if pair else 3
        values += encode_constraints(
            "pair" if pair else "triplet",
            ids=stream.constraints[rows, :width],
            similar=stream.similar[rows] if pair else None,
            fmt=fmt,
            modalities=names[stream.modality[rows, :width]],
        )
    return values


def encode_stream(
    path: str | os.PathLike[str],
    fmt: str = "binary",
    inline: bool = False,
    start: int = 0,
    limit: int | None = None,
) -> list[bytes]:
    """The messages of a stream file's constraints ``start:start+limit``, in stream order, with
    items by id (the item indices) or, with ``inline``, their feature vectors.

    >>> import tempfile, pathlib
    >>> from oahu.streams.stream_file import ConstraintStream
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "s.npz"
    >>> ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]]).save(path)
    >>> encode_stream(path, "json")
    [b'{"v":1,"kind":"triplet","anchor":{"id":"0"},"positive":{"id":"1"},"negative":{"id":"2"}}']
    """
    try:
        stream = load_stream(path)
    except OtherStreamFamily as refusal:
        if not refusal.cross_modal:
            raise
        if inline:
            raise ValueError(
                f"inline: {os.fspath(path)} is a cross-modal stream, whose items have one "
                "dimension per modality and one message holds items of one dimension; send "
                "them by id"
            ) from None
        cross = load_cross_modal_stream(path)
        stop = len(cross) if limit is None else min(len(cross), start + limit)
        return encode_cross_modal(cross, start, stop, fmt)
    stop = len(stream) if limit is None else min(len(stream), start + limit)
    ids = stream.constraints[start:stop]
    similar = None if stream.similar is None else stream.similar[start:stop]
    if inline:
        return encode_constraints(stream.kind, x=stream.X[ids], similar=similar, fmt=fmt)
    return encode_constraints(stream.kind, ids=ids, similar=similar, fmt=fmt)
