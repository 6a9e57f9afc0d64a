"""Poison records: no input makes a decoder raise anything but a DecodeError, and no input makes
decode_batch raise at all; every record is either decoded or an error, in input order.

The examples first (each once made the learner process crash and block its partition), then
the class, with hypothesis: arbitrary bytes, arbitrary JSON (huge integers, non-finite floats,
deep nesting, unicode, wrong types) in every position of a message, and valid binary messages
with arbitrary header fields.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oahu.connectors.binary_codec import HEADER
from oahu.connectors.constraint import REASONS, ROLES, Constraint, DecodeError
from oahu.connectors.messages import decode, decode_batch, encode_binary, encode_json

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INLINE = Constraint("triplet", x=np.arange(6, dtype=np.float32).reshape(3, 2))
BY_ID = Constraint("pair", ids=("4", "2"), similar=True)
QUAD_INLINE = Constraint("quadruplet", x=np.arange(8, dtype=np.float32).reshape(4, 2))
QUAD_BY_ID = Constraint("quadruplet", ids=("4", "2", "4", "9"), labels=(1, None, 1, 2), ts=3.5)
#: A valid message of every kind and layout, for the fuzzers to corrupt.
BASES = [INLINE, BY_ID, QUAD_INLINE, QUAD_BY_ID]
INLINE_BASES = [c for c in BASES if not c.by_id]


def with_dim(message: bytes, dim: int) -> bytes:
    fields = list(HEADER.unpack_from(message))
    fields[6] = dim
    out = bytearray(message)
    HEADER.pack_into(out, 0, *fields)
    return bytes(out)


def json_triplet(**anchor: object) -> bytes:
    msg = {
        "v": 1,
        "kind": "triplet",
        "anchor": {"x": [1.0, 2.0], **anchor},
        "positive": {"x": [1.0, 2.0]},
        "negative": {"x": [1.0, 3.0]},
    }
    return json.dumps(msg).encode()


POISON = {
    "label beyond int64": json_triplet(label=2**63),
    "label below int64": json_triplet(label=-(2**63) - 1),
    "label that means 'no label'": json_triplet(label=-(2**63)),
    "Kafka tombstone": None,
    "binary dimension near 2**32": with_dim(encode_binary(INLINE), 2**32 - 1),
    "binary dimension of 2**28": with_dim(encode_binary(INLINE), 2**28),
    "JSON nested 200,000 deep": b'{"a":' * 200_000 + b"1" + b"}" * 200_000,
    "ragged vector": json_triplet(x=[[1.0], [1.0, 2.0]]),
    "timestamp beyond float64": json_triplet()[:-1] + b', "ts": 1' + b"0" * 400 + b"}",
    "integer of 5,000 digits": json_triplet()[:-1] + b', "n": 1' + b"0" * 5000 + b"}",
}


@pytest.mark.parametrize("name", list(POISON))
def test_each_known_poison_is_one_error_and_spares_its_neighbours(name):
    good = encode_binary(INLINE)
    out = decode_batch([good, POISON[name], good])
    assert [i for i, _ in out.errors] == [1]
    assert out.errors[0][1].reason in REASONS
    assert [int(i) for b in out.batches for i in b.index] == [0, 2]
    with pytest.raises(DecodeError):
        decode(POISON[name])  # type: ignore[arg-type]


def assert_accounted(values: list) -> None:
    """decode_batch never raises; each input is decoded once or is an error, in input order."""
    out = decode_batch(values)
    decoded = [int(i) for b in out.batches for i in b.index]
    failed = [i for i, _ in out.errors]
    assert sorted(decoded + failed) == list(range(len(values)))
    assert decoded == sorted(decoded) and failed == sorted(failed)
    assert all(e.reason in REASONS for _, e in out.errors)
    for i, value in enumerate(values):  # and decode agrees with it, record by record
        try:
            decode(value)
        except DecodeError:
            assert i in failed
        else:
            assert i in decoded


@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=8))
def test_arbitrary_bytes(values):
    assert_accounted(values)


@FUZZ
@given(st.lists(st.binary(max_size=64).map(lambda tail: b"OA\x01" + tail), max_size=8))
def test_arbitrary_bytes_after_the_binary_magic(values):
    assert_accounted(values)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)
# Every top-level field, the item roles of every kind included (a quadruplet's a, b, c, d).
ROLE_FIELDS = tuple(dict.fromkeys(role for roles in ROLES.values() for role in roles))
FIELDS = ("v", "kind", *ROLE_FIELDS, "similar", "ts")


@FUZZ
@given(
    st.sampled_from(BASES),
    st.lists(st.tuples(st.sampled_from(FIELDS), JSON_VALUES), min_size=1, max_size=3),
    st.integers(0, 3),
    st.lists(st.tuples(st.sampled_from(("id", "x", "label")), JSON_VALUES), max_size=2),
)
def test_arbitrary_json_in_every_field(base, top, which, item):
    """A valid message with arbitrary values put in its fields and in one of its items'."""
    msg = json.loads(encode_json(base))
    for key, value in top:
        msg[key] = value
    role = base.roles[which % base.n_items]
    if isinstance(msg.get(role), dict):
        for key, value in item:
            msg[role][key] = value
    assert_accounted([encode_json(base), json.dumps(msg).encode(), encode_binary(base)])


@FUZZ
@given(st.floats(), st.sampled_from(["x", "ts"]), st.sampled_from(INLINE_BASES), st.integers(0, 3))
def test_non_finite_and_extreme_numbers(number, where, base, which):
    """NaN and infinities (which JSON spells as literals Python accepts) and huge floats, in any
    item of a message of any kind."""
    msg = json.loads(encode_json(base))
    if where == "x":
        msg[base.roles[which % base.n_items]]["x"] = [number, 1.0]
    else:
        msg["ts"] = number
    raw = json.dumps(msg).encode()  # allow_nan: writes NaN / Infinity
    assert_accounted([raw])
    with np.errstate(over="ignore"):  # vectors travel as float32: beyond its range is inf
        beyond_float32 = where == "x" and not np.isfinite(np.float32(number))
    if not math.isfinite(number) or beyond_float32:
        with pytest.raises(DecodeError):
            decode(raw)


@FUZZ
@given(
    st.sampled_from(BASES),
    st.integers(min_value=0, max_value=255),
    st.integers(min_value=0, max_value=255),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=0, max_value=64),
)
def test_binary_messages_with_arbitrary_header_fields(base, kind, flags, dim, cut):
    """Any kind, flags and dimension in a valid message's header, and truncations of it."""
    fields = list(HEADER.unpack_from(encode_binary(base)))
    fields[2], fields[3], fields[6] = kind, flags, dim
    message = bytearray(encode_binary(base))
    HEADER.pack_into(message, 0, *fields)
    values = [bytes(message), bytes(message[: len(message) - cut]), encode_binary(base)]
    assert_accounted(values)
    assert_accounted(values[:2] * 3)  # same-size runs take decode_batch's fast path
