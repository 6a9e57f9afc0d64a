"""OAHU training throughput at d = 784 with the paper's defaults: strict and micro-batch modes.

Learns a Fashion-MNIST triplet stream (the paper's protocol) through the same path ``oahu replay``
uses, several times, and reports the best and median triplets/s per mode. The machine's load
average is recorded beside each figure: on a shared 2-core machine other processes cost a lot.

    python benchmarks/throughput.py                       # CPU, strict and B = 256
    python benchmarks/throughput.py --device cuda         # on a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path

import torch

from oahu.oahu_learner import OAHU
from oahu.stream_replay import replay
from oahu.streams.stream_file import build_stream

RESULTS = Path(__file__).resolve().parent / "results"


def measure(stream, batch_size: int, device: str, repeats: int, preset: str) -> dict:
    rates = []
    for _ in range(repeats):
        learner = OAHU(stream.n_features, preset=preset, batch_size=batch_size, device=device)
        learner.prepare(stream.X[stream.dev_idx])
        rates.append(replay(learner, stream).constraints_per_s)
    return {
        "batch_size": batch_size,
        "best": max(rates),
        "median": statistics.median(rates),
        "runs": rates,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--preset", default="paper")
    args = parser.parse_args()
    stream = build_stream("fashion-mnist", args.constraints, seed=0)
    modes = [measure(stream, b, args.device, args.repeats, args.preset) for b in args.batch_sizes]
    record = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "preset": args.preset,
        "constraints": args.constraints,
        "modes": modes,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"throughput-{args.device.replace(':', '')}-{args.preset}.json"
    out.write_text(json.dumps(record, indent=1))
    for m in modes:
        print(
            f"B={m['batch_size']:<4} best {m['best']:8.0f}  median {m['median']:8.0f} "
            f"triplets/s  (load average {m['load_average'][0]:.1f})"
        )


if __name__ == "__main__":
    main()
