"""A learning group of real processes over a stream file: every record learned exactly once,
and the model the one-process replay of the group's schedule learns."""

from __future__ import annotations

from pathlib import Path

import pytest
from group_support import (
    assert_each_once,
    checkpointed,
    leader,
    prepared,
    replayed,
    start_of,
)
from service_support import assert_same_model, make_stream

from oahu.connectors.file_source import FileSource
from oahu.service.catalog import base_items
from oahu.service.checkpoints import Progress
from oahu.service.config import ServiceConfig
from oahu.service.group.loop import group_progress
from oahu.service.group.schedule import learn_values, read_schedule
from oahu.service.group.shards import ShardedFileSource
from oahu.streams.jsonl import write_jsonl
from oahu.streams.stream_file import load_stream

N_RECORDS = 600


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("members", "batch"), [(3, 1), (2, 16)])
def test_a_group_learns_every_record_once_and_equals_the_replay(
    tmp_path: Path, members: int, batch: int
) -> None:
    path = make_stream(tmp_path, N_RECORDS)
    stream = load_stream(path)
    config = ServiceConfig(
        source=path.as_uri(), checkpoint_dir=str(tmp_path / "state"), exit_at_end=True,
        learners=members, combine_every=4, checkpoint_every=150, learner_nice=0,
        learner_params={"batch_size": batch},
    )  # fmt: skip
    new = prepared(stream, batch_size=batch)
    process = leader(config, start_of(config, new))
    assert process.finished.wait(90)
    assert process.error is None
    assert process.status["constraints_consumed"] == N_RECORDS  # the group's, from rank 0
    model, progress = checkpointed(config)
    assert progress.consumed == N_RECORDS
    block = 4 * batch  # one round's records: --combine-every updates' worth
    assert progress.group == {"members": members, "round": progress.group["round"], "block": block}
    # each shard's next offset is just past its last record
    shard = {o: (o // block) % members for o in range(N_RECORDS)}
    last = {p: max(o for o in range(N_RECORDS) if shard[o] == p) for p in range(members)}
    assert progress.offsets == {p: o + 1 for p, o in last.items()}
    assert_each_once(config, members, [(shard[o], o) for o in range(N_RECORDS)])
    # every round learns the next stretch of the file, each member one block of it
    start = 0
    for round_ in read_schedule(config.checkpoint_dir, members):
        if round_.restart:
            continue
        learned = sorted(o for member in round_.offsets for _, o in member)
        assert learned == list(range(start, min(start + members * block, N_RECORDS)))
        for rank, member in enumerate(round_.offsets):
            assert {p for p, _ in member} <= {rank}
        start += len(learned)
    assert start == N_RECORDS

    values = {r.offset: r.value for r in FileSource(path).poll(N_RECORDS)}
    items, _ = base_items(config)
    replay = replayed(
        config, members, new(),
        lambda learner, offsets: learn_values(learner, [values[o] for _, o in offsets], items),
    )  # fmt: skip
    assert model.constraints_seen == N_RECORDS
    assert_same_model(model, replay, atol=1e-5)


def test_a_file_checkpoint_belongs_to_its_number_of_learners(tmp_path: Path) -> None:
    path = make_stream(tmp_path, 20)
    config = ServiceConfig(source=path.as_uri(), checkpoint_dir=str(tmp_path), learners=3)
    # one learner process's offset: everything before it was learned, every shard starts there,
    # in blocks of the new group's rounds
    one = group_progress(config, Progress({0: 7, 1: 2}, consumed=9), block=64)
    assert one.offsets == {0: 7, 1: 7, 2: 7}
    assert one.group == {"members": 3, "block": 64}
    # a group's checkpoint keeps its block, whatever the rounds are now
    same = group_progress(
        config, Progress({0: 4, 1: 5, 2: 6}, group={"members": 3, "round": 2, "block": 8}), 64
    )
    assert same.offsets == {0: 4, 1: 5, 2: 6}
    assert same.group == {"members": 3, "round": 2, "block": 8}
    # written before files were cut in blocks: records were dealt out one by one
    old = group_progress(config, Progress({0: 4, 1: 5, 2: 6}, group={"members": 3}), 64)
    assert old.group["block"] == 1
    with pytest.raises(ValueError, match=r"written by a group of 2 learners .* --learners 2"):
        group_progress(config, Progress({0: 4, 1: 5}, group={"members": 2, "round": 2}), 64)


@pytest.mark.parametrize("lines", [False, True])
def test_a_shard_reads_its_blocks_and_continues_at_a_checkpoint(
    tmp_path: Path, lines: bool
) -> None:
    path = make_stream(tmp_path, 23)
    if lines:  # JSON Lines: no index, the other members' blocks are read through
        path = tmp_path / "stream.jsonl"
        write_jsonl(load_stream(make_stream(tmp_path, 23)), path)
    shards = [ShardedFileSource(path, member=m, members=3, block=2) for m in range(3)]
    assert [s.lag() for s in shards] == ([{}, {}, {}] if lines else [{0: 8}, {1: 8}, {2: 7}])
    read = [s.poll(3) for s in shards]
    assert [[r.offset for r in rs] for rs in read] == [[0, 1, 6], [2, 3, 8], [4, 5, 10]]
    assert [{r.partition for r in rs} for rs in read] == [{0}, {1}, {2}]
    rest = [[r.offset for r in s.poll(100)] for s in shards]
    assert rest == [[7, 12, 13, 18, 19], [9, 14, 15, 20, 21], [11, 16, 17, 22]]
    assert all(s.exhausted for s in shards)
    assert [s.lag() for s in shards] == [{0: 0}, {1: 0}, {2: 0}]
    # a checkpoint's offset: the shard's first record at or after it
    shards[1].seek({1: 10})
    assert [r.offset for r in shards[1].poll(3)] == [14, 15, 20]
    assert shards[1].lag() == {1: 1}
    assert [r.offset for r in shards[1].poll(3)] == [21]
    for shard in shards:
        shard.close()
