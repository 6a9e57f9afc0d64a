"""Item modalities on the wire: version 2 of both message formats.

A cross-modal constraint (Zhen and Zha, AAAI 2015) names each item's modality. Such a message is
written as version 2 (JSON ``"v": 2``, binary version byte 2 with the modality flag), so a reader
that predates modalities refuses it as ``unknown_version`` instead of learning it as a
constraint within one modality; a constraint without modalities is written as version 1, byte
for byte as before, and this reader reads both. Checked here: the data model's validation, the
layouts byte for byte, round trips (examples and hypothesis), runs mixing versions, malformed
modality fields refused as ``bad_modality``, and the readers of the commit before modalities
(loaded from git) refusing version 2 and reading version 1 as they always did.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_connectors_poison import BASES, assert_accounted

from oahu.connectors import binary_codec, json_codec
from oahu.connectors.binary_codec import FLAG_MODALITY, HEADER
from oahu.connectors.constraint import (
    DEFAULT_MODALITY,
    MAX_MODALITY_LENGTH,
    REASONS,
    ROLES,
    Constraint,
    ConstraintBatch,
    DecodeError,
    split_modality,
)
from oahu.connectors.dead_letter import DEAD_LETTER_REASONS, UNSUPPORTED_MODALITY
from oahu.connectors.messages import (
    decode,
    decode_batch,
    encode_binary,
    encode_constraints,
    encode_json,
)

REPO = Path(__file__).resolve().parents[1]
#: The last commit whose readers speak version 1 only (before item modalities).
V1_COMMIT = "070ded3"
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))

CROSS_TRIPLET = Constraint(
    "triplet", ids=("17", "3", "8"), ts=2.5, modalities=("pix", "fou", "fou")
)
CROSS_PAIR = Constraint(
    "pair", x=np.array([[0.5, 1.0], [2.0, -1.0]], np.float32), similar=True, modalities=("a", "b")
)
CROSS_QUAD = Constraint(
    "quadruplet", ids=("1", "2", "3", "4"), labels=(7, None, 7, 9), modalities=("x",) * 4
)
CROSS = [CROSS_TRIPLET, CROSS_PAIR, CROSS_QUAD]


def same(a: Constraint, b: Constraint) -> None:
    assert (a.kind, a.ids, a.labels, a.similar, a.ts, a.modalities) == (
        b.kind,
        b.ids,
        b.labels,
        b.similar,
        b.ts,
        b.modalities,
    )
    if a.x is None or b.x is None:
        assert a.x is None and b.x is None
    else:
        assert a.x.tobytes() == b.x.tobytes()


def reason(message: bytes) -> str:
    with pytest.raises(DecodeError) as info:
        decode(message)
    return info.value.reason


# ---------------------------------------------------------------- the data model


def test_modalities_are_one_valid_name_per_item():
    assert Constraint("triplet", ids=("1", "2", "3")).modalities is None
    assert CROSS_TRIPLET.item_modalities == ("pix", "fou", "fou")
    assert (
        Constraint("pair", ids=("1", "2"), similar=True).item_modalities == (DEFAULT_MODALITY,) * 2
    )
    longest = "m" * MAX_MODALITY_LENGTH
    ok = Constraint("pair", ids=("1", "2"), similar=True, modalities=[longest, "a.b-c_D9"])
    assert ok.modalities == (longest, "a.b-c_D9")  # a list becomes a tuple
    bad = {
        "": r"modalities\[1\]: expected 1 to 64 letters, digits, '_', '-' or '.', got ''",
        "m" * 65: r"modalities\[1\]: .* got 'mmmm",
        "pi x": r"modalities\[1\]: .* got 'pi x'",
        "pix/2": r"got 'pix/2'",
        "é": r"got 'é'",
        "a\0": r"got 'a\\x00'",
        3: r"modalities\[1\]: .* got 3",
        None: r"got None",
    }
    for value, message in bad.items():
        with pytest.raises(ValueError, match=message):
            Constraint("pair", ids=("1", "2"), similar=True, modalities=("pix", value))
    with pytest.raises(ValueError, match="modalities: expected 3 entries, got 2"):
        Constraint("triplet", ids=("1", "2", "3"), modalities=("pix", "fou"))
    with pytest.raises(ValueError, match="modalities: expected one modality name per item"):
        Constraint("pair", ids=("1", "2"), similar=True, modalities="pix")


def test_the_new_reasons_are_decode_and_dead_letter_reasons():
    assert "bad_modality" in REASONS and "bad_modality" in DEAD_LETTER_REASONS
    assert UNSUPPORTED_MODALITY == "unsupported_modality"
    assert UNSUPPORTED_MODALITY in DEAD_LETTER_REASONS and UNSUPPORTED_MODALITY not in REASONS
    assert len(set(DEAD_LETTER_REASONS)) == len(DEAD_LETTER_REASONS)


def test_split_modality_keeps_the_rows_of_one_modality_in_order():
    names = np.array([["default"] * 2, ["pix", "fou"], ["default"] * 2, ["pix", "default"]])
    batch = ConstraintBatch(
        "pair",
        index=np.array([3, 5, 8, 9]),
        ids=np.arange(8).reshape(4, 2),
        similar=np.array([True, False, True, False]),
        modalities=names,
    )
    kept, others = split_modality(batch)
    assert kept.index.tolist() == [3, 8] and kept.ids.tolist() == [[0, 1], [4, 5]]
    assert others == [(5, ("pix", "fou")), (9, ("pix", "default"))]
    assert split_modality(batch, "nothing")[0] is None
    plain = ConstraintBatch("pair", index=np.arange(2), ids=np.ones((2, 2)), similar=np.ones(2))
    assert split_modality(plain) == (plain, [])
    assert split_modality(plain, "pix")[0] is None
    assert split_modality(plain, "pix")[1] == [(0, ("default",) * 2), (1, ("default",) * 2)]


# ---------------------------------------------------------------- JSON


def test_json_without_modalities_is_version_1_as_before():
    plain = Constraint("triplet", ids=("17", "4", "90"), labels=(3, None, None), ts=2.5)
    assert encode_json(plain) == (
        b'{"v":1,"kind":"triplet","anchor":{"id":"17","label":3},"positive":{"id":"4"},'
        b'"negative":{"id":"90"},"ts":2.5}'
    )


def test_json_with_modalities_is_version_2_with_a_modality_per_item():
    assert encode_json(CROSS_TRIPLET) == (
        b'{"v":2,"kind":"triplet","anchor":{"id":"17","modality":"pix"},'
        b'"positive":{"id":"3","modality":"fou"},"negative":{"id":"8","modality":"fou"},'
        b'"ts":2.5}'
    )
    msg = json.loads(encode_json(CROSS_QUAD))
    assert msg["v"] == 2 and msg["a"] == {"id": "1", "label": 7, "modality": "x"}


@pytest.mark.parametrize("c", CROSS)
@pytest.mark.parametrize("encode", [encode_json, encode_binary])
def test_round_trips_with_modalities(c, encode):
    same(decode(encode(c)), c)


def test_a_version_2_json_message_without_modalities_reads_as_version_1():
    v1 = encode_json(Constraint("pair", ids=("1", "2"), similar=True))
    v2 = v1.replace(b'"v":1', b'"v":2')
    same(decode(v2), decode(v1))
    assert decode(v2).modalities is None


JSON_BAD_MODALITY = {
    "in a version-1 message": (
        {"v": 1, "left": {"id": "1", "modality": "pix"}, "right": {"id": "2", "modality": "fou"}},
        'item modality in a "v": 1 message',
    ),
    "on some items only": (
        {"left": {"id": "1", "modality": "pix"}, "right": {"id": "2"}},
        "modality on left but not on right",
    ),
    "empty": ({"right": {"id": "2", "modality": ""}}, "right.modality: expected 1 to 64"),
    "too long": ({"left": {"id": "1", "modality": "m" * 65}}, "left.modality: expected"),
    "a space": ({"left": {"id": "1", "modality": "pi x"}}, "got 'pi x'"),
    "not ASCII": ({"left": {"id": "1", "modality": "é"}}, "got 'é'"),
    "a number": ({"left": {"id": "1", "modality": 7}}, "got 7"),
    "null": ({"left": {"id": "1", "modality": None}}, "got None"),
    "a list": ({"left": {"id": "1", "modality": ["pix"]}}, "got ['pix']"),
}


@pytest.mark.parametrize("name", list(JSON_BAD_MODALITY))
def test_malformed_json_modalities_are_bad_modality_naming_the_field(name):
    change, detail = JSON_BAD_MODALITY[name]
    msg = {
        "v": 2,
        "kind": "pair",
        "left": {"id": "1", "modality": "pix"},
        "right": {"id": "2", "modality": "fou"},
        "similar": True,
        **change,
    }
    raw = json.dumps(msg).encode()
    with pytest.raises(DecodeError) as info:
        decode(raw)
    assert info.value.reason == "bad_modality" and detail in info.value.detail
    assert_accounted([raw, encode_json(CROSS_TRIPLET), raw])


# ---------------------------------------------------------------- binary


def test_binary_without_modalities_is_version_1_as_before():
    quad = Constraint("quadruplet", ids=("17", "4", "17", "90"), ts=2.5)
    assert encode_binary(quad).hex(" ") == (  # the example of MESSAGES.md
        "4f 41 01 03 04 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 04 40 "
        "11 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 "
        "11 00 00 00 00 00 00 00 5a 00 00 00 00 00 00 00"
    )


def test_binary_version_2_layout_byte_for_byte():
    pair = Constraint("pair", ids=("17", "4"), similar=True, ts=2.5, modalities=("pix", "fou"))
    message = encode_binary(pair)
    assert message.hex(" ") == (  # the example of MESSAGES.md
        "4f 41 02 02 0c 01 08 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 04 40 "
        "70 69 78 00 00 00 00 00 66 6f 75 00 00 00 00 00 "
        "11 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00"
    )
    assert len(message) == 16 + 8 + 2 * 8 + 2 * 8
    assert len(encode_binary(CROSS_TRIPLET)) == 16 + 8 + 3 * 8 + 3 * 8


@pytest.mark.parametrize("length, width", [(1, 8), (8, 8), (9, 16), (33, 40), (64, 64)])
def test_binary_modality_width_is_the_longest_name_rounded_up_to_8_bytes(length, width):
    c = Constraint("pair", ids=("1", "2"), similar=False, modalities=("m" * length, "f"))
    message = encode_binary(c)
    assert message[6] == width and len(message) == 16 + 2 * width + 16
    assert decode(message).modalities == ("m" * length, "f")


def test_a_batch_of_several_widths_encodes_each_row_as_alone_and_decodes_in_order():
    rows = [("pix", "fou"), ("a" * 20, "b"), ("default", "default"), ("c" * 64, "d" * 9)]
    modalities = np.array(rows)
    ids = np.arange(8).reshape(4, 2)
    similar = np.array([True, False, True, False])
    messages = encode_constraints("pair", ids=ids, similar=similar, modalities=modalities)
    for i, row in enumerate(rows):
        c = Constraint(
            "pair", ids=tuple(map(str, ids[i])), similar=bool(similar[i]), modalities=row
        )
        assert messages[i] == encode_binary(c)
    out = decode_batch(messages)
    assert not out.errors
    assert [tuple(r) for b in out.batches for r in b.modalities.tolist()] == rows
    assert [int(i) for b in out.batches for i in b.index] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"modalities\[1, 0\]: expected .* got 'b d'"):
        encode_constraints(
            "pair", ids=ids[:2], similar=similar[:2], modalities=[["a", "b"], ["b d", "c"]]
        )
    with pytest.raises(ValueError, match=r"modalities: expected shape \(2, 2\)"):
        encode_constraints("pair", ids=ids[:2], similar=similar[:2], modalities=[["a", "b"]])


def v2(c: Constraint = CROSS_TRIPLET) -> bytearray:
    return bytearray(encode_binary(c))


def name_at(message: bytearray, item: int, raw: bytes) -> bytes:
    """``message`` (CROSS_TRIPLET's layout: ts, then 8-byte names) with item ``item``'s name
    field set to ``raw`` (padded with NULs)."""
    start = 16 + 8 + 8 * item
    message[start : start + 8] = raw.ljust(8, b"\0")
    return bytes(message)


def with_header(message: bytearray, version: int | None = None, flags=None, width=None) -> bytes:
    out = bytearray(message)
    if version is not None:
        out[2] = version
    if flags is not None:
        out[4] = flags
    if width is not None:
        out[6] = width
    return bytes(out)


BINARY_BAD = {
    "an empty name": (name_at(v2(), 1, b""), "bad_modality", "positive: modality"),
    "a space": (name_at(v2(), 0, b"pi x"), "bad_modality", "anchor: modality b'pi x"),
    "a byte after the padding": (name_at(v2(), 2, b"pix\0x"), "bad_modality", "negative"),
    "a leading NUL": (name_at(v2(), 2, b"\0pix"), "bad_modality", "negative"),
    "not ASCII": (name_at(v2(), 0, "é".encode()), "bad_modality", "anchor"),
    "a byte 0xff": (name_at(v2(), 0, b"\xff"), "bad_modality", "anchor"),
    "the flag without a width": (with_header(v2(), width=0), "bad_modality", "width 0"),
    "a width without the flag": (with_header(v2(), flags=0x04), "bad_modality", "width 8"),
    "a width over 64": (with_header(v2(), width=65), "bad_modality", "width 65"),
    "the flag in version 1": (with_header(v2(), version=1), "undecodable", "unknown flags"),
    "a width in version 1": (
        with_header(encode_binary(Constraint("triplet", ids=("1", "2", "3"))), width=8),
        "undecodable",
        "non-zero reserved",
    ),
    "byte 7 in version 2": (bytes(v2()[:7] + b"\1" + v2()[8:]), "undecodable", "reserved"),
    "a truncated name field": (bytes(v2()[:-25]), "undecodable", "bytes, the header declares"),
    "an unknown flag in version 2": (with_header(v2(), flags=0x1C), "undecodable", "flags"),
    "version 3": (with_header(v2(), version=3), "unknown_version", "version 3, expected 1 or 2"),
}


@pytest.mark.parametrize("name", list(BINARY_BAD))
def test_malformed_binary_modalities_are_refused_with_a_stable_reason(name):
    message, expected, detail = BINARY_BAD[name]
    with pytest.raises(DecodeError) as info:
        decode(message)
    assert info.value.reason == expected and detail in info.value.detail, info.value
    good = encode_binary(CROSS_TRIPLET)
    out = decode_batch([good, message, good])  # the run path, and its neighbours spared
    assert [(i, e.reason) for i, e in out.errors] == [(1, expected)]
    assert [int(i) for b in out.batches for i in b.index] == [0, 2]
    if len(message) == len(good):  # the fast path: one layout, refused rows dropped
        out = decode_batch([good, message, good, message])
        assert [(i, e.reason) for i, e in out.errors] == [(1, expected), (3, expected)]
        assert [int(i) for b in out.batches for i in b.index] == [0, 2]


def test_a_version_2_binary_message_without_the_flag_reads_as_version_1():
    v1 = encode_binary(Constraint("triplet", ids=("1", "2", "3")))
    same(decode(with_header(bytearray(v1), version=2)), decode(v1))


# ---------------------------------------------------------------- runs mixing versions


def test_runs_mixing_versions_and_formats_decode_in_order():
    plain_t = Constraint("triplet", ids=("17", "3", "8"), ts=2.5)
    default_t = Constraint("triplet", ids=("17", "3", "8"), ts=2.5, modalities=("default",) * 3)
    constraints = [
        plain_t,
        CROSS_TRIPLET,
        CROSS_TRIPLET,
        plain_t,
        default_t,
        CROSS_QUAD,
        CROSS_PAIR,
    ]
    values = []
    for i, c in enumerate(constraints):
        values += (
            [encode_binary(c), encode_json(c)] if i % 2 else [encode_json(c), encode_binary(c)]
        )
    out = decode_batch(values)
    assert not out.errors
    rows = [(int(i), b.row(r)) for b in out.batches for r, i in enumerate(b.index)]
    assert [i for i, _ in rows] == list(range(len(values)))
    for (_, got), c in zip(rows, [c for c in constraints for _ in range(2)], strict=True):
        same(got, c)
    # one layout, one run: the binary fast path keeps the names
    (batch,) = decode_batch([encode_binary(CROSS_TRIPLET)] * 5).batches
    assert batch.modalities.tolist() == [["pix", "fou", "fou"]] * 5
    assert batch.ids.dtype == np.int64 and batch.modalities.dtype.kind == "U"


# ---------------------------------------------------------------- property tests

NAMES = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.",
    min_size=1,
    max_size=MAX_MODALITY_LENGTH,
)


@st.composite
def constraints(draw: st.DrawFn) -> Constraint:
    kind = draw(st.sampled_from(list(ROLES)))
    k = len(ROLES[kind])
    inline = draw(st.booleans())
    ids = x = None
    if inline:
        dim = draw(st.integers(1, 4))
        x = np.asarray(
            draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=k * dim, max_size=k * dim)),
            dtype=np.float32,
        ).reshape(k, dim)
    else:
        ids = tuple(
            str(v) for v in draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=k, max_size=k))
        )
    labels = draw(
        st.none()
        | st.lists(st.none() | st.integers(-(2**63) + 1, 2**63 - 1), min_size=k, max_size=k)
    )
    return Constraint(
        kind,
        ids=ids,
        x=x,
        labels=None if labels is None or all(v is None for v in labels) else tuple(labels),
        similar=draw(st.booleans()) if kind == "pair" else None,
        ts=draw(st.none() | st.floats(0, 2e9)),
        modalities=draw(st.none() | st.lists(NAMES, min_size=k, max_size=k).map(tuple)),
    )


@PROPERTY
@given(c=constraints())
def test_any_constraint_round_trips_in_both_formats_at_its_version(c):
    for encode, version in (
        (encode_json, lambda m: json.loads(m)["v"]),
        (encode_binary, lambda m: m[2]),
    ):
        message = encode(c)
        assert version(message) == (1 if c.modalities is None else 2)
        same(decode(message), c)


@PROPERTY
@given(
    cs=st.lists(constraints(), max_size=12),
    formats=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_any_run_of_both_versions_decodes_as_each_message_alone(cs, formats):
    values = [(encode_json if f else encode_binary)(c) for c, f in zip(cs, formats, strict=False)]
    out = decode_batch(values)
    assert not out.errors
    rows = sorted((int(i), b.row(r)) for b in out.batches for r, i in enumerate(b.index))
    assert [i for i, _ in rows] == list(range(len(values)))
    for (_, got), value in zip(rows, values, strict=True):
        same(got, decode(value))


@PROPERTY
@given(
    base=st.sampled_from(CROSS + BASES),
    width=st.integers(0, 255),
    flags=st.integers(0, 255),
    version=st.integers(0, 3),
    names=st.binary(min_size=0, max_size=64),
    at=st.integers(0, 200),
)
def test_arbitrary_modality_bytes_are_decoded_or_refused_never_raised(
    base, width, flags, version, names, at
):
    """Any version, flags and width in a header, any bytes where the names go: each message is
    decoded or is a DecodeError, alone and in runs (the fast path included)."""
    message = bytearray(encode_binary(base))
    message[2], message[4], message[6] = version, flags, width
    message[16 + at : 16 + at + len(names)] = names
    values = [bytes(message), bytes(message[: len(message) - 1]), encode_binary(base)]
    assert_accounted(values)
    assert_accounted(values[:1] * 3)
    try:
        c = decode(bytes(message))
    except DecodeError as e:
        assert e.reason in REASONS
    else:
        assert c.modalities is None or all(0 < len(m) <= MAX_MODALITY_LENGTH for m in c.modalities)


# ---------------------------------------------------------------- the readers before modalities


def old_module(name: str):
    """``oahu.connectors.<name>`` as it was at ``V1_COMMIT`` (skips without the git history)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{V1_COMMIT}:connectors/{name}.py"],
            cwd=REPO, capture_output=True, check=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"no git history with commit {V1_COMMIT}")
    spec = importlib.util.spec_from_loader(f"v1_{name}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        exec(compile(source, f"{V1_COMMIT}:connectors/{name}.py", "exec"), module.__dict__)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture(scope="module")
def v1_readers():
    json_v1, binary_v1 = old_module("json_codec"), old_module("binary_codec")
    assert json_v1.VERSION == binary_v1.VERSION == 1 and not hasattr(binary_v1, "FLAG_MODALITY")
    return json_v1, binary_v1


@pytest.mark.parametrize("c", CROSS)
def test_a_version_1_reader_refuses_version_2_as_unknown_version(v1_readers, c):
    json_v1, binary_v1 = v1_readers
    for decode_v1, message in (
        (json_v1.decode_json, encode_json(c)),
        (binary_v1.decode_binary, encode_binary(c)),
    ):
        with pytest.raises(DecodeError) as info:
            decode_v1(message)
        assert info.value.reason == "unknown_version"


@pytest.mark.parametrize("c", BASES)
def test_a_version_1_reader_reads_what_is_written_without_modalities_as_before(v1_readers, c):
    json_v1, binary_v1 = v1_readers
    assert encode_json(c) == json_v1.encode_json(c)
    assert encode_binary(c) == binary_v1.encode_binary(c)
    same(json_v1.decode_json(encode_json(c)), c)
    same(binary_v1.decode_binary(encode_binary(c)), c)


def test_the_codecs_name_their_versions():
    assert (json_codec.VERSION, json_codec.MODALITY_VERSION) == (1, 2)
    assert (binary_codec.VERSION, binary_codec.MODALITY_VERSION, FLAG_MODALITY) == (1, 2, 0x08)
    assert HEADER.size == 16
    assert struct.unpack_from("<B", encode_binary(CROSS_TRIPLET), 2) == (2,)


def test_the_documented_version_2_examples_are_what_the_encoders_write():
    text = (REPO / "connectors" / "MESSAGES.md").read_text()
    section = text.split("## Modalities (version 2)", 1)[1].split("\n## ", 1)[0]
    example = section.split("```\n", 2)[1]
    assert encode_json(decode(example.encode())) == encode_json(CROSS_TRIPLET)
    assert "is 72 bytes" in section and len(encode_binary(CROSS_TRIPLET)) == 72
    dump = text.split("in version 2:\n\n```\n", 1)[1].split("```", 1)[0]
    documented = bytes.fromhex(" ".join(line.split("    ")[0] for line in dump.splitlines()))
    pair = Constraint("pair", ids=("17", "4"), similar=True, ts=2.5, modalities=("pix", "fou"))
    assert encode_binary(pair) == documented
    same(decode(documented), pair)
