"""Device-resident steps against per-update learning, on the CPU: the same stream, the same seed,
both engines (``step_engine="update"`` and ``"device"``), strict or micro-batch, test error,
prequential accuracy and α after the stream.

The device engine's torch code runs eagerly on the CPU, so this checks what its blocks change
(draws made per block, mining one block stale and ranked on the device's copy of the graph, a
drift adapted per block) without a GPU. The two engines round differently (eager torch against
numpy, sums in another order), so the comparison also shows how far rounding alone moves a
learner: little for the default, far for the paper's preset on small data. Each run's row is
printed as JSON and, with ``--out``, appended to that file (JSON lines).

    python benchmarks/device_steps_quality.py --dataset fashion-mnist --constraints 10000 --seed 100
    python benchmarks/device_steps_quality.py --constraints 100000 --batch-size 256 --seed 101
    python benchmarks/device_steps_quality.py --dataset digits --constraints 3000 --preset paper \
        --seed 0 1 2 3 4 5 6 7 8 9
    python benchmarks/device_steps_quality.py --dataset digits --constraints 3000 --preset paper \
        --seed 0 --trace 1 10 30 100 300 1000 3000

``--trace`` learns the stream with both engines side by side instead and prints, after each of
the given numbers of constraints, how far apart their networks' weights are (the largest
difference and the norm of the difference relative to the per-update engine's weights): a
difference that starts at float32 rounding and grows exponentially is sensitivity to rounding,
one that starts large and stays bounded is the engines' different draws.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version

from oahu import OAHU
from oahu.experiments.evaluation import classification_quality
from oahu.experiments.stream_replay import replay
from oahu.learners.oahu.config import PRESETS
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument(
        "--seed",
        type=int,
        nargs="+",
        default=[100],
        help="development seeds (100-102) to choose by; reporting seeds to explain a table",
    )
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None)
    parser.add_argument("--out", type=Path, default=None, help="append each row (JSON lines)")
    parser.add_argument(
        "--trace",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="the weights' difference between the engines after N constraints, instead",
    )
    args = parser.parse_args(argv)
    dataset = load_dataset(args.dataset)
    for seed in args.seed:
        if args.trace:
            trace_divergence(dataset, seed, args)
        else:
            compare_engines(dataset, seed, args)


def _model(n_features: int, engine: str, seed: int, args: argparse.Namespace) -> OAHU:
    return OAHU(
        n_features,
        preset=args.preset,
        device="cpu",
        step_engine=engine,
        seed=seed,
        batch_size=args.batch_size,
    )


def _weights(model: OAHU) -> torch.Tensor:
    network = model.get_state()["model"]["network"]
    return torch.cat([w.detach().double().ravel().cpu() for w in network.values()])


def trace_divergence(dataset: Dataset, seed: int, args: argparse.Namespace) -> None:
    stream = build_stream(dataset, args.constraints, seed)
    models = [_model(stream.n_features, engine, seed, args) for engine in ("update", "device")]
    for model in models:
        model.prepare(stream.X[stream.dev_idx])
    done = 0
    for stop in sorted(n for n in args.trace if n <= len(stream.constraints)):
        rows = stream.X[stream.constraints[done:stop].reshape(-1)]
        triplets = rows.reshape(stop - done, 3, -1)
        for model in models:
            model.learn_triplets(triplets[:, 0], triplets[:, 1], triplets[:, 2])
        done = stop
        update, device = (_weights(m) for m in models)
        row = {
            "trace": True,
            "dataset": args.dataset,
            "seed": seed,
            "preset": args.preset,
            "batch_size": args.batch_size,
            "constraints": stop,
            "max_weight_difference": float((update - device).abs().max()),
            "relative_difference": float((update - device).norm() / update.norm()),
            "code": code_version(),
        }
        _emit(row, args.out)


def _emit(row: dict, out: Path | None) -> None:
    print(json.dumps(row), flush=True)
    if out is not None:
        with out.open("a") as file:
            file.write(json.dumps(row) + "\n")


def compare_engines(dataset: Dataset, seed: int, args: argparse.Namespace) -> None:
    stream = build_stream(dataset, args.constraints, seed)
    for engine in ("update", "device"):
        model = _model(stream.n_features, engine, seed, args)
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
            "seed": seed,
            "preset": args.preset,
            "batch_size": args.batch_size,
            "error": quality["error"],
            "prequential_accuracy": model.prequential.combined,
            "alpha": np.round(model.alpha, 4).tolist(),
            "updates": model.updates,
            "triplets_per_s": args.constraints / seconds,
            "code": code_version(),
        }
        _emit(row, args.out)


if __name__ == "__main__":
    main()
