"""JSON Lines interchange for cross-modal streams (version 1, labelled objects; version 2, linked
objects; streams/FORMAT.md, "Cross-modal streams").

One JSON object per line, each with a ``type``:

* first line, the header; ``format`` tells it from a single-modality stream's::

    {"type": "header", "format": "oahu-cross-modal-stream", "version": 1,
     "modalities": ["pix", "fou"], "dims": [240, 76], "n_objects": 2000,
     "n_constraints": 10000, "meta": {...}}

* two item records per object, one per modality (A, then B), before any constraint that uses
  them; the development objects in the order of ``dev_idx``, then the test objects::

    {"type": "item", "id": 17, "modality": "pix", "x": [0.0, 0.3125, ...], "label": 3,
     "split": "dev"}

* constraint records in stream order, each item with its modality's name::

    {"type": "pair", "u": 17, "u_modality": "pix", "v": 5, "v_modality": "fou",
     "similar": true}
    {"type": "triplet", "anchor": 17, "anchor_modality": "fou", "positive": 5,
     "positive_modality": "pix", "negative": 9, "negative_modality": "pix"}

Version 2 holds linked objects (:mod:`streams.linked`): each modality's objects are its own, so
the header adds ``sizes`` (each modality's objects; ``n_objects`` is their sum) and ``n_links``;
each object has one item record, in its modality, without a label (A's development objects,
A's test objects, then B's); one record per link follows the items, before the constraints::

    {"type": "header", "format": "oahu-cross-modal-stream", "version": 2,
     "modalities": ["drug", "target"], "dims": [16, 8], "n_objects": 50, "sizes": [30, 20],
     "n_links": 80, "n_constraints": 1000, "meta": {...}}
    {"type": "item", "id": 4, "modality": "target", "x": [0.5, ...], "split": "test"}
    {"type": "link", "a": 3, "b": 17}

Features are written as the shortest decimal of the float64 equal to each float32 value, so
reading them back gives the identical float32. Blank lines are skipped and unknown fields
ignored; any other deviation raises ``ValueError`` naming the line and the field.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from oahu.streams.atomic import atomic_open
from oahu.streams.jsonl import (
    _boolean,
    _count,
    _integer,
    _object,
    _one_of,
    check_fields,
    checked_records,
)
from oahu.streams.stream_families import CROSS_MODAL_FORMAT, single_modality_refusal

if TYPE_CHECKING:
    from oahu.streams.cross_modal import CrossModalStream

__all__ = [
    "CROSS_MODAL_JSONL_VERSION",
    "LINKED_JSONL_VERSION",
    "ROLES",
    "read_cross_modal_jsonl",
    "write_cross_modal_jsonl",
]

#: The header's ``version`` of a stream of labelled objects, and of one of linked objects.
CROSS_MODAL_JSONL_VERSION, LINKED_JSONL_VERSION = 1, 2
#: The item fields of each kind of constraint record, in constraint order; each has a
#: ``<role>_modality`` beside it.
ROLES: dict[str, tuple[str, ...]] = {
    "pair": ("u", "v"),
    "triplet": ("anchor", "positive", "negative"),
}
_KIND_CODES = {"pair": 0, "triplet": 1}  # CrossModalStream.kinds


def _names(v: Any) -> str | None:
    ok = isinstance(v, list) and len(v) == 2 and all(isinstance(n, str) and n for n in v)
    return None if ok and v[0] != v[1] else "expected two distinct non-empty names"


def _dims(v: Any) -> str | None:
    ok = isinstance(v, list) and len(v) == 2 and all(_count(d) is None and d > 0 for d in v)
    return None if ok else "expected two positive integers"


_SCHEMA = {
    "header": {
        "version": _integer,
        "modalities": _names,
        "dims": _dims,
        "n_objects": _count,
        "n_constraints": _count,
        "meta": _object,
    },
    "item": {
        "id": _integer,
        "modality": lambda v: None if isinstance(v, str) else "expected a modality's name",
        "x": lambda v: None if isinstance(v, list) else "expected a list of numbers",
        "label": _integer,
        "split": _one_of("dev", "test"),
    },
    "pair": {"u": _integer, "v": _integer, "similar": _boolean},
    "triplet": dict.fromkeys(ROLES["triplet"], _integer),
}
# Version 2 (linked objects): what the header adds, an item without a label, the links.
_LINKED_SCHEMA = {
    **_SCHEMA,
    "header": {**_SCHEMA["header"], "sizes": _dims, "n_links": _count},
    "item": {key: check for key, check in _SCHEMA["item"].items() if key != "label"},
    "link": {"a": _integer, "b": _integer},
}
_LINK_ROLES = ("a", "b")  # a link record's objects, of A and of B


def write_cross_modal_jsonl(stream: CrossModalStream, path: str | os.PathLike[str]) -> None:
    """Write ``stream`` to ``path`` as JSON Lines (header, items, links of linked objects,
    constraints), atomically."""
    names = stream.modalities
    header: dict[str, Any] = {
        "type": "header",
        "format": CROSS_MODAL_FORMAT,
        "version": LINKED_JSONL_VERSION if stream.is_linked else CROSS_MODAL_JSONL_VERSION,
        "modalities": list(names),
        "dims": list(stream.dims),
    }
    if stream.is_linked:
        assert stream.links is not None
        header.update(n_objects=sum(stream.sizes), sizes=list(stream.sizes))
        header["n_links"] = len(stream.links)
    else:
        header["n_objects"] = stream.n_objects
    header.update(n_constraints=len(stream), meta=stream.meta)
    with atomic_open(path, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        if stream.is_linked:
            _write_linked_items(stream, fh)
        else:
            _write_items(stream, fh)
        records = zip(
            stream.kinds.tolist(),
            stream.constraints.tolist(),
            stream.modality.tolist(),
            stream.similar.tolist(),
            strict=True,
        )
        for code, ids, modality, similar in records:
            kind = "pair" if code == _KIND_CODES["pair"] else "triplet"
            record: dict[str, Any] = {"type": kind}
            for role, i, m in zip(ROLES[kind], ids, modality, strict=False):
                record[role], record[f"{role}_modality"] = i, names[m]
            if kind == "pair":
                record["similar"] = similar
            fh.write(json.dumps(record) + "\n")


def _write_items(stream: CrossModalStream, fh: Any) -> None:
    """Two item records per labelled object, A's then B's, development objects first."""
    names = stream.modalities
    assert stream.y is not None
    for split, ids in (("dev", stream.dev_idx), ("test", stream.test_idx)):
        rows = [stream.X[m][ids].tolist() for m in (0, 1)]
        for k, (i, label) in enumerate(zip(ids.tolist(), stream.y[ids].tolist(), strict=True)):
            for m in (0, 1):
                item = {"type": "item", "id": i, "modality": names[m], "x": rows[m][k]}
                fh.write(json.dumps({**item, "label": label, "split": split}) + "\n")


def _write_linked_items(stream: CrossModalStream, fh: Any) -> None:
    """One item record per linked object, in its modality (A's then B's, development objects
    first), then one record per link."""
    assert stream.links is not None
    for m, name in enumerate(stream.modalities):
        for split, ids in (("dev", stream.dev_objects(m)), ("test", stream.test_objects(m))):
            for i, x in zip(ids.tolist(), stream.X[m][ids].tolist(), strict=True):
                item = {"type": "item", "id": i, "modality": name, "x": x, "split": split}
                fh.write(json.dumps(item) + "\n")
    for a, b in stream.links.tolist():
        fh.write(json.dumps({"type": "link", "a": a, "b": b}) + "\n")


class _Reader:
    """Checks records one at a time against the schema and what the header announced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.header: dict[str, Any] | None = None
        self.linked = False
        # Per modality, which objects' item records were read.
        self.seen: list[np.ndarray] = [np.zeros(0, dtype=bool)] * 2
        self.label = np.zeros(0, dtype=np.int64)
        self.split: dict[int, str] = {}
        self.n_items = self.n_links = self.n_constraints = 0

    def fail(self, lineno: int, message: str) -> ValueError:
        return ValueError(f"{self.path}:{lineno}: {message}")

    def check(self, record: Any, lineno: int) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise self.fail(lineno, "expected a JSON object")
        kind = record.get("type")
        if self.header is None and kind == "header" and "format" not in record:
            raise single_modality_refusal(self.path)
        if self.header is None:
            expected: tuple[str, ...] = ("header",)
            # The version says which schema the rest of the header follows.
            linked = record.get("version") == LINKED_JSONL_VERSION
        else:
            expected = (
                ("item", "link", "pair", "triplet") if self.linked else ("item", "pair", "triplet")
            )
            linked = self.linked
        check_fields(record, lineno, expected, _LINKED_SCHEMA if linked else _SCHEMA, self.fail)
        if kind == "header":
            self._check_header(record, lineno)
        elif kind == "item":
            self._check_item(record, lineno)
        elif kind == "link":
            self._check_link(record, lineno)
        else:
            self._check_constraint(record, lineno)
        return record

    def _check_header(self, record: dict[str, Any], lineno: int) -> None:
        if record["format"] != CROSS_MODAL_FORMAT:
            raise self.fail(
                lineno,
                f"field 'format': this reader reads {CROSS_MODAL_FORMAT!r}, got "
                f"{record['format']!r}"[:300],
            )
        if record["version"] not in (CROSS_MODAL_JSONL_VERSION, LINKED_JSONL_VERSION):
            raise self.fail(
                lineno,
                f"field 'version': this reader reads {CROSS_MODAL_JSONL_VERSION} and "
                f"{LINKED_JSONL_VERSION}, got {record['version']}",
            )
        self.header = record
        self.linked = record["version"] == LINKED_JSONL_VERSION
        n = record["n_objects"]
        sizes = record["sizes"] if self.linked else [n, n]
        if self.linked and sum(sizes) != n:
            raise self.fail(
                lineno,
                f"field 'n_objects': the objects of both modalities, {sizes[0]} + {sizes[1]} "
                f"(sizes), got {n}",
            )
        self.seen = [np.zeros(size, dtype=bool) for size in sizes]
        self.label = np.zeros(n, dtype=np.int64)

    def _modality(self, record: dict[str, Any], name: str, lineno: int) -> int:
        assert self.header is not None
        names = self.header["modalities"]
        if record.get(name) not in names:
            raise self.fail(
                lineno,
                f"field '{name}': expected {names[0]!r} or {names[1]!r} (the header's "
                f"modalities), got {record.get(name)!r}"[:300],
            )
        return names.index(record[name])

    def _object(self, record: dict[str, Any], name: str, m: int, lineno: int) -> int:
        n = len(self.seen[m])
        if not 0 <= record[name] < n:
            assert self.header is not None
            of = (
                f"sizes: the objects of {self.header['modalities'][m]}"
                if self.linked
                else ("n_objects")
            )
            raise self.fail(
                lineno, f"field '{name}': object id {record[name]} is outside [0, {n}) ({of})"
            )
        return record[name]

    def _check_item(self, record: dict[str, Any], lineno: int) -> None:
        assert self.header is not None
        m = self._modality(record, "modality", lineno)
        i = self._object(record, "id", m, lineno)
        if self.seen[m][i]:
            raise self.fail(
                lineno, f"field 'id': object {i} in {record['modality']} is defined twice"
            )
        if self.n_links:
            raise self.fail(lineno, "an item record after a link record: items come first")
        width = self.header["dims"][m]
        try:  # converted without a dtype first, so that text and nulls show in the dtype
            x = np.asarray(record["x"])
        except ValueError:  # ragged nested lists
            x = np.asarray(None)
        if x.shape != (width,) or x.dtype.kind not in "iuf" or not np.all(np.isfinite(x)):
            raise self.fail(
                lineno,
                f"field 'x': expected {width} finite numbers (dims of {record['modality']})",
            )
        with np.errstate(over="ignore"):
            record["x"] = x.astype(np.float32)
        if not np.all(np.isfinite(record["x"])):
            raise self.fail(lineno, "field 'x': a value overflows float32")
        if not self.linked:
            self._check_other_modality(record, i, lineno)
        self.seen[m][i] = True
        self.n_items += 1

    def _check_other_modality(self, record: dict[str, Any], i: int, lineno: int) -> None:
        """A labelled object's two item records agree on its label and split."""
        if self.seen[0][i] or self.seen[1][i]:  # the other modality came first
            for name, before in (("label", int(self.label[i])), ("split", self.split[i])):
                if record[name] != before:
                    raise self.fail(
                        lineno,
                        f"field '{name}': object {i} has {before!r} in its other modality's "
                        f"record, {record[name]!r} here",
                    )
        self.label[i], self.split[i] = record["label"], record["split"]

    def _check_seen(self, record: dict[str, Any], role: str, m: int, lineno: int) -> None:
        assert self.header is not None
        i = self._object(record, role, m, lineno)
        if not self.seen[m][i]:
            raise self.fail(
                lineno,
                f"field '{role}': object {i} has no item record in "
                f"{self.header['modalities'][m]} before this line",
            )

    def _check_link(self, record: dict[str, Any], lineno: int) -> None:
        if self.n_constraints:
            raise self.fail(lineno, "a link record after a constraint: links come first")
        for m, role in enumerate(_LINK_ROLES):
            self._check_seen(record, role, m, lineno)
        self.n_links += 1

    def _check_constraint(self, record: dict[str, Any], lineno: int) -> None:
        for role in ROLES[record["type"]]:
            m = self._modality(record, f"{role}_modality", lineno)
            self._check_seen(record, role, m, lineno)
        self.n_constraints += 1

    def check_complete(self, lineno: int) -> None:
        if self.header is None:
            raise self.fail(lineno, "no header record: the file is empty")
        counts = [("n_constraints", self.header["n_constraints"], self.n_constraints)]
        if self.linked:
            counts[:0] = [
                ("n_objects item records", self.header["n_objects"], self.n_items),
                ("n_links", self.header["n_links"], self.n_links),
            ]
        else:
            counts[:0] = [
                ("2 * n_objects item records", 2 * self.header["n_objects"], self.n_items)
            ]
        for what, expected, seen in counts:
            if seen != expected:
                raise self.fail(
                    lineno,
                    f"end of file: header announced {expected} ({what}), found {seen} "
                    "(truncated file?)",
                )


def read_cross_modal_jsonl(path: str | os.PathLike[str]) -> CrossModalStream:
    """Read a whole cross-modal JSON Lines stream (as written by
    :func:`write_cross_modal_jsonl`); a single-modality file is refused, naming its reader."""
    from oahu.streams.cross_modal import CrossModalStream  # cross_modal re-exports this module

    reader = _Reader(path)
    X: list[np.ndarray] = []
    # Per modality, the development and the test objects in the order of their records.
    split_ids: list[dict[str, list[int]]] = [{"dev": [], "test": []} for _ in range(2)]
    links: list[list[int]] = []
    constraints: list[list[int]] = []
    modality: list[list[int]] = []
    kinds: list[int] = []
    similar: list[bool] = []
    for record in checked_records(path, reader):
        kind = record["type"]
        if kind == "header":
            names = record["modalities"]
            sizes = record["sizes"] if reader.linked else [record["n_objects"]] * 2
            X = [
                np.empty((n, d), dtype=np.float32)
                for n, d in zip(sizes, record["dims"], strict=True)
            ]
        elif kind == "item":
            m = names.index(record["modality"])
            X[m][record["id"]] = record["x"]
            # A labelled object's split once, in the order of its first modality's records.
            if reader.linked or m == 0:
                split_ids[m][record["split"]].append(record["id"])
        elif kind == "link":
            links.append([record["a"], record["b"]])
        else:
            roles = ROLES[kind]
            ids = [record[role] for role in roles]
            codes = [names.index(record[f"{role}_modality"]) for role in roles]
            constraints.append(ids + [-1] * (3 - len(roles)))
            modality.append(codes + [-1] * (3 - len(roles)))
            kinds.append(_KIND_CODES[kind])
            similar.append(record.get("similar", False) if kind == "pair" else False)
    assert reader.header is not None
    header = reader.header
    split = [{k: np.array(v, dtype=np.int64) for k, v in ids.items()} for ids in split_ids]
    linked: dict[str, Any] = {}
    if reader.linked:
        linked = {
            "links": np.array(links, dtype=np.int64).reshape(-1, 2),
            "dev_idx_b": split[1]["dev"],
            "test_idx_b": split[1]["test"],
        }
    return CrossModalStream(
        modalities=tuple(header["modalities"]),  # type: ignore[arg-type]
        X=(X[0], X[1]),
        y=None if reader.linked else reader.label,
        dev_idx=split[0]["dev"],
        test_idx=split[0]["test"],
        constraints=np.array(constraints, dtype=np.int64).reshape(-1, 3),
        modality=np.array(modality, dtype=np.int8).reshape(-1, 3),
        kinds=np.array(kinds, dtype=np.int8),
        similar=np.array(similar, dtype=bool),
        meta=header["meta"],
        **linked,
    )
