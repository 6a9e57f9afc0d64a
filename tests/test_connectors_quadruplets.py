"""Quadruplets on the wire: (a, b, c, d) says D(a, b) < D(c, d) (Law, Thome and Cord, IJCV 2016).

JSON and binary round trips (by id, inline, with labels and a timestamp), the exact binary
layout of connectors/MESSAGES.md, every way a quadruplet can be malformed with the reason it is
refused for, the batch decoder keeping kinds apart, and the resolver turning 4 ids into 4
vectors.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from test_connectors_messages import assert_same

from oahu.connectors.binary_codec import KIND_CODES, encode_binary_batch
from oahu.connectors.constraint import CONSTRAINT_KINDS, MISSING_LABEL
from oahu.connectors.messages import (
    Constraint,
    ConstraintBatch,
    DecodeError,
    decode,
    decode_batch,
    encode_binary,
    encode_constraints,
    encode_json,
)
from oahu.constraint_kinds import triplet_as_quadruplet
from oahu.service.item_store import ItemStore
from oahu.service.learning.resolve import resolve_batch

ENCODERS = {"json": encode_json, "binary": encode_binary}
X4 = np.array([[0.5, -1.0, 2.0], [0.25, 0.0, 1.0], [3.0, 1e-3, -7.5], [1.0, 1.0, 1.0]], np.float32)
CASES = {
    "by id": Constraint("quadruplet", ids=("17", "4", "17", "90")),
    "by id, labels and ts": Constraint(
        "quadruplet", ids=("17", "4", "-3", "90"), labels=(3, None, 0, -(2**63) + 1), ts=1.5e9
    ),
    "inline": Constraint("quadruplet", x=X4),
    "inline, labels": Constraint("quadruplet", x=X4, labels=(None, None, None, 2**63 - 1)),
}


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("fmt", list(ENCODERS))
@pytest.mark.parametrize("case", list(CASES))
def test_round_trip(fmt: str, case: str) -> None:
    c = CASES[case]
    assert (c.n_items, c.roles) == (4, ("a", "b", "c", "d"))
    got = decode(ENCODERS[fmt](c))
    assert_same(c, got)
    assert_same(c, decode(ENCODERS["binary" if fmt == "json" else "json"](got)))  # and across


def test_kind_codes_are_assigned_in_order_and_quadruplet_is_3() -> None:
    """Every kind has a binary code (CONSTRAINT_KINDS lists them in the order codes were
    assigned); codes are on the wire, so they never move."""
    assert list(KIND_CODES) == list(CONSTRAINT_KINDS)
    assert KIND_CODES == {"triplet": 1, "pair": 2, "quadruplet": 3}


def header(kind: int = 3, flags: int = 0, similar: int = 0, dim: int = 0) -> bytes:
    return b"OA" + bytes([1, kind, flags, similar, 0, 0]) + struct.pack("<I", dim) + bytes(4)


IDS4 = struct.pack("<4q", 17, 4, 17, 90)


def test_binary_layout_is_exactly_as_documented() -> None:
    # MESSAGES.md: kind byte 3; then ts (f64), labels (4 x i64), items (4 x i64 or 4 x dim f32)
    c = decode(header() + IDS4)
    assert (c.kind, c.ids, c.labels, c.ts) == ("quadruplet", ("17", "4", "17", "90"), None, None)
    assert encode_binary(c) == header() + IDS4 and len(header() + IDS4) == 48

    full = header(flags=0x06) + struct.pack("<d", 2.5)
    full += struct.pack("<4q", 1, MISSING_LABEL, 2, 3) + IDS4
    c = decode(full)
    assert (c.labels, c.ts) == ((1, None, 2, 3), 2.5) and len(full) == 88
    assert encode_binary(c) == full

    inline = header(flags=0x01, dim=2) + struct.pack("<8f", 1, 2, 3, 4, 5, 6, 7, 8)
    c = decode(inline)
    assert c.x.tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]] and c.dim == 2
    assert encode_binary(c) == inline and len(inline) == 16 + 4 * 2 * 4


def test_json_message_schema() -> None:
    msg = (
        b'{"v":1,"kind":"quadruplet","a":{"id":17,"label":3},"b":{"id":"4"},'
        b'"c":{"id":"17"},"d":{"id":"90"},"ts":5,"meta":"ignored"}'
    )
    c = decode(msg)
    assert (c.ids, c.labels, c.ts) == (("17", "4", "17", "90"), (3, None, None, None), 5.0)
    encoded = json.loads(encode_json(c))
    assert list(encoded) == ["v", "kind", "a", "b", "c", "d", "ts"]
    assert encoded["a"] == {"id": "17", "label": 3} and encoded["d"] == {"id": "90"}


def test_a_triplet_is_the_quadruplet_anchor_positive_anchor_negative() -> None:
    """Law et al., Section 3.1: the triplet (a, p, n) says what the quadruplet (a, p, a, n)
    says; a producer may send either, and the items arrive in that order."""
    triplets = np.array([[17, 4, 90], [5, 6, 7]])
    quads = triplet_as_quadruplet(triplets)
    assert quads.tolist() == [[17, 4, 17, 90], [5, 6, 5, 7]]
    for fmt in ("binary", "json"):
        (msg, _) = encode_constraints("quadruplet", ids=quads, fmt=fmt)
        assert decode(msg).ids == ("17", "4", "17", "90")
    x = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    (msg,) = encode_constraints("quadruplet", x=triplet_as_quadruplet(x))
    np.testing.assert_array_equal(decode(msg).x, x[0, [0, 1, 0, 2]])


def test_a_json_quadruplet_ignores_similar_and_the_roles_of_other_kinds() -> None:
    """Unknown top-level keys are metadata (MESSAGES.md), so a fifth key is not a fifth item:
    in JSON items are named by their roles, and a quadruplet's are a, b, c and d."""
    msg = json.loads(encode_json(CASES["by id"]))
    msg.update(e={"id": "5"}, anchor={"id": "6"}, similar=True)
    c = decode(json.dumps(msg).encode())
    assert c.ids == ("17", "4", "17", "90") and c.similar is None


# ------------------------------------------------------------------ malformed quadruplets
GOOD = encode_json(CASES["by id"])


def json_quad(**items: object) -> bytes:
    msg: dict = {"v": 1, "kind": "quadruplet"}
    msg.update({r: {"id": str(i)} for i, r in enumerate("abcd")})
    msg.update(items)
    return json.dumps({k: v for k, v in msg.items() if v is not None}).encode()


def inline_quad(*xs: object) -> bytes:
    return json_quad(**{r: {"x": x} for r, x in zip("abcd", xs, strict=True)})


MALFORMED = {
    # (reason, what the detail names)
    "JSON with 3 items (no d)": (json_quad(d=None), "undecodable", "d:"),
    "JSON d not an object": (json_quad(d=[{"id": "1"}, {"id": "2"}]), "undecodable", "d:"),
    "JSON c with both id and x": (json_quad(c={"id": "1", "x": [1]}), "undecodable", "c:"),
    "JSON ids mixed with vectors": (json_quad(d={"x": [1.0]}), "undecodable", "mix"),
    "JSON boolean id": (json_quad(b={"id": True}), "undecodable", "ids"),
    "JSON label beyond int64": (json_quad(a={"id": "1", "label": 2**63}), "undecodable", "labels"),
    "binary with 3 ids": (header() + IDS4[:24], "undecodable", "48-byte"),
    "binary with 5 ids": (header() + IDS4 + IDS4[:8], "undecodable", "48-byte"),
    "binary triplet with 4 ids": (header(kind=1) + IDS4, "undecodable", "40-byte"),
    "binary quadruplet said similar": (header(similar=1) + IDS4, "undecodable", "similar"),
    "JSON d of another dimension": (
        inline_quad([1, 2], [1, 2], [1, 2], [1, 2, 3]),
        "bad_dimension",
        "[2, 3]",
    ),
    "JSON empty vectors": (inline_quad([], [], [], []), "bad_dimension", "a.x"),
    "JSON nested vector": (inline_quad([1], [1], [[1]], [1]), "bad_dimension", "c.x"),
    "binary ids with a dimension": (header(dim=4) + IDS4, "bad_dimension", "dim"),
    "binary inline of dimension 0": (header(flags=0x01), "bad_dimension", "dim 0"),
    "JSON NaN in c": (
        inline_quad([1.0], [2.0], [float("nan")], [3.0]),
        "non_finite",
        "NaN",
    ),
    "JSON beyond float32 in d": (inline_quad([1.0], [2.0], [3.0], [1e39]), "non_finite", "NaN"),
    "binary inf in d": (
        header(flags=0x01, dim=1) + struct.pack("<4f", 1, 2, 3, float("inf")),
        "non_finite",
        "NaN",
    ),
    "JSON unknown kind": (json_quad(kind="quad"), "bad_kind", "'quadruplet'"),
    "binary unknown kind code 4": (header(kind=4) + IDS4, "bad_kind", "3 (quadruplet)"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_quadruplet_is_refused_with_its_reason(name: str) -> None:
    message, reason, named = MALFORMED[name]
    with pytest.raises(DecodeError) as info:
        decode(message)
    assert info.value.reason == reason
    assert named in info.value.detail, info.value.detail
    # the batch path: the same reason at the same index, its neighbours decoded
    out = decode_batch([GOOD, message, GOOD])
    assert [(i, e.reason) for i, e in out.errors] == [(1, reason)]
    assert [int(i) for b in out.batches for i in b.index] == [0, 2]


def test_a_missing_item_is_named_with_the_kinds_roles_and_the_value_found() -> None:
    expected = r"d: expected an object with 'id' or 'x' \(quadruplet items: a, b, c, d\), got 7$"
    with pytest.raises(DecodeError, match=expected):
        decode(json_quad(d=7))
    with pytest.raises(DecodeError) as info:
        decode(json_quad(d=list(range(1000))))  # a long value is cut
    shown = info.value.detail.split(", got ")[1]
    assert shown.startswith("[0, 1, 2, 3") and shown.endswith("...") and len(shown) == 60


def test_encoders_refuse_what_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="ids"):
        Constraint("quadruplet", ids=("1", "2", "3"))  # a quadruplet has 4 items
    with pytest.raises(ValueError, match="x"):
        Constraint("quadruplet", x=np.zeros((5, 2), np.float32))
    with pytest.raises(ValueError, match="similar"):
        Constraint("quadruplet", ids=("1", "2", "3", "4"), similar=True)
    nan = Constraint("quadruplet", x=np.array([[1], [2], [3], [np.nan]], np.float32))
    for encode in ENCODERS.values():
        with pytest.raises(ValueError):
            encode(nan)


# ------------------------------------------------------------------ batches
def test_batches_keep_kinds_apart_and_stream_order() -> None:
    """A quadruplet by id and a triplet by id with a timestamp are both 48 bytes: the kind byte
    still splits their runs (decode_batch's fast path needs equal layout bytes)."""
    quads = encode_constraints("quadruplet", ids=np.arange(12).reshape(3, 4))
    trip = encode_binary(Constraint("triplet", ids=("1", "2", "3"), ts=0.0))
    pair = encode_binary(Constraint("pair", ids=("1", "2"), similar=True))
    assert len(trip) == len(quads[0]) == 48
    values = [quads[0], quads[1], trip, quads[2], GOOD, pair]
    out = decode_batch(values)
    assert not out.errors
    assert [(b.kind, b.index.tolist()) for b in out.batches] == [
        ("quadruplet", [0, 1]),
        ("triplet", [2]),
        ("quadruplet", [3]),
        ("quadruplet", [4]),  # JSON: a run of its own
        ("pair", [5]),
    ]
    assert out.batches[0].ids.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert out.batches[3].ids.tolist() == [["17", "4", "17", "90"]]


def test_uniform_quadruplet_batch_takes_the_fast_path() -> None:
    rng = np.random.default_rng(0)
    batch = ConstraintBatch(
        "quadruplet",
        index=np.arange(40),
        x=rng.normal(size=(40, 4, 3)).astype(np.float32),
        labels=rng.integers(0, 5, (40, 4)),
        ts=np.arange(40, dtype=np.float64),
    )
    out = decode_batch(encode_binary_batch(batch))
    assert len(out.batches) == 1 and not out.errors
    got = out.batches[0]
    assert got.kind == "quadruplet" and got.n_items == 4 and got.similar is None
    np.testing.assert_array_equal(got.x, batch.x)
    np.testing.assert_array_equal(got.labels, batch.labels)


# ------------------------------------------------------------------ resolving
@pytest.fixture
def store() -> ItemStore:
    items = ItemStore(dim=3)
    items.add(["17", "4", "90", "-3"], X4)
    return items


def resolve(c: Constraint, store: ItemStore | None) -> np.ndarray:
    """The features of one constraint's items as the learn loop resolves them, in a batch."""
    (batch,) = decode_batch([encode_binary(c)]).batches
    resolved, errors = resolve_batch(batch, store)
    if errors:
        raise errors[0][1]
    return resolved.x[0]


def test_the_resolver_resolves_4_items_in_role_order(store: ItemStore) -> None:
    x = resolve(CASES["by id"], store)
    np.testing.assert_array_equal(x, X4[[0, 1, 0, 2]])
    np.testing.assert_array_equal(resolve(CASES["inline"], store), X4)
    extras = {"labels": (3, None, 0, 1), "ts": 7.0}
    rows = [("17", "4", "17", "90"), ("17", "4", "17", "5"), ("-3", "90", "17", "4")]  # 5: unknown
    (batch,) = decode_batch(
        [encode_binary(Constraint("quadruplet", ids=ids, **extras)) for ids in rows]
    ).batches
    resolved, errors = resolve_batch(batch, store, dim=3)
    assert [(i, e.reason) for i, e in errors] == [(1, "unknown_item")]
    assert "5" in errors[0][1].detail
    assert resolved.kind == "quadruplet" and resolved.index.tolist() == [0, 2]
    assert resolved.x.shape == (2, 4, 3) and resolved.x.dtype == np.float32
    np.testing.assert_array_equal(resolved.x[0], X4[[0, 1, 0, 2]])
    np.testing.assert_array_equal(resolved.x[1], X4[[3, 2, 0, 1]])
    assert resolved.labels.tolist() == [[3, MISSING_LABEL, 0, 1]] * 2
    assert resolved.ts.tolist() == [7.0, 7.0] and resolved.similar is None


def test_the_resolver_refuses_quadruplets_of_the_wrong_dimension_or_without_a_store(
    store: ItemStore,
) -> None:
    wide = Constraint("quadruplet", x=np.zeros((4, 5), np.float32))
    with pytest.raises(DecodeError) as info:
        resolve(wide, store)
    assert info.value.reason == "bad_dimension" and "expected 3" in info.value.detail
    batch = decode_batch([encode_binary(wide)] * 2).batches[0]
    resolved, errors = resolve_batch(batch, store)
    assert resolved is None
    assert [(i, e.reason) for i, e in errors] == [(0, "bad_dimension"), (1, "bad_dimension")]
    with pytest.raises(DecodeError) as info:
        resolve(CASES["by id"], None)
    assert info.value.reason == "unknown_item"
    by_id = decode_batch([encode_binary(CASES["by id"])]).batches[0]
    resolved, errors = resolve_batch(by_id, None, dim=3)
    assert resolved is None and [e.reason for _, e in errors] == ["unknown_item"]


# ------------------------------------------------------------------ the documented examples
REPO = Path(__file__).resolve().parents[1]
MESSAGES_MD = REPO / "connectors" / "MESSAGES.md"


def test_the_documented_json_examples_decode() -> None:
    (block,) = re.findall(r"```json\n(.*?)```", MESSAGES_MD.read_text(), re.S)
    examples = [json.loads(text) for text in block.split("\n\n")]
    decoded = [decode(json.dumps(example).encode()) for example in examples]
    assert [c.kind for c in decoded] == ["triplet", "pair", "quadruplet", "quadruplet"]
    assert decoded[2].ids == ("17", "4", "17", "90") and decoded[3].dim == 2


def test_the_documented_binary_quadruplet_is_what_the_encoder_writes() -> None:
    text = MESSAGES_MD.read_text().split("byte for byte", 1)[1]
    dump = text.split("```\n", 2)[1]
    hex_bytes = [line.split("    ")[0] for line in dump.splitlines()]
    documented = bytes.fromhex(" ".join(hex_bytes))
    c = Constraint("quadruplet", ids=("17", "4", "17", "90"), ts=2.5)
    assert encode_binary(c) == documented
    assert_same(c, decode(documented))


def test_the_overview_shows_one_quadruplet_in_both_formats() -> None:
    """docs/messages.md: its JSON example and its byte dump are the same message."""
    text = (REPO / "docs" / "messages.md").read_text()
    (example,) = re.findall(r"```json\n(.*?)```", text, re.S)
    dump = text.split("```json\n", 1)[1].split("```\n", 2)[2].split("```", 1)[0]
    documented = bytes.fromhex(" ".join(line.split("   ")[0] for line in dump.splitlines()))
    c = decode(example.encode())
    assert c.kind == "quadruplet" and c.ids == ("17", "4", "17", "90")
    assert encode_binary(c) == documented
