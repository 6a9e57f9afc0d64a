"""Throughput over windows of one long stream, learners side by side: does an update cost the same
late in a stream as early, and how fast is oahu's default against the paper's algorithm?

Learns one Fashion-MNIST stream of the paper's protocol (seed ``--seed``) with each
configuration, all at once, one process per configuration (so that each has a core of a 2-core
machine and all see the same machine at the same time), and records the triplets/s of each of
``--windows`` equal windows of the stream. A configuration is ``NAME`` or ``NAME:FIELD=VALUE,...``
where NAME is ``default`` or ``paper`` (the preset) and the fields are OAHUConfig's, e.g.
``default:batch_size=256``. Written to ``results/throughput-windows<tag>.json`` with a plot:
per configuration the rate in every window, over the whole stream, over its first and its last
tenth, and the whole-stream rate as a ratio of the first configuration's.

A fast configuration finishes long before a slow one, which then learns alone, and a shared
machine's speed drifts over minutes (by a third within one run here). So each configuration's
rate is also given over the seconds when every configuration was learning (``overlap_per_s``,
from the wall-clock times of the window ends), and its ratio to the first configuration's over
those same seconds (``overlap_over_first_config``): the side-by-side comparison.

    python benchmarks/throughput_windows.py --constraints 1000000 --configs paper default
    python benchmarks/throughput_windows.py --constraints 1000000 \
        --configs paper default:batch_size=256 --tag=-b256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, cpu_model, machine

import oahu
from oahu.settings import parse_settings

RESULTS = Path(__file__).resolve().parent / "results"


def parse_config(spec: str) -> tuple[str | None, dict[str, Any]]:
    """``"default:batch_size=256"`` → (None, {"batch_size": 256}); ``"paper"`` → ("paper", {}).

    >>> parse_config("default:batch_size=256,replay=2")
    (None, {'batch_size': 256, 'replay': 2})
    >>> parse_config("paper")
    ('paper', {})
    >>> parse_config("tuned")
    Traceback (most recent call last):
    ...
    ValueError: configuration: 'tuned' is neither default nor paper (in 'tuned')
    """
    name, _, fields = spec.partition(":")
    if name not in ("default", "paper"):
        raise ValueError(f"configuration: {name!r} is neither default nor paper (in {spec!r})")
    params = parse_settings(fields.split(","), "configuration") if fields else {}
    return (None if name == "default" else name), params


def run(spec: str, constraints: int, windows: int, seed: int) -> dict[str, Any]:
    """Learn the stream with configuration ``spec``; the learning seconds at each window's end."""
    preset, params = parse_config(spec)
    stream = oahu.build_stream("fashion-mnist", n_constraints=constraints, seed=seed)
    learner = oahu.OAHU(stream.n_features, preset=preset, device="cpu", **params)
    if learner.needs_prepare:
        learner.prepare(stream.X[stream.dev_idx])
    per_update = learner.constraints_per_update
    width = constraints // windows
    # Window ends at whole updates of a micro-batch learner, so that timing cuts none.
    marks = sorted({-(-width * i // per_update) * per_update for i in range(1, windows)})
    marks = [m for m in marks if m < constraints] + [constraints]
    ends: list[float] = []
    started_at = time.time()  # wall clock: the runs are compared over their common seconds
    started = time.perf_counter()

    def at(n: int) -> None:
        ends.append(time.perf_counter() - started)

    oahu.replay(learner, stream, checkpoints=marks, at_checkpoint=at)
    bounds = [0, *marks]
    seconds = [0.0, *ends]
    rates = [
        (n1 - n0) / (t1 - t0)
        for n0, n1, t0, t1 in zip(bounds[:-1], bounds[1:], seconds[:-1], seconds[1:], strict=True)
    ]
    return {
        "config": spec,
        "learner_params": json.loads(json.dumps(learner.get_params(), default=str)),
        "window_ends": marks,
        "started_at": started_at,
        "window_seconds": ends,
        "triplets_per_s": rates,
        "whole_per_s": constraints / ends[-1],
        "first_tenth_per_s": tenth_rate(marks, ends, first=True),
        "last_tenth_per_s": tenth_rate(marks, ends, first=False),
    }


def tenth_rate(marks: list[int], ends: list[float], first: bool) -> float:
    """Triplets/s over the first (or last) tenth of the stream, interpolating the window ends.

    >>> first = tenth_rate([100, 200], [1.0, 3.0], first=True)
    >>> round(first, 9), round(tenth_rate([100, 200], [1.0, 3.0], first=False), 9)
    (100.0, 50.0)
    """
    total = marks[-1]
    ns, ts = [0, *marks], [0.0, *ends]
    lo, hi = (0, total / 10) if first else (total - total / 10, total)
    return float((hi - lo) / (np.interp(hi, ns, ts) - np.interp(lo, ns, ts)))


def overlap_rate(run_: dict[str, Any], start: float, end: float) -> float:
    """Triplets/s of ``run_`` between wall-clock times ``start`` and ``end`` (within its run),
    interpolating its window ends.

    >>> run_ = {"started_at": 10.0, "window_ends": [100, 200], "window_seconds": [1.0, 3.0]}
    >>> overlap_rate(run_, 10.0, 11.0), overlap_rate(run_, 10.5, 11.5)
    (100.0, 75.0)
    """
    ns = [0, *run_["window_ends"]]
    ts = [run_["started_at"] + t for t in (0.0, *run_["window_seconds"])]
    return float((np.interp(end, ts, ns) - np.interp(start, ts, ns)) / (end - start))


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for run_ in result["runs"]:
        ax.plot(
            run_["window_ends"], run_["triplets_per_s"], "-o", markersize=3, label=run_["config"]
        )
    ax.set_xlabel("constraints learned")
    ax.set_ylabel("triplets/s over the window")
    ax.set_yscale("log")
    ax.set_ylim(bottom=min(min(r["triplets_per_s"]) for r in result["runs"]) / 2)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(
        f"Fashion-MNIST, {result['constraints']:,} constraints, side by side ({result['cpu']})",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--constraints", type=int, default=1_000_000)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="+", default=["paper", "default"])
    parser.add_argument("--tag", default="", help="suffix of the result's file names")
    args = parser.parse_args()
    for spec in args.configs:
        parse_config(spec)  # a bad one fails before any run
    with ProcessPoolExecutor(len(args.configs)) as pool:
        runs = list(
            pool.map(
                run,
                args.configs,
                [args.constraints] * len(args.configs),
                [args.windows] * len(args.configs),
                [args.seed] * len(args.configs),
            )
        )
    reference = runs[0]["whole_per_s"]
    # The seconds when every configuration was learning.
    overlap = (
        max(r["started_at"] for r in runs),
        min(r["started_at"] + r["window_seconds"][-1] for r in runs),
    )
    for run_ in runs:
        run_["whole_over_first_config"] = run_["whole_per_s"] / reference
        run_["last_over_first_tenth"] = run_["last_tenth_per_s"] / run_["first_tenth_per_s"]
        run_["overlap_per_s"] = overlap_rate(run_, *overlap)
    for run_ in runs:
        run_["overlap_over_first_config"] = run_["overlap_per_s"] / runs[0]["overlap_per_s"]
    result = {
        "constraints": args.constraints,
        "seed": args.seed,
        "commit": code_version(),
        "cpu": cpu_model(),
        "machine": machine(),
        "overlap_seconds": overlap[1] - overlap[0],
        "runs": runs,
    }
    out = RESULTS / f"throughput-windows{args.tag}.json"
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    for run_ in runs:
        print(
            f"{run_['config']:28s} {run_['whole_per_s']:9,.0f}/s over the stream "
            f"({run_['whole_over_first_config']:.2f}x {runs[0]['config']}), first tenth "
            f"{run_['first_tenth_per_s']:,.0f}/s, last tenth {run_['last_tenth_per_s']:,.0f}/s "
            f"({run_['last_over_first_tenth']:.2f}x); while all ran "
            f"({result['overlap_seconds']:.0f} s) {run_['overlap_per_s']:,.0f}/s "
            f"({run_['overlap_over_first_config']:.2f}x)"
        )


if __name__ == "__main__":
    main()
