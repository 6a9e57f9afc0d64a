"""OAHU on CUDA: strict and micro-batch training rates, and agreement with the CPU.

On one seed of the paper's Fashion-MNIST protocol it trains oahu's default learner and
``--preset paper`` on CUDA in strict mode (B = 1) and micro-batch mode (B = 256), then the default
again on the CPU, and reports each run's triplets/s, 5-NN error and macro-F1 (development split
as gallery, whole test split as queries) and, per batch size, the largest difference between the
CPU and CUDA models' weights and test embeddings.

    python benchmarks/cuda_check.py --out benchmarks/results/cuda-check.json
    python benchmarks/cuda_check.py --fashion-mnist-root DIR   # where the .gz files are

A machine without the Debian package ``dataset-fashion-mnist`` takes the four
``*-ubyte.gz`` files from ``--fashion-mnist-root``. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from oahu import OAHU
from oahu.experiments.evaluation import classification_quality
from oahu.experiments.stream_replay import replay
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import FASHION_MNIST_ROOT, load_fashion_mnist
from oahu.streams.stream_file import ConstraintStream

RUNS = ((None, "cuda", 1), (None, "cuda", 256), ("paper", "cuda", 1), ("paper", "cuda", 256))
RUNS_CPU = ((None, "cpu", 1), (None, "cpu", 256))


def train(stream: ConstraintStream, preset: str | None, device: str, batch: int) -> tuple:
    model = OAHU(stream.n_features, preset=preset, device=device, batch_size=batch)
    model.prepare(stream.X[stream.dev_idx])
    stats = replay(model, stream)
    if device == "cuda":
        torch.cuda.synchronize()
    quality = classification_quality(
        model,
        stream.X[stream.dev_idx],
        stream.y[stream.dev_idx],
        model.embed(stream.X[stream.test_idx]),
        stream.y[stream.test_idx],
    )
    run: dict[str, Any] = {
        "preset": preset or "default",
        "device": device,
        "batch_size": batch,
        "triplets_per_s": stats.constraints_per_s,
        "error": quality["error"],
        "macro_f1": quality["macro_f1"],
        "alpha": [float(a) for a in model.alpha],
        "prequential_accuracy": model.diagnostics().get("prequential_accuracy"),
    }
    print(json.dumps(run), flush=True)
    return model, run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fashion-mnist-root", default=FASHION_MNIST_ROOT, metavar="DIR")
    parser.add_argument("--out", type=Path, default=Path("cuda-check.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda_check: no CUDA device here")
    stream = build_stream(load_fashion_mnist(args.fashion_mnist_root), args.constraints, args.seed)
    out: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "constraints": args.constraints,
        "seed": args.seed,
        "runs": [],
    }
    models = {}
    for preset, device, batch in RUNS + RUNS_CPU:
        model, run = train(stream, preset, device, batch)
        out["runs"].append(run)
        if preset is None:
            models[device, batch] = model
    sample = stream.X[stream.test_idx[:2000]]
    for batch in (1, 256):
        cpu, cuda = models["cpu", batch], models["cuda", batch]
        weights = zip(cpu.network.tensors().values(), cuda.network.tensors().values(), strict=True)
        out[f"cpu_vs_cuda_B{batch}"] = {
            "max_weight_diff": max(float((a.cpu() - b.cpu()).abs().max()) for a, b in weights),
            "max_embedding_diff": float(np.abs(cpu.embed(sample) - cuda.embed(sample)).max()),
        }
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
