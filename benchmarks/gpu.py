"""OAHU on a GPU: triplets/s from strict updates to large micro-batches, what one strict step costs
in kernel launches against compute, and how far from the device's FLOP limit each run is.

On the paper's Fashion-MNIST protocol (d = 784, one seed), for oahu's default learner and
``preset="paper"`` at every batch size of ``--batch-sizes``:

- triplets/s over the whole run and over its steady state (the first 10% of its constraints
  left out: CUDA graph capture, compilation and the small updates of the batch ramp fall there),
  the 5-NN error and macro-F1 after it (development split as gallery, test split as queries),
  the final hedge weights α, the rolling prequential accuracy and the peak GPU memory;
- the estimated FLOPs a triplet costs (forward and backward of the network over the rows an
  update takes: the new triplet, its replayed and mined ones, three items each), the GFLOP/s
  achieved and their fraction of ``--peak-tflops``;
- longer runs (``--long-constraints``) of the configurations of ``--long``, on one stream built
  once for all of them;
- a profile of strict updates of the default learner (torch.profiler): device kernels and
  runtime launch calls per update, kernel time against host wall time;
- with ``--compare-cpu``, the default learner trained strict on the CPU and on the device: the
  largest difference of their weights and test embeddings, and both test errors.

Every run stops after its constraints or after ``--max-seconds`` of learning (counted after its
first chunk, where compilation and CUDA graph capture fall), whichever comes first; a run stopped
by the clock records ``"capped": true`` and the constraints it learned. The
JSON is written again after every run, so a run cut short still leaves what was measured.

An update of a micro-batch learner takes at most a ``batch_ramp``-th of the constraints learned
before it (1,000 by default), so B = 4,096 reaches full-size updates only after 4.1 million
constraints: within 10,000 every B > 10 makes the same updates. ``--set batch_ramp=1`` measures
full-size updates from the start.

    python benchmarks/gpu.py --out gpu.json --plot gpu.png
    python benchmarks/gpu.py --fashion-mnist-root DIR   # where the four *-ubyte.gz files are
    python benchmarks/gpu.py --device cpu --constraints 2000 --long-constraints 4000 \\
        --batch-sizes 1,256 --out /tmp/gpu-cpu.json   # the script itself, on a CPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import REPO, code_version, machine

from oahu import OAHU
from oahu.experiments.evaluation import classification_quality
from oahu.settings import parse_settings
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import FASHION_MNIST_ROOT, load_digits, load_fashion_mnist
from oahu.streams.stream_file import ConstraintStream

PRESET_NAMES = {"default": None, "paper": "paper"}
WARM_FRACTION = 0.1  # the share of a run's constraints its steady-state rate leaves out
# Constraints handed to the learner at a time (at least one update's): several blocks of the
# device-resident steps, which overlap a block's host work with the next block's device work
# only within one call.
CHUNK = 4096
BLOCKS_PER_CHUNK = 4
PROGRESS_EVERY_S = 15.0


# ------------------------------------------------------------------ device
def synchronize(device: str) -> None:
    """Wait for the device's queued work, so that a timer read after it counts that work."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def on_cuda(device: str) -> bool:
    return device.startswith("cuda")


def git_commit() -> str | None:
    """The checkout's full commit; None in a copied tree without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head or None


# ------------------------------------------------------------------ FLOPs
def flops_per_item(model: OAHU) -> int:
    """FLOPs of one item through the network and back, from its weight shapes: each matrix costs
    2·rows·cols forward, as much again for its gradient, and as much again for the gradient of
    its input where the input is a hidden layer (the raw input needs none). Element-wise work
    (biases, ReLU, normalisation) and the input projection are left out: at these widths they
    are a few percent."""
    net = model.network
    matrices = [(w, layer > 0) for layer, w in enumerate(net.weights)]
    matrices.append((net.head0, False))
    matrices.extend((head, True) for head in net.heads)
    total = 0
    for matrix, input_is_hidden in matrices:
        size = int(matrix.shape[-2]) * int(matrix.shape[-1])
        total += 2 * size * (3 if input_is_hidden else 2)
    return total


def flops_per_triplet(model: OAHU) -> int:
    """FLOPs an update spends per new triplet: its rows are the new triplet, ``replay``
    replayed and ``mined`` mined ones, three items each. An upper bound: an update whose
    margin loss is zero on every row takes no backward pass."""
    config = model.update_step.config  # the counts the step learns with ("auto" settled)
    rows = 1 + config.replay + config.mined
    return 3 * rows * flops_per_item(model)


def flop_rate(rate: float | None, flops: int, peak_tflops: float, device: str) -> dict[str, Any]:
    gflops = rate * flops / 1e9 if rate else None
    fraction = gflops / (peak_tflops * 1e3) if gflops is not None and on_cuda(device) else None
    return {"achieved_gflops": gflops, "peak_fraction": fraction}


# ------------------------------------------------------------------ learning
def learn(
    model: OAHU,
    stream: ConstraintStream,
    limit: int,
    max_seconds: float,
    device: str,
    label: str,
) -> dict[str, Any]:
    """Learn the stream's first ``limit`` constraints in order, a chunk at a time, timing each
    chunk to the end of its device work; stop early after ``max_seconds`` of learning after the
    first chunk (where compilation and CUDA graph capture fall, a one-off per learner). The
    features are gathered inside the timer, as :func:`oahu.experiments.stream_replay.replay`
    does, so the rates compare with the replay-based figures."""
    total = min(limit, len(stream))
    warm = max(1, math.ceil(total * WARM_FRACTION))
    chunk = chunk_size(model)
    done, seconds, warm_seconds, capped = 0, 0.0, None, False
    first_seconds: float | None = None
    last_report = time.perf_counter()
    synchronize(device)
    while done < total:
        stop = min(done + chunk, total)
        if done < warm:
            stop = min(stop, warm)
        started = time.perf_counter()
        similar = None if stream.similar is None else stream.similar[done:stop]
        model.learn(stream.kind, stream.features(done, stop), similar)
        synchronize(device)
        seconds += time.perf_counter() - started
        first_seconds = seconds if first_seconds is None else first_seconds
        done = stop
        if done == warm:
            warm_seconds = seconds
        if time.perf_counter() - last_report > PROGRESS_EVERY_S:
            last_report = time.perf_counter()
            print(f"  {label}: {done:,}/{total:,} in {seconds:.1f} s", flush=True)
        if seconds - first_seconds >= max_seconds and done < total:
            capped = True
            break
    steady = None
    if warm_seconds is not None and done > warm and seconds > warm_seconds:
        steady = (done - warm) / (seconds - warm_seconds)
    return {
        "constraints": done,
        "requested_constraints": total,
        "capped": capped,
        "seconds": seconds,
        "triplets_per_s": done / seconds if seconds > 0 else None,
        "steady_triplets_per_s": steady,
        "first_chunk_seconds": first_seconds,
        "warm_constraints": warm,
        "warm_seconds": warm_seconds,
    }


def chunk_size(model: OAHU) -> int:
    """Constraints handed to the learner at a time: at least one update's, and several blocks of
    device-resident steps, which overlap host and device work only within one call."""
    chunk = max(CHUNK, model.constraints_per_update)
    engine = model.device_steps
    if engine is not None:
        chunk = max(chunk, BLOCKS_PER_CHUNK * engine.block * engine.width)
    return chunk


def new_model(
    stream: ConstraintStream, preset: str | None, device: str, batch: int, fields: dict[str, Any]
) -> OAHU:
    model = OAHU(stream.n_features, preset=preset, device=device, **{**fields, "batch_size": batch})
    model.prepare(stream.X[stream.dev_idx])
    return model


def test_quality(model: OAHU, stream: ConstraintStream) -> dict[str, Any]:
    return classification_quality(
        model,
        stream.X[stream.dev_idx],
        stream.y[stream.dev_idx],
        model.embed(stream.X[stream.test_idx]),
        stream.y[stream.test_idx],
    )


def run_config(
    stream: ConstraintStream,
    preset: str | None,
    batch: int,
    args: argparse.Namespace,
    limit: int,
) -> dict[str, Any]:
    """One configuration trained from scratch and evaluated: the record the JSON's ``runs``
    hold."""
    device = args.device
    name = f"{preset or 'default'} B={batch} {limit:,}"
    if on_cuda(device):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = new_model(stream, preset, device, batch, args.fields)
    learned = learn(model, stream, limit, args.max_seconds, device, name)
    memory = torch.cuda.max_memory_allocated() if on_cuda(device) else None
    started = time.perf_counter()
    quality = test_quality(model, stream)
    flops = flops_per_triplet(model)
    run: dict[str, Any] = {
        "preset": preset,
        "device": device,
        "batch_size": batch,
        **learned,
        "error": quality["error"],
        "macro_f1": quality["macro_f1"],
        "alpha": [float(a) for a in model.alpha],
        "prequential_accuracy": model.diagnostics().get("prequential_accuracy"),
        "updates": model.updates,
        "mean_update_size": learned["constraints"] / model.updates if model.updates else None,
        "gpu_max_memory_allocated_mib": memory / 2**20 if memory is not None else None,
        "flops_per_triplet": flops,
        **flop_rate(learned["triplets_per_s"], flops, args.peak_tflops, device),
        "steady": flop_rate(learned["steady_triplets_per_s"], flops, args.peak_tflops, device),
        "evaluation_seconds": time.perf_counter() - started,
        "settings": args.fields,
        # Every field the learner ran with, those a newer learner adds (its step engine, say)
        # included: runs of different code compare only where these agree.
        "config": model.config.to_dict(),
    }
    rate, steady = run["triplets_per_s"], run["steady_triplets_per_s"]
    print(
        f"{name}: {learned['constraints']:,} constraints"
        f"{' (capped)' if learned['capped'] else ''}, {rate or 0:,.0f} triplets/s"
        f" (steady {steady or 0:,.0f}), error {run['error']:.4f}, "
        f"{run['achieved_gflops'] or 0:.2f} GFLOP/s",
        flush=True,
    )
    return run


# ------------------------------------------------------------------ profile
CUDA_LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"}
CUDA_SYNCS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
}


def profile_strict(stream: ConstraintStream, args: argparse.Namespace) -> dict[str, Any]:
    """Strict updates of the default learner after ``--profile-warmup`` constraints: host wall
    time per update without the profiler, then, on CUDA, the device's kernels under it."""
    device = args.device
    warmup, n = args.profile_warmup, args.profile_updates
    if warmup + 2 * n > len(stream):
        raise SystemExit(
            f"gpu: the profile needs {warmup + 2 * n} constraints; the stream has "
            f"{len(stream)} (--constraints)"
        )
    model = new_model(stream, None, device, 1, args.fields)
    model.learn(stream.kind, stream.features(0, warmup))
    synchronize(device)

    def updates(start: int) -> tuple[int, float]:
        before = model.updates
        started = time.perf_counter()
        model.learn(stream.kind, stream.features(start, start + n))
        synchronize(device)
        return model.updates - before, time.perf_counter() - started

    made, wall = updates(warmup)
    out: dict[str, Any] = {
        "learner": "default",
        "batch_size": 1,
        "config": model.config.to_dict(),
        "warmup_constraints": warmup,
        "updates": made,
        "host_wall_us_per_update": wall / made * 1e6 if made else None,
    }
    from torch.profiler import ProfilerActivity, profile

    # The profiler runs on the CPU too, so that the counting below is exercised there; only the
    # host's time is reported there.
    activities = [ProfilerActivity.CPU]
    if on_cuda(device):
        activities.append(ProfilerActivity.CUDA)
    try:
        with profile(activities=activities) as prof:
            profiled, profiled_wall = updates(warmup + n)
        counts = count_events(prof.events(), max(profiled, 1))
    except (RuntimeError, AttributeError) as e:  # a profiler that cannot start keeps the rest
        out["profile_error"] = repr(e)
        return out
    host_us = out["host_wall_us_per_update"]
    if not on_cuda(device):
        print(f"profile: {host_us:.0f} µs per strict update", flush=True)
        return out
    kernel_us = counts["kernel_us_per_update"]
    out |= {
        "profiled_updates": profiled,
        "profiled_wall_us_per_update": profiled_wall / max(profiled, 1) * 1e6,
        **counts,
        # Of the unprofiled wall time, what the device computes and what is left to the host
        # (launches, Python, synchronization): the step is launch-bound where the second wins.
        "device_busy_fraction": kernel_us / host_us if host_us else None,
        "host_overhead_us_per_update": host_us - kernel_us if host_us else None,
    }
    print(
        f"profile: {host_us:.0f} µs per strict update, {out['kernels_per_update']:.0f} kernels "
        f"({kernel_us:.0f} µs of them), "
        f"{out['synchronizations_per_update']:.1f} synchronizations",
        flush=True,
    )
    return out


def profile_host(stream: ConstraintStream, args: argparse.Namespace) -> dict[str, Any]:
    """Where the host's time goes while the default learner learns micro-batches of
    ``--host-profile`` on the device (cProfile, after a warm-up of ``--profile-warmup``
    constraints): the functions with the most time of their own, per triplet. The device works
    while the host does, so the host's total is what bounds the rate once the device keeps up."""
    import cProfile
    import pstats

    device, batch = args.device, args.host_profile
    warmup = args.profile_warmup
    n = min(len(stream) - warmup, args.host_profile_constraints)
    if n < 1:
        raise SystemExit(f"gpu: --host-profile needs more than {warmup} constraints in the stream")
    model = new_model(stream, None, device, batch, args.fields)
    model.learn(stream.kind, stream.features(0, warmup))
    synchronize(device)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    chunk = chunk_size(model)
    for start in range(warmup, warmup + n, chunk):
        model.learn(stream.kind, stream.features(start, min(start + chunk, warmup + n)))
    synchronize(device)
    profiler.disable()
    wall = time.perf_counter() - started
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (calls, _, own, cumulative, _)
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:20]
    out = {
        "batch_size": batch,
        "constraints": n,
        "wall_us_per_triplet": wall / n * 1e6,
        "own_us_per_triplet": {
            f"{Path(f).name}:{line}({name})": own / n * 1e6
            for (f, line, name), (_, _, own, _, _) in ranked
        },
    }
    print(f"host profile: B={batch}, {out['wall_us_per_triplet']:.1f} µs per triplet", flush=True)
    return out


def count_events(events: Any, per: int) -> dict[str, Any]:
    """Per update: the device's kernels and copies (count and time) and the host's launch and
    synchronization calls, from a torch.profiler trace."""
    from torch.autograd import DeviceType

    kernels = copies = launches = graph_launches = syncs = 0
    kernel_us = copy_us = 0.0
    names: dict[str, int] = {}
    times: dict[str, float] = {}  # each kernel's device time, to see which ones to fuse or avoid
    for event in events:
        if event.device_type == DeviceType.CUDA:
            elapsed = event.time_range.elapsed_us()
            if event.name.startswith(("Memcpy", "Memset")):
                copies += 1
                copy_us += elapsed
            else:
                kernels += 1
                kernel_us += elapsed
                names[event.name] = names.get(event.name, 0) + 1
                times[event.name] = times.get(event.name, 0.0) + elapsed
        elif event.name in CUDA_LAUNCHES:
            launches += 1
        elif event.name == "cudaGraphLaunch":
            graph_launches += 1
        elif event.name in CUDA_SYNCS:
            syncs += 1
    return {
        "kernels_per_update": kernels / per,
        "kernel_launch_calls_per_update": launches / per,
        "graph_launches_per_update": graph_launches / per,
        "copies_per_update": copies / per,
        "synchronizations_per_update": syncs / per,
        "kernel_us_per_update": kernel_us / per,
        "copy_us_per_update": copy_us / per,
        "top_kernels": dict(sorted(names.items(), key=lambda kv: -kv[1])[:15]),
        "kernel_us_per_update_by_name": {
            name: us / per for name, us in sorted(times.items(), key=lambda kv: -kv[1])[:15]
        },
    }


# ------------------------------------------------------------------ CPU agreement
def compare_cpu(stream: ConstraintStream, args: argparse.Namespace) -> dict[str, Any]:
    """The default learner, strict, on the CPU and on the device over the same constraints."""
    n = min(args.compare_constraints, len(stream))
    models, errors = {}, {}
    for device in ("cpu", args.device):
        model = new_model(stream, None, device, 1, args.fields)
        model.learn(stream.kind, stream.features(0, n))
        synchronize(device)
        models[device] = model
        errors[device] = test_quality(model, stream)["error"]
    cpu, other = models["cpu"], models[args.device]
    pairs = zip(cpu.network.tensors().values(), other.network.tensors().values(), strict=True)
    sample = stream.X[stream.test_idx[:2000]]
    out = {
        "constraints": n,
        "max_weight_diff": max(float((a.cpu() - b.cpu()).abs().max()) for a, b in pairs),
        "max_embedding_diff": float(np.abs(cpu.embed(sample) - other.embed(sample)).max()),
        "error_cpu": errors["cpu"],
        "error_device": errors[args.device],
    }
    print(f"compare-cpu: {json.dumps(out)}", flush=True)
    return out


# ------------------------------------------------------------------ plot
def plot(out: dict[str, Any], path: Path) -> list[str]:
    """Triplets/s and test error against B, one series per preset and stream length; returns
    the series' labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, error) = plt.subplots(1, 2, figsize=(11, 4.2))
    # The long runs are series of their own: they learn another stream length.
    series = dict.fromkeys((r["preset"], bool(r.get("long"))) for r in out["runs"])
    for preset, long in series:
        runs = sorted(
            (r for r in out["runs"] if r["preset"] == preset and bool(r.get("long")) == long),
            key=lambda r: r["batch_size"],
        )
        name = preset or "default"
        if long:
            name = f"{name}, {out['long_constraints']:,} constraints"
        b = [r["batch_size"] for r in runs]
        marker = "s" if long else "o"
        (line,) = speed.plot(
            b, [r["triplets_per_s"] or np.nan for r in runs], f"{marker}-", label=name
        )
        steady = [r["steady_triplets_per_s"] or np.nan for r in runs]
        color = line.get_color()
        speed.plot(b, steady, "x--", color=color, label=f"{name}, steady state")
        error.plot(b, [r["error"] for r in runs], f"{marker}-", color=color, label=name)
        for r in runs:  # a run stopped by the clock learned fewer constraints
            error.annotate(
                f"{r['constraints'] / 1000:,.0f}k",
                (r["batch_size"], r["error"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color=color,
            )
    speed.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="triplets/s")
    error.set(xscale="log", xlabel="batch size B", ylabel="5-NN test error")
    where = out["gpu"] or out["device"]
    cap = f", at most {out['max_seconds']:g} s each" if out.get("max_seconds") else ""
    longest = out["long_constraints"] if all(r.get("long") for r in out["runs"]) else None
    length = f"{longest or out['constraints']:,}"
    speed.set_title(f"{where}, up to {length} constraints{cap}", fontsize=10)
    error.set_title("5-NN test error after the run (constraints learned)", fontsize=10)
    for ax in (speed, error):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [line.get_label() for line in speed.get_lines()]


# ------------------------------------------------------------------ main
def int_list(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def preset_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in PRESET_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown preset(s) {unknown}: default or paper")
    return names


def long_list(text: str) -> list[tuple[str, int]]:
    """``"default:1,default:1024"`` → [("default", 1), ("default", 1024)]."""
    out = []
    for spec in (v.strip() for v in text.split(",") if v.strip()):
        name, _, batch = spec.partition(":")
        if name not in PRESET_NAMES or not batch.isdigit():
            raise argparse.ArgumentTypeError(f"--long: {spec!r} is not PRESET:B")
        out.append((name, int(batch)))
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--batch-sizes", type=int_list, default=[1, 256, 1024, 4096, 16384])
    parser.add_argument("--presets", type=preset_list, default=["default", "paper"])
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--long-constraints", type=int, default=100_000)
    parser.add_argument(
        "--long",
        type=long_list,
        default=[("default", 1), ("default", 1024)],
        help="PRESET:B,... trained on --long-constraints (default default:1,default:1024; "
        "an empty string for none)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=100.0,
        help="of learning per run after its first chunk, after which it stops (default 100)",
    )
    parser.add_argument("--profile-updates", type=int, default=200)
    parser.add_argument("--profile-warmup", type=int, default=1000)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--host-profile",
        type=int,
        default=0,
        metavar="B",
        help="profile the host's functions (cProfile) while the default learner learns "
        "micro-batches of B (default 0: not)",
    )
    parser.add_argument("--host-profile-constraints", type=int, default=200_000)
    parser.add_argument("--compare-cpu", action="store_true")
    parser.add_argument("--compare-constraints", type=int, default=2000)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=67.0,
        help="the device's FP32 peak (default 67: H100 SXM, non-tensor)",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="K=V",
        help="an OAHUConfig field for every run, e.g. batch_ramp=1 (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", choices=("fashion-mnist", "digits"), default="fashion-mnist")
    parser.add_argument("--fashion-mnist-root", default=FASHION_MNIST_ROOT, metavar="DIR")
    parser.add_argument(
        "--commit",
        default=None,
        help="the code's commit, for a copied tree without git (default: git rev-parse HEAD)",
    )
    parser.add_argument("--out", type=Path, default=Path("gpu.json"))
    parser.add_argument("--plot", type=Path, default=None, metavar="FILE.png")
    args = parser.parse_args(argv)
    args.fields = parse_settings(args.settings, "--set")
    if "batch_size" in args.fields or "device" in args.fields:
        parser.error("--set: batch_size and device are the script's own (--batch-sizes, --device)")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = args.device
    if on_cuda(device) and not torch.cuda.is_available():
        raise SystemExit("gpu: no CUDA device here (--device cpu measures the CPU)")
    wall = time.perf_counter()
    dataset = (
        load_digits() if args.dataset == "digits" else load_fashion_mnist(args.fashion_mnist_root)
    )
    stream = build_stream(dataset, args.constraints, args.seed)
    out: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(device) if on_cuda(device) else None,
        "torch": torch.__version__,
        "commit": args.commit or git_commit(),
        "code_version": code_version(),
        "device": device,
        "machine": machine(),
        "cpu_count": os.cpu_count(),
        "dataset": args.dataset,
        "n_features": stream.n_features,
        "constraints": args.constraints,
        "long_constraints": args.long_constraints,
        "max_seconds": args.max_seconds,
        "peak_tflops": args.peak_tflops,
        "seed": args.seed,
        "settings": args.fields,
        "runs": [],
    }

    def save() -> None:
        out["total_seconds"] = time.perf_counter() - wall
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))

    print(f"gpu: {out['gpu'] or device}, torch {torch.__version__}, {args.dataset}", flush=True)
    for name in args.presets:
        for batch in args.batch_sizes:
            out["runs"].append(run_config(stream, PRESET_NAMES[name], batch, args, len(stream)))
            save()
    if args.long and args.long_constraints:
        long_stream = build_stream(dataset, args.long_constraints, args.seed)
        for name, batch in args.long:
            run = run_config(long_stream, PRESET_NAMES[name], batch, args, len(long_stream))
            out["runs"].append({**run, "long": True})
            save()
    if not args.no_profile:
        out["profile"] = profile_strict(stream, args)
        save()
    if args.host_profile:
        out["host_profile"] = profile_host(stream, args)
        save()
    if args.compare_cpu:
        out["compare_cpu"] = compare_cpu(stream, args)
        save()
    capped = [
        f"{r['preset'] or 'default'} B={r['batch_size']}{' long' if r.get('long') else ''}"
        for r in out["runs"]
        if r["capped"]
    ]
    out["capped_runs"] = capped
    save()
    if args.plot is not None:
        plot(out, args.plot)
    print(
        f"gpu: {out['total_seconds']:.0f} s; capped: {', '.join(capped) or 'none'}; "
        f"written to {args.out}",
        flush=True,
    )
    return out


if __name__ == "__main__":
    main()
