"""Which records each member of a learning group reads.

A Kafka topic's partition p goes to member p mod N, assigned manually
(:class:`~oahu.connectors.kafka_source.KafkaSource` with ``partitions``): no rebalancing moves
a partition between members, so a member's offsets are its own until the group is re-formed
from a checkpoint.

A stream file is read by N members as if it were a topic of N partitions: record ``o`` of the
file belongs to *shard* ``o mod N``, member ``o mod N`` reads it, and its records keep their
file offsets, under partition number ``o mod N`` (:class:`ShardedFileSource`). The checkpoint
then holds, per shard, the next file offset to read, as a topic's offsets per partition.

>>> member_partitions([0, 1, 2, 3, 4], member=1, members=3)
[1, 4]
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from oahu.connectors.file_source import FileSource
from oahu.connectors.source import PartitionCallback, SourceRecord

__all__ = ["ShardedFileSource", "member_partitions"]


def member_partitions(partitions: list[int], member: int, members: int) -> list[int]:
    """The partitions of ``partitions`` member ``member`` of ``members`` reads: p mod N."""
    return [p for p in partitions if p % members == member]


class ShardedFileSource:
    """The records of a stream file whose offset is ``member`` mod ``members``, as partition
    ``member`` (offsets: the file's).

    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from oahu.streams.stream_file import ConstraintStream
    >>> path = Path(tempfile.mkdtemp()) / "s.npz"
    >>> ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet",
    ...                  [[0, 1, 2], [1, 0, 2]] * 4).save(path)
    >>> shard = ShardedFileSource(path, member=1, members=3)
    >>> [(r.partition, r.offset) for r in shard.poll(2)], shard.lag()
    ([(1, 1), (1, 4)], {1: 1})
    >>> shard.seek({1: 5}); [r.offset for r in shard.poll(10)], shard.exhausted
    ([7], True)
    """

    def __init__(self, path: str | os.PathLike[str], member: int, members: int) -> None:
        self.file = FileSource(path)
        self.member, self.members = member, members
        self.source = self.file.source
        self.last_committed: int | None = None
        self._on_assign: PartitionCallback | None = None
        self._assigned = False

    ready = True
    connected = True
    not_ready_reason = None
    seconds_since_contact = 0.0

    @property
    def exhausted(self) -> bool:
        return self.file.exhausted

    @property
    def assignment(self) -> list[int]:
        return [self.member]

    def listen(self, on_assign: PartitionCallback, on_revoke: PartitionCallback) -> None:
        """``on_assign([member])`` runs at the first poll; a shard is never revoked."""
        self._on_assign = on_assign

    def poll(self, max_records: int = 500, timeout: float = 0.0) -> list[SourceRecord]:
        """The shard's next records (at most ``max_records``); reads the file up to the last
        of them, so that the position stays just past the last record handed out."""
        if not self._assigned:
            self._assigned = True
            if self._on_assign is not None:
                self._on_assign(self.assignment)
        if max_records <= 0:
            return []
        # The file's records up to this shard's max_records-th from here, no further.
        ahead = (self.member - self.file.position) % self.members
        wanted = ahead + 1 + (max_records - 1) * self.members
        records = self.file.poll(wanted)
        return [
            SourceRecord(r.source, self.member, r.offset, r.value, r.timestamp, r.key)
            for r in records
            if r.offset % self.members == self.member
        ]

    def commit(self, offsets: Mapping[int, int]) -> bool:
        """Remember the committed offset (the checkpoint persists it)."""
        self.last_committed = int(offsets[self.member])
        return True

    def committed(self, partition: int) -> int | None:
        return self.last_committed

    def seek(self, offsets: Mapping[int, int]) -> None:
        """Continue at the shard's first record at or after ``offsets[member]``."""
        self.file.seek({0: int(offsets[self.member])})

    def lag(self) -> dict[int, int]:
        """The shard's records left (a file of messages: known once read to the end)."""
        left = self.file.lag().get(0)
        if left is None:
            return {}
        position = self.file.position
        end = position + left
        first = position + (self.member - position) % self.members
        return {self.member: max(0, -(-(end - first) // self.members))}

    def close(self) -> None:
        self.file.close()
