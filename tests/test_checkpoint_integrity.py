"""Checkpoints and saved learners detect corruption and never load it silently: a checksum in
every file, the previous checkpoints kept, a loud fallback to the newest valid one (model and
offsets together), and a one-line refusal when none is valid."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_support import REPO, assert_same_model, make_stream, train_reference, wait_until
from test_service_file import run_to_end  # the service over a whole file, shut down cleanly

from oahu.connectors.answers_source import WithAnswers
from oahu.learners.baselines.rdml import RDML
from oahu.persistence import LearnerFileError, load_learner, save_learner
from oahu.registry import make_learner
from oahu.service.checkpoints import (
    CheckpointError,
    Progress,
    checkpoint_files,
    checkpoint_path,
    read_checkpoint,
    restore_checkpoint,
    write_checkpoint,
)
from oahu.service.config import ServiceConfig
from oahu.service.learning.main import build_loop
from oahu.service.serving.app import Service
from oahu.streams.stream_file import ConstraintStream

# ---------------------------------------------------------------------------- corruptions


def flip_middle(data: bytes) -> bytes:
    """What the outside tester did: 64 bytes in the middle of the file, inverted."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :]


def truncate(data: bytes) -> bytes:
    return data[: len(data) * 2 // 3]


def random_file(data: bytes) -> bytes:
    return np.random.default_rng(0).bytes(len(data))


def wrong_checksum(data: bytes) -> bytes:
    """A valid payload under a header whose SHA-256 is another one's."""
    header, payload = data.split(b"\n", 1)
    digest = header.split(b"sha256=")[1][:64]
    return header.replace(digest, digest[::-1]) + b"\n" + payload


def empty(data: bytes) -> bytes:
    return b""


CORRUPTIONS = [flip_middle, truncate, random_file, wrong_checksum, empty]


def corrupt(path: Path, how) -> None:
    path.write_bytes(how(path.read_bytes()))


def trained_rdml(n: int = 20, seed: int = 0) -> RDML:
    rng = np.random.default_rng(seed)
    rdml = RDML(n_features=4, learning_rate=0.1)
    rdml.learn_pairs(rng.normal(size=(n, 4)), rng.normal(size=(n, 4)), rng.random(n) < 0.5)
    return rdml


# ---------------------------------------------------------------------------- saved learners


@pytest.mark.parametrize("how", CORRUPTIONS, ids=lambda f: f.__name__)
def test_a_corrupt_saved_learner_is_refused_in_one_line_naming_the_file(tmp_path, how):
    """``save_learner``/``load_learner`` (the Python API and ``--save-model``): the bytes the
    tester flipped, a truncation, a random or empty file and a mismatching checksum are refused
    with a ValueError of one line that names the file, never torch's advice."""
    path = tmp_path / "model.pt"
    save_learner(trained_rdml(), path, extra={"offset": 20})
    corrupt(path, how)
    with pytest.raises(LearnerFileError) as refused:
        load_learner(path)
    message = str(refused.value)
    assert isinstance(refused.value, ValueError)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert "weights_only" not in message
    error = refused.value  # and no chained torch traceback behind it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_the_tester_s_flip_is_refused_and_the_intact_file_loads_exactly(tmp_path):
    rdml = trained_rdml()
    path = tmp_path / "model.pt"
    save_learner(rdml, path)
    assert path.read_bytes().startswith(b"oahu-learner 2 sha256=")
    loaded, _ = load_learner(path)
    np.testing.assert_array_equal(loaded.metric_matrix, rdml.metric_matrix)
    corrupt(path, flip_middle)
    with pytest.raises(LearnerFileError, match=r"corrupt learner file: its \d+ payload bytes"):
        load_learner(path)


def test_a_file_of_an_earlier_release_loads_and_says_it_is_unverified(tmp_path, caplog):
    """Before checksums a saved learner was the bare torch.save payload: it still loads."""
    rdml = trained_rdml()
    path = tmp_path / "old.pt"
    blob = {"format_version": 1, "state": rdml.get_state(), "extra": {"offset": 20}}
    torch.save(blob, path)
    with caplog.at_level(logging.WARNING, logger="oahu.persistence"):
        loaded, extra = load_learner(path)
    assert extra == {"offset": 20}
    np.testing.assert_array_equal(loaded.metric_matrix, rdml.metric_matrix)
    assert f"{path}: saved by an earlier oahu without a checksum: loaded unverified" in caplog.text
    corrupt(path, truncate)  # unverified, yet a broken one is still refused in one line
    with pytest.raises(LearnerFileError, match=r"earlier release's file, without a checksum"):
        load_learner(path)


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory) -> tuple[Path, object, bytes]:
    """One real checkpoint, written through the service's path, for the property below: its
    folder (pytest's, so nothing is left behind in the temporary directory), the learner and
    the file's bytes."""
    folder = tmp_path_factory.mktemp("checkpoint-property")
    learner = make_learner("oahu", 6, hidden_width=8, embedding_dim=4, device="cpu")
    learner.prepare(np.random.default_rng(3).normal(size=(40, 6)))
    learner.learn_triplets(*np.random.default_rng(4).normal(size=(3, 30, 6)))
    write_checkpoint(checkpoint_path(folder), learner, Progress({0: 30}, consumed=30))
    return folder, learner, checkpoint_path(folder).read_bytes()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_corruption_of_a_checkpoint_is_detected_or_changes_nothing(saved_checkpoint, data):
    """Property: whatever byte range of a checkpoint is overwritten (or cut off, or appended
    to), loading it either raises LearnerFileError or yields exactly the saved model and
    offsets (only when the bytes are unchanged): never a silently different model."""
    folder, saved, original = saved_checkpoint
    start = data.draw(st.integers(0, len(original)), label="start")
    length = data.draw(st.integers(0, min(256, len(original) - start)), label="length")
    replacement = data.draw(st.binary(min_size=length, max_size=length), label="bytes")
    damaged = original[:start] + replacement + original[start + length :]
    if data.draw(st.booleans(), label="cut or extend too"):
        damaged = data.draw(
            st.one_of(
                st.integers(0, len(damaged)).map(lambda n: damaged[:n]),
                st.binary(min_size=1, max_size=64).map(lambda tail: damaged + tail),
            ),
            label="resized",
        )
    path = folder / "damaged.pt"
    path.write_bytes(damaged)
    try:
        restored = read_checkpoint(path)
    except LearnerFileError:
        assert damaged != original
        return
    assert damaged == original, "a changed checkpoint loaded without complaint"
    learner, progress = restored
    assert_same_model(learner, saved, atol=0)
    assert progress.offsets == {0: 30} and progress.consumed == 30


# ---------------------------------------------------------------------------- kept checkpoints


def test_each_checkpoint_keeps_the_previous_two(tmp_path):
    path = checkpoint_path(tmp_path)
    for consumed in (10, 20, 30, 40):
        write_checkpoint(path, trained_rdml(consumed), Progress({0: consumed}, consumed=consumed))
    kept = [read_checkpoint(f)[1].offsets for f in checkpoint_files(path)]
    assert kept == [{0: 40}, {0: 30}, {0: 20}]
    # the same model again (nothing consumed since) replaces the latest, keeping the older two
    write_checkpoint(path, trained_rdml(40), Progress({0: 40}, consumed=40), keep_previous=False)
    assert [read_checkpoint(f)[1].offsets for f in checkpoint_files(path)] == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint.1.pt",
        "checkpoint.2.pt",
        "checkpoint.pt",
    ]  # no temporary file left behind


@pytest.mark.parametrize("how", CORRUPTIONS, ids=lambda f: f.__name__)
def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_loudly(tmp_path, caplog, how):
    path = checkpoint_path(tmp_path)
    previous = trained_rdml(20, seed=1)
    write_checkpoint(path, previous, Progress({0: 20}, consumed=20))
    write_checkpoint(path, trained_rdml(30, seed=2), Progress({0: 30}, consumed=30))
    corrupt(path, how)
    with caplog.at_level(logging.ERROR, logger="oahu.service"):
        restored = restore_checkpoint(path)
    assert restored.fell_back and restored.path == tmp_path / "checkpoint.1.pt"
    assert_same_model(restored.learner, previous, atol=0)
    assert restored.progress.offsets == {0: 20} and restored.progress.consumed == 20
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith(f"CHECKPOINT FALLBACK: {path}: ")
    assert f"continuing from the earlier checkpoint {restored.path}" in record.getMessage()
    assert "offsets {0: 20}" in record.getMessage()
    # the refused one is set aside, the restored one stays where it is
    assert (tmp_path / "checkpoint.pt.corrupt").exists() and not path.exists()
    assert restored.path.exists()


def test_a_missing_latest_checkpoint_falls_back_too(tmp_path, caplog):
    path = checkpoint_path(tmp_path)
    write_checkpoint(path, trained_rdml(20), Progress({0: 20}, consumed=20))
    write_checkpoint(path, trained_rdml(30), Progress({0: 30}, consumed=30))
    path.unlink()
    restored = restore_checkpoint(path)
    assert restored.fell_back and restored.progress.offsets == {0: 20}
    assert f"CHECKPOINT FALLBACK: {path}: missing" in caplog.text


def test_no_valid_checkpoint_is_refused_naming_every_file_and_the_remedy(tmp_path):
    path = checkpoint_path(tmp_path)
    for consumed in (10, 20, 30):
        write_checkpoint(path, trained_rdml(consumed), Progress({0: consumed}, consumed=consumed))
    for file, how in zip(checkpoint_files(path), (flip_middle, truncate, random_file), strict=True):
        corrupt(file, how)
    with pytest.raises(CheckpointError) as refused:
        restore_checkpoint(path)
    message = str(refused.value)
    assert "\n" not in message and "weights_only" not in message
    assert message.startswith(f"{path}: no valid checkpoint to continue from (")
    for file in checkpoint_files(path):
        assert str(file) in message
    assert message.endswith(
        "restore the files from a backup, or move checkpoint.pt, checkpoint.1.pt, "  # all here
        f"checkpoint.2.pt out of {tmp_path} to start a new model"
    )
    assert restore_checkpoint(tmp_path / "elsewhere" / "checkpoint.pt") is None  # no files


# ---------------------------------------------------------------------------- the service


def metric(service: Service, name: str) -> float:
    for line in service.metrics.render().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_the_service_falls_back_past_corrupt_checkpoints_and_learns_each_record_once(
    tmp_path, caplog
):
    """A service's checkpoints: 100, 200, 300 consumed (the final one, with nothing consumed
    since, replaces the latest rather than pushing one out). With the latest two corrupted, a
    restart continues from the third (model and offset 100), says so in the log and in
    oahu_checkpoint_fallbacks_total, and replays records 100 to 299 into that model: the result
    is the model of the whole stream learned once."""
    stream_file = make_stream(tmp_path, 300, seed=7)
    state = tmp_path / "state"
    first = run_to_end(stream_file, state, checkpoint_every=100, poll_records=50)
    assert metric(first, "oahu_checkpoint_fallbacks_total") == 0.0
    files = checkpoint_files(checkpoint_path(state))
    kept = [read_checkpoint(f) for f in files]
    assert [progress.offsets for _, progress in kept] == [{0: 300}, {0: 200}, {0: 100}]
    corrupt(files[0], flip_middle)
    corrupt(files[1], truncate)

    with caplog.at_level(logging.ERROR, logger="oahu.service"):
        again = Service(
            ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(state), exit_at_end=True)
        )
    assert_same_model(again.learner, kept[2][0], atol=0)  # the newest valid one
    assert metric(again, "oahu_checkpoint_fallbacks_total") == 1.0  # before any report too
    fallback = [r.getMessage() for r in caplog.records if "CHECKPOINT FALLBACK" in r.getMessage()]
    assert len(fallback) == 1 and str(files[0]) in fallback[0] and str(files[1]) in fallback[0]
    assert f"continuing from the earlier checkpoint {files[2]}" in fallback[0]
    assert [f.name for f in sorted(state.glob("*.corrupt"))] == [
        "checkpoint.1.pt.corrupt",
        "checkpoint.pt.corrupt",
    ]  # set aside, no longer among the kept checkpoints
    again.start()
    assert again.finished.wait(120) and again.learner_error is None
    again.shutdown()
    assert metric(again, "oahu_checkpoint_fallbacks_total") == 1.0
    learner, progress = read_checkpoint(files[0])
    assert progress.offsets == {0: 300} and progress.consumed == 300
    assert_same_model(learner, train_reference(ConstraintStream.load(stream_file)))


def test_the_service_refuses_to_start_without_a_valid_checkpoint_in_one_line(tmp_path):
    stream_file = make_stream(tmp_path, 60, seed=8)
    state = tmp_path / "state"
    run_to_end(stream_file, state)
    for file in checkpoint_files(checkpoint_path(state)):
        if file.exists():
            corrupt(file, flip_middle)
    done = subprocess.run(
        [sys.executable, "-m", "oahu.cli.main", "run", "--source", stream_file.as_uri(),
         "--checkpoint-dir", str(state), "--http", "127.0.0.1:0"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    # the one line of the error (start-up logs, e.g. faiss's, come before it)
    [line] = [line for line in done.stderr.splitlines() if line.startswith("oahu run: ")]
    assert line.startswith(f"oahu run: error: {checkpoint_path(state)}: no valid checkpoint")
    assert line.endswith(f"or move checkpoint.pt out of {state} to start a new model")
    assert "weights_only" not in line


def test_the_service_starts_from_a_checkpoint_of_an_earlier_release(tmp_path, caplog):
    """No checksum then: it loads, unverified (said in the log), and the next one has one."""
    stream_file = make_stream(tmp_path, 60, seed=9)
    state = tmp_path / "state"
    run_to_end(stream_file, state)
    path = checkpoint_path(state)
    learner, progress = read_checkpoint(path)
    for file in checkpoint_files(path):
        file.unlink(missing_ok=True)
    blob = {
        "format_version": 1,
        "state": learner.get_state(),
        "extra": {"service": progress.to_extra()},
    }
    torch.save(blob, path)  # what oahu wrote before checksums
    with caplog.at_level(logging.WARNING):
        again = run_to_end(stream_file, state)
    assert f"{path}: saved by an earlier oahu without a checksum: loaded unverified" in caplog.text
    assert again.status["constraints_consumed"] == 60 and again.status["updates"] == 60
    assert path.read_bytes().startswith(b"oahu-learner 2 sha256=")
    assert_same_model(read_checkpoint(path)[0], learner)


# ---------------------------------------------------------------------------- start offsets


class RecordingLink:
    """A ServingLink that keeps nothing: these tests look at where partitions start."""

    def offer(self, learner, force=False):
        return False

    def report(self, status, families, force=False):
        pass


def loop_over_file(tmp_path: Path, progress: Progress, committed: int, fell_back: bool):
    """A learn loop over a real file source whose committed offset is ``committed`` (as a
    Kafka group's would be), assigned its partition."""
    stream_file = make_stream(tmp_path, 50, seed=10)
    (tmp_path / "state").mkdir()  # made by the serving process before the learner's starts
    config = ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(tmp_path / "state"))
    stream = ConstraintStream.load(stream_file)
    learner = make_learner("rdml", stream.n_features)
    loop = build_loop(config, learner, progress, RecordingLink(), fell_back)
    assert isinstance(loop.source, WithAnswers)  # the file, and the answers log beside it
    loop.source.commit({0: committed})
    loop.on_assign([0])
    return loop


def test_after_a_fallback_the_checkpoint_s_own_offsets_win_over_committed_ones(tmp_path, caplog):
    """The group's committed offsets were the refused checkpoint's: the restored model must
    learn the records after its own offset, not skip them."""
    with caplog.at_level(logging.WARNING):
        loop = loop_over_file(tmp_path, Progress({0: 20}, consumed=20), 40, fell_back=True)
    assert loop.progress.offsets == {0: 20} and loop.source.stream.position == 20
    assert (
        "partition 0: continuing from the restored checkpoint's offset 20, not the group's "
        "committed 40 (the refused checkpoint's): offsets 20 to 39 are learned again"
    ) in caplog.text
    assert "oahu_checkpoint_fallbacks_total 1.0" in "\n".join(
        f"{s.name} {s.value}" for f in loop.metrics.families() for s in f.samples
    )


def test_without_a_fallback_the_committed_offset_still_wins(tmp_path):
    loop = loop_over_file(tmp_path, Progress({0: 20}, consumed=20), 40, fell_back=False)
    assert loop.progress.offsets == {0: 40} and loop.source.stream.position == 40


def test_a_new_model_over_committed_offsets_warns_which_records_it_skips(tmp_path, caplog):
    """A deleted checkpoint with a Kafka group that has committed offsets: the new model starts
    at the committed offsets (docs/delivery.md) and the log names what it never learns."""
    with caplog.at_level(logging.WARNING):
        loop = loop_over_file(tmp_path, Progress(), 40, fell_back=False)
    assert loop.progress.offsets == {0: 40} and loop.source.stream.position == 40
    assert (
        "partition 0: no checkpoint covers it; starting at the group's committed offset 40, so "
        "this model never learns the records before offset 40"
    ) in caplog.text


# ---------------------------------------------------------------------------- a Kafka group


@pytest.mark.kafka
def test_a_kafka_group_falls_back_with_its_offsets_and_a_deleted_checkpoint_says_what_it_skips(
    kafka_bootstrap, tmp_path
):
    """Against a real broker: the group's committed offsets are the latest checkpoint's. With
    the latest two checkpoints corrupt, the restart continues from the third's offsets (not the
    committed ones) and learns each record once; with every checkpoint moved away, a new model
    starts at the committed offsets and the log names what it skips."""
    from test_service_kafka import create_topic, produce, service, unique

    n = 600
    stream_file = make_stream(tmp_path, n, seed=12)
    topic, group, state = unique("integrity"), unique("g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, 1)
    assert produce(kafka_bootstrap, topic, stream_file, "--format", "json").wait(60) == 0
    first = service(kafka_bootstrap, topic, group, stream_file, state,
                    "--checkpoint-every", "200", "--poll-records", "100")  # fmt: skip
    first.wait_consumed(n)
    assert first.terminate() == 0
    files = checkpoint_files(checkpoint_path(state))
    assert read_checkpoint(files[0])[1].offsets == {0: n}
    _, kept = read_checkpoint(files[2])
    assert kept.offsets[0] < read_checkpoint(files[1])[1].offsets[0] < n
    corrupt(files[0], flip_middle)
    corrupt(files[1], random_file)

    again = service(kafka_bootstrap, topic, group, stream_file, state)
    again.wait_consumed(n)
    assert "oahu_checkpoint_fallbacks_total 1.0" in again.get("/metrics").text.splitlines()
    assert again.terminate() == 0
    log = again.log.read_text()
    assert f"CHECKPOINT FALLBACK: {files[0]}: corrupt learner file" in log
    assert (
        f"partition 0: continuing from the restored checkpoint's offset {kept.offsets[0]}, not "
        f"the group's committed {n} (the refused checkpoint's)"
    ) in log
    learner, progress = read_checkpoint(files[0])
    assert progress.offsets == {0: n} and progress.consumed == n
    assert_same_model(learner, train_reference(ConstraintStream.load(stream_file)))

    moved = tmp_path / "moved"
    moved.mkdir()
    for file in state.glob("checkpoint*.pt"):  # as docs/delivery.md says to start anew
        file.rename(moved / file.name)
    fresh = service(kafka_bootstrap, topic, group, stream_file, state)
    fresh.wait_serving()
    wait_until(lambda: f"committed offset {n}, so" in fresh.log.read_text(), 60, "the warning")
    assert fresh.model()["constraints_consumed"] == 0
    assert fresh.terminate() == 0
    assert (
        f"WARNING oahu-learner oahu.service.learning.consumer: partition 0: no checkpoint covers "
        f"it; starting at the group's committed offset {n}, so this model never learns the "
        f"records before offset {n}"
    ) in fresh.log.read_text()
