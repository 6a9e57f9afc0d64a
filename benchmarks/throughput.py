"""OAHU training throughput at d = 784: oahu's default learner beside the paper's, strict and
micro-batch modes, in one run.

Learns a Fashion-MNIST triplet stream (the paper's protocol) through the same path ``oahu replay``
uses, several times per configuration (interleaved, so that both see the same machine), and
reports the best and median triplets/s per mode and the ratio default/paper. The machine's load
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


def rate(stream, batch_size: int, device: str, preset: str | None) -> float:
    learner = OAHU(stream.n_features, preset=preset, batch_size=batch_size, device=device)
    learner.prepare(stream.X[stream.dev_idx])
    return replay(learner, stream).constraints_per_s


def measure(stream, batch_size: int, device: str, repeats: int, presets: list[str]) -> dict:
    """Per preset ("default" = no preset), the rates of ``repeats`` runs, taken in turns."""
    runs: dict[str, list[float]] = {name: [] for name in presets}
    loads = []
    for _ in range(repeats):
        for name in presets:
            runs[name].append(rate(stream, batch_size, device, None if name == "default" else name))
            loads.append(os.getloadavg()[0])
    out = {
        "batch_size": batch_size,
        "load_average": [min(loads), max(loads)],
        **{
            name: {"best": max(r), "median": statistics.median(r), "runs": r}
            for name, r in runs.items()
        },
    }
    if {"default", "paper"} <= set(presets):
        out["ratio_default_to_paper"] = out["default"]["median"] / out["paper"]["median"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--presets", nargs="+", default=["default", "paper"])
    args = parser.parse_args()
    stream = build_stream("fashion-mnist", args.constraints, seed=0)
    modes = [measure(stream, b, args.device, args.repeats, args.presets) for b in args.batch_sizes]
    record = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "presets": args.presets,
        "constraints": args.constraints,
        "modes": modes,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"throughput-{args.device.replace(':', '')}.json"
    out.write_text(json.dumps(record, indent=1))
    for m in modes:
        cells = "  ".join(
            f"{name}: median {m[name]['median']:7.0f} (best {m[name]['best']:7.0f})"
            for name in args.presets
        )
        ratio = m.get("ratio_default_to_paper")
        print(
            f"B={m['batch_size']:<4} {cells} triplets/s"
            + (f"  default/paper {ratio:.2f}" if ratio else "")
            + f"  (load average {m['load_average'][0]:.1f}-{m['load_average'][1]:.1f})"
        )


if __name__ == "__main__":
    main()
