"""The host's cost of the constraint graph per triplet, against an earlier revision of it.

A micro-batch on a GPU is bound by Python that runs once per item on the host, and the
constraint graph (union-find over the items the stream names, the reservoir held for mining) is
the largest part of it. This script feeds one Fashion-MNIST stream's triplets (their first
``--width`` features, a stand-in for the preprocessed rows) to the graph in blocks of B, after a
warm-up that fills the reservoir, and times ``observe`` per triplet. With ``--against REV`` it
also loads the graph's module as it was at git revision REV and times both in interleaved rounds
in one process (this shared machine moves by ±20% between runs), reports the median ratio, and
checks that both ended in the same state, byte for byte::

    python benchmarks/constraint_graph_cost.py --against HEAD~1 --batch-sizes 1 256 1024 16384 \
        --out benchmarks/results/constraint-graph-cost.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

from oahu.learners.oahu import constraint_graph
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_digits, load_fashion_mnist

MODULE = "oahu/learners/oahu/constraint_graph.py"
ROOT = Path(__file__).resolve().parent.parent


def module_at(revision: str) -> ModuleType:
    """The constraint graph's module as it was at git ``revision``, loaded beside today's."""
    source = subprocess.run(
        ["git", "show", f"{revision}:{MODULE}"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "constraint_graph_then.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("constraint_graph_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def state_digest(graph: Any) -> str:
    """SHA-256 of what the graph holds and knows, in order (16 hex digits)."""
    digest = hashlib.sha256()
    for array in (graph.keys, graph.component, graph.rows, graph.embeddings):
        digest.update(np.ascontiguousarray(array).tobytes())
    digest.update(repr(list(graph.known.items())).encode())
    digest.update(repr(sorted((a, sorted(b)) for a, b in graph.links.items())).encode())
    digest.update(repr((graph.seen, graph.contradictions, graph.rng.bit_generator.state)).encode())
    return digest.hexdigest()[:16]


def time_observe(
    module: ModuleType, rows: np.ndarray, batch: int, warm_up: int, args: argparse.Namespace
) -> tuple[float, str]:
    """µs per triplet of ``observe`` in blocks of ``batch`` after ``warm_up`` triplets, and the
    graph's final state digest."""
    depths, dim = 3, args.embedding_dim
    embeddings = np.ones((depths, 3, batch, dim), np.float32)
    graph = module.ConstraintGraph(
        args.item_memory, rows.shape[2], depths, dim, np.random.default_rng(args.seed)
    )
    for start in range(0, warm_up, batch):
        stop = min(start + batch, warm_up)
        graph.observe(rows[start:stop], embeddings[:, :, : stop - start])
    started = time.perf_counter()
    for start in range(warm_up, len(rows), batch):
        stop = min(start + batch, len(rows))
        graph.observe(rows[start:stop], embeddings[:, :, : stop - start])
    seconds = time.perf_counter() - started
    return seconds / (len(rows) - warm_up) * 1e6, state_digest(graph)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256, 1024, 16384])
    parser.add_argument("--constraints", type=int, default=100_000)
    parser.add_argument(
        "--warm-up", type=int, default=20_000, help="triplets observed before timing"
    )
    parser.add_argument("--strict-constraints", type=int, default=20_000, help="timed at B = 1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", default=None, metavar="REV")
    parser.add_argument("--item-memory", type=int, default=8192)
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--embedding-dim", type=int, default=200)
    parser.add_argument("--dataset", choices=("fashion-mnist", "digits"), default="fashion-mnist")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    dataset = load_digits() if args.dataset == "digits" else load_fashion_mnist()
    stream = build_stream(dataset, args.constraints, args.seed)
    rows = np.ascontiguousarray(stream.features(0, len(stream))[:, :, : args.width])
    variants = {"now": constraint_graph}
    if args.against:
        variants = {args.against: module_at(args.against), **variants}
    out: dict[str, Any] = {
        "code_version": code_version(),
        "machine": machine(),
        "against": args.against,
        "constraints": len(rows),
        "warm_up": args.warm_up,
        "item_memory": args.item_memory,
        "runs": [],
    }
    for batch in args.batch_sizes:
        # A strict step's observe costs more per triplet: fewer of them make the same time.
        n = min(len(rows), args.warm_up + args.strict_constraints) if batch == 1 else len(rows)
        times: dict[str, list[float]] = {name: [] for name in variants}
        digests: dict[str, str] = {}
        for round_ in range(args.rounds):
            # Alternate which goes first: a process's first runs of a round find colder caches.
            order = list(variants.items())[:: -1 if round_ % 2 else 1]
            for name, module in order:
                us, digests[name] = time_observe(module, rows[:n], batch, args.warm_up, args)
                times[name].append(us)
        run = {
            "batch_size": batch,
            "timed_triplets": n - args.warm_up,
            "us_per_triplet": {name: statistics.median(t) for name, t in times.items()},
            "rounds_us": times,
            "same_state": len(set(digests.values())) == 1,
        }
        if args.against:
            run["ratio"] = run["us_per_triplet"][args.against] / run["us_per_triplet"]["now"]
        out["runs"].append(run)
        line = ", ".join(f"{k} {v:.2f} µs" for k, v in run["us_per_triplet"].items())
        ratio = f", {run['ratio']:.2f}x" if args.against else ""
        print(f"B={batch}: {line}{ratio}, same state: {run['same_state']}", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
