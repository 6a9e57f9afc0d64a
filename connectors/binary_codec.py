"""The compact binary constraint encoding (format version 1; layout in ``MESSAGES.md``).

A 16-byte little-endian header, then an optional float64 timestamp, optional int64 labels and
the items as int64 ids or float32 vectors. Decoding is ``np.frombuffer`` with a structured
dtype per layout, so a run of same-layout messages decodes in one vectorised step.

Kind codes are assigned once and never reused: 1 triplet, 2 pair, 3 quadruplet. A new kind takes
the next free code within version 1 (the header and the field order are unchanged, only the
number of items differs), so a reader that predates it refuses it as ``bad_kind`` and reads
every other message as before.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from oahu.connectors.constraint import (
    MISSING_LABEL,
    ROLES,
    Constraint,
    ConstraintBatch,
    DecodeError,
)

MAGIC = b"OA"
VERSION = 1
# magic, version, kind, flags, similar, reserved (2), dim, reserved (4)
HEADER = struct.Struct("<2sBBBB2sI4s")
# Spelled out rather than derived from the order of CONSTRAINT_KINDS: codes are on the wire for
# good (tests/test_connectors_quadruplets.py checks every kind has one).
KIND_CODES = {"triplet": 1, "pair": 2, "quadruplet": 3}
KIND_NAMES = {code: kind for kind, code in KIND_CODES.items()}
# What a bad_kind error says was expected: "1 (triplet), 2 (pair), 3 (quadruplet)".
_CODES_EXPECTED = ", ".join(f"{code} ({kind})" for kind, code in KIND_CODES.items())
FLAG_INLINE = 0x01  # items are float32 vectors (else int64 ids)
FLAG_LABELS = 0x02  # one int64 label per item follows the timestamp
FLAG_TS = 0x04  # a float64 timestamp follows the header
_KNOWN_FLAGS = FLAG_INLINE | FLAG_LABELS | FLAG_TS
_SIMILAR_BYTE = 5  # the only header byte that varies between messages of one layout
_LAYOUT_BYTES = np.array([i for i in range(HEADER.size) if i != _SIMILAR_BYTE])
_ZERO2, _ZERO4 = b"\0" * 2, b"\0" * 4


@dataclass(frozen=True)
class BinaryLayout:
    """Everything the header fixes about a message: its kind, what follows, and its size."""

    kind: str
    inline: bool
    labels: bool
    ts: bool
    dim: int

    @property
    def n_items(self) -> int:
        return len(ROLES[self.kind])

    @property
    def dtype(self) -> np.dtype:
        """One whole message as a packed structured record."""
        return _record_dtype(self)

    @property
    def size(self) -> int:
        """Bytes of one message, computed from the header alone: a header may declare a size
        no buffer has (dim near 2**32), which must be refused before a dtype is built for it."""
        k = self.n_items
        items = 4 * k * self.dim if self.inline else 8 * k
        return HEADER.size + 8 * self.ts + 8 * k * self.labels + items


@lru_cache(maxsize=256)
def _record_dtype(layout: BinaryLayout) -> np.dtype:
    k = layout.n_items
    fields: list[tuple] = [("head", "u1", (HEADER.size,))]
    if layout.ts:
        fields.append(("ts", "<f8"))
    if layout.labels:
        fields.append(("labels", "<i8", (k,)))
    if layout.inline:
        fields.append(("x", "<f4", (k, layout.dim)))
    else:
        fields.append(("ids", "<i8", (k,)))
    return np.dtype(fields)


def parse_header(buf: bytes) -> BinaryLayout:
    """The layout a binary message declares; raises ``DecodeError`` for a bad header.

    Magic and version (bytes 0-2) are the only bytes every future version keeps in place, so
    they are checked first and an unknown version is reported as such.

    >>> parse_header(encode_binary(Constraint("quadruplet", ids=("1", "2", "1", "3")))).size
    48
    >>> try:
    ...     parse_header(MAGIC + bytes([VERSION, 9]) + bytes(12))  # kind code 9
    ... except DecodeError as e:
    ...     print(e)
    bad_kind: kind code 9, expected one of 1 (triplet), 2 (pair), 3 (quadruplet)
    """
    if len(buf) < 3 or buf[:2] != MAGIC:
        raise DecodeError("undecodable", "not a binary constraint message (bad magic)")
    if buf[2] != VERSION:
        raise DecodeError("unknown_version", f"binary format version {buf[2]}, expected 1")
    if len(buf) < HEADER.size:
        raise DecodeError("undecodable", f"{len(buf)} bytes, shorter than the 16-byte header")
    _, _, kind_code, flags, _, reserved2, dim, reserved4 = HEADER.unpack_from(buf)
    kind = KIND_NAMES.get(kind_code)
    if kind is None:
        raise DecodeError("bad_kind", f"kind code {kind_code}, expected one of {_CODES_EXPECTED}")
    if flags & ~_KNOWN_FLAGS or reserved2 != _ZERO2 or reserved4 != _ZERO4:
        raise DecodeError("undecodable", f"unknown flags {flags:#04x} or non-zero reserved bytes")
    inline = bool(flags & FLAG_INLINE)
    if inline and dim == 0:
        raise DecodeError("bad_dimension", "inline items with dim 0")
    if not inline and dim != 0:
        raise DecodeError("bad_dimension", f"items by id must declare dim 0, got {dim}")
    return BinaryLayout(kind, inline, bool(flags & FLAG_LABELS), bool(flags & FLAG_TS), dim)


def check_size(layout: BinaryLayout, n_bytes: int) -> None:
    """``DecodeError`` unless a message of ``n_bytes`` bytes has the size its header declares."""
    if n_bytes != layout.size:
        raise DecodeError(
            "undecodable", f"{n_bytes} bytes, the header declares a {layout.size}-byte message"
        )


def encode_binary(c: Constraint) -> bytes:
    """Encode a constraint; ids must be canonical decimal integers (they travel as int64).

    >>> msg = encode_binary(Constraint("triplet", ids=("17", "3", "8"), ts=1.5))
    >>> len(msg), decode_binary(msg).ids
    (48, ('17', '3', '8'))
    """
    ids = None
    if c.ids is not None:
        try:
            ids = np.asarray([[int(i) for i in c.ids]], dtype=np.int64)
        except (ValueError, OverflowError) as e:
            raise ValueError(f"ids: the binary format carries int64 ids, got {c.ids}") from e
        if [str(i) for i in ids[0].tolist()] != list(c.ids):
            raise ValueError(f"ids: must be canonical decimal integers, got {c.ids}")
    labels = None
    if c.labels is not None:
        labels = np.asarray([[MISSING_LABEL if v is None else v for v in c.labels]], np.int64)
    batch = ConstraintBatch(
        c.kind,
        index=np.zeros(1, dtype=np.int64),
        ids=ids,
        x=None if c.x is None else c.x[None],
        labels=labels,
        similar=None if c.similar is None else np.array([c.similar]),
        ts=None if c.ts is None else np.array([c.ts], dtype=np.float64),
    )
    return encode_binary_batch(batch)[0]


def encode_binary_batch(batch: ConstraintBatch) -> list[bytes]:
    """Encode every row of a batch (ids must be integers) in one vectorised step.

    >>> b = ConstraintBatch("pair", index=np.arange(2), ids=np.array([[1, 2], [3, 4]]),
    ...                     similar=np.array([True, False]))
    >>> [decode_binary(m).similar for m in encode_binary_batch(b)]
    [True, False]
    """
    n = len(batch)
    inline = batch.x is not None
    dim = int(batch.x.shape[2]) if inline else 0  # type: ignore[union-attr]
    layout = BinaryLayout(batch.kind, inline, batch.labels is not None, batch.ts is not None, dim)
    flags = (FLAG_INLINE * inline) | (FLAG_LABELS * layout.labels) | (FLAG_TS * layout.ts)
    head = HEADER.pack(MAGIC, VERSION, KIND_CODES[batch.kind], flags, 0, _ZERO2, dim, _ZERO4)
    records = np.zeros(n, dtype=layout.dtype)
    records["head"] = np.frombuffer(head, dtype=np.uint8)
    if batch.similar is not None:
        records["head"][:, _SIMILAR_BYTE] = batch.similar
    if layout.ts:
        records["ts"] = batch.ts
    if layout.labels:
        records["labels"] = batch.labels
    if inline:
        if not np.isfinite(batch.x).all():  # type: ignore[arg-type]
            raise ValueError("x: non-finite values cannot be encoded")
        records["x"] = batch.x
    else:
        if batch.ids is None or batch.ids.dtype.kind not in "iu":
            raise ValueError("ids: the binary format carries int64 ids")
        records["ids"] = batch.ids
    buf, size = records.tobytes(), layout.size
    return [buf[i * size : (i + 1) * size] for i in range(n)]


def _records_to_batch(
    layout: BinaryLayout, records: np.ndarray, index: np.ndarray
) -> tuple[ConstraintBatch | None, list[tuple[int, DecodeError]]]:
    """Turn decoded records into a batch, dropping rows with a bad similar byte or a
    non-finite vector (reported as errors with their input index)."""
    similar_byte = records["head"][:, _SIMILAR_BYTE]
    ok = similar_byte <= (1 if layout.kind == "pair" else 0)
    errors = [
        (int(i), DecodeError("undecodable", f"similar byte {int(b)} for a {layout.kind}"))
        for i, b in zip(index[~ok], similar_byte[~ok], strict=True)
    ]
    x = None
    if layout.inline:
        x = records["x"].astype(np.float32)
        finite = np.isfinite(x).all(axis=(1, 2))
        bad = ok & ~finite
        errors += [(int(i), DecodeError("non_finite", "NaN or inf in an item")) for i in index[bad]]
        ok &= finite
    if errors:
        errors.sort(key=lambda e: e[0])
    if not ok.any():
        return None, errors
    batch = ConstraintBatch(
        layout.kind,
        index=index,
        ids=None if layout.inline else records["ids"].astype(np.int64),
        x=x,
        labels=records["labels"].astype(np.int64) if layout.labels else None,
        similar=similar_byte.astype(bool) if layout.kind == "pair" else None,
        ts=records["ts"].astype(np.float64) if layout.ts else None,
    )
    return (batch if ok.all() else batch.take(ok)), errors


def decode_binary(buf: bytes) -> Constraint:
    """Decode one binary message; raises ``DecodeError``."""
    layout = parse_header(buf)
    check_size(layout, len(buf))
    records = np.frombuffer(buf, dtype=layout.dtype)
    batch, errors = _records_to_batch(layout, records, np.zeros(1, dtype=np.int64))
    if errors:
        raise errors[0][1]
    assert batch is not None
    return batch.row(0)


def decode_binary_run(
    layout: BinaryLayout, values: Sequence[bytes], index: np.ndarray
) -> tuple[ConstraintBatch | None, list[tuple[int, DecodeError]]]:
    """Decode messages already known to share ``layout`` and its size, in one step."""
    records = np.frombuffer(b"".join(values), dtype=layout.dtype)
    return _records_to_batch(layout, records, index)


def decode_uniform(
    values: Sequence[bytes],
) -> tuple[ConstraintBatch | None, list[tuple[int, DecodeError]]] | None:
    """Fast path for the common case: every message binary, same size and same layout.

    Returns None when the input is not uniform (the caller then splits it into runs).
    """
    size = len(values[0])
    if values[0][:2] != MAGIC or size < HEADER.size or any(len(v) != size for v in values):
        return None
    joined = b"".join(values)
    heads = np.frombuffer(joined, dtype=np.uint8).reshape(len(values), size)[:, : HEADER.size]
    if not (heads[:, _LAYOUT_BYTES] == heads[0, _LAYOUT_BYTES]).all():
        return None
    index = np.arange(len(values), dtype=np.int64)
    try:
        layout = parse_header(values[0])
        check_size(layout, size)
    except DecodeError as e:
        return None, [(int(i), e) for i in index]
    return _records_to_batch(layout, np.frombuffer(joined, dtype=layout.dtype), index)
