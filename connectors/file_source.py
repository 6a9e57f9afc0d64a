"""Read constraints from a file as if it were a one-partition topic.

Three kinds of file:

* a stream file (.npz, ``oahu.streams.stream_file.ConstraintStream.save``);
* a JSON Lines stream (``oahu.streams.stream_file.write_jsonl``: header, item and constraint
  records), read incrementally;
* any other text file: one constraint message (``connectors/MESSAGES.md``) per non-blank line,
  of any kind (quadruplets too), e.g. JSON messages written by another tool or replayed from
  dead letters.

Every kind reads the same way: a stream file of quadruplets (label-hierarchy streams,
``streams/FORMAT.md``) yields binary quadruplet messages, one per constraint. A cross-modal
stream file (either format, ``oahu.streams.cross_modal``) yields version-2 messages that name
each item's modality, pairs and triplets in file order; the stream itself, whose items the
service holds per modality, is ``FileSource.cross_modal``.

Records come as binary messages with items by id (the stream's item indices), so the service
decodes files and Kafka the same way; the offset of a record is its constraint index. A stream
file's items (features and labels by index) are handed out by :meth:`FileSource.items`, for the
item store that resolves those ids.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from oahu.checks import check_int
from oahu.connectors.messages import encode_constraints, encode_cross_modal
from oahu.connectors.source import PartitionCallback, SourceRecord
from oahu.streams.cross_modal import CrossModalStream, load_cross_modal_stream
from oahu.streams.image_shape import check_image_shape
from oahu.streams.jsonl import CONSTRAINT_FIELDS
from oahu.streams.stream_families import CROSS_MODAL_FORMAT, OtherStreamFamily
from oahu.streams.stream_file import iter_jsonl, load_stream


class StreamItems(NamedTuple):
    """The items of a stream file: ids (the item indices), features ``X`` and labels ``y``."""

    ids: np.ndarray
    X: np.ndarray
    y: np.ndarray


def _stream_jsonl_header(path: Path) -> dict[str, Any] | None:
    """The header record of a JSON Lines stream file; None for a file of messages."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    first = json.loads(line)
                except ValueError:
                    return None
                is_header = isinstance(first, dict) and first.get("type") == "header"
                return first if is_header else None
    return None


class FileSource:
    """Records of a stream file, partition 0, offsets 0, 1, 2, ... in file order.

    ``on_assign([0])`` (see :meth:`listen`) runs at the first poll, as a Kafka source announces
    its partitions.

    >>> import tempfile
    >>> from oahu.streams.stream_file import ConstraintStream
    >>> path = Path(tempfile.mkdtemp()) / "s.npz"
    >>> ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet",
    ...                  [[0, 1, 2], [1, 0, 2]]).save(path)
    >>> src = FileSource(path)
    >>> [(r.offset, len(r.value)) for r in src.poll(10)], src.exhausted
    ([(0, 40), (1, 40)], True)
    >>> src.items().ids.tolist(), src.items().y.tolist(), src.image_shape
    ([0, 1, 2], [0, 0, 1], None)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.source = os.fspath(path)
        self.exhausted = False
        self.last_committed: int | None = None
        self._position = 0
        self._on_assign: PartitionCallback | None = None
        self._assigned = False
        self.kind: str | None = None  # known once the stream's header is read
        self.cross_modal: CrossModalStream | None = None  # the stream, for a cross-modal file
        header = None if self.path.suffix == ".npz" else _stream_jsonl_header(self.path)
        if self.path.suffix == ".npz" or (header or {}).get("format") == CROSS_MODAL_FORMAT:
            try:
                self._stream = load_stream(self.path)
            except OtherStreamFamily as refusal:
                if not refusal.cross_modal:
                    raise
                self._open_cross_modal()
                return
            self.kind = self._stream.kind
            self._constraints, self._similar = self._stream.constraints, self._stream.similar
            self._total: int | None = len(self._stream)
            self._lines: Generator[bytes, None, None] | None = None
        else:
            self._header = header
            self._stream_jsonl = self._header is not None
            self._total = None
            self._lines = self._open_lines()

    def _open_cross_modal(self) -> None:
        stream = self.cross_modal = load_cross_modal_stream(self.path)
        self.kind = "cross-modal"
        self._total, self._lines = len(stream), None
        self._constraints, self._similar = stream.constraints, stream.similar

    # ------------------------------------------------------------------ reading
    @property
    def ready(self) -> bool:
        return True

    @property
    def connected(self) -> bool:
        return True

    @property
    def not_ready_reason(self) -> str | None:
        return None

    @property
    def seconds_since_contact(self) -> float:
        return 0.0

    @property
    def assignment(self) -> list[int]:
        return [0]

    def listen(self, on_assign: PartitionCallback, on_revoke: PartitionCallback) -> None:
        """``on_assign([0])`` runs at the first poll; a file never revokes its partition."""
        self._on_assign = on_assign

    def items(self) -> StreamItems | None:
        """The stream file's items, or None for a file of messages (which carries none)."""
        if self.cross_modal is not None:
            return None  # one store per modality: oahu.service.modal_items, from .cross_modal
        if self._lines is None:
            stream = self._stream
        elif self._stream_jsonl:
            stream = load_stream(self.path)
        else:
            return None
        return StreamItems(np.arange(stream.n_items), stream.X, stream.y)

    @property
    def image_shape(self) -> tuple[int, int] | None:
        """(height, width) of the stream file's items when they are images (the stream's
        ``image_shape``), else None; None for a file of messages."""
        if self.cross_modal is not None:
            return None
        if self._lines is None:
            return self._stream.image_shape
        if self._header is None:
            return None
        return check_image_shape(self._header.get("image_shape"), self._header.get("n_features"))

    @property
    def position(self) -> int:
        """Offset of the next record."""
        return self._position

    def _open_lines(self) -> Generator[bytes, None, None]:
        return self._jsonl_stream_values() if self._stream_jsonl else self._message_lines()

    def _message_lines(self) -> Generator[bytes, None, None]:
        with open(self.path, "rb") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    yield line

    def _jsonl_stream_values(self) -> Generator[bytes, None, None]:
        records = iter_jsonl(self.path)
        header = next(records)
        self.kind = header["kind"]
        self._total = header["n_constraints"]
        fields = CONSTRAINT_FIELDS[self.kind]
        for record in records:
            if record["type"] == "item":  # handed out by items()
                continue
            ids = np.array([[record[f] for f in fields]], dtype=np.int64)
            similar = np.array([record["similar"]]) if self.kind == "pair" else None
            yield self._encode(ids, similar)[0]

    def _encode(self, ids: np.ndarray, similar: np.ndarray | None) -> list[bytes]:
        assert self.kind is not None
        return encode_constraints(self.kind, ids=ids, similar=similar)

    def _read(self, n: int) -> list[bytes]:
        if self._lines is None:  # .npz: encode the next window in one step
            stop = min(self._position + n, len(self._constraints))
            if self.cross_modal is not None:
                return encode_cross_modal(self.cross_modal, self._position, stop)
            similar = None if self._similar is None else self._similar[self._position : stop]
            return self._encode(self._constraints[self._position : stop], similar)
        values: list[bytes] = []
        if n <= 0:
            return values
        for value in self._lines:
            values.append(value)
            if len(values) == n:
                break
        return values

    def poll(self, max_records: int = 500, timeout: float = 0.0) -> list[SourceRecord]:
        """The next records (at most ``max_records``); [] and ``exhausted`` at the end.
        ``timeout`` is accepted for interface parity and never waited on."""
        if not self._assigned:
            self._assigned = True
            if self._on_assign is not None:
                self._on_assign(self.assignment)
        values = self._read(max_records)
        start = self._position
        self._position += len(values)
        if len(values) < max_records:
            self.exhausted = True
        return [SourceRecord(self.source, 0, start + i, v) for i, v in enumerate(values)]

    def skip_to(self, offset: int) -> None:
        """Go forward to ``offset`` without handing out the records before it (an offset at or
        behind the position changes nothing); ``exhausted`` when the file ends before it. A
        stream file jumps there; a text file is read through, as it has no index."""
        wanted = offset - self._position
        if wanted <= 0:
            return
        if self._lines is None:
            skipped = min(wanted, len(self._constraints) - self._position)
        else:
            skipped = sum(1 for _ in zip(range(wanted), self._lines, strict=False))
        self._position += skipped
        if skipped < wanted:
            self.exhausted = True

    # ------------------------------------------------------------------ offsets
    def commit(self, offsets: Mapping[int, int]) -> bool:
        """Remember the committed offset (files have no broker; the checkpoint persists it)."""
        self.last_committed = int(offsets[0])
        return True

    def committed(self, partition: int) -> int | None:
        return self.last_committed

    def seek(self, offsets: int | Mapping[int, int]) -> None:
        """Continue from ``offsets`` (an int, or ``{0: offset}``)."""
        offset = int(offsets if isinstance(offsets, int) else offsets[0])
        check_int(offset, "offset", minimum=0)
        self.exhausted = False
        if self._lines is None:
            self._position = min(offset, len(self._constraints))
            return
        self._lines = self._open_lines()  # text files are re-read up to the offset
        self._position = len(self._read(offset))

    def lag(self) -> dict[int, int]:
        """Records left (for message-per-line files, known once the end is reached)."""
        if self._total is None:
            return {0: 0} if self.exhausted else {}
        return {0: max(0, self._total - self._position)}

    def close(self) -> None:
        if self._lines is not None:
            self._lines.close()
