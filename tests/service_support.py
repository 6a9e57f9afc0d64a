"""Helpers shared by the tests/test_service_*.py files: streams, reference training, and
``oahu run`` as a real subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch

from oahu.learner import Learner
from oahu.registry import make_learner
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.learning.link import ParentLink, ReindexSchedule
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream

REPO = Path(__file__).resolve().parents[1]


def make_stream(directory: Path, n: int, seed: int = 0, kind: str = "triplet") -> Path:
    path = directory / f"digits-{kind}-{n}-{seed}.npz"
    build_stream("digits", n, seed=seed, kind=kind).save(path)
    return path


def train_reference(
    stream: ConstraintStream, learner: str = "oahu", rows: Any = None, **params: Any
) -> Learner:
    """The learner trained directly on the stream's constraints ``rows`` (all), in order,
    prepared first where it needs it on what the service prepares it on: its gallery, the
    stream's development items (as ``oahu replay`` does too)."""
    model = make_learner(learner, stream.n_features, **params)
    if model.needs_prepare:
        model.prepare(stream.X[stream.dev_idx])
    c = stream.constraints if rows is None else stream.constraints[rows]
    if stream.kind == "triplet":
        model.learn_triplets(stream.X[c[:, 0]], stream.X[c[:, 1]], stream.X[c[:, 2]])
    else:
        similar = stream.similar if rows is None else stream.similar[rows]
        model.learn_pairs(stream.X[c[:, 0]], stream.X[c[:, 1]], similar)
    return model


def assert_same_model(a: Learner, b: Learner, atol: float = 1e-6) -> None:
    """Same learner, counters, hedge weights and parameters (within ``atol``); all of its state
    unless one of them is a serving snapshot's, rebuilt for queries only."""
    assert a.name == b.name
    assert (a.constraints_seen, a.constraints_used, a.updates) == (
        b.constraints_seen,
        b.constraints_used,
        b.updates,
    )
    np.testing.assert_allclose(a.alpha, b.alpha, atol=atol)
    only = a.queries_only or b.queries_only
    _assert_close(a.get_state(only)["model"], b.get_state(only)["model"], atol)
    # What the drift detectors have seen, and what they detected: a restart neither forgets
    # nor repeats a detection.
    _assert_close(a.get_state(only)["drift"], b.get_state(only)["drift"], atol, "drift")


def assert_same_state(a: dict[str, Any], b: dict[str, Any], atol: float = 1e-6) -> None:
    """Two models' whole states (``get_state()``), arrays within ``atol``, the rest equal."""
    _assert_close(a, b, atol, "state")


def _assert_close(x: Any, y: Any, atol: float, path: str = "model") -> None:
    if isinstance(x, dict):
        assert set(x) == set(y), path
        for key in x:
            _assert_close(x[key], y[key], atol, f"{path}.{key}")
    elif isinstance(x, torch.Tensor | np.ndarray) and np.asarray(x).dtype == bool:
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=path)
    elif isinstance(x, torch.Tensor | np.ndarray):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, err_msg=path)
    elif isinstance(x, list | tuple):
        assert len(x) == len(y), path
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            _assert_close(u, v, atol, f"{path}[{i}]")
    else:
        assert x == y, path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited: no /proc entry (reaped), or a zombie or dead task not
    yet reaped by whoever adopted it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        # Reaped before the open, or between the open and the read (ESRCH): gone either way.
        return True
    return state in ("Z", "X")


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_service(stream_file: Path, state: Path, n: int, **config: Any) -> Any:
    """An in-process service learning the ``n`` constraints of ``stream_file``, started and
    waited for until it has consumed them all and serves a snapshot of the final model."""
    from oahu.service.config import ServiceConfig
    from oahu.service.serving.app import Service

    service = Service(
        ServiceConfig(
            source=stream_file.as_uri(), checkpoint_dir=str(state), reindex_interval=0.05, **config
        )
    )
    service.start()
    wait_until(lambda: service.status["constraints_consumed"] == n, 60, "the stream")
    wait_until(
        lambda: service.publisher.current and service.publisher.current.updates == n,
        30,
        "the final snapshot",
    )
    return service


STARTED: list[ServiceProcess] = []  # killed after each test (tests/conftest.py)


def kill_started(keep: int = 0) -> None:
    """Kill every service started after the first ``keep`` and left running (a failed
    assertion included), so that none lives on into later tests."""
    while len(STARTED) > keep:
        service = STARTED.pop()
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait(timeout=30)


class ServiceProcess:
    """``python -m oahu.cli.main COMMAND ARGS`` (``run`` or ``serve``) as a subprocess, with
    its HTTP API (on ``port``: a free one by default; a restart takes its predecessor's to look
    the same to clients)."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        port: int | None = None,
        command: str = "run",
    ) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        STARTED.append(self)
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "oahu.cli.main", command, "--http",
                 f"127.0.0.1:{self.port}", *args],
                stdout=fh, stderr=subprocess.STDOUT, env=full_env, cwd=REPO,
            )  # fmt: skip

    def get(self, path: str) -> httpx.Response | None:
        try:
            return httpx.get(self.base + path, timeout=5.0)
        except httpx.HTTPError:
            return None

    def model(self) -> dict[str, Any] | None:
        response = self.get("/v1/model")
        return response.json() if response is not None and response.status_code == 200 else None

    def wait_serving(self, timeout: float = 60.0) -> dict[str, Any]:
        def serving() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"oahu run exited {self.proc.returncode}:\n{self.output()}")
            ready = self.get("/readyz")
            return self.model() if ready is not None and ready.status_code == 200 else None

        return wait_until(serving, timeout, "the service to be ready")

    def wait_consumed(self, n: int, timeout: float = 120.0) -> dict[str, Any]:
        def consumed() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"oahu run exited {self.proc.returncode}:\n{self.output()}")
            model = self.model()
            return model if model and model["constraints_consumed"] >= n else None

        return wait_until(consumed, timeout, f"{n} constraints consumed")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def crash_and_resume(
    args: list[str],
    state: Path,
    n: int,
    logs: Path,
    at: int = 300,
    before_kill: Callable[[ServiceProcess], Callable[[], None]] | None = None,
) -> tuple[Any, Progress]:
    """``oahu run ARGS`` over a stream of ``n`` constraints, checkpointing into ``state``, killed
    with SIGKILL once it has consumed ``at`` (a real mid-stream crash, asserted), then run again
    with ``--exit-at-end`` to the end; the final checkpoint's model and progress (all ``n``
    consumed, asserted). ``before_kill(first)`` runs just before the kill and returns what to
    check just after it."""
    first = ServiceProcess(args, logs / "first.log")
    killed_at = first.wait_consumed(at)["constraints_consumed"]
    after_kill = before_kill(first) if before_kill is not None else None
    first.kill()
    if after_kill is not None:
        after_kill()
    _, progress = read_checkpoint(checkpoint_path(state))
    assert killed_at < n and progress.consumed < n  # a real mid-stream crash
    second = ServiceProcess([*args, "--exit-at-end"], logs / "second.log")
    assert second.proc.wait(timeout=180) == 0, second.output()
    model, progress = read_checkpoint(checkpoint_path(state))
    assert progress.offsets == {0: n} and progress.consumed == n
    return model, progress


def failing_learner(detail: str, inbox: Any, outbox: Any) -> None:
    """A learner process that reports ``detail`` as its failure and exits 1, as
    ``oahu.service.learning.learner_main`` does when learning raises."""
    ParentLink(outbox, ReindexSchedule()).fail(detail)
    raise SystemExit(1)
