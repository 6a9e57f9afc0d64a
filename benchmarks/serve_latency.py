"""/v1/classify latency while the learner consumes: p50 / p99 at 50 concurrent clients.

Starts ``oahu run`` (a subprocess) on a Fashion-MNIST stream file, so the gallery is the stream's
35,000 development items, waits until it serves, then measures in phases, each with ``--clients``
keep-alive connections sending one-item classify requests (test items):

* closed loop: each client sends its next request as soon as the previous one is answered. This
  measures saturation: the server always has ~``clients`` requests in flight, so by Little's law
  p50 ≈ clients / throughput, whatever the per-request cost;
* fixed rate (``--rates``): the clients together offer R requests/s on a fixed schedule (request
  i is due at i/R, on connection i mod clients). Latency counts from the due time, so a request
  delayed behind a slow one on its connection is charged for the wait (no coordinated
  omission).

Two clients measure the fixed rates (``--client``): this benchmark's own, a minimal asyncio
HTTP/1.1 client with the request bytes prepared in advance (it takes as little CPU from the
server as it can), and aiohttp's ``ClientSession``, a client of the common kind: request i is
sent at i/R whatever came before (open loop), over a pool of ``--clients`` keep-alive
connections, its latency counted from i/R (waiting for a free connection included). Each rate is
measured ``--repeats`` times per client; the report names, per client, the highest rate at which
every step up to it kept p99 within ``--target-ms``.

The learner keeps consuming the stream through every phase: each phase reports the constraints it
learned per second, the CPU seconds of the serving process, the learner process and this client,
the load average, the CPU time the hypervisor stole from the machine, and from the service's own
metrics the longest garbage collection, event-loop lag and pause of the serving process and its
stalls of 100 ms or more per thread (the service logs each stall with the stack it happened in);
a phase that ends with the stream exhausted is flagged. Client, server and learner share the
machine's cores.

    python benchmarks/serve_latency.py                                # the default setting
    python benchmarks/serve_latency.py --rates 100 200 300 --seconds 20 --repeats 3
    python benchmarks/serve_latency.py --cpu-burners 3    # under contention
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"oahu run exited with {proc.returncode}")
        try:
            if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the service did not become ready")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def learner_pid(pid: int) -> int | None:
    """The learner process among the service's children (not multiprocessing's tracker);
    None for a service that learns in a thread (versions before the learner process)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
            return int(child)
    return None


def request_bodies(queries: np.ndarray) -> list[bytes]:
    """One /v1/classify body per query item, encoded once."""
    return [json.dumps({"items": [{"x": x.tolist()}]}).encode() for x in queries]


def requests(bodies: list[bytes], host: str) -> list[bytes]:
    """Complete HTTP/1.1 requests carrying ``bodies``, for our own client."""
    return [
        (
            f"POST /v1/classify HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        + body
        for body in bodies
    ]


class Connection:
    """One keep-alive HTTP/1.1 connection answering one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        return cls(*await asyncio.open_connection(host, port))

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


class Recorder:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.snapshots: set[int] = set()

    def add(self, latency: float, status: int, body: bytes) -> None:
        self.latencies.append(latency)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status == 200:
            self.snapshots.add(json.loads(body)["model"]["snapshot"])

    def summary(self, seconds: float) -> dict[str, Any]:
        ms = np.array(self.latencies) * 1000
        return {
            "requests": len(ms),
            "requests_per_s": len(ms) / seconds,
            "p50_ms": float(np.percentile(ms, 50)),
            "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "snapshots_seen": len(self.snapshots),
        }


async def closed_loop(conns: list[Connection], raws: list[bytes], seconds: float) -> Recorder:
    rec = Recorder()
    stop_at = time.perf_counter() + seconds

    async def client(conn: Connection, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while time.perf_counter() < stop_at:
            raw = raws[rng.integers(len(raws))]
            started = time.perf_counter()
            status, body = await conn.send(raw)
            rec.add(time.perf_counter() - started, status, body)

    await asyncio.gather(*(client(c, i) for i, c in enumerate(conns)))
    return rec


async def aiohttp_session(clients: int) -> Any:
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients))


async def aiohttp_fixed_rate(
    session: Any, url: str, bodies: list[bytes], seconds: float, rate: float
) -> Recorder:
    """``rate`` requests/s through aiohttp: request i is sent at i / rate (open loop), on
    whichever of the session's keep-alive connections is free."""
    rec = Recorder()
    total = int(seconds * rate)
    start = time.perf_counter() + 0.05
    rng = np.random.default_rng(0)
    picks = rng.integers(len(bodies), size=total)
    headers = {"content-type": "application/json"}

    async def one(i: int) -> None:
        due = start + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        async with session.post(url, data=bodies[picks[i]], headers=headers) as response:
            body = await response.read()
        rec.add(time.perf_counter() - due, response.status, body)

    await asyncio.gather(*(one(i) for i in range(total)))
    return rec


async def fixed_rate(
    conns: list[Connection], raws: list[bytes], seconds: float, rate: float
) -> Recorder:
    """``rate`` requests/s in all; request i is due at i / rate on connection i mod n."""
    rec = Recorder()
    n = len(conns)
    total = int(seconds * rate)
    start = time.perf_counter() + 0.05

    async def client(c: int) -> None:
        rng = np.random.default_rng(c)
        for i in range(c, total, n):
            due = start + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            status, body = await conns[c].send(raws[rng.integers(len(raws))])
            rec.add(time.perf_counter() - due, status, body)

    await asyncio.gather(*(client(c) for c in range(n)))
    return rec


def scrape(base: str) -> dict[str, Any]:
    """What a phase compares before and after from the service's /metrics: cumulative counts per
    upper bound of its garbage-collection pauses (all generations), event-loop lags and
    process pauses, and its stall counters per thread (each empty if the service lacks it)."""
    histograms = {
        "gc": "oahu_gc_pause_seconds_bucket",
        "loop_lag": "oahu_event_loop_lag_seconds_bucket",
        "pause": "oahu_serving_pause_seconds_bucket",
    }
    out: dict[str, Any] = {name: {} for name in [*histograms, "stalls"]}
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        for name, prefix in histograms.items():
            if line.startswith(prefix):
                le = float(line.split('le="')[1].split('"')[0])
                out[name][le] = out[name].get(le, 0.0) + float(line.rsplit(" ", 1)[1])
        if line.startswith("oahu_serving_stalls_total{"):
            thread = line.split('thread="')[1].split('"')[0]
            out["stalls"][thread] = float(line.rsplit(" ", 1)[1])
    return out


def longest(before: dict[float, float], after: dict[float, float]) -> Any:
    """How many observations a phase added to a histogram, and the bound its longest one stayed
    within (ms); None for a histogram the service does not have."""
    if not after:
        return None
    delta = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = delta[-1][1]
    bound = next(le for le, count in delta if count >= total) if total else 0.0
    return {"count": int(total), "longest_within_ms": bound * 1000}


def stall_summary(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """A phase's garbage collections, event-loop lags, process pauses and stalls (of 100 ms or
    more, per thread: the service logs each with its stack)."""
    return {
        "serving_gc": longest(before["gc"], after["gc"]),
        "event_loop_lag": longest(before["loop_lag"], after["loop_lag"]),
        "serving_pause": longest(before["pause"], after["pause"]),
        "stalls": {t: n - before["stalls"].get(t, 0.0) for t, n in after["stalls"].items()},
    }


def steal_seconds() -> float:
    """CPU time the hypervisor gave to others while this machine's vCPUs were ready to run
    (all CPUs, from /proc/stat): a stall that coincides with it is not the service's."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) / CLOCK_TICKS if len(fields) > 8 else 0.0


def phase(
    name: str,
    run: Callable[[], Recorder],
    offered: float | None,
    base: str,
    server_pid: int,
) -> dict[str, Any]:
    """Run one load phase; add the learner's rate and everyone's CPU use during it."""
    learner = learner_pid(server_pid)
    before = httpx.get(base + "/v1/model", timeout=10).json()
    cpu0 = (cpu_seconds(server_pid), cpu_seconds(learner or server_pid), resource.getrusage(0))
    load = os.getloadavg()[0]
    scraped = scrape(base)
    steal = steal_seconds()
    started = time.perf_counter()
    rec = run()
    elapsed = time.perf_counter() - started
    stolen = steal_seconds() - steal
    cpu1 = (cpu_seconds(server_pid), cpu_seconds(learner or server_pid), resource.getrusage(0))
    after = httpx.get(base + "/v1/model", timeout=10).json()
    learned = after["constraints_consumed"] - before["constraints_consumed"]
    client_cpu = sum(getattr(cpu1[2], f) - getattr(cpu0[2], f) for f in ("ru_utime", "ru_stime"))
    result = {
        "phase": name,
        "offered_per_s": offered,
        **rec.summary(elapsed),
        "learner_constraints_per_s": learned / elapsed,
        "stream_left_after": sum(after["lag"].values()),
        "cpu_cores": {
            "serving_process": (cpu1[0] - cpu0[0]) / elapsed,
            "learner_process": (cpu1[1] - cpu0[1]) / elapsed if learner else None,
            "client": client_cpu / elapsed,
        },
        "load_average_1m_before": load,
        "steal_cores": stolen / elapsed,
        **stall_summary(scraped, scrape(base)),
    }
    if after["lag"] and result["stream_left_after"] == 0:
        result["warning"] = "the stream ran out during this phase: use a longer --constraints"
    print(json.dumps(result), flush=True)
    return result


async def open_all(host: str, port: int, n: int) -> list[Connection]:
    return list(await asyncio.gather(*(Connection.open(host, port) for _ in range(n))))


def client_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (a lighter client leaves more of the two cores
    to the server), else asyncio's own: the benchmark runs on a plain install too."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


CLIENTS = ("own", "aiohttp")


def measure(
    args: argparse.Namespace, base: str, port: int, server_pid: int, raws: list[bytes],
    bodies: list[bytes],
) -> list[dict[str, Any]]:  # fmt: skip
    phases = []
    with asyncio.Runner(loop_factory=client_loop_factory()) as runner:
        conns = runner.run(open_all("127.0.0.1", port, args.clients))
        session = runner.run(aiohttp_session(args.clients)) if "aiohttp" in args.client else None

        def closed(seconds: float) -> Callable[[], Recorder]:
            return lambda: runner.run(closed_loop(conns, raws, seconds))

        async def own_fixed_rate(rate: float) -> Recorder:
            # fresh connections: the server closes keep-alive ones idle for 5 s (uvicorn's
            # default), as ours are while the aiohttp client measures
            fresh = await open_all("127.0.0.1", port, args.clients)
            try:
                return await fixed_rate(fresh, raws, args.seconds, rate)
            finally:
                for conn in fresh:
                    conn.close()

        def fixed(client: str, rate: float) -> Callable[[], Recorder]:
            if client == "own":
                return lambda: runner.run(own_fixed_rate(rate))
            url = base + "/v1/classify"
            return lambda: runner.run(aiohttp_fixed_rate(session, url, bodies, args.seconds, rate))

        phase("warm-up", closed(args.warmup), None, base, server_pid)
        phases.append(phase("closed-loop", closed(args.seconds), None, base, server_pid))
        for rate in args.rates:
            for step in range(args.repeats):
                for client in args.client:  # interleaved: both meet the same learner and load
                    name = f"fixed-rate {rate:g}/s, {client} client, step {step + 1}"
                    result = phase(name, fixed(client, rate), rate, base, server_pid)
                    phases.append({**result, "client": client})
        if session is not None:
            runner.run(session.close())
        for conn in conns:
            conn.close()
    return phases


def highest_rate_within(phases: list[dict[str, Any]], client: str, target_ms: float) -> Any:
    """The highest offered rate at which this client's every step, at it and at every lower
    rate, kept p99 within ``target_ms`` (None if the lowest rate did not)."""
    best = None
    for rate in sorted({p["offered_per_s"] for p in phases if p.get("client") == client}):
        steps = [p for p in phases if p.get("client") == client and p["offered_per_s"] == rate]
        if not all(p["p99_ms"] <= target_ms for p in steps):
            break
        best = rate
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=600_000, help="stream length")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rates", type=float, nargs="*", default=[100, 200, 300, 400, 500])
    parser.add_argument("--repeats", type=int, default=1, help="steps per rate and client")
    parser.add_argument(
        "--client", nargs="+", choices=CLIENTS, default=list(CLIENTS),
        help="clients that measure the fixed rates (aiohttp: pip install -e '.[bench]')",
    )  # fmt: skip
    parser.add_argument("--target-ms", type=float, default=50.0, help="p99 objective")
    parser.add_argument("--learner", default="oahu")
    parser.add_argument("--index", choices=("exact", "ivf"), default="exact")
    parser.add_argument("--server-arg", action="append", default=[], help="extra oahu run flag")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cpu-burners", type=int, default=0,
        help="CPU-bound processes (busy loops) running beside the service while it is measured",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_latency.json")
    args = parser.parse_args()

    from oahu.streams.benchmark_stream import build_stream

    stream = build_stream(args.dataset, args.constraints, seed=args.seed)
    port = free_port()
    bodies = request_bodies(stream.X[stream.test_idx[:1000]])
    raws = requests(bodies, f"127.0.0.1:{port}")
    with tempfile.TemporaryDirectory(prefix="oahu-serve-bench-") as tmp:
        stream_file = Path(tmp) / "stream.npz"
        stream.save(stream_file)
        base = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "oahu.cli.main", "run", "--source", stream_file.as_uri(),
               "--checkpoint-dir", str(Path(tmp) / "state"), "--http", f"127.0.0.1:{port}",
               "--learner", args.learner, "--index", args.index, "--log-level", "warning",
               *[a for flag in args.server_arg for a in flag.split(maxsplit=1)]]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env={"PYTHONPATH": str(REPO)})
        burners: list[subprocess.Popen] = []
        try:
            wait_ready(base, proc, timeout=300)
            model = httpx.get(base + "/v1/model", timeout=10).json()
            burn = [sys.executable, "-c", "while True: pass"]
            burners = [subprocess.Popen(burn) for _ in range(args.cpu_burners)]
            phases = measure(args, base, port, proc.pid, raws, bodies)
        finally:
            for burner in burners:
                burner.kill()
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(timeout=120)
    report = {
        "benchmark": "serve_latency",
        "command": " ".join(["python", "benchmarks/serve_latency.py", *sys.argv[1:]]),
        "dataset": args.dataset,
        "gallery_items": (model["snapshot"] or {}).get("gallery_items"),
        "learner": args.learner,
        "index": args.index,
        "clients": args.clients,
        "client_event_loop": "asyncio" if client_loop_factory() is None else "uvloop",
        "seconds_per_phase": args.seconds,
        "target_p99_ms": args.target_ms,
        "repeats": args.repeats,
        "cpu_burners": args.cpu_burners,
        "highest_rate_with_p99_within_target_in_every_step_per_s": {
            client: highest_rate_within(phases, client, args.target_ms) for client in args.client
        },
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
