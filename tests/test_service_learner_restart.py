"""Serving outlives the learner process: ``kill -9`` of the learner alone leaves the service
answering from its last snapshot, a new learner process continues from the last checkpoint after
a backoff, ``/readyz`` says "ready to serve, not learning" meanwhile, a crash loop is reported,
and every constraint is still learned exactly once."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
import pytest
from group_support import assert_each_once, checkpointed, prepared, replayed
from service_support import (
    ServiceProcess,
    assert_same_model,
    gone,
    make_stream,
    train_reference,
    wait_until,
)
from test_service_process import learner_pid

from oahu.connectors.file_source import FileSource
from oahu.service.catalog import base_items
from oahu.service.checkpoints import checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.group.schedule import learn_values
from oahu.service.serving.supervisor import RestartBackoff
from oahu.streams.stream_file import ConstraintStream

KILLS = 5


def test_restart_delays_double_after_quick_failures_and_reset_after_a_stable_run():
    now = [0.0]
    backoff = RestartBackoff(first=0.5, most=3.0, stable=60.0, loop=5, window=300.0,
                             clock=lambda: now[0])  # fmt: skip
    delays = []
    for _ in range(5):
        delays.append(backoff.failed(ran=2.0))
        now[0] += 10.0
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]  # doubled, capped at ``most``
    assert backoff.crash_loop()  # 5 failures within 40 s
    assert backoff.failed(ran=61.0) == 0.5  # a stable run starts the doubling again
    now[0] += 300.0
    assert not backoff.crash_loop()  # the last 5 failures are no longer within the window


class Client(threading.Thread):
    """Classifies two test items back to back until stopped, counting every answer that is
    not a 200 (or no answer at all)."""

    def __init__(self, base: str, body: dict) -> None:
        super().__init__(daemon=True)
        self.base, self.body = base, body
        self.stop = threading.Event()
        self.answered = 0
        self.failures: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10.0) as http:
            while not self.stop.is_set():
                try:
                    response = http.post("/v1/classify", json=self.body)
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                if response.status_code == 200:
                    self.answered += 1
                else:
                    self.failures.append(f"{response.status_code}: {response.text[:200]}")


def readyz(service: ServiceProcess) -> tuple[int, dict]:
    response = service.get("/readyz")
    assert response is not None
    return response.status_code, response.json()


@pytest.mark.timeout(300)
def test_kill_9_of_the_learner_alone_keeps_serving_and_learns_each_constraint_once(tmp_path):
    n = 4000
    stream_file = make_stream(tmp_path, n, seed=11)
    stream = ConstraintStream.load(stream_file)
    state = tmp_path / "state"
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(state),
         "--checkpoint-every", "150", "--poll-records", "10", "--learner-restart-delay", "0.1",
         "--reindex-interval", "0.2"],
        tmp_path / "service.log",
    )  # fmt: skip
    service.wait_serving()
    body = {"items": [{"x": stream.X[i].tolist()} for i in stream.test_idx[:2]]}
    client = Client(service.base, body)
    client.start()
    try:
        seen_down = 0
        for kill in range(1, KILLS + 1):
            service.wait_consumed(min(n, 300 * kill))
            child = learner_pid(service)
            os.kill(child, signal.SIGKILL)
            wait_until(lambda: gone(child), 10, "the learner process to die")  # noqa: B023

            def restarted() -> bool:
                nonlocal seen_down
                code, ready = readyz(service)
                learning = ready["learning"]
                if not learning["running"]:
                    # ready to serve, not learning: the snapshot is the only check that counts
                    assert code == 200 and ready["ready"] and ready["checks"] == {"snapshot": True}
                    assert "exited with code -9" in learning["last_error"]
                    seen_down += 1
                return learning["running"] and learning["restarts"] == kill  # noqa: B023

            wait_until(restarted, 60, f"restart {kill}", interval=0.02)
            assert service.proc.poll() is None  # the serving process lives on
        assert seen_down >= KILLS  # every outage was seen as one, ready to serve
        _, ready = readyz(service)
        assert ready["learning"]["crash_loop"]  # 5 failures within 300 s: reported
        metrics = service.get("/metrics").text
        assert f"oahu_learner_restarts_total {float(KILLS)}" in metrics
        assert "oahu_learner_crash_loop 1.0" in metrics
        service.wait_consumed(n)
    finally:
        client.stop.set()
        client.join(timeout=30)
    assert client.failures == [] and client.answered > 0
    assert service.terminate() == 0
    learner, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n} and progress.consumed == n
    assert_same_model(learner, train_reference(stream))  # nothing lost, nothing learned twice


def test_a_learner_that_ends_cleanly_ends_the_service(tmp_path: Path):
    """Exit code 0 (the end of the file with --exit-at-end) is not a failure: no restart."""
    stream_file = make_stream(tmp_path, 200, seed=3)
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(tmp_path / "state"),
         "--exit-at-end"], tmp_path / "service.log",
    )  # fmt: skip
    assert service.proc.wait(timeout=120) == 0, service.output()
    assert "restarted" not in service.output()


def spawned_member(rank0: int) -> int | None:
    """The member rank 0 spawned (a child of one of its threads), once it has."""
    for task in Path(f"/proc/{rank0}/task").iterdir():
        for child in (task / "children").read_text().split():
            return int(child)
    return None


@pytest.mark.timeout(300)
def test_a_learning_group_whose_member_dies_is_restarted_and_learns_each_record_once(tmp_path):
    """``oahu run --learners 2``: kill -9 of the member rank 0 spawned fails the group (rank 0
    exits 1), the serving process restarts it from the last cut, and the group still learns
    every record of the file once, the model equal to a replay of its schedule (strict steps:
    the records a crash left in flight are learned one at a time afterwards, which a replay of
    micro-batches would not know)."""
    n, members = 1500, 2
    stream_file = make_stream(tmp_path, n, seed=5)
    state = tmp_path / "state"
    service = ServiceProcess(
        ["--source", stream_file.as_uri(), "--checkpoint-dir", str(state),
         "--learners", str(members), "--combine-every", "4", "--checkpoint-every", "100",
         "--learner-restart-delay", "0.25"],
        tmp_path / "service.log",
    )  # fmt: skip
    service.wait_serving()
    for kill in (1, 2):
        service.wait_consumed(300 * kill)
        rank0 = learner_pid(service)
        member = wait_until(lambda: spawned_member(rank0), 60, "the member")  # noqa: B023
        os.kill(member, signal.SIGKILL)
        wait_until(lambda: gone(rank0), 30, "the group to fail as one")  # noqa: B023

        def restarted() -> bool:
            learning = readyz(service)[1]["learning"]
            return learning["running"] and learning["restarts"] == kill  # noqa: B023

        wait_until(restarted, 60, f"restart {kill}", interval=0.02)
    service.wait_consumed(n)
    assert service.terminate() == 0
    config = ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=str(state),
                           learners=members)  # fmt: skip
    model, progress = checkpointed(config)
    assert progress.consumed == n and model.constraints_seen == n
    block = 4  # one round's records: --combine-every 4 strict updates
    assert progress.group["block"] == block
    assert_each_once(config, members, [((o // block) % members, o) for o in range(n)])
    values = {r.offset: r.value for r in FileSource(stream_file).poll(n)}
    items, _ = base_items(config)
    stream = ConstraintStream.load(stream_file)
    replay = replayed(
        config, members, prepared(stream)(),
        lambda learner, offsets: learn_values(learner, [values[o] for _, o in offsets], items),
    )  # fmt: skip
    assert_same_model(model, replay, atol=1e-5)
