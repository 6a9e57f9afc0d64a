"""How a strict device step computes its small matrix products, and what each way costs on a GPU.

A strict update of the default learner multiplies a dozen rows (one new, one replayed and two
mined triplets, three items each) by weights of 128-200 columns, about 25 products per update.
This script learns the paper's Fashion-MNIST protocol strict on the device engine (CUDA graphs,
``step_engine="device"``) with one way of computing those products per process, and records the
steady triplets/s (the first tenth of the constraints left out: compilation and graph capture
fall there) and a kernel profile of ``--profile-updates`` updates (kernels per update, their
time, the costliest):

- ``broadcast``: the default; products of up to ``arrays.SMALL_PRODUCT_ROWS`` rows as a broadcast
  multiply and a sum, which the compiled update fuses into reductions spread over the device;
- ``blas``: every product a cuBLAS GEMM (``SMALL_PRODUCT_ROWS = 0``), as before this option;
- ``tf32``: cuBLAS with TF32 tensor cores allowed (``torch.backends.cuda.matmul.allow_tf32``);
- ``autotune``: cuBLAS or Triton GEMMs chosen per shape by timing them while compiling
  (``torch.compile(mode="max-autotune-no-cudagraphs")``).

Each variant runs in a process of its own (compiled code and cuBLAS state are per process), one
after the other, so that they see the same device::

    python benchmarks/gpu_strict_products.py --out gpu-strict-products.jsonl
    python benchmarks/gpu_strict_products.py --fashion-mnist-root DIR --variants blas broadcast

``--device cpu`` runs the script itself on the CPU (eagerly, without the profile's kernels).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from gpu import count_events, learn, synchronize
from provenance import code_version, machine

from oahu import OAHU
from oahu.learners.oahu import arrays
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import FASHION_MNIST_ROOT, load_digits, load_fashion_mnist

VARIANTS = ("broadcast", "blas", "tf32", "autotune")


def set_variant(variant: str) -> None:
    """Make this process compute the step's products the ``variant`` way."""
    if variant != "broadcast":
        arrays.SMALL_PRODUCT_ROWS = 0
    if variant == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    if variant == "autotune":
        compile_ = torch.compile

        def autotuned(fn: Any, **options: Any) -> Any:
            return compile_(fn, **{**options, "mode": "max-autotune-no-cudagraphs"})

        torch.compile = autotuned  # the device engine compiles its update through torch.compile


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    """One variant, in this process: steady rate, then a profile of ``--profile-updates``."""
    set_variant(args.variant)
    started = time.perf_counter()
    dataset = (
        load_digits()
        if args.dataset == "digits"
        else load_fashion_mnist(args.fashion_mnist_root)
    )
    stream = build_stream(dataset, args.constraints, args.seed)
    model = OAHU(stream.n_features, seed=args.seed, device=args.device, step_engine="device")
    model.prepare(stream.X[stream.dev_idx])
    run = learn(model, stream, args.constraints, args.max_seconds, args.device, args.variant)
    out: dict[str, Any] = {
        "variant": args.variant,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(args.device) if args.device != "cpu" else None,
        "small_product_rows": arrays.SMALL_PRODUCT_ROWS,
        **run,
        "seconds_with_setup": time.perf_counter() - started,
    }
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if args.device != "cpu":
        activities.append(ProfilerActivity.CUDA)
    # Constraints learned already: the profile times updates as they run, not what they learn.
    start = run["constraints"] - 2 * args.profile_updates
    before = model.updates
    with profile(activities=activities) as prof:
        model.learn(stream.kind, stream.features(start, start + args.profile_updates))
        synchronize(args.device)
    out["profile"] = count_events(prof.events(), max(model.updates - before, 1))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one, in-process
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--constraints", type=int, default=70_000)
    parser.add_argument(
        "--max-seconds", type=float, default=8.0, help="learning per variant after its first chunk"
    )
    parser.add_argument("--profile-updates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", choices=("fashion-mnist", "digits"), default="fashion-mnist")
    parser.add_argument("--fashion-mnist-root", default=FASHION_MNIST_ROOT, metavar="DIR")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per variant")
    parser.add_argument("--out", type=Path, default=Path("gpu-strict-products.jsonl"))
    args = parser.parse_args(argv)
    if args.profile_updates < 1 or args.constraints < 10 * args.profile_updates:
        parser.error(
            f"--constraints: at least 10 times --profile-updates ({args.profile_updates}), "
            f"got {args.constraints}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.variant:  # a child: one variant, its record on stdout's last line
        print(json.dumps(run_variant(args)), flush=True)
        return []
    if args.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("gpu_strict_products: no CUDA device here (--device cpu runs the script)")
    records = []
    for variant in args.variants:
        command = [
            sys.executable, __file__, "--variant", variant, "--device", args.device,
            "--constraints", str(args.constraints), "--max-seconds", str(args.max_seconds),
            "--seed", str(args.seed), "--profile-updates", str(args.profile_updates),
            "--dataset", args.dataset,
            "--fashion-mnist-root", str(args.fashion_mnist_root),
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{variant}: no result within {args.timeout:.0f} s", flush=True)
            continue
        if done.returncode != 0:
            print(f"{variant}: failed\n{done.stderr[-2000:]}", flush=True)
            continue
        record = {
            **json.loads(done.stdout.strip().splitlines()[-1]),
            "code_version": code_version(),
            "machine": machine(),
        }
        profile = record["profile"]
        print(
            f"{variant}: steady {record['steady_triplets_per_s'] or 0:,.0f} triplets/s, "
            f"{profile['kernels_per_update']:.1f} kernels and "
            f"{profile['kernel_us_per_update']:.1f} µs of kernel time per update",
            flush=True,
        )
        records.append(record)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
    return records


if __name__ == "__main__":
    main()
