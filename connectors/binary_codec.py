"""The compact binary constraint encoding (format versions 1 and 2; layout in ``MESSAGES.md``).

A 16-byte little-endian header, then an optional float64 timestamp, optional int64 labels and
the items as int64 ids or float32 vectors. Decoding is ``np.frombuffer`` with a structured
dtype per layout, so a run of same-layout messages decodes in one vectorised step.

Kind codes are assigned once and never reused: 1 triplet, 2 pair, 3 quadruplet. A new kind takes
the next free code within version 1 (the header and the field order are unchanged, only the
number of items differs), so a reader that predates it refuses it as ``bad_kind`` and reads
every other message as before.

Version 2 is version 1 plus one flag, ``FLAG_MODALITY``: each item's modality name follows the
labels, NUL-padded to a width the header declares (byte 6, reserved in version 1), so messages
of one layout keep one size and still decode in one ``np.frombuffer``. A constraint without
modalities is written as version 1, byte for byte as before; a version-1 reader refuses a
version-2 message as ``unknown_version`` rather than learning a cross-modal constraint as one
within a single modality.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from oahu.connectors.constraint import (
    MAX_MODALITY_LENGTH,
    MISSING_LABEL,
    MODALITY_RULE,
    ROLES,
    Constraint,
    ConstraintBatch,
    DecodeError,
    modality_problem,
)

MAGIC = b"OA"
VERSION = 1
#: The version of messages whose items carry a modality: version 1 plus ``FLAG_MODALITY``.
MODALITY_VERSION = 2
# magic, version, kind, flags, similar, reserved (2; in version 2: modality width, reserved),
# dim, reserved (4)
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
FLAG_MODALITY = 0x08  # version 2: each item's modality name follows the labels
_KNOWN_FLAGS = {VERSION: FLAG_INLINE | FLAG_LABELS | FLAG_TS}
_KNOWN_FLAGS[MODALITY_VERSION] = _KNOWN_FLAGS[VERSION] | FLAG_MODALITY
# The bytes a modality name is made of: ASCII letters, digits, "_", "-", "."; NUL pads it.
_NAME_BYTE = np.zeros(256, dtype=bool)
_NAME_BYTE[list(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")] = True
_SIMILAR_BYTE = 5  # the only header byte that varies between messages of one layout
_LAYOUT_BYTES = np.array([i for i in range(HEADER.size) if i != _SIMILAR_BYTE])
_ZERO4 = b"\0" * 4


@dataclass(frozen=True)
class BinaryLayout:
    """Everything the header fixes about a message: its kind, what follows, and its size."""

    kind: str
    inline: bool
    labels: bool
    ts: bool
    dim: int
    modality: int = 0  # bytes per item's modality name; 0: no modalities (version 1)

    @property
    def n_items(self) -> int:
        return len(ROLES[self.kind])

    @property
    def version(self) -> int:
        """The version a writer gives a message of this layout."""
        return MODALITY_VERSION if self.modality else VERSION

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
        return HEADER.size + 8 * self.ts + 8 * k * self.labels + k * self.modality + items


@lru_cache(maxsize=256)
def _record_dtype(layout: BinaryLayout) -> np.dtype:
    k = layout.n_items
    fields: list[tuple] = [("head", "u1", (HEADER.size,))]
    if layout.ts:
        fields.append(("ts", "<f8"))
    if layout.labels:
        fields.append(("labels", "<i8", (k,)))
    if layout.modality:
        fields.append(("modality", "u1", (k, layout.modality)))
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
    version = buf[2]
    if version not in _KNOWN_FLAGS:
        raise DecodeError("unknown_version", f"binary format version {version}, expected 1 or 2")
    if len(buf) < HEADER.size:
        raise DecodeError("undecodable", f"{len(buf)} bytes, shorter than the 16-byte header")
    _, _, kind_code, flags, _, reserved2, dim, reserved4 = HEADER.unpack_from(buf)
    kind = KIND_NAMES.get(kind_code)
    if kind is None:
        raise DecodeError("bad_kind", f"kind code {kind_code}, expected one of {_CODES_EXPECTED}")
    width = reserved2[0] if version == MODALITY_VERSION else 0
    reserved2 = reserved2[1:] if version == MODALITY_VERSION else reserved2
    if flags & ~_KNOWN_FLAGS[version] or any(reserved2) or reserved4 != _ZERO4:
        raise DecodeError("undecodable", f"unknown flags {flags:#04x} or non-zero reserved bytes")
    if bool(flags & FLAG_MODALITY) != (width > 0) or width > MAX_MODALITY_LENGTH:
        raise DecodeError(
            "bad_modality",
            f"modality width {width} with the modality flag {flags & FLAG_MODALITY:#04x}, "
            f"expected 1 to {MAX_MODALITY_LENGTH} with the flag, 0 without",
        )
    inline = bool(flags & FLAG_INLINE)
    if inline and dim == 0:
        raise DecodeError("bad_dimension", "inline items with dim 0")
    if not inline and dim != 0:
        raise DecodeError("bad_dimension", f"items by id must declare dim 0, got {dim}")
    return BinaryLayout(kind, inline, bool(flags & FLAG_LABELS), bool(flags & FLAG_TS), dim, width)


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
        modalities=None if c.modalities is None else np.array([c.modalities], dtype=str),
    )
    return encode_binary_batch(batch)[0]


def encode_binary_batch(batch: ConstraintBatch) -> list[bytes]:
    """Encode every row of a batch (ids must be integers) in one vectorised step.

    >>> b = ConstraintBatch("pair", index=np.arange(2), ids=np.array([[1, 2], [3, 4]]),
    ...                     similar=np.array([True, False]))
    >>> [decode_binary(m).similar for m in encode_binary_batch(b)]
    [True, False]

    Rows with ``modalities`` are version-2 messages whose names are NUL-padded to the smallest
    multiple of 8 bytes that holds the row's longest (one width per row, so a row's bytes do not
    depend on the batch it is encoded in).
    """
    if batch.modalities is None:
        return _encode_layout(batch, 0)
    modalities = np.asarray(batch.modalities)
    if modalities.shape != (len(batch), batch.n_items):
        raise ValueError(
            f"modalities: expected shape ({len(batch)}, {batch.n_items}), got {modalities.shape}"
        )
    for name in np.unique(modalities).tolist():  # each name once, not each item
        problem = modality_problem(name)
        if problem is not None:
            row, item = np.argwhere(modalities == name)[0]
            raise ValueError(f"modalities[{row}, {item}]: {problem}")
    longest = np.char.str_len(modalities.astype(str)).max(axis=1, initial=1)
    widths = -(-longest // 8) * 8
    if len(widths) == 0 or (widths == widths[0]).all():
        return _encode_layout(batch, int(widths[0]) if len(widths) else 8)
    out: list[bytes] = [b""] * len(batch)
    for width in np.unique(widths):
        rows = np.flatnonzero(widths == width)
        for row, message in zip(rows, _encode_layout(batch.take(rows), int(width)), strict=True):
            out[row] = message
    return out


def _encode_layout(batch: ConstraintBatch, width: int) -> list[bytes]:
    """Every row of ``batch`` in one layout, modality names ``width`` bytes each (0: none)."""
    n = len(batch)
    inline = batch.x is not None
    dim = int(batch.x.shape[2]) if inline else 0  # type: ignore[union-attr]
    layout = BinaryLayout(
        batch.kind, inline, batch.labels is not None, batch.ts is not None, dim, width
    )
    flags = (FLAG_INLINE * inline) | (FLAG_LABELS * layout.labels) | (FLAG_TS * layout.ts)
    flags |= FLAG_MODALITY * bool(width)
    reserved2 = bytes([width, 0])
    code = KIND_CODES[batch.kind]
    head = HEADER.pack(MAGIC, layout.version, code, flags, 0, reserved2, dim, _ZERO4)
    records = np.zeros(n, dtype=layout.dtype)
    records["head"] = np.frombuffer(head, dtype=np.uint8)
    if batch.similar is not None:
        records["head"][:, _SIMILAR_BYTE] = batch.similar
    if layout.ts:
        records["ts"] = batch.ts
    if layout.labels:
        records["labels"] = batch.labels
    if width:
        names = np.char.encode(np.asarray(batch.modalities).astype(str), "ascii")
        records["modality"] = (
            np.ascontiguousarray(names.astype(f"S{width}"))
            .view(np.uint8)
            .reshape(n, layout.n_items, width)
        )
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
    """Turn decoded records into a batch, dropping rows with a bad similar byte, an invalid
    modality name or a non-finite vector (reported as errors with their input index)."""
    similar_byte = records["head"][:, _SIMILAR_BYTE]
    ok = similar_byte <= (1 if layout.kind == "pair" else 0)
    errors = [
        (int(i), DecodeError("undecodable", f"similar byte {int(b)} for a {layout.kind}"))
        for i, b in zip(index[~ok], similar_byte[~ok], strict=True)
    ]
    modalities = None
    if layout.modality:
        modalities, named = _modalities(records["modality"])
        bad = ok & ~named
        errors += [
            (int(i), _modality_error(layout, records["modality"][r]))
            for r, i in zip(np.flatnonzero(bad), index[bad], strict=True)
        ]
        ok &= named
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
        modalities=modalities,
    )
    return (batch if ok.all() else batch.take(ok)), errors


def _modalities(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The names in the modality fields ``raw`` (n, k, width) as a str array (n, k), and which
    rows name a valid modality for every item: name bytes, then only NUL padding, none empty."""
    n, k, width = raw.shape
    nul = raw == 0
    valid = (_NAME_BYTE[raw] | nul).all(axis=2) & ~nul[:, :, 0]
    valid &= (np.diff(nul.view(np.int8), axis=2) >= 0).all(axis=2)  # no byte after a NUL
    named = np.where(_NAME_BYTE[raw], raw, 0)  # other bytes (in rows refused) would not decode
    names = named.view(f"S{width}").reshape(n, k).astype(f"U{width}")
    return names, valid.all(axis=1)


def _modality_error(layout: BinaryLayout, raw: np.ndarray) -> DecodeError:
    """The error for one message's modality fields ``raw`` (k, width), one of them invalid."""
    for role, field in zip(ROLES[layout.kind], raw, strict=True):
        value = bytes(field)
        name = value.rstrip(b"\0")
        if not name or b"\0" in name or not _NAME_BYTE[np.frombuffer(name, np.uint8)].all():
            return DecodeError(
                "bad_modality",
                f"{role}: modality {value!r}, expected {MODALITY_RULE}, NUL-padded",
            )
    raise AssertionError("no invalid modality field")  # pragma: no cover


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
