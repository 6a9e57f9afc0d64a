"""OAHU training throughput at d = 784: oahu's default learner beside the paper's (and beside
its self-paced and quadruplet modes), strict and micro-batch, in one run.

Learns a Fashion-MNIST triplet stream (the paper's protocol) through the same path ``oahu replay``
uses, several times per configuration (interleaved, so that both see the same machine), and
reports the best and median triplets/s per mode and the ratio default/paper. The machine's load
average is recorded beside each figure: on a shared 2-core machine other processes cost a lot.

    python benchmarks/throughput.py                       # CPU, strict and B = 256
    python benchmarks/throughput.py --device cuda         # on a GPU
    python benchmarks/throughput.py --variants default self-paced quadruplet --batch-sizes 1 \
        --out benchmarks/results/throughput-modes.json

The ``quadruplet`` variant learns the same stream with every triplet (a, p, n) sent as the
quadruplet (a, p, a, n): the same constraints through the quadruplet path, one more row each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, cpu_model, machine

from oahu.constraint_kinds import triplet_as_quadruplet
from oahu.experiments.stream_replay import replay
from oahu.learners.oahu.learner import OAHU
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream

RESULTS = Path(__file__).resolve().parent / "results"
# name -> (OAHU's constructor parameters, the stream's kind)
VARIANTS: dict[str, tuple[dict, str]] = {
    "default": ({}, "triplet"),
    "paper": ({"preset": "paper"}, "triplet"),
    "self-paced": ({"self_paced": True}, "triplet"),
    "quadruplet": ({}, "quadruplet"),
}


def as_quadruplets(stream: ConstraintStream) -> ConstraintStream:
    """The same stream with each triplet (a, p, n) as the quadruplet (a, p, a, n)."""
    return dataclasses.replace(
        stream, kind="quadruplet", constraints=triplet_as_quadruplet(stream.constraints)
    )


def rate(stream, batch_size: int, device: str, variant: str) -> float:
    params, kind = VARIANTS[variant]
    learner = OAHU(stream.n_features, batch_size=batch_size, device=device, **params)
    learner.prepare(stream.X[stream.dev_idx])
    return replay(
        learner, as_quadruplets(stream) if kind == "quadruplet" else stream
    ).constraints_per_s


def measure(stream, batch_size: int, device: str, repeats: int, presets: list[str]) -> dict:
    """Per variant, the rates of ``repeats`` runs, taken in turns."""
    runs: dict[str, list[float]] = {name: [] for name in presets}
    loads = []
    for _ in range(repeats):
        for name in presets:
            runs[name].append(rate(stream, batch_size, device, name))
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
    for name in set(presets) - {"default", "paper"}:
        if "default" in presets:
            out[f"ratio_{name}_to_default"] = out[name]["median"] / out["default"]["median"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument(
        "--variants", nargs="+", default=["default", "paper"], choices=list(VARIANTS)
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/throughput-DEVICE.json"
    )
    args = parser.parse_args()
    stream = build_stream("fashion-mnist", args.constraints, seed=0)
    modes = [measure(stream, b, args.device, args.repeats, args.variants) for b in args.batch_sizes]
    record = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else cpu_model(),
        "cpu_count": os.cpu_count(),
        "machine": machine(),
        "code": code_version(),
        "torch": torch.__version__,
        "presets": args.variants,
        "constraints": args.constraints,
        "modes": modes,
    }
    RESULTS.mkdir(exist_ok=True)
    out = args.out or RESULTS / f"throughput-{args.device.replace(':', '')}.json"
    out.write_text(json.dumps(record, indent=1))
    for m in modes:
        cells = "  ".join(
            f"{name}: median {m[name]['median']:7.0f} (best {m[name]['best']:7.0f})"
            for name in args.variants
        )
        ratios = "".join(
            f"  {key[len('ratio_') :].replace('_to_', '/')} {value:.2f}"
            for key, value in m.items()
            if key.startswith("ratio_")
        )
        print(
            f"B={m['batch_size']:<4} {cells} constraints/s{ratios}"
            + f"  (load average {m['load_average'][0]:.1f}-{m['load_average'][1]:.1f})"
        )


if __name__ == "__main__":
    main()
