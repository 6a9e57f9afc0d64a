"""Device-resident steps against per-update learning, on the CPU: the same stream, the same seed,
both engines (``step_engine="update"`` and ``"device"``), strict or micro-batch, test error,
prequential accuracy and α after the stream.

The device engine's torch code runs eagerly on the CPU, so this checks what its blocks change
(draws made per block, mining one block stale and ranked on the device's copy of the graph, a
drift adapted per block) without a GPU. Each run's row is printed as JSON and, with ``--out``,
appended to that file (JSON lines).

    python benchmarks/device_steps_quality.py --dataset fashion-mnist --constraints 10000 --seed 100
    python benchmarks/device_steps_quality.py --constraints 100000 --batch-size 256 --seed 101
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version

from oahu import OAHU
from oahu.experiments.evaluation import classification_quality
from oahu.experiments.stream_replay import replay
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_dataset


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=100, help="a development seed (100-102)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="append each row (JSON lines)")
    args = parser.parse_args()
    stream = build_stream(load_dataset(args.dataset), args.constraints, args.seed)
    for engine in ("update", "device"):
        model = OAHU(
            stream.n_features,
            device="cpu",
            step_engine=engine,
            seed=args.seed,
            batch_size=args.batch_size,
        )
        model.prepare(stream.X[stream.dev_idx])
        started = time.perf_counter()
        replay(model, stream)
        seconds = time.perf_counter() - started
        quality = classification_quality(
            model,
            stream.X[stream.dev_idx],
            stream.y[stream.dev_idx],
            model.embed(stream.X[stream.test_idx]),
            stream.y[stream.test_idx],
        )
        row = {
            "engine": engine,
            "dataset": args.dataset,
            "constraints": args.constraints,
            "seed": args.seed,
            "batch_size": args.batch_size,
            "error": quality["error"],
            "prequential_accuracy": model.prequential.combined,
            "alpha": np.round(model.alpha, 4).tolist(),
            "updates": model.updates,
            "triplets_per_s": args.constraints / seconds,
            "code": code_version(),
        }
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with args.out.open("a") as out:
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
