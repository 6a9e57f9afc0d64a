"""What every constraint source yields, and the interface the consumer loop relies on.

Kafka topics and stream files look the same to the service: ``poll`` returns records with a
partition and an offset, ``commit`` records progress (offset of the next record to read, as in
Kafka), ``seek`` restarts from a checkpointed position and ``lag`` says how much is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One raw message. ``source`` is the topic or file path, ``value`` the message bytes
    (JSON or binary, see ``oahu.connectors.messages``), ``timestamp`` seconds since the epoch.

    >>> r = SourceRecord("constraints", 0, 41, b'{"v":1}')
    >>> r.next_offset
    42
    """

    source: str
    partition: int
    offset: int
    value: bytes
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

    def poll(self, max_records: int = 500, timeout: float = 1.0) -> list[SourceRecord]: ...

    def commit(self, offsets: dict[int, int]) -> bool: ...

    def seek(self, offsets: dict[int, int]) -> None: ...

    def lag(self) -> dict[int, int]: ...

    def close(self) -> None: ...
