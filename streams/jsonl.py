"""JSON Lines interchange for constraint streams (version 1; see streams/FORMAT.md).

One JSON object per line, each with a ``type``:

* first line, the header::

    {"type": "header", "version": 1, "kind": "triplet", "n_items": 1797, "n_features": 64,
     "n_constraints": 10000, "meta": {...}}

* one item record per item, before any constraint that uses it; the development items in the
  order of ``dev_idx``, then the test items in the order of ``test_idx``::

    {"type": "item", "id": 17, "x": [0.0, 0.3125, ...], "label": 3, "split": "dev"}

* constraint records in stream order, of the header's kind::

    {"type": "triplet", "anchor": 17, "positive": 5, "negative": 9}
    {"type": "pair", "u": 17, "v": 5, "similar": true}
    {"type": "quadruplet", "a": 17, "b": 5, "c": 9, "d": 30}

Optional stream fields (drifting streams, :mod:`streams.drift`; noisy streams,
:mod:`streams.noise`) are announced by the header's ``fields``, the list of those the file
carries, and then appear on every record they concern::

    {"type": "header", ..., "fields": ["concepts", "concept_labels", "gallery_idx",
     "query_idx", "start_idx", "flipped"], "n_concepts": 2}
    {"type": "item", "id": 17, ..., "label": 1, "labels": [7, 1], "in": ["start"]}
    {"type": "triplet", "anchor": 17, "positive": 9, "negative": 5, "concept": 1, "flipped": true}

Items that are greyscale images (their features the pixels, row-major) are announced by the
header's ``image_shape``, ``[height, width]`` with height * width == ``n_features``; a header
without it is a stream of items that are not images (or a file from before it existed)::

    {"type": "header", ..., "n_features": 64, ..., "image_shape": [8, 8]}

``labels`` (with ``concept_labels``): the item's label under each of the header's
``n_concepts`` concepts, the last equal to ``label``; ``in``: the item sets among
``gallery_idx``, ``query_idx``, ``start_idx`` that hold the item, by their short names
``gallery``, ``query``, ``start`` (omitted when none); ``concept`` (with ``concepts``): the
concept the constraint was drawn from; ``flipped`` (with ``flipped``): whether the constraint
was made wrong on purpose (label noise). A file without ``fields`` is a file without them, as
before they existed.

Features are written as the shortest decimal of the float64 equal to each float32 value, so
reading them back gives the identical float32. Blank lines are skipped; unknown fields are
ignored (for forward compatibility), but a name in ``fields`` or ``in`` that this reader does
not know is refused, so that no announced content is dropped silently. Any other deviation
raises ``ValueError`` naming the line number and the field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from oahu.constraint_kinds import ROLES
from oahu.streams.atomic import atomic_open
from oahu.streams.image_shape import check_image_shape
from oahu.streams.stream_families import CROSS_MODAL_FORMAT, cross_modal_refusal

if TYPE_CHECKING:
    from oahu.streams.stream_file import ConstraintStream

JSONL_VERSION = 1


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> str | None:
    return None if _is_int(v) and v >= 0 else "expected a non-negative integer"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"expected one of {', '.join(choices)}"


def _integer(v: Any) -> str | None:
    return None if _is_int(v) else "expected an integer"


def _boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "expected true or false"


def _object(v: Any) -> str | None:
    return None if isinstance(v, dict) else "expected a JSON object"


def _list(v: Any) -> str | None:
    return None if isinstance(v, list) else "expected a list of numbers"


def _names(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(name, str) for name in v)
    return None if ok and len(set(v)) == len(v) else "expected a list of distinct names"


#: The optional stream fields a header's ``fields`` may announce (streams.stream_file).
OPTIONAL_FIELDS: tuple[str, ...] = (
    "concepts",
    "concept_labels",
    "gallery_idx",
    "query_idx",
    "start_idx",
    "flipped",
)
#: An item record's ``in`` names for the optional item sets.
ITEM_SETS: dict[str, str] = {"gallery": "gallery_idx", "query": "query_idx", "start": "start_idx"}

#: The item-index fields of a constraint record, by kind, in constraint order.
CONSTRAINT_FIELDS: dict[str, tuple[str, ...]] = {
    "triplet": ("anchor", "positive", "negative"),
    "pair": ("u", "v"),
    "quadruplet": ROLES["quadruplet"],  # a, b, c, d: D(a, b) < D(c, d)
}
# Record type -> required fields -> check (None when the value is fine, else what was expected).
_ITEM_ID_FIELDS = {"item": ("id",), **CONSTRAINT_FIELDS}
_SCHEMA: dict[str, dict[str, Callable[[Any], str | None]]] = {
    "header": {
        "version": _integer,
        "kind": _one_of(*CONSTRAINT_FIELDS),
        "n_items": _count,
        "n_features": _count,
        "n_constraints": _count,
        "meta": _object,
    },
    "item": {"id": _integer, "x": _list, "label": _integer, "split": _one_of("dev", "test")},
    "triplet": {"anchor": _integer, "positive": _integer, "negative": _integer},
    "pair": {"u": _integer, "v": _integer, "similar": _boolean},
    "quadruplet": dict.fromkeys(CONSTRAINT_FIELDS["quadruplet"], _integer),
}


def write_jsonl(stream: ConstraintStream, path: str | os.PathLike[str]) -> None:
    """Write ``stream`` to ``path`` as JSON Lines (header, items, constraints), atomically."""
    header = {
        "type": "header",
        "version": JSONL_VERSION,
        "kind": stream.kind,
        "n_items": stream.n_items,
        "n_features": stream.n_features,
        "n_constraints": len(stream),
        "meta": stream.meta,
    }
    # Only what the stream has: a stream without optional fields is written as before them.
    present = [name for name in OPTIONAL_FIELDS if getattr(stream, name) is not None]
    if present:
        header["fields"] = present
    labels = stream.concept_labels
    if labels is not None:
        header["n_concepts"] = len(labels)
    if stream.image_shape is not None:
        header["image_shape"] = list(stream.image_shape)
    member = {
        short: _membership(getattr(stream, name), stream.n_items)
        for short, name in ITEM_SETS.items()
        if getattr(stream, name) is not None
    }
    with atomic_open(path, "w") as fh:
        fh.write(json.dumps(header) + "\n")
        # Items in split order, so that the reader recovers dev_idx and test_idx exactly (and the
        # item sets, which a stream keeps in split order too).
        for split, ids in (("dev", stream.dev_idx), ("test", stream.test_idx)):
            item_labels = None if labels is None else labels[:, ids].T.tolist()
            for k, (i, x, label) in enumerate(
                zip(ids.tolist(), stream.X[ids].tolist(), stream.y[ids].tolist(), strict=True)
            ):
                item = {"type": "item", "id": i, "x": x, "label": label, "split": split}
                if item_labels is not None:
                    item["labels"] = item_labels[k]
                sets = [short for short, is_in in member.items() if is_in[i]]
                if sets:
                    item["in"] = sets
                fh.write(json.dumps(item) + "\n")
        fields = CONSTRAINT_FIELDS[stream.kind]
        similar = [] if stream.similar is None else stream.similar.tolist()
        concepts = [] if stream.concepts is None else stream.concepts.tolist()
        flipped = [] if stream.flipped is None else stream.flipped.tolist()
        for k, ids in enumerate(stream.constraints.tolist()):
            record = {"type": stream.kind, **dict(zip(fields, ids, strict=True))}
            if similar:
                record["similar"] = similar[k]
            if concepts:
                record["concept"] = concepts[k]
            if flipped:
                record["flipped"] = flipped[k]
            fh.write(json.dumps(record) + "\n")


def _membership(idx: np.ndarray, n_items: int) -> np.ndarray:
    is_in = np.zeros(n_items, dtype=bool)
    is_in[idx] = True
    return is_in


def check_fields(
    record: dict[str, Any],
    lineno: int,
    expected: tuple[str, ...],
    schema: dict[str, dict[str, Callable[[Any], str | None]]],
    fail: Callable[[int, str], ValueError],
) -> None:
    """Check that ``record`` is of a ``type`` in ``expected`` and has every field ``schema``
    requires of that type, each passing its check; else ``fail``'s error naming the field."""
    kind = record.get("type")
    if kind not in expected:
        raise fail(lineno, f"field 'type': expected {' or '.join(expected)}, got {kind!r}")
    for name, check in schema[kind].items():
        if name not in record:
            raise fail(lineno, f"field '{name}' is missing from the {kind} record")
        problem = check(record[name])
        if problem:
            raise fail(lineno, f"field '{name}': {problem}, got {record[name]!r}"[:300])


class _Reader:
    """Checks records one at a time against the schema and what the header announced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self.header: dict[str, Any] | None = None
        self.item_seen: np.ndarray = np.zeros(0, dtype=bool)
        self.n_items_seen = 0
        self.n_constraints_seen = 0
        self.fields: frozenset[str] = frozenset()
        self.sets: frozenset[str] = frozenset()

    def fail(self, lineno: int, message: str) -> ValueError:
        return ValueError(f"{self.path}:{lineno}: {message}")

    def check(self, record: Any, lineno: int) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise self.fail(lineno, "expected a JSON object")
        kind = record.get("type")
        if kind == "header" and self.header is None and record.get("format") == CROSS_MODAL_FORMAT:
            raise cross_modal_refusal(self.path)
        check_fields(record, lineno, self._expected_types(), _SCHEMA, self.fail)
        getattr(self, f"_check_{kind}")(record, lineno)
        return record

    def _expected_types(self) -> tuple[str, ...]:
        return ("header",) if self.header is None else ("item", self.header["kind"])

    def _check_header(self, record: dict[str, Any], lineno: int) -> None:
        if record["version"] != JSONL_VERSION:
            raise self.fail(
                lineno,
                f"field 'version': this reader reads {JSONL_VERSION}, got {record['version']}",
            )
        fields = record.get("fields", [])
        problem = _names(fields)
        if problem:
            raise self.fail(lineno, f"field 'fields': {problem}, got {fields!r}"[:300])
        unknown = [name for name in fields if name not in OPTIONAL_FIELDS]
        if unknown:
            raise self.fail(
                lineno,
                f"field 'fields': unknown optional field {unknown[0]!r}; this reader knows "
                f"{', '.join(OPTIONAL_FIELDS)}",
            )
        if "concept_labels" in fields:
            problem = _count(record.get("n_concepts"))
            if problem or record["n_concepts"] == 0:
                raise self.fail(
                    lineno,
                    "field 'n_concepts': a header announcing concept_labels needs a positive "
                    f"integer, got {record.get('n_concepts')!r}",
                )
        if "concepts" in fields and "concept_labels" not in fields:
            raise self.fail(
                lineno, "field 'fields': concepts needs concept_labels (n_concepts) as well"
            )
        try:
            check_image_shape(
                record.get("image_shape"), record["n_features"], "field 'image_shape'"
            )
        except ValueError as e:
            raise self.fail(lineno, str(e)) from None
        self.fields = frozenset(fields)
        self.sets = frozenset(short for short, name in ITEM_SETS.items() if name in fields)
        self.header = record
        self.item_seen = np.zeros(record["n_items"], dtype=bool)

    def _check_ids(self, record: dict[str, Any], lineno: int) -> None:
        n_items = len(self.item_seen)
        for name in _ITEM_ID_FIELDS[record["type"]]:
            if not 0 <= record[name] < n_items:
                raise self.fail(
                    lineno,
                    f"field '{name}': item id {record[name]} is outside [0, {n_items}) (n_items)",
                )
            if record["type"] != "item" and not self.item_seen[record[name]]:
                raise self.fail(
                    lineno,
                    f"field '{name}': item {record[name]} has no item record before this line",
                )

    def _check_item(self, record: dict[str, Any], lineno: int) -> None:
        self._check_ids(record, lineno)
        assert self.header is not None
        if len(record["x"]) != self.header["n_features"]:
            raise self.fail(
                lineno,
                f"field 'x': expected {self.header['n_features']} values "
                f"(n_features), got {len(record['x'])}",
            )
        if self.item_seen[record["id"]]:
            raise self.fail(lineno, f"field 'id': item {record['id']} is defined twice")
        # Converted without a dtype first, so that strings, nulls and nested lists show in the
        # dtype or shape instead of being coerced to numbers.
        try:
            x = np.asarray(record["x"])
        except ValueError:  # ragged nested lists
            x = np.asarray(None)
        if x.ndim != 1 or x.dtype.kind not in "iuf" or not np.all(np.isfinite(x)):
            raise self.fail(lineno, "field 'x': expected a list of finite numbers")
        with np.errstate(over="ignore"):
            record["x"] = x.astype(np.float32)
        if not np.all(np.isfinite(record["x"])):
            raise self.fail(lineno, "field 'x': a value overflows float32")
        self._check_item_extras(record, lineno)
        self.item_seen[record["id"]] = True
        self.n_items_seen += 1

    def _check_item_extras(self, record: dict[str, Any], lineno: int) -> None:
        """``labels`` and ``in``, the optional fields the header announced."""
        assert self.header is not None
        if "concept_labels" in self.fields:
            n_concepts, labels = self.header["n_concepts"], record.get("labels")
            if not (
                isinstance(labels, list)
                and len(labels) == n_concepts
                and all(_is_int(label) for label in labels)
            ):
                raise self.fail(
                    lineno,
                    f"field 'labels': expected {n_concepts} integers (n_concepts), got {labels!r}"[
                        :300
                    ],
                )
            if labels[-1] != record["label"]:
                raise self.fail(
                    lineno,
                    f"field 'labels': the last (the final concept's) must equal label "
                    f"{record['label']}, got {labels[-1]}",
                )
        sets = record.get("in", [])
        problem = _names(sets)
        if problem:
            raise self.fail(lineno, f"field 'in': {problem}, got {sets!r}"[:300])
        for name in sets:
            if name not in self.sets:
                raise self.fail(
                    lineno,
                    f"field 'in': {name!r} is not an item set the header announced "
                    f"({', '.join(sorted(self.sets)) or 'none'})",
                )

    def _check_triplet(self, record: dict[str, Any], lineno: int) -> None:
        self._check_ids(record, lineno)
        if "concepts" in self.fields:
            assert self.header is not None
            concept, n_concepts = record.get("concept"), self.header["n_concepts"]
            if not (_is_int(concept) and 0 <= concept < n_concepts):
                raise self.fail(
                    lineno,
                    f"field 'concept': expected an integer in [0, {n_concepts}) (n_concepts), "
                    f"got {concept!r}",
                )
        if "flipped" in self.fields and not isinstance(record.get("flipped"), bool):
            raise self.fail(
                lineno,
                "field 'flipped': expected true or false (the header announced flipped), got "
                f"{record.get('flipped')!r}"[:300],
            )
        self.n_constraints_seen += 1

    _check_pair = _check_quadruplet = _check_triplet

    def check_complete(self, lineno: int) -> None:
        if self.header is None:
            raise self.fail(lineno, "no header record: the file is empty")
        for what, seen in (
            ("n_items", self.n_items_seen),
            ("n_constraints", self.n_constraints_seen),
        ):
            if seen != self.header[what]:
                raise self.fail(
                    lineno,
                    f"end of file: header announced {what}="
                    f"{self.header[what]}, found {seen} (truncated file?)",
                )


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSON Lines stream one at a time, validated, reading line by line.

    Item records come with ``x`` as a float32 array; their optional ``labels`` and ``in`` and
    the constraints' ``concept`` and ``flipped`` are checked against what the header's
    ``fields`` announced. A bad line raises ``ValueError`` naming the line and field when the
    reader reaches it, after every record before it has been yielded; a file that ends before
    the counts its header announced raises at the end.
    """
    return checked_records(path, _Reader(path))


def checked_records(
    path: str | os.PathLike[str], reader: RecordChecker
) -> Iterator[dict[str, Any]]:
    """The records of the JSON Lines file ``path``, line by line, each checked by ``reader``
    (blank lines skipped; a line that is not JSON is ``reader.fail``'s error), then the end of
    the file by ``reader.check_complete``. Both stream families' JSON Lines read so."""
    lineno = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise reader.fail(lineno, f"not valid JSON ({e.msg} at column {e.colno})") from e
            yield reader.check(record, lineno)
    reader.check_complete(lineno)


class RecordChecker(Protocol):
    """What :func:`checked_records` asks of a reader: check a record, fail a line, check the
    end."""

    def check(self, record: Any, lineno: int) -> dict[str, Any]: ...

    def fail(self, lineno: int, message: str) -> ValueError: ...

    def check_complete(self, lineno: int) -> None: ...


def read_jsonl(path: str | os.PathLike[str]) -> ConstraintStream:
    """Read a whole JSON Lines stream (as written by :func:`write_jsonl`) into memory."""
    from oahu.streams.stream_file import ConstraintStream  # stream_file re-exports this module

    records = iter_jsonl(path)
    header = next(records)
    n, kind = header["n_items"], header["kind"]
    X = np.empty((n, header["n_features"]), dtype=np.float32)
    y = np.empty(n, dtype=np.int64)
    split_ids: dict[str, list[int]] = {"dev": [], "test": []}
    constraints: list[tuple[int, ...]] = []
    similar: list[bool] = []
    fields = header.get("fields", [])
    concept_labels = (
        np.empty((header["n_concepts"], n), dtype=np.int64) if "concept_labels" in fields else None
    )
    concepts: list[int] = []
    flipped: list[bool] = []
    set_ids: dict[str, list[int]] = {
        short: [] for short, name in ITEM_SETS.items() if name in fields
    }
    for record in records:
        if record["type"] == "item":
            i = record["id"]
            X[i], y[i] = record["x"], record["label"]
            split_ids[record["split"]].append(i)
            if concept_labels is not None:
                concept_labels[:, i] = record["labels"]
            for short in record.get("in", []):
                set_ids[short].append(i)
        else:
            constraints.append(tuple(record[f] for f in CONSTRAINT_FIELDS[kind]))
            if kind == "pair":
                similar.append(record["similar"])
            if "concepts" in fields:
                concepts.append(record["concept"])
            if "flipped" in fields:
                flipped.append(record["flipped"])
    width = len(CONSTRAINT_FIELDS[kind])
    item_sets = {ITEM_SETS[short]: np.array(ids, dtype=np.int64) for short, ids in set_ids.items()}
    return ConstraintStream(
        X=X,
        y=y,
        dev_idx=np.array(split_ids["dev"], dtype=np.int64),
        test_idx=np.array(split_ids["test"], dtype=np.int64),
        kind=kind,
        constraints=np.array(constraints, dtype=np.int64).reshape(-1, width),
        similar=np.array(similar, dtype=bool) if kind == "pair" else None,
        meta=header["meta"],
        concepts=np.array(concepts, dtype=np.int8) if "concepts" in fields else None,
        concept_labels=concept_labels,
        **item_sets,
        flipped=np.array(flipped, dtype=bool) if "flipped" in fields else None,
        image_shape=header.get("image_shape"),
    )
