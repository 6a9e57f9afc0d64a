"""What an open web console costs /v1/classify: p99 at a fixed rate with and without it.

Starts ``oahu run`` on a Fashion-MNIST stream file as ``serve_latency.py`` does (the gallery is
the stream's 35,000 development items; the learner keeps consuming throughout), then measures
phases of one-item classify requests at ``--rate`` requests/s on a fixed schedule (this
benchmark's own open-loop client, latency counted from each request's due time), alternating
phases without and with ``--consoles`` open live views. An open live view is emulated exactly as
its page behaves (``static/live.js``): one ``GET /v1/console/live`` a second, each sent when the
previous answer came. Phases alternate (without, with, without, ...) so both meet the same
learner, stream position and machine load; the report gives each phase's p99 and the ratios
of the mean and of the median p99 with consoles to those without.

    python benchmarks/console_cost.py                       # 300 req/s, 1 console, 3 pairs
    python benchmarks/console_cost.py --rate 300 --consoles 3 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine
from serve_latency import (
    REPO,
    RESULTS,
    client_loop_factory,
    fixed_rate,
    free_port,
    open_all,
    phase,
    request_bodies,
    requests,
    wait_ready,
)

POLL_SECONDS = 1.0  # the live page's polling period (static/live.js, POLL_MS)


class Consoles:
    """``n`` open live views: each polls /v1/console/live once a second, as the page does."""

    def __init__(self, base: str, n: int) -> None:
        self.base, self.n = base, n
        self.stop = threading.Event()
        self.polls = 0
        self.bytes = 0
        self.failures = 0
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Consoles:
        self.stop.clear()
        self._threads = [threading.Thread(target=self._poll, daemon=True) for _ in range(self.n)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join()

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    response = client.get(self.base + "/v1/console/live")
                    self.polls += 1
                    self.bytes += len(response.content)
                    self.failures += response.status_code != 200
                except httpx.HTTPError:
                    self.failures += 1
                self.stop.wait(POLL_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=600_000, help="stream length")
    parser.add_argument("--rate", type=float, default=300.0, help="classify requests/s")
    parser.add_argument("--clients", type=int, default=50, help="keep-alive connections")
    parser.add_argument("--consoles", type=int, default=1, help="open live views")
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--repeats", type=int, default=3, help="pairs of phases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "console_cost.json")
    args = parser.parse_args()

    from oahu.streams.benchmark_stream import build_stream

    stream = build_stream(args.dataset, args.constraints, seed=args.seed)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    raws = requests(request_bodies(stream.X[stream.test_idx[:1000]]), f"127.0.0.1:{port}")
    phases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="oahu-console-bench-") as tmp:
        stream_file = Path(tmp) / "stream.npz"
        stream.save(stream_file)
        cmd = [sys.executable, "-m", "oahu.cli.main", "run", "--source", stream_file.as_uri(),
               "--checkpoint-dir", str(Path(tmp) / "state"), "--http", f"127.0.0.1:{port}",
               "--log-level", "warning"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            wait_ready(base, proc, timeout=300)
            consoles = Consoles(base, args.consoles)
            with asyncio.Runner(loop_factory=client_loop_factory()) as runner:

                def at_rate() -> Any:
                    async def run() -> Any:
                        conns = await open_all("127.0.0.1", port, args.clients)
                        try:
                            return await fixed_rate(conns, raws, args.seconds, args.rate)
                        finally:
                            for conn in conns:
                                conn.close()

                    return runner.run(run())

                phase("warm-up", at_rate, args.rate, base, proc.pid)
                with consoles:
                    time.sleep(3.0)  # the consoles' first polls happen outside the phases
                for step in range(args.repeats):
                    for open_console in (False, True):
                        name = f"{args.rate:g}/s, {'with' if open_console else 'without'} console"
                        polls = consoles.polls
                        if open_console:
                            with consoles:
                                result = phase(name, at_rate, args.rate, base, proc.pid)
                        else:
                            result = phase(name, at_rate, args.rate, base, proc.pid)
                        polled = consoles.polls - polls
                        phases.append(
                            result
                            | {"console": open_console, "step": step + 1, "console_polls": polled}
                        )
        finally:
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(timeout=120)
    p99 = {
        side: [p["p99_ms"] for p in phases if p["console"] is side] for side in (False, True)
    }
    without, with_console = float(np.mean(p99[False])), float(np.mean(p99[True]))
    # the median of the phases too: one phase's p99 is a handful of requests, and a snapshot
    # rebuilt during one phase and not the other moves a mean of three by tens of percent
    median_without, median_with = float(np.median(p99[False])), float(np.median(p99[True]))
    report = {
        "benchmark": "console_cost",
        "command": " ".join(["python", "benchmarks/console_cost.py", *sys.argv[1:]]),
        "dataset": args.dataset,
        "rate_per_s": args.rate,
        "consoles": args.consoles,
        "seconds_per_phase": args.seconds,
        "p99_ms_without_console": p99[False],
        "p99_ms_with_console": p99[True],
        "mean_p99_ms_without_console": without,
        "mean_p99_ms_with_console": with_console,
        "p99_ratio_with_to_without": with_console / without,
        "median_p99_ms_without_console": median_without,
        "median_p99_ms_with_console": median_with,
        "median_p99_ratio_with_to_without": median_with / median_without,
        "console_poll_failures": consoles.failures,
        "console_bytes_per_poll": consoles.bytes / max(1, consoles.polls),
        "phases": phases,
        "service_exit_code": exit_code,
        "machine": machine(),
        "commit": code_version(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "phases"}, indent=2))


if __name__ == "__main__":
    main()
