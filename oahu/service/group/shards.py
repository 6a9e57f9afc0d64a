"""Which records each member of a learning group reads.

A Kafka topic's partition p goes to member p mod N, assigned manually
(:class:`~oahu.connectors.kafka_source.KafkaSource` with ``partitions``): no rebalancing moves
a partition between members, so a member's offsets are its own until the group is re-formed
from a checkpoint.

A stream file is read by N members as if it were a topic of N partitions, cut in blocks of
``block`` consecutive records dealt out in turn: record ``o`` belongs to *shard*
``(o // block) mod N``, which member ``(o // block) mod N`` reads, its records keeping their
file offsets, under partition number ``(o // block) mod N`` (:class:`ShardedFileSource`). The
checkpoint then holds, per shard, the next file offset to read, as a topic's offsets per
partition, and the block, which stays the group's for as long as it continues that checkpoint.

Why blocks, and of a round's records: a stream is ordered in time, and in the paper's protocol
each derived constraint follows its seed, so dealing records out one by one would give one
member of two every seed and the other every derived constraint. A block of one round's
records (K updates' worth, ``--combine-every``) lets every round of the group learn one stretch of
the stream, as one learner would learn it, only split over the members.

>>> member_partitions([0, 1, 2, 3, 4], member=1, members=3)
[1, 4]
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from oahu.checks import check_int
from oahu.connectors.file_source import FileSource
from oahu.connectors.source import PartitionCallback, SourceRecord

__all__ = ["ShardedFileSource", "member_partitions"]


def member_partitions(partitions: list[int], member: int, members: int) -> list[int]:
    """The partitions of ``partitions`` member ``member`` of ``members`` reads: p mod N."""
    return [p for p in partitions if p % members == member]


class ShardedFileSource:
    """The records of a stream file in the blocks of ``block`` records that belong to ``member``
    of ``members`` (record o's if o // block mod members is ``member``), as partition ``member``
    (offsets: the file's).

    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from oahu.streams.stream_file import ConstraintStream
    >>> path = Path(tempfile.mkdtemp()) / "s.npz"
    >>> ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet",
    ...                  [[0, 1, 2], [1, 0, 2]] * 5).save(path)
    >>> shard = ShardedFileSource(path, member=1, members=3, block=2)
    >>> [(r.partition, r.offset) for r in shard.poll(3)], shard.lag()
    ([(1, 2), (1, 3), (1, 8)], {1: 1})
    >>> shard.seek({1: 4}); [r.offset for r in shard.poll(10)], shard.exhausted
    ([8, 9], True)
    """

    def __init__(
        self, path: str | os.PathLike[str], member: int, members: int, block: int = 1
    ) -> None:
        check_int(block, "block", minimum=1)
        self.file = FileSource(path)
        self.member, self.members, self.block = member, members, block
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

    def _first_from(self, offset: int) -> int:
        """The offset of the shard's first record at or after ``offset``."""
        block = offset // self.block
        ahead = (self.member - block) % self.members
        return offset if ahead == 0 else (block + ahead) * self.block

    def _before(self, offset: int) -> int:
        """How many of the shard's records lie before ``offset``."""
        cycles, into = divmod(offset, self.members * self.block)
        return cycles * self.block + min(max(0, into - self.member * self.block), self.block)

    def poll(self, max_records: int = 500, timeout: float = 0.0) -> list[SourceRecord]:
        """The shard's next records (at most ``max_records``), read block by block; the file
        goes no further than the last of them, and skips the other members' blocks unread."""
        if not self._assigned:
            self._assigned = True
            if self._on_assign is not None:
                self._on_assign(self.assignment)
        records: list[SourceRecord] = []
        while len(records) < max_records and not self.file.exhausted:
            self.file.skip_to(self._first_from(self.file.position))
            if self.file.exhausted:
                break
            left_in_block = self.block - self.file.position % self.block
            read = self.file.poll(min(left_in_block, max_records - len(records)))
            records.extend(
                SourceRecord(r.source, self.member, r.offset, r.value, r.timestamp, r.key)
                for r in read
            )
        return records

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
        return {self.member: self._before(position + left) - self._before(position)}

    def close(self) -> None:
        self.file.close()
