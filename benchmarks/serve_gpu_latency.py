"""/v1/classify's compute path on a large synthetic gallery, in process: p50 / p99 at a fixed rate.

The latency target it checks: "/v1/classify on a 1,000,000-item gallery with the learner on the
same GPU: p99 ≤ 20 ms at 1,000 req/s". It builds what the serving process builds, without HTTP,
a stream or Kafka: a gallery of ``--synthetic-gallery`` random unit vectors of ``--dim`` features
with random labels in a :class:`~oahu.service.catalog.Catalog`, an untrained OAHU learner on
``--device`` (its weights do not change the cost of a query), and a
:class:`~oahu.service.serving.snapshot.SnapshotPublisher` that embeds and indexes the gallery on
the device :meth:`ServiceConfig.index_device <oahu.service.config.ServiceConfig.index_device>`
names for that learner, as ``oahu run --learner-param device=cuda`` does. Requests then go to
the service's own query worker (:class:`~oahu.service.serving.queries.QueryEngine`: batching of
waiting requests, embedding, index search, classification) on a fixed schedule, one one-item
classify request due every 1/``--rate`` s (open loop: a request's latency counts from its due
time, so waiting behind a slow one is charged, with no coordinated omission).

What it measures is the compute behind /v1/classify, not the HTTP round trip: JSON parsing, the
event loop and the socket are left out. benchmarks/serve_latency.py measures those, against a
running ``oahu run`` whose gallery is a stream file's items; a 1,000,000-item gallery there would
take a stream file of that many items and its learner process, which is this benchmark's size
class but not its 3-minute budget. The report also holds one query's embedding, search and
classification times measured alone, and (``--check-cpu``, on by default off the CPU) whether
the device's index classifies a sample of queries as a CPU index of the same embeddings does.

    python benchmarks/serve_gpu_latency.py --device cuda --out benchmarks/results/serve-gpu.json
    python benchmarks/serve_gpu_latency.py --device cpu --synthetic-gallery 20000 --rate 100 \\
        --seconds 10 --out /tmp/serve-cpu.json                             # a small check here
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

from oahu.inference import classify, make_index
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.queries import QueryEngine
from oahu.service.serving.snapshot import Snapshot, SnapshotPublisher

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE = 256  # queries for the single-query timings and the CPU agreement check
PREPARE_ITEMS = 20_000  # gallery items the learner's preprocessing is fitted on
# A run that cannot finish (the builder or the query worker died) ends after these.
BUILD_TIMEOUT = 240.0
ANSWER_TIMEOUT = 30.0


def synthetic_gallery(n: int, dim: int, classes: int, seed: int) -> ItemStore:
    """``n`` random unit vectors of ``dim`` features with labels drawn from ``classes``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return ItemStore.from_arrays([f"g{i}" for i in range(n)], x, rng.integers(0, classes, n))


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "p999_ms": float(np.percentile(ms, 99.9)),
        "max_ms": float(ms.max()),
    }


def fixed_rate(engine: QueryEngine, queries: np.ndarray, k: int, rate: float, seconds: float):
    """One one-item classify request due every 1/``rate`` s for ``seconds``; each latency counts
    from the request's due time to its answer. Returns (latencies, failures, elapsed)."""
    total = int(rate * seconds)
    latencies: list[float] = []
    failures: list[str] = []
    done = threading.Semaphore(0)
    start = time.perf_counter() + 0.05

    def answered(due: float):
        def record(future: Any) -> None:
            if future.exception() is not None:
                failures.append(repr(future.exception()))
            else:
                latencies.append(time.perf_counter() - due)
            done.release()

        return record

    for i in range(total):
        due = start + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        engine.submit("classify", queries[i % len(queries)][None], k).add_done_callback(
            answered(due)
        )
    for _ in range(total):
        if not done.acquire(timeout=ANSWER_TIMEOUT):
            raise RuntimeError(f"a request unanswered for {ANSWER_TIMEOUT} s (worker gone: "
                               f"{engine.failed})")  # fmt: skip
    return latencies, failures, time.perf_counter() - start


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def alone(snapshot: Snapshot, queries: np.ndarray, k: int, device: str) -> dict[str, Any]:
    """One query at a time through the classify path: its embedding, its index search, and the
    two with the classification that searches (what the query worker does for it)."""
    steps: dict[str, list[float]] = {"embed": [], "search": [], "embed_and_classify": []}
    for x in queries[:SAMPLE]:
        started = time.perf_counter()
        emb = snapshot.learner.embed(x[None], role="query")
        synchronize(device)
        embedded = time.perf_counter()
        snapshot.index.search(emb, k)  # type: ignore[union-attr]  # the gallery is not empty
        searched = time.perf_counter()
        classify(snapshot.index, emb, snapshot.alpha, k=k)  # type: ignore[arg-type]
        classified = time.perf_counter()
        steps["embed"].append(embedded - started)
        steps["search"].append(searched - embedded)
        steps["embed_and_classify"].append(classified - searched + embedded - started)
    return {step: percentiles(values) for step, values in steps.items()}


def agreement_with_cpu(snapshot: Snapshot, queries: np.ndarray, k: int) -> dict[str, Any]:
    """Whether a CPU index of the snapshot's own embeddings classifies a sample of queries as the
    device's index does (float rounding may swap near-exact ties)."""
    assert snapshot.embeddings is not None and snapshot.index is not None
    emb = snapshot.learner.embed(queries[:SAMPLE], role="query")
    on_cpu = make_index("exact", snapshot.embeddings, snapshot.index.labels, "l2")
    want = classify(on_cpu, emb, snapshot.alpha, k=k)
    got = classify(snapshot.index, emb, snapshot.alpha, k=k)
    return {
        "queries": len(emb[0]),
        "same_label_share": float((got.labels == want.labels).mean()),
        "largest_score_difference": float(np.abs(got.scores - want.scores).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-gallery", type=int, default=1_000_000, help="items")
    parser.add_argument("--dim", type=int, default=200, help="features per item")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--device", default="cuda", help="the learner's: cpu, cuda, cuda:N, auto")
    parser.add_argument("--rate", type=float, default=1000.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds at the rate, first")
    parser.add_argument("--k", type=int, default=5, help="neighbours per query and depth")
    parser.add_argument("--target-ms", type=float, default=20.0, help="p99 objective")
    parser.add_argument("--check-cpu", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_gpu_latency.json")
    args = parser.parse_args()

    config = ServiceConfig(learner="oahu", learner_params={"device": args.device})
    index_device = config.index_device()
    started = time.perf_counter()
    gallery = synthetic_gallery(args.synthetic_gallery, args.dim, args.classes, args.seed)
    made_gallery = time.perf_counter() - started
    learner = make_learner("oahu", args.dim, **config.learner_arguments())
    if learner.needs_prepare:  # as the service prepares it on its gallery (PCA's axes)
        learner.prepare(gallery.snapshot()[1][:PREPARE_ITEMS])
    with tempfile.TemporaryDirectory(prefix="oahu-serve-gpu-") as tmp:
        catalog = Catalog(ItemStore(dim=args.dim), gallery, Path(tmp) / "overlay.npz")
        publisher = SnapshotPublisher(catalog, ServiceMetrics(), index_device=index_device)
        engine = QueryEngine(publisher)
        publisher.start()
        started = time.perf_counter()
        publisher.submit(learner_to_bytes(learner))
        deadline = time.monotonic() + BUILD_TIMEOUT
        while publisher.current is None:  # a failed build would be retried: stop at once
            if publisher.error is not None or time.monotonic() > deadline:
                publisher.stop()
                raise RuntimeError(f"no snapshot within {BUILD_TIMEOUT} s: {publisher.error}")
            time.sleep(0.05)
        built = time.perf_counter() - started
        snapshot = publisher.current
        assert snapshot is not None and snapshot.index is not None
        engine.start()
        rng = np.random.default_rng(args.seed + 1)
        queries = rng.standard_normal((4096, args.dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        try:
            steps = alone(snapshot, queries, args.k, index_device)
            fixed_rate(engine, queries, args.k, args.rate, args.warmup)
            latencies, failures, elapsed = fixed_rate(
                engine, queries, args.k, args.rate, args.seconds
            )
            check = args.check_cpu if args.check_cpu is not None else index_device != "cpu"
            agreement = agreement_with_cpu(snapshot, queries, args.k) if check else None
        finally:
            engine.stop()
            publisher.stop()
    measured = percentiles(latencies) if latencies else {}
    report = {
        "benchmark": "serve_gpu_latency",
        "measurement": "in process: the /v1/classify query worker (batching, embedding, index "
        "search, classification) at a fixed rate of one-item requests, latency from each "
        "request's due time; no HTTP, JSON or socket",
        "command": " ".join(["python", "benchmarks/serve_gpu_latency.py", *sys.argv[1:]]),
        "gallery_items": snapshot.index.n_items,
        "features": args.dim,
        "depths": snapshot.index.n_depths,
        "embedding_dim": snapshot.index.dim,
        "k": args.k,
        "learner_device": str(learner.device),
        "index_device": str(getattr(snapshot.index, "device", "cpu")),
        "gpu": torch.cuda.get_device_name() if index_device.startswith("cuda") else None,
        "torch": torch.__version__,
        "gallery_seconds": made_gallery,
        "snapshot_build_seconds": built,
        "offered_per_s": args.rate,
        "seconds": args.seconds,
        "requests": len(latencies) + len(failures),
        "answered_per_s": len(latencies) / elapsed,
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
        **measured,
        "target_p99_ms": args.target_ms,
        "within_target": bool(latencies) and not failures and measured["p99_ms"] <= args.target_ms,
        "one_query_alone": steps,
        "agreement_with_cpu_index": agreement,
        "machine": machine(),
        "commit": code_version(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
