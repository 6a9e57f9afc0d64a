"""Records that break the learner after the decoder let them through, at the learn loop.

An error while learning a record rewinds the learner to the last checkpoint and the records are
learned again one at a time, so the one that raises is dead-lettered (``learn_error``) and every
other record is learned exactly once, even when the error struck halfway through an update. A
record that crashes the learner process itself is dead-lettered (``crash_loop``) after it was
in flight alone at two crashes; the partition moves on.

The class, with hypothesis: arbitrary bytes and JSON (the decoder fuzzers' values), valid
constraints, and valid constraints that make the learner raise, through the real loop: no error
escapes, each record is learned or dead-lettered once, the counts add up, and the model equals
one that learned the good records one by one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_support import (
    REPO,
    ServiceProcess,
    assert_same_model,
    make_stream,
    train_reference,
)
from test_connectors_poison import JSON_VALUES, POISON

from oahu.connectors.constraint import Constraint, DecodeError
from oahu.connectors.dead_letter import (
    CRASH_LOOP,
    DEAD_LETTER_REASONS,
    LEARN_ERROR,
    DeadLetter,
    DeadLetterFile,
)
from oahu.connectors.messages import decode, encode_json
from oahu.connectors.source import SourceRecord
from oahu.learner import Learner
from oahu.registry import learner_class, make_learner
from oahu.service.catalog import Catalog
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.service.learning.consumer import ConsumerLoop
from oahu.service.learning.in_flight import IN_FLIGHT_FILE, InFlight, Recovery, offset_ranges
from oahu.service.learning.main import build_loop
from oahu.service.metrics import LearningMetrics
from oahu.streams.stream_file import ConstraintStream

POISON_VALUE = 666.0  # an anchor whose first feature is this makes the patched learner raise


def raise_on_poison(monkeypatch: pytest.MonkeyPatch, cls: type[Learner]) -> None:
    """Make ``cls`` (every instance, also those rebuilt from bytes) learn the triplets before
    the first poisoned one, then raise: an error after part of an update."""
    original = cls.learn  # what the service's consumer calls

    def learn(self: Learner, kind: str, items: Any, similar: Any = None) -> np.ndarray:
        x = np.asarray(items)
        poisoned = np.flatnonzero(x[:, 0, 0] == POISON_VALUE)
        if kind != "triplet" or len(poisoned) == 0:
            return original(self, kind, items, similar)
        k = int(poisoned[0])
        original(self, kind, x[:k])
        raise ValueError(f"poisoned triplet at row {k}")

    monkeypatch.setattr(cls, "learn", learn)


class ListSource:
    """The ``Source`` interface over values in memory: one partition, offsets are positions."""

    ready = connected = True
    not_ready_reason = None
    seconds_since_contact = 0.0
    assignment = (0,)

    def __init__(self, values: list[bytes | None]) -> None:
        self.values = values
        self.position = 0
        self.exhausted = False
        self._on_assign: Any = None

    def listen(self, on_assign: Any, on_revoke: Any) -> None:
        self._on_assign = on_assign

    def poll(self, max_records: int = 500, timeout: float = 0.0) -> list[SourceRecord]:
        if self._on_assign is not None:
            on_assign, self._on_assign = self._on_assign, None
            on_assign([0])
        chunk = self.values[self.position : self.position + max_records]
        records = [SourceRecord("list", 0, self.position + i, v) for i, v in enumerate(chunk)]
        self.position += len(chunk)
        self.exhausted = self.position >= len(self.values)
        return records

    def commit(self, offsets: Mapping[int, int]) -> bool:
        return True

    def committed(self, partition: int) -> int | None:
        return None

    def seek(self, offsets: Mapping[int, int]) -> None:
        if 0 in offsets:
            self.position = offsets[0]
            self.exhausted = False

    def lag(self) -> dict[int, int]:
        return {0: len(self.values) - self.position}

    def close(self) -> None:
        pass


class DiscardingLink:
    """The serving side of the loop, absent: learners offered and reports are dropped."""

    def offer(self, learner: Learner, force: bool = False) -> bool:
        return False

    def report(self, status: Any, families: Any, force: bool = False) -> None:
        pass


def run_loop(
    tmp: Path, values: list[bytes | None], learner: Learner, **config: Any
) -> tuple[ConsumerLoop, ListSource, list[DeadLetter]]:
    """The real learn loop over ``values`` until their end; the loop, source and letters."""
    options = {"checkpoint_every": 4, "poll_records": 5, "poll_timeout": 0.001, **config}
    cfg = ServiceConfig(checkpoint_dir=str(tmp), exit_at_end=True, **options)
    store = ItemStore(dim=2)
    store.add(["4", "2"], [[0.0, 1.0], [1.0, 0.0]])
    catalog = Catalog(store, ItemStore(), tmp / "overlay.jsonl")
    source = ListSource(values)
    letters_file = tmp / "letters.jsonl"
    letters_file.unlink(missing_ok=True)
    link = DiscardingLink()
    loop = ConsumerLoop(
        cfg, learner, source, catalog, DeadLetterFile(letters_file), link,
        LearningMetrics.of(learner), Progress(),
    )  # fmt: skip
    loop.run(threading.Event())
    loop.dead_letters.close()
    lines = letters_file.read_text().splitlines() if letters_file.exists() else []
    return loop, source, [DeadLetter.from_json(json.loads(line)) for line in lines]


def triplet(seed: int, poisoned: bool = False) -> bytes:
    x = np.random.default_rng(seed).normal(size=(3, 2)).astype(np.float32)
    if poisoned:
        x[0, 0] = POISON_VALUE
    return encode_json(Constraint("triplet", x=x))


def counter(loop: ConsumerLoop, name: str, **labels: str) -> float:
    value = loop.metrics.registry.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


def expected(values: list[bytes | None]) -> tuple[list[np.ndarray], list[int]]:
    """What a correct loop does with ``values``: the triplets it learns, in order, and the
    offsets it dead-letters as ``learn_error`` (those of the poisoned triplets)."""
    store = {"4": [0.0, 1.0], "2": [1.0, 0.0]}
    good, poisoned = [], []
    for offset, value in enumerate(values):
        try:
            c = decode(value)  # type: ignore[arg-type]
        except DecodeError:
            continue
        ids = c.ids or ()
        if c.kind != "triplet" or any(i not in store for i in ids):
            continue  # a pair (the learner takes triplets), or an unknown item
        x = np.asarray(c.x if c.x is not None else [store[i] for i in ids], dtype=np.float32)
        if x.shape != (3, 2):
            continue
        if x[0, 0] == POISON_VALUE:
            poisoned.append(offset)
        else:
            good.append(x)
    return good, poisoned


RECORD = st.one_of(
    st.integers(0, 10**6).map(triplet),
    st.integers(0, 10**6).map(lambda s: triplet(s, poisoned=True)),
    st.binary(max_size=40),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.sampled_from(list(POISON.values())),
    st.just(b'{"v":1,"kind":"triplet","anchor":{"id":"4"},"positive":{"id":"2"},'
            b'"negative":{"id":"9"}}'),  # an unknown item
    st.just(b'{"v":1,"kind":"triplet","anchor":{"id":"4"},"positive":{"id":"2"},'
            b'"negative":{"id":"4"}}'),  # degenerate: skipped by the learner
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(RECORD, max_size=14), poll=st.integers(1, 6), every=st.integers(1, 6))
def test_any_records_through_the_loop_are_learned_or_dead_lettered_once(
    tmp_path_factory, values, poll, every
):
    tmp = tmp_path_factory.mktemp("loop")
    with pytest.MonkeyPatch.context() as mp:
        raise_on_poison(mp, learner_class("oasis"))
        loop, source, letters = run_loop(
            tmp, values, make_learner("oasis", 2), poll_records=poll, checkpoint_every=every
        )
        good, poisoned = expected(values)
        reference = make_learner("oasis", 2)
        for x in good:  # one by one, in stream order
            reference.learn_triplets(x[None, 0], x[None, 1], x[None, 2])

    n = len(values)
    learner = loop.learner
    assert loop.progress.consumed == n and source.position == n
    assert loop.progress.offsets.get(0, 0) == n
    # each record once: learned, or dead-lettered (letters may repeat after a rewind: the sink
    # is at-least-once; the model and the counters are exactly-once)
    offsets = sorted({d.offset for d in letters})
    assert [o for o in offsets if any(d.reason == LEARN_ERROR for d in letters if d.offset == o)
            ] == poisoned  # fmt: skip
    assert learner.constraints_seen == len(good) and len(good) + len(offsets) == n
    assert_same_model(learner, reference)
    consumed = counter(loop, "oahu_constraints_consumed_total")
    learned = counter(loop, "oahu_constraints_learned_total")
    skipped = sum(counter(loop, "oahu_constraints_skipped_total", reason=r)
                  for r in ("non_finite", "degenerate"))  # fmt: skip
    dead = sum(counter(loop, "oahu_dead_letters_total", reason=r) for r in DEAD_LETTER_REASONS)
    assert consumed == n and learned + skipped + dead == n and dead == len(offsets)
    assert not (tmp / IN_FLIGHT_FILE).exists()  # nothing left to recover


def test_an_error_halfway_through_an_update_is_undone_and_only_its_record_is_dead_lettered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The default learner on a digits stream, through the loop the service runs: the poisoned
    constraint raises after the ones before it in its run were learned; the model ends equal
    to one trained on the stream without it, and its letter names the error."""
    n, bad = 300, 137
    stream_file = make_stream(tmp_path, n, seed=3)
    stream = ConstraintStream.load(stream_file)
    poisoned = stream.X[stream.constraints[bad]]  # (3, d)
    original = learner_class("oahu").learn  # what the service's consumer calls

    def learn(self: Learner, kind: str, items: Any, similar: Any = None) -> np.ndarray:
        rows = np.asarray(items)
        hit = np.flatnonzero((rows == poisoned).all(axis=(1, 2)))
        if len(hit) == 0:
            return original(self, kind, items, similar)
        k = int(hit[0])
        original(self, kind, rows[:k])
        raise FloatingPointError("the update overflowed")

    monkeypatch.setattr(learner_class("oahu"), "learn", learn)
    config = ServiceConfig(
        source=stream_file.as_uri(), checkpoint_dir=str(tmp_path / "state"), exit_at_end=True,
        checkpoint_every=50, poll_records=40, poll_timeout=0.01,
    )  # fmt: skip
    (tmp_path / "state").mkdir()  # the service makes it before the learner process starts
    learner = make_learner("oahu", stream.n_features)
    learner.prepare(stream.X[stream.dev_idx])
    loop = build_loop(config, learner, Progress(), DiscardingLink())
    loop.run(threading.Event())
    loop.dead_letters.close()

    letters = [json.loads(line) for line in (tmp_path / "state" / "dead-letters.jsonl").open()]
    assert {(d["offset"], d["reason"]) for d in letters} == {(bad, LEARN_ERROR)}
    assert "FloatingPointError: the update overflowed" in letters[0]["detail"]
    keep = np.delete(np.arange(n), bad)
    assert_same_model(loop.learner, train_reference(stream, rows=keep))
    assert loop.progress.consumed == n and loop.progress.dead_letters == {LEARN_ERROR: 1}


CRASH_HOOK = '''
"""Test hook (tests/test_service_poison_records.py): the learner process kills itself, as a
segfault in native code would, when it is given the triplet saved in $OAHU_TEST_CRASH_ON."""
import os
import signal

if os.environ.get("OAHU_TEST_CRASH_ON"):
    import numpy as np

    from oahu.learner import Learner

    _bad = np.load(os.environ["OAHU_TEST_CRASH_ON"])
    _learn = Learner.learn  # what the service's consumer calls

    def _learn_items(self, kind, items, similar=None):
        rows = np.asarray(items)
        if kind == "triplet" and (rows == _bad).all(axis=(1, 2)).any():
            os.kill(os.getpid(), signal.SIGKILL)
        return _learn(self, kind, items, similar)

    Learner.learn = _learn_items
'''


def crashing_on(
    tmp_path: Path, n: int, bad: int, seed: int
) -> tuple[Path, ConstraintStream, dict[str, str]]:
    """A digits stream of ``n`` triplets, and the environment under which a learner process
    kills itself when it learns triplet ``bad`` of it (:data:`CRASH_HOOK`)."""
    stream_file = make_stream(tmp_path, n, seed=seed)
    stream = ConstraintStream.load(stream_file)
    np.save(tmp_path / "bad.npy", stream.X[stream.constraints[bad]])
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(CRASH_HOOK)
    env = {"PYTHONPATH": f"{tmp_path / 'hook'}{os.pathsep}{REPO}",
           "OAHU_TEST_CRASH_ON": str(tmp_path / "bad.npy")}  # fmt: skip
    return stream_file, stream, env


def test_a_record_that_crashes_the_learner_process_is_dead_lettered_as_crash_loop(tmp_path):
    """The learner process restarted by the serving process after each crash: the crashing
    record is learned alone after the first crash, dead-lettered after two crashes alone, and
    every other record is learned exactly once; the partition reaches its end and the service
    exits 0, never having stopped serving."""
    n, bad = 400, 150
    stream_file, stream, env = crashing_on(tmp_path, n, bad, seed=8)
    state = tmp_path / "state"
    args = [sys.executable, "-m", "oahu.cli.main", "run", "--http", "127.0.0.1:0",
            "--source", stream_file.as_uri(), "--checkpoint-dir", str(state),
            "--checkpoint-every", "97", "--poll-records", "20", "--exit-at-end",
            "--learner-restart-delay", "0.2"]  # fmt: skip
    run = subprocess.run(args, env={**os.environ, **env}, cwd=REPO, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    # crashed in its batch, then alone, then alone again; the fourth process dead-letters it
    assert run.stderr.count("learner process restarted") == 3, run.stderr[-3000:]
    assert "learning them one at a time" in run.stderr
    letters = [json.loads(line) for line in (state / "dead-letters.jsonl").open()]
    assert [(d["offset"], d["reason"]) for d in letters] == [(bad, CRASH_LOOP)]
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed == n and progress.offsets == {0: n}
    assert_same_model(learner, train_reference(stream, rows=np.delete(np.arange(n), bad)))
    assert not (state / IN_FLIGHT_FILE).exists()


def test_one_crash_with_a_record_in_flight_alone_is_not_enough_to_dead_letter_it(tmp_path):
    """An operator's kill -9 can strike while a suspect is learned alone: a strike, not yet a
    dead letter; the same record at a second crash alone is."""
    records = [SourceRecord("t", 2, o, b"") for o in range(40, 45)]
    InFlight(tmp_path).begin(offset_ranges(records), Recovery())  # the run dies in its batch
    recovery = InFlight(tmp_path).recover()
    assert recovery.suspects == {2: (40, 44)} and not recovery.strikes
    for _ in range(2):  # then twice while offset 42 is learned alone
        InFlight(tmp_path).begin(offset_ranges(records[2:3]), recovery, alone=True)
        recovery = InFlight(tmp_path).recover()
        looping = [r.offset for r in records if recovery.crash_looping(r)]
        assert looping == ([] if recovery.strikes[2, 42] == 1 else [42])
    assert recovery.strikes == {(2, 42): 2} and recovery.isolates(records[4:])
    InFlight(tmp_path).end(recovery)  # a clean stop keeps what is still to do ...
    assert InFlight(tmp_path).recover() == recovery
    recovery.passed({2: 45})  # ... until a checkpoint is past it
    InFlight(tmp_path).end(recovery)
    assert not (tmp_path / IN_FLIGHT_FILE).exists()
    (tmp_path / IN_FLIGHT_FILE).write_text("{not json")
    assert InFlight(tmp_path).recover() == Recovery()  # unreadable: ignored, said in the log


@pytest.mark.kafka
def test_a_crash_looping_record_does_not_block_its_kafka_partition(kafka_bootstrap, tmp_path):
    """The same against the real broker: the crashing record goes to the dead-letter topic as
    crash_loop, the group's committed offset reaches the end of the partition, and the model is
    the one trained on the stream without that record."""
    from test_service_kafka import FAST_GROUP, create_topic, produce, read_topic, unique

    n, bad = 300, 120
    stream_file, stream, env = crashing_on(tmp_path, n, bad, seed=9)
    topic, group, state = unique("poison"), unique("g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    assert produce(kafka_bootstrap, topic, stream_file).wait(60) == 0
    args = ["--source", f"kafka://{kafka_bootstrap}/{topic}?group={group}", "--items",
            str(stream_file), "--gallery", str(stream_file), "--checkpoint-dir", str(state),
            *FAST_GROUP, "--kafka-option",
            f"group_instance_id={unique('member')}", "--checkpoint-every", "97",
            "--poll-records", "20", "--learner-restart-delay", "0.2"]  # fmt: skip
    proc = ServiceProcess(args, tmp_path / "run.log", env=env)
    proc.wait_consumed(n, timeout=240)  # crashed in its batch, then twice alone: restarted
    assert proc.log.read_text().count("learner process restarted") == 3
    assert proc.terminate() == 0
    (letter,) = read_topic(kafka_bootstrap, topic + ".dead-letter", 1)
    assert dict(letter.headers)["reason"] == CRASH_LOOP.encode() and letter.offset == 0
    assert dict(letter.headers)["offset"] == str(bad).encode()
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n} and progress.consumed == n
    assert_same_model(learner, train_reference(stream, rows=np.delete(np.arange(n), bad)))
