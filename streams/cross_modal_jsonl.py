"""JSON Lines interchange for cross-modal streams (version 1; streams/FORMAT.md, "Cross-modal
streams").

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
    "ROLES",
    "read_cross_modal_jsonl",
    "write_cross_modal_jsonl",
]

CROSS_MODAL_JSONL_VERSION = 1
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


def write_cross_modal_jsonl(stream: CrossModalStream, path: str | os.PathLike[str]) -> None:
    """Write ``stream`` to ``path`` as JSON Lines (header, items, constraints), atomically."""
    names = stream.modalities
    header = {
        "type": "header",
        "format": CROSS_MODAL_FORMAT,
        "version": CROSS_MODAL_JSONL_VERSION,
        "modalities": list(names),
        "dims": list(stream.dims),
        "n_objects": stream.n_objects,
        "n_constraints": len(stream),
        "meta": stream.meta,
    }
    with atomic_open(path, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        for split, ids in (("dev", stream.dev_idx), ("test", stream.test_idx)):
            rows = [stream.X[m][ids].tolist() for m in (0, 1)]
            for k, (i, label) in enumerate(zip(ids.tolist(), stream.y[ids].tolist(), strict=True)):
                for m in (0, 1):
                    item = {"type": "item", "id": i, "modality": names[m], "x": rows[m][k]}
                    fh.write(json.dumps({**item, "label": label, "split": split}) + "\n")
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


class _Reader:
    """Checks records one at a time against the schema and what the header announced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.header: dict[str, Any] | None = None
        self.seen = np.zeros((0, 2), dtype=bool)  # (object, modality) item records read
        self.label = np.zeros(0, dtype=np.int64)
        self.split: dict[int, str] = {}
        self.n_items = self.n_constraints = 0

    def fail(self, lineno: int, message: str) -> ValueError:
        return ValueError(f"{self.path}:{lineno}: {message}")

    def check(self, record: Any, lineno: int) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise self.fail(lineno, "expected a JSON object")
        kind = record.get("type")
        if self.header is None and kind == "header" and "format" not in record:
            raise single_modality_refusal(self.path)
        expected = ("header",) if self.header is None else ("item", "pair", "triplet")
        check_fields(record, lineno, expected, _SCHEMA, self.fail)
        if kind == "header":
            self._check_header(record, lineno)
        elif kind == "item":
            self._check_item(record, lineno)
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
        if record["version"] != CROSS_MODAL_JSONL_VERSION:
            raise self.fail(
                lineno,
                f"field 'version': this reader reads {CROSS_MODAL_JSONL_VERSION}, got "
                f"{record['version']}",
            )
        self.header = record
        n = record["n_objects"]
        self.seen = np.zeros((n, 2), dtype=bool)
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

    def _object(self, record: dict[str, Any], name: str, lineno: int) -> int:
        n = len(self.seen)
        if not 0 <= record[name] < n:
            raise self.fail(
                lineno, f"field '{name}': object id {record[name]} is outside [0, {n}) (n_objects)"
            )
        return record[name]

    def _check_item(self, record: dict[str, Any], lineno: int) -> None:
        assert self.header is not None
        i = self._object(record, "id", lineno)
        m = self._modality(record, "modality", lineno)
        if self.seen[i, m]:
            raise self.fail(
                lineno, f"field 'id': object {i} in {record['modality']} is defined twice"
            )
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
        if self.seen[i].any():  # the object's other modality came first: they must agree
            for name, before in (("label", int(self.label[i])), ("split", self.split[i])):
                if record[name] != before:
                    raise self.fail(
                        lineno,
                        f"field '{name}': object {i} has {before!r} in its other modality's "
                        f"record, {record[name]!r} here",
                    )
        self.label[i], self.split[i] = record["label"], record["split"]
        self.seen[i, m] = True
        self.n_items += 1

    def _check_constraint(self, record: dict[str, Any], lineno: int) -> None:
        for role in ROLES[record["type"]]:
            i = self._object(record, role, lineno)
            m = self._modality(record, f"{role}_modality", lineno)
            if not self.seen[i, m]:
                raise self.fail(
                    lineno,
                    f"field '{role}': object {i} has no item record in "
                    f"{record[f'{role}_modality']} before this line",
                )
        self.n_constraints += 1

    def check_complete(self, lineno: int) -> None:
        if self.header is None:
            raise self.fail(lineno, "no header record: the file is empty")
        expected_items = 2 * self.header["n_objects"]
        for what, expected, seen in (
            ("2 * n_objects item records", expected_items, self.n_items),
            ("n_constraints", self.header["n_constraints"], self.n_constraints),
        ):
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
    split_ids: dict[str, list[int]] = {"dev": [], "test": []}
    constraints: list[list[int]] = []
    modality: list[list[int]] = []
    kinds: list[int] = []
    similar: list[bool] = []
    for record in checked_records(path, reader):
        kind = record["type"]
        if kind == "header":
            n, names = record["n_objects"], record["modalities"]
            X = [np.empty((n, d), dtype=np.float32) for d in record["dims"]]
        elif kind == "item":
            m = names.index(record["modality"])
            X[m][record["id"]] = record["x"]
            if m == 0:  # each object's split once, in the order of its first modality
                split_ids[record["split"]].append(record["id"])
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
    return CrossModalStream(
        modalities=tuple(header["modalities"]),  # type: ignore[arg-type]
        X=(X[0], X[1]),
        y=reader.label,
        dev_idx=np.array(split_ids["dev"], dtype=np.int64),
        test_idx=np.array(split_ids["test"], dtype=np.int64),
        constraints=np.array(constraints, dtype=np.int64).reshape(-1, 3),
        modality=np.array(modality, dtype=np.int8).reshape(-1, 3),
        kinds=np.array(kinds, dtype=np.int8),
        similar=np.array(similar, dtype=bool),
        meta=header["meta"],
    )
