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
from oahu.service.group.schedule import learn_values
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
    assert progress.group == {"members": members, "round": progress.group["round"]}
    # each shard's next offset is just past its last record
    last = {p: max(o for o in range(N_RECORDS) if o % members == p) for p in range(members)}
    assert progress.offsets == {p: o + 1 for p, o in last.items()}
    assert_each_once(config, members, [(o % members, o) for o in range(N_RECORDS)])

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
    # one learner process's offset: everything before it was learned, every shard starts there
    one = group_progress(config, Progress({0: 7, 1: 2}, consumed=9))
    assert one.offsets == {0: 7, 1: 7, 2: 7}
    same = group_progress(config, Progress({0: 4, 1: 5, 2: 6}, group={"members": 3, "round": 2}))
    assert same.offsets == {0: 4, 1: 5, 2: 6}
    with pytest.raises(ValueError, match=r"written by a group of 2 learners .* --learners 2"):
        group_progress(config, Progress({0: 4, 1: 5}, group={"members": 2, "round": 2}))
