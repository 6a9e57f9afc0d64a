"""The learner process of ``oahu run``: it dies with the service, stops cleanly with it, starts
from the items added through the API, and reports its failures (file sources; services run as
subprocesses)."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from service_support import (
    ServiceProcess,
    assert_same_model,
    crash_and_resume,
    failing_learner,
    gone,
    make_stream,
    train_reference,
    wait_until,
)

from oahu.connectors.messages import encode_stream
from oahu.service.catalog import OVERLAY_FILE, Catalog
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.service.item_store import ItemStore
from oahu.service.messages import Start
from oahu.service.serving.process import LearnerProcess
from oahu.streams.stream_file import ConstraintStream


def learner_pid(service: ServiceProcess) -> int:
    """The service's learner process (its child running multiprocessing's spawn_main)."""
    pid = service.proc.pid
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
            return int(child)
    raise AssertionError("the service has no learner process")


def test_kill_9_takes_the_learner_with_it_and_a_restart_learns_each_constraint_once(tmp_path):
    n = 3000
    stream_file = make_stream(tmp_path, n, seed=6)
    state = tmp_path / "state"
    args = ["--source", stream_file.as_uri(), "--checkpoint-dir", str(state),
            "--checkpoint-every", "97", "--poll-records", "20"]  # fmt: skip

    def learner_dies_with_it(first: ServiceProcess) -> Callable[[], None]:
        child = learner_pid(first)
        return lambda: wait_until(lambda: gone(child), 10, "the learner process to die with it")

    learner, _ = crash_and_resume(args, state, n, tmp_path, before_kill=learner_dies_with_it)
    assert_same_model(learner, train_reference(ConstraintStream.load(stream_file)))


def test_sigterm_checkpoints_what_was_learned_and_exits_0(tmp_path: Path):
    n = 3000
    stream_file = make_stream(tmp_path, n, seed=8)
    state = tmp_path / "state"
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(state),
         "--poll-records", "20"], tmp_path / "service.log",
    )  # fmt: skip
    service.wait_consumed(200)
    child = learner_pid(service)
    assert service.terminate() == 0
    assert gone(child)
    learner, progress = read_checkpoint(checkpoint_path(state))
    consumed = progress.consumed
    assert 200 <= consumed and progress.offsets == {0: consumed}
    stream = ConstraintStream.load(stream_file)
    assert_same_model(learner, train_reference(stream, rows=slice(0, consumed)))


def test_items_added_through_the_api_before_a_start_resolve_in_the_learner(tmp_path: Path):
    """The learner's item replica starts from the API overlay file (the live path, changes
    sent while it runs, is tested against Kafka in test_service_kafka.py)."""
    stream_file = make_stream(tmp_path, 50, seed=2)
    stream = ConstraintStream.load(stream_file)
    state = tmp_path / "state"
    state.mkdir()
    api_catalog = Catalog(ItemStore(dim=64), ItemStore(dim=64), state / OVERLAY_FILE)
    api_catalog.add(["new-0", "new-1", "new-2"], stream.X[:3])  # what POST /v1/items does
    message = (
        b'{"v":1,"kind":"triplet","anchor":{"id":"new-0"},"positive":{"id":"new-1"},'
        b'"negative":{"id":"new-2"}}'
    )
    messages = tmp_path / "messages.txt"
    messages.write_bytes(b"\n".join([message, *encode_stream(stream_file, "json", inline=True)]))
    service = ServiceProcess(
        ["--source", messages.as_uri(), "--exit-at-end", "--checkpoint-dir", str(state),
         "--gallery", str(stream_file)], tmp_path / "service.log",
    )  # fmt: skip
    assert service.proc.wait(timeout=120) == 0, service.output()
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed == 51 and learner.constraints_learned == 51
    assert not progress.dead_letters and progress.items_version == 1


def test_a_failing_learner_process_reports_why_and_counts_as_finished():
    states, families = [], []
    process = LearnerProcess(
        failing_learner, ("boom: no source",), Start(b"learner", {}), {"constraints_consumed": 0},
        states.append, families.append,
    )  # fmt: skip
    process.start()
    assert process.finished.wait(60)
    assert process.error == "boom: no source" and not process.alive
    assert process.wait_items(1, timeout=1) is False  # nobody left to apply item changes
    assert states == [] and families == [] and process.status == {"constraints_consumed": 0}
    process.stop()  # already finished: returns at once


def test_the_learner_process_imports_no_serving_code():
    """The learner process's entry point pulls in neither faiss nor the HTTP stack nor the
    serving subpackage (they would cost its memory and start-up for nothing)."""
    probe = (
        "import sys, oahu.service.learning.main\n"
        "serving = ('faiss', 'fastapi', 'uvicorn', 'oahu.inference', 'oahu.service.serving')\n"
        "print(sorted(m for m in serving if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_serving_process_answers_from_a_snapshot_without_river_or_scikit_learn(tmp_path):
    """A learner rebuilt from a serving snapshot keeps no drift detector running, so the
    serving process (and every replica) does not pay the second of imports that river's drift
    package brings in with scikit-learn and SciPy; only learning loads them."""
    from oahu.persistence import learner_to_bytes
    from oahu.registry import make_learner

    rng = np.random.default_rng(0)
    learner = make_learner("oahu", 8, seed=0)
    learner.prepare(rng.normal(size=(100, 8)))
    learner.learn_triplets(*rng.normal(size=(3, 64, 8)))
    assert learner.drift is not None and learner.drift.seen == 64  # a detector was watching
    snapshot = tmp_path / "snapshot"
    snapshot.write_bytes(learner_to_bytes(learner, queries_only=True))
    expected = learner.embed(np.eye(8))
    probe = (
        "import sys, numpy as np, oahu.service.serving.app\n"
        "from oahu.persistence import learner_from_bytes\n"
        f"learner = learner_from_bytes(open({str(snapshot)!r}, 'rb').read())[0]\n"
        "np.save(sys.stdout.buffer, learner.embed(np.eye(8)))\n"
        "heavy = ('river.drift', 'sklearn', 'scipy.stats')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, timeout=120, check=True
    )
    assert done.stderr.decode().strip() == "[]"
    np.testing.assert_allclose(np.load(io.BytesIO(done.stdout)), expected, rtol=1e-5, atol=1e-6)
