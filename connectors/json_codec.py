"""The JSON constraint encoding (format versions 1 and 2; schema in ``MESSAGES.md``).

The interchange format: readable, easy to produce from any language, and the one the HTTP API
and JSON Lines stream files speak. Items are keyed by their role (``ROLES[kind]``), each an
object with either ``"id"`` or ``"x"``::

    {"v": 1, "kind": "triplet", "anchor": {"id": "17", "label": 3},
     "positive": {"id": "4"}, "negative": {"id": "90"}, "ts": 1718000000.25}
    {"v": 1, "kind": "pair", "left": {"x": [0.1, 0.2]}, "right": {"x": [0.3, 0.1]},
     "similar": false}
    {"v": 1, "kind": "quadruplet", "a": {"id": "17"}, "b": {"id": "4"},
     "c": {"id": "17"}, "d": {"id": "90"}}

A kind is added within version 1 (the quadruplet was): a reader that predates it refuses such a
message as ``bad_kind`` rather than misreading it, and reads every other message as before.

Version 2 adds one item key, ``"modality"`` (every item or none), for cross-modal constraints::

    {"v": 2, "kind": "pair", "left": {"id": "17", "modality": "pix"},
     "right": {"id": "4", "modality": "fou"}, "similar": true}

A version-1 reader ignores item keys it does not know, so it would learn that pair as one within
a single modality; written as ``"v": 2`` it refuses it as ``unknown_version`` instead. A
constraint without modalities is written as version 1, byte for byte as before; this reader
reads both versions, and refuses a ``"modality"`` in a version-1 message as ``bad_modality``
(the writer meant something its version-1 readers would drop).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from oahu.connectors.constraint import (
    INT64_MAX,
    MISSING_LABEL,
    ROLES,
    Constraint,
    DecodeError,
    modality_problem,
)

VERSION = 1
#: The version of messages whose items carry a modality (version 1 plus the item key).
MODALITY_VERSION = 2
VERSIONS = (VERSION, MODALITY_VERSION)
# What a bad_kind error says was expected: every kind this reader knows, named as on the wire.
_KINDS_EXPECTED = ", ".join(repr(kind) for kind in ROLES)


def encode_json(c: Constraint) -> bytes:
    """Encode a constraint as one compact UTF-8 JSON object.

    >>> encode_json(Constraint("pair", ids=("1", "2"), similar=True))
    b'{"v":1,"kind":"pair","left":{"id":"1"},"right":{"id":"2"},"similar":true}'
    >>> encode_json(Constraint("quadruplet", ids=("1", "2", "1", "3")))
    b'{"v":1,"kind":"quadruplet","a":{"id":"1"},"b":{"id":"2"},"c":{"id":"1"},"d":{"id":"3"}}'
    >>> c = Constraint("pair", ids=("1", "2"), similar=True, modalities=("pix", "fou"))
    >>> msg = json.loads(encode_json(c))
    >>> msg["v"], msg["left"], msg["right"]
    (2, {'id': '1', 'modality': 'pix'}, {'id': '2', 'modality': 'fou'})
    """
    version = VERSION if c.modalities is None else MODALITY_VERSION
    msg: dict[str, Any] = {"v": version, "kind": c.kind}
    for i, role in enumerate(c.roles):
        item: dict[str, Any] = {"id": c.ids[i]} if c.ids is not None else {"x": _vector(c, i)}
        if c.labels is not None and c.labels[i] is not None:
            item["label"] = int(c.labels[i])  # type: ignore[arg-type]
        if c.modalities is not None:
            item["modality"] = c.modalities[i]
        msg[role] = item
    if c.similar is not None:
        msg["similar"] = bool(c.similar)
    if c.ts is not None:
        msg["ts"] = float(c.ts)
    return json.dumps(msg, separators=(",", ":"), allow_nan=False).encode()


def _vector(c: Constraint, i: int) -> list[float]:
    assert c.x is not None
    # float32 -> float64 -> shortest repr round-trips exactly back to the same float32
    return np.asarray(c.x[i], dtype=np.float32).astype(np.float64).tolist()


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_label(v: object) -> bool:
    # int64 in batches and in the binary format, whose smallest value means "no label"
    return _is_int(v) and MISSING_LABEL < v <= INT64_MAX  # type: ignore[operator]


def _finite_seconds(v: object) -> bool:
    """A number of seconds a float64 holds finitely (an int beyond its range is not)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error's detail; never raises (a value
    nested about as deeply as JSON allows may be too deep to repr)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_object(buf: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(buf)
    except (UnicodeDecodeError, ValueError) as e:  # ValueError: also ints of over 4,300 digits
        raise DecodeError("undecodable", f"invalid JSON: {e}") from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise DecodeError("undecodable", "JSON nested too deeply") from None
    if not isinstance(msg, dict):
        raise DecodeError("undecodable", f"expected a JSON object, got {type(msg).__name__}")
    return msg


def _parse_vectors(items: list[dict[str, Any]], roles: tuple[str, ...]) -> np.ndarray:
    vectors = []
    for role, item in zip(roles, items, strict=True):
        try:
            arr = np.asarray(item["x"])
        except (ValueError, OverflowError, RecursionError):  # ragged or too deep for an array
            arr = np.empty(0)
        if arr.dtype.kind not in "fiu" or arr.ndim != 1 or arr.size == 0:
            raise DecodeError("bad_dimension", f"{role}.x: expected a non-empty list of numbers")
        vectors.append(arr)
    dims = {len(v) for v in vectors}
    if len(dims) != 1:
        raise DecodeError("bad_dimension", f"items have different dimensions {sorted(dims)}")
    with np.errstate(over="ignore"):  # values beyond float32 range become inf: non_finite
        x = np.stack(vectors).astype(np.float32)
    if not np.isfinite(x).all():
        raise DecodeError("non_finite", "NaN or inf in an item")
    return x


def decode_json(buf: bytes) -> Constraint:
    """Decode one JSON message; raises ``DecodeError``. Unknown top-level keys are ignored
    (so are the roles of other kinds: a quadruplet's fifth key is metadata, not an item).

    >>> decode_json(b'{"v":1,"kind":"quadruplet","a":{"id":1},"b":{"id":2},'
    ...             b'"c":{"id":1},"d":{"id":3}}').ids
    ('1', '2', '1', '3')
    >>> try:
    ...     decode_json(b'{"v":1,"kind":"quadruplet","a":{"id":1},"b":{"id":2},"c":{"id":1}}')
    ... except DecodeError as e:
    ...     print(e.reason, e.detail)
    undecodable d: expected an object with 'id' or 'x' (quadruplet items: a, b, c, d), got None
    """
    msg = _parse_object(buf)
    version = msg.get("v")
    if not _is_int(version) or version not in VERSIONS:
        raise DecodeError("unknown_version", f"v={version!r}, expected 1 or 2")
    kind = msg.get("kind")
    if not isinstance(kind, str) or kind not in ROLES:
        raise DecodeError("bad_kind", f"kind={kind!r}, expected one of {_KINDS_EXPECTED}")
    roles = ROLES[kind]
    items = [msg.get(role) for role in roles]
    for role, item in zip(roles, items, strict=True):
        if not isinstance(item, dict) or ("id" in item) == ("x" in item):
            raise DecodeError(
                "undecodable",
                f"{role}: expected an object with 'id' or 'x' ({kind} items: "
                f"{', '.join(roles)}), got {_brief(item)}",
            )
    if len({"id" in item for item in items}) != 1:  # type: ignore[operator]
        raise DecodeError("undecodable", "items mix ids and inline vectors")
    ids = x = None
    if "id" in items[0]:  # type: ignore[operator]
        raw = [item["id"] for item in items]  # type: ignore[index]
        if not all(_is_int(i) or (isinstance(i, str) and i) for i in raw):
            raise DecodeError("undecodable", f"ids must be non-empty strings or integers: {raw}")
        ids = tuple(str(i) for i in raw)
    else:
        x = _parse_vectors(items, roles)  # type: ignore[arg-type]
    labels = tuple(item.get("label") for item in items)  # type: ignore[union-attr]
    if not all(v is None or _is_label(v) for v in labels):
        raise DecodeError(
            "undecodable", f"labels must be integers in ({MISSING_LABEL}, 2**63): {labels}"
        )
    modalities = _parse_modalities(items, roles, version)  # type: ignore[arg-type]
    similar = msg.get("similar") if kind == "pair" else None
    if kind == "pair" and not isinstance(similar, bool):
        raise DecodeError("undecodable", f"similar={similar!r}, expected true or false")
    ts = msg.get("ts")
    if ts is not None and not _finite_seconds(ts):
        raise DecodeError("undecodable", f"ts={ts!r}, expected seconds since the epoch")
    return Constraint(
        kind,
        ids=ids,
        x=x,
        labels=None if all(v is None for v in labels) else labels,
        similar=similar,
        ts=None if ts is None else float(ts),
        modalities=modalities,
    )


def _parse_modalities(
    items: list[dict[str, Any]], roles: tuple[str, ...], version: int
) -> tuple[str, ...] | None:
    """The items' modalities: None when no item names one; ``DecodeError("bad_modality")`` for
    a modality in a version-1 message, on some items only, or that is not a modality name.

    >>> try:
    ...     _parse_modalities([{"modality": "pix"}, {"id": "4"}], ("left", "right"), 2)
    ... except DecodeError as e:
    ...     print(e.reason, "|", e.detail)
    bad_modality | modality on left but not on right: every item names its modality or none does
    """
    given = ["modality" in item for item in items]
    if not any(given):
        return None
    if version == VERSION:
        raise DecodeError(
            "bad_modality",
            'item modality in a "v": 1 message (a version-1 reader would ignore it): write "v": 2',
        )
    if not all(given):
        on = ", ".join(r for r, g in zip(roles, given, strict=True) if g)
        off = ", ".join(r for r, g in zip(roles, given, strict=True) if not g)
        raise DecodeError(
            "bad_modality",
            f"modality on {on} but not on {off}: every item names its modality or none does",
        )
    for role, item in zip(roles, items, strict=True):
        problem = modality_problem(item["modality"])
        if problem is not None:
            raise DecodeError("bad_modality", f"{role}.modality: {problem}")
    return tuple(item["modality"] for item in items)
