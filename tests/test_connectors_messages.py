"""The constraint wire formats: round trips, exact binary layout, every decode error reason."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oahu.connectors.binary_codec import encode_binary_batch
from oahu.connectors.constraint import CONSTRAINT_KINDS, MISSING_LABEL, ROLES
from oahu.connectors.messages import (
    Constraint,
    ConstraintBatch,
    DecodeError,
    decode,
    decode_batch,
    encode_binary,
    encode_json,
)

ENCODERS = {"json": encode_json, "binary": encode_binary}


def make_constraint(kind: str, by_id: bool, extras: bool, seed: int = 0) -> Constraint:
    rng = np.random.default_rng(seed)
    k = len(ROLES[kind])
    return Constraint(
        kind,
        ids=tuple(str(i) for i in rng.integers(0, 10**12, k)) if by_id else None,
        x=None if by_id else rng.normal(size=(k, 5)).astype(np.float32),
        labels=(7, None, -3, 0)[:k] if extras else None,
        similar=bool(seed % 2) if kind == "pair" else None,
        ts=1718000000.125 if extras else None,
    )


def assert_same(a: Constraint, b: Constraint) -> None:
    assert (a.kind, a.ids, a.labels, a.similar, a.ts) == (b.kind, b.ids, b.labels, b.similar, b.ts)
    if a.x is None:
        assert b.x is None
    else:
        assert b.x is not None and b.x.dtype == np.float32
        np.testing.assert_array_equal(a.x, b.x)  # bit-exact, also through JSON


@pytest.mark.parametrize(
    "fmt, kind, by_id, extras",
    list(itertools.product(ENCODERS, CONSTRAINT_KINDS, (True, False), (True, False))),
)
def test_round_trip(fmt: str, kind: str, by_id: bool, extras: bool) -> None:
    for seed in range(3):
        c = make_constraint(kind, by_id, extras, seed)
        assert_same(c, decode(ENCODERS[fmt](c)))


LABELS = st.none() | st.integers(MISSING_LABEL + 1, 2**63 - 1)


@st.composite
def constraints(draw: st.DrawFn) -> Constraint:
    """Any valid constraint of any kind: ids or float32 vectors, optional labels and ts."""
    kind = draw(st.sampled_from(CONSTRAINT_KINDS))
    k = len(ROLES[kind])
    if draw(st.booleans()):
        int64 = st.integers(-(2**63), 2**63 - 1)
        ids, x = tuple(str(i) for i in draw(st.lists(int64, min_size=k, max_size=k))), None
    else:
        dim = draw(st.integers(1, 6))
        values = st.floats(width=32, allow_nan=False, allow_infinity=False)
        x = np.array(draw(st.lists(values, min_size=k * dim, max_size=k * dim)), np.float32)
        ids, x = None, x.reshape(k, dim)
    labels = draw(st.none() | st.tuples(*[LABELS] * k))
    return Constraint(
        kind,
        ids=ids,
        x=x,
        labels=None if labels is None or all(v is None for v in labels) else labels,
        similar=draw(st.booleans()) if kind == "pair" else None,
        ts=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(constraints(), min_size=1, max_size=6), st.sampled_from(list(ENCODERS)))
def test_any_constraint_of_any_kind_round_trips(cs: list[Constraint], fmt: str) -> None:
    """Every kind, one message at a time and as a batch (mixed kinds split into runs)."""
    messages = [ENCODERS[fmt](c) for c in cs]
    for c, message in zip(cs, messages, strict=True):
        assert_same(c, decode(message))
    out = decode_batch(messages)
    assert not out.errors
    rows = {int(i): b.row(r) for b in out.batches for r, i in enumerate(b.index)}
    assert sorted(rows) == list(range(len(cs)))
    for i, c in enumerate(cs):
        assert_same(c, rows[i])


def test_binary_layout_is_exactly_as_documented() -> None:
    # MESSAGES.md: 16-byte header, then ts (f64), labels (k x i64), items, all little-endian
    head = b"OA" + bytes([1, 1, 0x06, 0, 0, 0]) + struct.pack("<I", 0) + bytes(4)
    body = struct.pack("<d", 2.5) + struct.pack("<3q", 1, MISSING_LABEL, 2)
    body += struct.pack("<3q", 10, 20, 30)
    c = decode(head + body)
    assert (c.kind, c.ids, c.labels, c.ts) == ("triplet", ("10", "20", "30"), (1, None, 2), 2.5)
    assert encode_binary(c) == head + body

    pair = b"OA" + bytes([1, 2, 0x01, 1, 0, 0]) + struct.pack("<I", 2) + bytes(4)
    pair += struct.pack("<4f", 1.0, -2.0, 0.5, 4.0)
    c = decode(pair)
    assert c.kind == "pair" and c.similar is True and c.ids is None
    assert c.x.tolist() == [[1.0, -2.0], [0.5, 4.0]]


def test_binary_sizes() -> None:
    ids = Constraint("triplet", ids=("1", "2", "3"))
    assert len(encode_binary(ids)) == 16 + 3 * 8
    inline = Constraint("pair", x=np.zeros((2, 784), np.float32), similar=False, ts=0.0)
    assert len(encode_binary(inline)) == 16 + 8 + 2 * 784 * 4


def test_json_message_schema() -> None:
    msg = b'{"v":1,"kind":"triplet","anchor":{"id":17,"label":3},"positive":{"id":"4"},'
    msg += b'"negative":{"id":"90"},"ts":5,"extra":"ignored"}'
    c = decode(msg)
    assert (c.ids, c.labels, c.ts) == (("17", "4", "90"), (3, None, None), 5.0)
    pair = decode(
        b' {"v":1,"kind":"pair","left":{"x":[1,2]},"right":{"x":[3.5,4]},"similar":false}'
    )
    assert pair.similar is False and pair.x.tolist() == [[1.0, 2.0], [3.5, 4.0]]


def test_encoders_reject_what_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="ids"):
        encode_binary(Constraint("pair", ids=("a", "b"), similar=True))
    with pytest.raises(ValueError, match="ids"):
        encode_binary(Constraint("pair", ids=("007", "1"), similar=True))  # not canonical
    nan = Constraint("pair", x=np.array([[np.nan], [1]], np.float32), similar=True)
    with pytest.raises(ValueError):
        encode_binary(nan)
    with pytest.raises(ValueError):
        encode_json(nan)


def header(version=1, kind=1, flags=0, similar=0, dim=0, reserved=b"\0\0") -> bytes:
    return (
        b"OA"
        + bytes([version, kind, flags, similar])
        + reserved
        + struct.pack("<I", dim)
        + bytes(4)
    )


IDS3 = struct.pack("<3q", 1, 2, 3)
GOOD_BINARY = header() + IDS3
BAD_MESSAGES = {
    "undecodable": [
        b"",
        b"hello",
        b"[1, 2, 3]",
        b'{"v": 1, "kind": "triplet"',  # truncated JSON
        b"{\xff}",  # not UTF-8
        GOOD_BINARY[:-1],  # truncated binary
        GOOD_BINARY[:10],  # shorter than the header
        GOOD_BINARY + b"\0",  # trailing garbage
        header(flags=0x80) + IDS3,  # unknown flag
        header(reserved=b"\0\1") + IDS3,  # non-zero reserved byte
        header(similar=1) + IDS3,  # a triplet cannot be similar
        header(kind=2, similar=2) + IDS3[:16],  # similar must be 0 or 1
        b'{"v":1,"kind":"triplet","anchor":{"id":"1"},"positive":{"id":"2"}}',
        b'{"v":1,"kind":"triplet","anchor":{"id":"1"},"positive":{"id":"2"},"negative":{}}',
        b'{"v":1,"kind":"pair","left":{"id":"1"},"right":{"x":[1]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"id":"1"},"right":{"id":"2"}}',  # no similar
        b'{"v":1,"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":1}',
        b'{"v":1,"kind":"pair","left":{"id":1.5},"right":{"id":"2"},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"id":"1","label":"a"},"right":{"id":"2"},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":true,"ts":"x"}',
    ],
    "unknown_version": [
        header(version=3) + IDS3,  # version 2 is the modality version
        b'{"v":3,"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":true}',
        b'{"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":true}',
        b'{"v":true,"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":true}',
    ],
    "bad_kind": [
        header(kind=4) + IDS3,  # the next free code (1 triplet, 2 pair, 3 quadruplet)
        header(kind=255) + IDS3,
        header(kind=0) + IDS3,
        b'{"v":1,"kind":"quad","left":{"id":"1"},"right":{"id":"2"},"similar":true}',
        b'{"v":1,"left":{"id":"1"},"right":{"id":"2"},"similar":true}',
    ],
    "bad_dimension": [
        header(flags=0x01, dim=0),  # inline items of dimension 0
        header(flags=0x00, dim=4) + IDS3,  # ids with a dimension
        b'{"v":1,"kind":"pair","left":{"x":[1,2]},"right":{"x":[1]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"x":[]},"right":{"x":[]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"x":[[1]]},"right":{"x":[[1]]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"x":["1"]},"right":{"x":["2"]},"similar":true}',
    ],
    "non_finite": [
        header(kind=2, flags=0x01, dim=1) + struct.pack("<2f", 1.0, float("nan")),
        header(kind=2, flags=0x01, dim=1) + struct.pack("<2f", float("-inf"), 1.0),
        b'{"v":1,"kind":"pair","left":{"x":[NaN]},"right":{"x":[1]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"x":[1e39]},"right":{"x":[1]},"similar":true}',
        b'{"v":1,"kind":"pair","left":{"x":[Infinity]},"right":{"x":[1]},"similar":true}',
    ],
}


@pytest.mark.parametrize(
    "reason, message",
    [(reason, msg) for reason, msgs in BAD_MESSAGES.items() for msg in msgs],
)
def test_decode_errors_carry_a_stable_reason(reason: str, message: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode(message)
    assert info.value.reason == reason
    assert info.value.detail  # says what was wrong
    # the batch path reports the same reason instead of raising, at the message's index
    out = decode_batch([GOOD_BINARY, message])
    assert [(i, e.reason) for i, e in out.errors] == [(1, reason)]
    assert out.n_decoded == 1


def test_decode_error_rejects_unknown_reasons() -> None:
    with pytest.raises(ValueError, match="reason"):
        DecodeError("oops", "not a reason")


def test_decode_batch_fast_path_equals_single_decode() -> None:
    rng = np.random.default_rng(1)
    n = 50
    batch = ConstraintBatch(
        "pair",
        index=np.arange(n),
        x=rng.normal(size=(n, 2, 3)).astype(np.float32),
        labels=rng.integers(0, 5, (n, 2)),
        similar=rng.random(n) < 0.5,  # the varying similar byte must not split the run
        ts=np.arange(n, dtype=np.float64),
    )
    messages = encode_binary_batch(batch)
    out = decode_batch(messages)
    assert len(out.batches) == 1 and not out.errors
    got = out.batches[0]
    np.testing.assert_array_equal(got.x, batch.x)
    np.testing.assert_array_equal(got.similar, batch.similar)
    np.testing.assert_array_equal(got.labels, batch.labels)
    np.testing.assert_array_equal(got.ts, batch.ts)
    for i in (0, 17, n - 1):
        assert_same(decode(messages[i]), got.row(i))


def test_decode_batch_keeps_order_across_formats_and_layouts() -> None:
    trip = [encode_binary(Constraint("triplet", ids=(str(i), "1", "2"))) for i in range(4)]
    js = [encode_json(Constraint("triplet", ids=(f"j{i}", "1", "2"))) for i in range(2)]
    with_ts = encode_binary(Constraint("triplet", ids=("9", "9", "9"), ts=1.0))
    nan_pair = header(kind=2, flags=0x01, dim=1) + struct.pack("<2f", np.nan, 0.0)
    values = [trip[0], trip[1], b"?", trip[2], *js, with_ts, nan_pair, trip[3]]
    out = decode_batch(values)
    assert [(i, e.reason) for i, e in out.errors] == [(2, "undecodable"), (7, "non_finite")]
    runs = [(b.index.tolist(), b.ids[:, 0].tolist()) for b in out.batches]
    assert runs == [
        ([0, 1, 3], [0, 1, 2]),  # a bad message does not break a run
        ([4, 5], ["j0", "j1"]),
        ([6], [9]),
        ([8], [3]),
    ]


def test_decode_batch_of_nothing() -> None:
    out = decode_batch([])
    assert out.batches == [] and out.errors == [] and out.n_decoded == 0


def test_uniform_batch_with_a_bad_header_reports_every_message() -> None:
    bad = [header(version=9) + IDS3] * 3
    out = decode_batch(bad)
    assert [(i, e.reason) for i, e in out.errors] == [(i, "unknown_version") for i in range(3)]
    assert out.batches == []
