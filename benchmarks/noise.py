"""Label noise: what wrong constraints cost a learner (the measurement self-paced learning
answers).

For each dataset, noise model (:mod:`oahu.streams.noise`: uniform, confusable), rate and seed,
the paper's stream of N constraints (``build_stream``) with ``round(rate * N)`` of them made wrong
(``add_noise``) is learned in one pass by each learner of ``LEARNERS`` (the default OAHU, and
the same with self-paced learning), which is then evaluated like ``oahu replay``: 5-NN error
over the test split with the development split as gallery (clean labels: the noise is in the
constraints, not in the items). Rate 0 is the clean stream, one run per seed shared by both
noise models.

Measured per run: the error, the learning throughput, and the loss against the clean stream of
the same seed (error(rate) − error(0)).

    python -m benchmarks.noise                                   # Fashion-MNIST, seeds 0-2
    python -m benchmarks.noise --datasets digits --rates 0 0.2

Runs are cached as JSON under benchmarks/results/noise/ (delete one to re-run it); the table
goes to results/noise-<dataset>.json, the plot to results/noise-<dataset>.png.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stream_runs import cached_run, evaluate_on_stream, finish_plot, run_all
from oahu.experiments.stream_replay import replay
from oahu.registry import make_learner
from oahu.streams import NOISE_MODELS, add_noise
from oahu.streams.benchmark_stream import build_stream

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "noise"
# label -> (registered learner, constructor parameters)
LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "oahu": ("oahu", {}),
    "oahu-self-paced": ("oahu", {"self_paced": True}),
}


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One learner on one (noisy) stream: its error and throughput."""
    stream = build_stream(spec["dataset"], spec["n"], spec["seed"])
    if spec["rate"] > 0:
        stream = add_noise(stream, spec["rate"], spec["model"])
    name, params = LEARNERS[spec["label"]]
    learner = make_learner(name, stream.n_features, seed=spec["seed"], **params)
    learner.prepare(stream.X[stream.prepare_idx])
    stats = replay(learner, stream)
    result = evaluate_on_stream(learner, stream, spec["seed"])
    return {
        **spec,
        "learner_params": learner.get_params(),
        "error": result.error,
        "macro_f1": result.macro_f1,
        "constraints_per_s": stats.constraints_per_s,
        "flipped": int(stream.flipped.sum()) if stream.flipped is not None else 0,
        "load_average": os.getloadavg(),
    }


def run_cached(spec: dict[str, Any]) -> dict[str, Any]:
    model = spec["model"] if spec["rate"] > 0 else "clean"
    slug = f"{spec['dataset']}-{model}-{spec['rate']:g}-{spec['seed']}-{spec['n']}-{spec['label']}"
    name, params = LEARNERS[spec["label"]]
    learner = (name, {**params, "seed": spec["seed"]})
    return cached_run(RUNS / f"{slug}.json", learner, lambda: run_one(spec))


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per learner, model and rate: error and loss against the clean stream, mean and per seed."""
    clean = {(r["label"], r["seed"]): r for r in runs if r["rate"] == 0}
    table: dict[str, Any] = {}
    for r in runs:
        model = r["model"] if r["rate"] > 0 else "clean"
        rates = table.setdefault(r["label"], {}).setdefault(model, {})
        empty = {"seeds": [], "error": [], "loss": [], "constraints_per_s": []}
        cell = rates.setdefault(f"{r['rate']:g}", empty)
        cell["seeds"].append(r["seed"])
        cell["error"].append(r["error"])
        cell["loss"].append(r["error"] - clean[(r["label"], r["seed"])]["error"])
        cell["constraints_per_s"].append(r["constraints_per_s"])
    for models in table.values():
        for rates in models.values():
            for cell in rates.values():
                for key in ("error", "loss", "constraints_per_s"):
                    cell[f"mean_{key}"] = float(np.mean(cell[key]))
    return table


def format_table(dataset: str, table: dict[str, Any]) -> str:
    lines = [f"{dataset}: learner / noise: error (loss against clean) [per seed]"]
    for label, models in table.items():
        for model, rates in models.items():
            for rate, cell in rates.items():
                per_seed = ", ".join(f"{e:.4f}" for e in cell["error"])
                lines.append(
                    f"  {label:<10} {model:<11} {rate:<5} {cell['mean_error']:.4f} "
                    f"({cell['mean_loss']:+.4f}) [{per_seed}] "
                    f"{cell['mean_constraints_per_s']:.0f} constraints/s"
                )
    return "\n".join(lines)


def plot(dataset: str, table: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for i, (label, models) in enumerate(table.items()):
        clean = models.get("clean", {}).get("0")
        for style, model in zip(("-", "--"), NOISE_MODELS, strict=True):
            rates = models.get(model, {})
            points = ([(0.0, clean["mean_error"])] if clean else []) + [
                (float(rate), cell["mean_error"]) for rate, cell in rates.items()
            ]
            if len(points) > 1:
                x, y = zip(*sorted(points), strict=True)
                ax.plot(x, y, style, marker="o", color=f"C{i}", label=f"{label}, {model}")
    title = f"{dataset}: label noise (mean over seeds)"
    finish_plot(fig, ax, path, "share of wrong constraints", "5-NN test error", title)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["fashion-mnist"])
    p.add_argument("--models", nargs="+", default=list(NOISE_MODELS), choices=NOISE_MODELS)
    p.add_argument("--rates", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.4])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--constraints", type=int, default=10_000, metavar="N")
    p.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=list(LEARNERS))
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (default: 2)")
    args = p.parse_args()
    for rate in args.rates:
        if not 0 <= rate < 1:
            p.error(f"--rates: each must be in [0, 1), got {rate}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        specs = [
            {
                "dataset": dataset,
                "model": model if rate > 0 else "uniform",
                "rate": rate,
                "seed": seed,
                "n": args.constraints,
                "label": label,
            }
            for label in args.learners
            for seed in args.seeds
            for rate in sorted(set(args.rates) | {0.0})
            for model in (args.models if rate > 0 else [None])
        ]
        runs = run_all(run_cached, specs, args.jobs)
        table = aggregate(runs)
        (RESULTS / f"noise-{dataset}.json").write_text(json.dumps(table, indent=1))
        plot(dataset, table, RESULTS / f"noise-{dataset}.png")
        print(format_table(dataset, table))


if __name__ == "__main__":
    main()
