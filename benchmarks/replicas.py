"""Serving replicas (``oahu run --publish-model`` + ``oahu serve``) on a Fashion-MNIST gallery of
35,000 items: how soon a replica serves a published snapshot, how soon a killed replica serves
again, and how the query capacity grows with replicas.

Starts a single-node Kafka broker (scripts/kafka), builds a Fashion-MNIST stream file (its
development items are the gallery of both the learner service and the replicas) and runs:

1. **publication delay**: the learner service learns the stream and publishes a snapshot every
   ``--reindex-interval`` seconds; one replica follows. For each snapshot, the delay from the
   learner's build of it (``/v1/model`` ``snapshot.created``) to the first answer the replica
   gives from it (its ``model.snapshot``, polled every 20 ms). Both clocks are this machine's.
2. **restart**: ``kill -9`` of the replica, started again: seconds until it answers from the
   learner's latest snapshot, ``--restarts`` times.
3. **capacity**: the learner service stopped (its topic stays), one replica pinned to core 0,
   then two pinned to cores 0 and 1 (``taskset``, at niceness 5 so that the client sharing the
   cores is not held up behind them and charges them for it); this benchmark's open-loop client
   (serve_latency.py's own, light enough to share the cores) offers rising rates of one-item
   ``/v1/classify`` requests, spread over the replicas' connections as a round-robin balancer
   would; the report names the highest rate whose p99 stays within ``--target-ms`` for each
   count, and their ratio. Each step also records the CPU each replica process took
   (``replica_cores``, of its step's nominal seconds) and their CPU per request.

    python benchmarks/replicas.py                        # the defaults, ~6 minutes here
    python benchmarks/replicas.py --rates 100 200 300 400 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine
from serve_latency import (
    Connection,
    client_loop_factory,
    cpu_seconds,
    fixed_rate,
    free_port,
    request_bodies,
    requests,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
KAFKA = REPO / "scripts" / "kafka" / "kafka.sh"
REPLICA_NICENESS = 5


def oahu(*args: str, log: Path, cores: str | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "oahu.cli.main", *args]
    if cores is not None:
        # The load generator shares the cores: below it in priority, the replicas take what it
        # leaves, and its clock is not held up behind them (that would count as latency).
        command = ["taskset", "-c", cores, "nice", "-n", str(REPLICA_NICENESS), *command]
    with open(log, "ab") as fh:
        return subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)


def get(base: str, path: str) -> Any:
    try:
        response = httpx.get(base + path, timeout=5)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def wait(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} within {timeout} s")


def answered_snapshot(base: str, body: dict) -> int | None:
    try:
        response = httpx.post(base + "/v1/classify", json=body, timeout=5)
    except httpx.HTTPError:
        return None
    return response.json()["model"]["snapshot"] if response.status_code == 200 else None


def publication_delays(learner: str, replica: str, body: dict, seconds: float) -> list[float]:
    """For each snapshot the learner service builds within ``seconds``: from its build to the
    replica's first answer from it."""
    built: dict[int, float] = {}
    served: dict[int, float] = {}
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        model = get(learner, "/v1/model")
        if model and model.get("snapshot"):
            built.setdefault(model["snapshot"]["snapshot"], model["snapshot"]["created"])
        version = answered_snapshot(replica, body)
        if version is not None:
            served.setdefault(version, time.time())
        time.sleep(0.02)
    return [served[v] - built[v] for v in sorted(built) if v in served and v > min(built)]


def capacity(ports: list[int], raws: list[bytes], rates: list[float], seconds: float,
             clients: int, pids: Sequence[int] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """p99 at each offered rate, the connections spread evenly over ``ports``; with the
    replicas' ``pids``, the CPU each replica process took (cores) and their CPU per request."""
    out = []
    with asyncio.Runner(loop_factory=client_loop_factory()) as runner:
        for rate in rates:
            conns = runner.run(_open(ports, clients))
            before = resource.getrusage(resource.RUSAGE_SELF)
            replicas_before = [cpu_seconds(pid) for pid in pids]
            try:
                rec = runner.run(fixed_rate(conns, raws, seconds, rate))
            finally:
                for conn in conns:
                    conn.close()
            after = resource.getrusage(resource.RUSAGE_SELF)
            replica_cpu = [cpu_seconds(p) - b for p, b in zip(pids, replicas_before, strict=True)]
            used = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
            summary = rec.summary(seconds)
            # what the client itself took of the two cores it shares with the replicas
            step = {"offered_per_s": rate, **summary, "client_cores": used / seconds}
            if pids:  # what a request costs a replica: does it grow with a second replica?
                step["replica_cores"] = [c / seconds for c in replica_cpu]
                step["replica_cpu_ms_per_request"] = sum(replica_cpu) / summary["requests"] * 1e3
            out.append(step)
            print(json.dumps({"replicas": len(ports), **out[-1]}), flush=True)
    return out


async def _open(ports: list[int], clients: int) -> list[Connection]:
    return list(
        await asyncio.gather(
            *(Connection.open("127.0.0.1", ports[i % len(ports)]) for i in range(clients))
        )
    )


def highest_within(steps: list[dict[str, Any]], target_ms: float) -> float | None:
    best = None
    for step in steps:
        if step["p99_ms"] > target_ms or set(step["statuses"]) != {"200"}:
            break
        best = step["offered_per_s"]
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constraints", type=int, default=500_000)
    parser.add_argument("--delay-seconds", type=float, default=90.0,
                        help="how long to watch publications")  # fmt: skip
    parser.add_argument("--reindex-interval", type=float, default=5.0)
    parser.add_argument("--restarts", type=int, default=3)
    rates = [100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 700]
    parser.add_argument("--rates", type=float, nargs="+", default=rates)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--target-ms", type=float, default=50.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "replicas.json")
    parser.add_argument("--capacity-only", action="store_true",
                        help="skip the publication and restart phases")  # fmt: skip
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="oahu-replicas-"))
    subprocess.run(["bash", str(KAFKA), "install"], check=True, capture_output=True)
    bootstrap = subprocess.run(["bash", str(KAFKA), "start", str(work / "kafka")], check=True,
                               capture_output=True, text=True).stdout.split()[-1]  # fmt: skip
    processes: list[subprocess.Popen] = []
    try:
        stream = work / "fashion.npz"
        subprocess.run([sys.executable, "-m", "oahu.cli.main", "make-stream", "--dataset",
                        "fashion-mnist", "--constraints", str(args.constraints), "--out",
                        str(stream)], check=True, cwd=REPO)  # fmt: skip
        from oahu.streams.stream_file import ConstraintStream

        loaded = ConstraintStream.load(stream)
        queries = loaded.X[loaded.test_idx[:2000]]
        body = {"items": [{"x": queries[0].tolist()}]}
        topic = f"kafka://{bootstrap}/model"
        learner_port, replica_port = free_port(), free_port()
        learner = f"http://127.0.0.1:{learner_port}"
        replica = f"http://127.0.0.1:{replica_port}"
        run = ["run", "--source", stream.as_uri(), "--checkpoint-dir", str(work / "state"),
               "--http", f"127.0.0.1:{learner_port}", "--publish-model", topic,
               "--reindex-interval", str(args.reindex_interval)]  # fmt: skip
        serve = ["serve", "--model-topic", topic, "--gallery", str(stream)]
        processes.append(oahu(*run, log=work / "learner.log"))
        wait(lambda: get(learner, "/v1/model"), 180, "the learner service")
        processes.append(
            oahu(*serve, "--http", f"127.0.0.1:{replica_port}", log=work / "replica.log")
        )
        wait(lambda: answered_snapshot(replica, body), 180, "the replica")
        delays = []
        if not args.capacity_only:
            delays = publication_delays(learner, replica, body, args.delay_seconds)
        print(json.dumps({"publication_delays_s": delays}), flush=True)

        restarts = []
        for _ in range(0 if args.capacity_only else args.restarts):
            processes[-1].send_signal(signal.SIGKILL)
            processes[-1].wait()
            started = time.monotonic()
            processes[-1] = oahu(*serve, "--http", f"127.0.0.1:{replica_port}",
                                 log=work / "replica.log")  # fmt: skip
            latest = get(learner, "/v1/model")["snapshot"]["snapshot"]
            wait(lambda: (answered_snapshot(replica, body) or 0) >= latest, 120,  # noqa: B023
                 "the restarted replica")  # fmt: skip
            restarts.append(time.monotonic() - started)
            print(json.dumps({"restart_s": restarts[-1]}), flush=True)
        processes[-1].send_signal(signal.SIGTERM)
        processes[-1].wait()

        processes[0].send_signal(signal.SIGTERM)  # the learner's topic stays for the replicas
        processes[0].wait(timeout=120)
        raws_for = lambda port: requests(request_bodies(queries), f"127.0.0.1:{port}")  # noqa: E731
        steps: dict[int, list[dict[str, Any]]] = {}
        for count in (1, 2):
            ports = [free_port() for _ in range(count)]
            group = [
                oahu(
                    *serve,
                    "--http",
                    f"127.0.0.1:{port}",
                    log=work / f"capacity{count}.log",
                    cores=str(i),
                )
                for i, port in enumerate(ports)
            ]
            try:
                for port in ports:
                    wait(lambda: answered_snapshot(f"http://127.0.0.1:{port}", body), 180,  # noqa: B023
                         "a capacity replica")  # fmt: skip
                capacity(ports, raws_for(ports[0]), [50.0], 5.0, args.clients)  # warm-up
                pids = [proc.pid for proc in group]  # taskset and nice exec the replica itself
                steps[count] = capacity(
                    ports, raws_for(ports[0]), args.rates, args.seconds, args.clients, pids
                )
            finally:
                for proc in group:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)
        one, two = (highest_within(steps[c], args.target_ms) for c in (1, 2))
        report = {
            "benchmark": "replicas",
            "command": "python benchmarks/replicas.py " + " ".join(sys.argv[1:]),
            "code": code_version(),
            "machine": machine(),
            "gallery_items": len(loaded.dev_idx),
            "publication_delay_s": {
                "snapshots": len(delays),
                "median": float(np.median(delays)) if delays else None,
                "max": max(delays) if delays else None,
                "all": delays,
            },
            "restart_s": {"max": max(restarts, default=None), "all": restarts},
            "capacity": {
                "target_p99_ms": args.target_ms,
                "highest_rate_one_replica": one,
                "highest_rate_two_replicas": two,
                "ratio": None if not one or not two else two / one,
                "steps": {str(c): s for c, s in steps.items()},
            },
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps({k: report[k] for k in ("publication_delay_s", "restart_s")}))
        print(json.dumps({k: v for k, v in report["capacity"].items() if k != "steps"}))
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
        subprocess.run(["bash", str(KAFKA), "stop", str(work / "kafka")], capture_output=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
