"""/v1/classify latency while the learner consumes: p50 / p99 at 50 concurrent clients.

Starts ``oahu run`` (a subprocess) on a Fashion-MNIST stream file, so the gallery is the
stream's 35,000 development items, waits until the first snapshot is published, then runs
``--clients`` concurrent httpx clients, each sending one-item classify requests (test items)
back to back for ``--seconds``. The learner keeps consuming the stream meanwhile; the run
reports how many constraints it learned during the measurement. Client and server share the
machine's cores.

    PYTHONPATH=. python benchmarks/serve_latency.py                  # defaults of the target
    PYTHONPATH=. python benchmarks/serve_latency.py --clients 50 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"oahu run exited with {proc.returncode}")
        try:
            if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                return httpx.get(base + "/v1/model", timeout=5).json()
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the service did not become ready")


async def load(base: str, queries: np.ndarray, clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    snapshots: set[int] = set()
    stop_at = time.perf_counter() + seconds

    async def client(http: httpx.AsyncClient, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while time.perf_counter() < stop_at:
            body = {"items": [{"x": queries[rng.integers(len(queries))].tolist()}]}
            started = time.perf_counter()
            response = await http.post("/v1/classify", json=body)
            latencies.append(time.perf_counter() - started)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 200:
                snapshots.add(response.json()["model"]["snapshot"])

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as http:
        await asyncio.gather(*(client(http, i) for i in range(clients)))
    ms = np.array(latencies) * 1000
    return {
        "requests": len(ms),
        "requests_per_s": len(ms) / seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "statuses": {str(k): v for k, v in statuses.items()},
        "snapshots_seen": len(snapshots),
    }


def server_side(base: str) -> tuple[float, float]:
    """(count, summed seconds) of 200-answered /v1/classify requests, from /metrics."""
    count = total = 0.0
    prefix = (
        "oahu_http_request_duration_seconds_{}"
        '{{endpoint="/v1/classify",method="POST",status="200"}}'
    )
    for line in httpx.get(base + "/metrics", timeout=5).text.splitlines():
        if line.startswith(prefix.format("count")):
            count = float(line.split()[-1])
        elif line.startswith(prefix.format("sum")):
            total = float(line.split()[-1])
    return count, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=50_000, help="stream length")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--learner", default="oahu")
    parser.add_argument("--reindex-interval", type=float, default=5.0)
    parser.add_argument("--index", choices=("exact", "ivf"), default="exact")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_latency.json")
    args = parser.parse_args()

    from streams.stream_file import build_stream

    stream = build_stream(args.dataset, args.constraints, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="oahu-serve-bench-") as tmp:
        stream_file = Path(tmp) / "stream.npz"
        stream.save(stream_file)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "oahu.cli.main", "run", "--source", stream_file.as_uri(),
               "--checkpoint-dir", str(Path(tmp) / "state"), "--http", f"127.0.0.1:{port}",
               "--learner", args.learner, "--reindex-interval", str(args.reindex_interval),
               "--index", args.index, "--log-level", "warning"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env={"PYTHONPATH": str(REPO)})
        try:
            wait_ready(base, proc, timeout=300)
            before = httpx.get(base + "/v1/model", timeout=5).json()
            count0, sum0 = server_side(base)
            result = asyncio.run(load(base, stream.X[stream.test_idx], args.clients, args.seconds))
            count1, sum1 = server_side(base)
            after = httpx.get(base + "/v1/model", timeout=5).json()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    learned = after["constraints_consumed"] - before["constraints_consumed"]
    report = {
        "benchmark": "serve_latency",
        "command": " ".join(["python", "benchmarks/serve_latency.py", *sys.argv[1:]]),
        "dataset": args.dataset,
        "gallery_items": (after["snapshot"] or {}).get("gallery_items"),
        "learner": args.learner,
        "clients": args.clients,
        "seconds": args.seconds,
        **result,
        "server_mean_ms": 1000 * (sum1 - sum0) / max(count1 - count0, 1),
        "index": args.index,
        "constraints_learned_during_load": learned,
        "learner_rate_during_load_per_s": learned / args.seconds,
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
