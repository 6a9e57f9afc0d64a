"""What every constraint source yields, and the interface the consumer loop relies on.

Kafka topics and stream files look the same to the service: ``poll`` returns records with a
partition and an offset, ``commit`` records progress (offset of the next record to read, as in
Kafka), ``seek`` restarts from a checkpointed position and ``lag`` says how much is left. The
partitions a source reads are announced to the callbacks given to ``listen`` before their first
record (a Kafka rebalance, or a file's one partition at its first poll), so one handler moves
every source to its checkpointed offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

PartitionCallback = Callable[[list[int]], None]


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One raw message. ``source`` is the topic or file path, ``value`` the message bytes
    (JSON or binary, see ``oahu.connectors.messages``; None for a Kafka tombstone, which is
    dead-lettered), ``timestamp`` seconds since the epoch.

    >>> r = SourceRecord("constraints", 0, 41, b'{"v":1}')
    >>> r.next_offset
    42
    """

    source: str
    partition: int
    offset: int
    value: bytes | None
    timestamp: float | None = None
    key: bytes | None = None

    @property
    def next_offset(self) -> int:
        """The offset to commit once this record is processed."""
        return self.offset + 1


@runtime_checkable
class Source(Protocol):
    """A partitioned, offset-addressed stream of ``SourceRecord``s."""

    @property
    def ready(self) -> bool:
        """Connected and able to deliver records (a file source always is)."""
        ...

    @property
    def connected(self) -> bool:
        """Able to talk to its broker at all (commit and seek may be tried; a file always is)."""
        ...

    @property
    def not_ready_reason(self) -> str | None:
        """Why the source cannot deliver records now, for an operator (None when ready)."""
        ...

    @property
    def seconds_since_contact(self) -> float:
        """Seconds since the source last heard from its broker (0.0 for a file)."""
        ...

    @property
    def exhausted(self) -> bool:
        """No record is left and none will come (a file read to its end; never a topic)."""
        ...

    @property
    def assignment(self) -> list[int]:
        """The partitions this source reads now."""
        ...

    def listen(self, on_assign: PartitionCallback, on_revoke: PartitionCallback) -> None:
        """Call ``on_assign(partitions)`` before the first record of newly read partitions and
        ``on_revoke(partitions)`` before giving partitions up (both may ``commit`` and
        ``seek``)."""
        ...

    def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[SourceRecord]: ...

    def commit(self, offsets: Mapping[int, int]) -> bool: ...

    def committed(self, partition: int) -> int | None:
        """The offset last committed for ``partition`` (None if none)."""
        ...

    def seek(self, offsets: Mapping[int, int]) -> None: ...

    def lag(self) -> dict[int, int]: ...

    def close(self) -> None: ...
