"""Active learning: test error against labels used, for joint-entropy batches, uncertainty only,
and the paper's random protocol (docs/active-learning.md).

For each dataset, oracle (:data:`oahu.experiments.active_loop.ORACLES`) and seed, oahu's default
learner is
taught by :func:`oahu.experiments.active_loop.active_learning` up to the largest budget, and
evaluated at
each budget as it stands then (5-NN of Eq. 23-25, the development split as gallery, the whole
test split as queries: error and macro-F1). ``random`` is the first N constraints of the paper's
protocol (one stream of the largest budget, whose first N constraints are what a stream of N
would hold, up to the closure's last few); ``active`` and ``uncertainty`` start from 500 of them
and then ask ``--batch`` questions per round of a simulated annotator that answers from the
development labels ("neither" when both or neither option shares the anchor's class: the label
is spent, nothing is learned).

What active learning must show, checked in the table: on Fashion-MNIST, joint entropy with
5,000 labels reaches an error no worse than random with 10,000 (mean over seeds), and beats
uncertainty at equal budget.

    python -m benchmarks.active                                   # Fashion-MNIST, seeds 0-2
    python -m benchmarks.active --datasets digits --budgets 1000 2000 5000

Runs are cached as JSON under benchmarks/results/active/ (delete one to re-run it; a changed
learner default or selection constant re-runs it too); the table goes to
results/active-<dataset>.json, the plot to results/active-<dataset>.png. Tuning, if any, was done
on seeds 100-102, never on the seeds reported.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import oahu.active as active
from benchmarks.stream_runs import cached_run, finish_plot, run_all
from oahu.experiments.active_loop import ORACLES, active_learning
from oahu.experiments.evaluation import classification_quality
from oahu.registry import make_learner
from oahu.streams.datasets import load_dataset
from oahu.streams.stream_file import ConstraintStream

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "active"
BUDGETS = (1_000, 2_000, 5_000, 10_000)
BATCH = 100
# What else decides a run besides the learner's parameters: a change re-runs cached runs.
SETTINGS = {
    "dropout": active.DROPOUT,
    "shortlist": active.SHORTLIST,
    "min_perturbations": active.MIN_PERTURBATIONS,
}


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One oracle on one dataset and seed: the error at each budget, the labels that gave a
    constraint, time."""
    seed = spec["seed"]
    learner = make_learner("oahu", load_dataset(spec["dataset"]).n_features, seed=seed)
    points: list[dict[str, Any]] = []
    started = time.perf_counter()

    def at(n: int, stream: ConstraintStream) -> None:
        dev, test = stream.dev_idx, stream.test_idx
        quality = classification_quality(
            learner,
            stream.X[dev],
            stream.y[dev],
            learner.embed(stream.X[test], role="query"),
            stream.y[test],
        )
        points.append({"labels": n, "error": quality["error"], "macro_f1": quality["macro_f1"]})

    _, stats = active_learning(
        learner,
        spec["dataset"],
        spec["oracle"],
        max(spec["budgets"]),
        spec["batch"],
        seed,
        checkpoints=spec["budgets"],
        at_checkpoint=at,
    )
    return {
        **spec,
        "settings": SETTINGS,
        "learner_params": learner.get_params(),
        "points": points,
        "labels_used": stats.labels_used,
        "answered": stats.answered,
        "constraints": stats.constraints,
        "rounds": stats.rounds,
        "learn_seconds": stats.seconds,
        "suggest_seconds": stats.suggest_seconds,
        "seconds": time.perf_counter() - started,
        "load_average": os.getloadavg(),
    }


def run_cached(spec: dict[str, Any]) -> dict[str, Any]:
    budgets = "-".join(str(b) for b in spec["budgets"])
    slug = f"{spec['dataset']}-{spec['oracle']}-{spec['seed']}-{budgets}-{spec['batch']}"
    path = RUNS / f"{slug}.json"
    if path.exists() and json.loads(path.read_text()).get("settings") != SETTINGS:
        path.unlink()  # made with other selection constants
    return cached_run(path, ("oahu", {"seed": spec["seed"]}), lambda: run_one(spec))


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per oracle and budget: error and macro-F1, mean, std and per seed; the labels that gave a
    constraint (``answered``) per seed."""
    table: dict[str, Any] = {}
    for r in runs:
        budgets = table.setdefault(r["oracle"], {"seeds": [], "budgets": {}})
        budgets["seeds"].append(r["seed"])
        for p in r["points"]:
            cell = budgets["budgets"].setdefault(str(p["labels"]), {"error": [], "macro_f1": []})
            cell["error"].append(p["error"])
            cell["macro_f1"].append(p["macro_f1"])
        budgets.setdefault("answered", []).append(r["answered"])
        budgets.setdefault("suggest_seconds", []).append(r["suggest_seconds"])
    for oracle in table.values():
        for cell in oracle["budgets"].values():
            for key in ("error", "macro_f1"):
                cell[f"mean_{key}"] = float(np.mean(cell[key]))
                cell[f"std_{key}"] = float(np.std(cell[key]))
    return {"table": table, "targets": targets(table)}


def targets(table: dict[str, Any]) -> dict[str, Any]:
    """The two claims of active learning (module doc), where the runs hold what they compare."""

    def error(oracle: str, budget: int) -> float | None:
        cell = table.get(oracle, {}).get("budgets", {}).get(str(budget))
        return None if cell is None else cell["mean_error"]

    out: dict[str, Any] = {}
    active5k, random10k = error("active", 5_000), error("random", 10_000)
    if active5k is not None and random10k is not None:
        out["active_5000_vs_random_10000"] = {
            "active": active5k,
            "random": random10k,
            "met": active5k <= random10k,
        }
    budgets = table.get("active", {}).get("budgets", {})
    beats = {}
    for budget in budgets:
        a, u = error("active", int(budget)), error("uncertainty", int(budget))
        if a is not None and u is not None:
            beats[budget] = {"active": a, "uncertainty": u, "met": a < u}
    if beats:
        out["active_beats_uncertainty"] = beats
    return out


def format_table(dataset: str, result: dict[str, Any]) -> str:
    lines = [f"{dataset}: test error by labels used, mean [per seed]"]
    for oracle, entry in result["table"].items():
        answered = np.mean(entry["answered"])
        lines.append(
            f"  {oracle} (seeds {entry['seeds']}, {answered:.0f} labels gave a constraint)"
        )
        for budget, cell in sorted(entry["budgets"].items(), key=lambda kv: int(kv[0])):
            per_seed = ", ".join(f"{e:.4f}" for e in cell["error"])
            lines.append(
                f"    {int(budget):>6}  {cell['mean_error']:.4f} ± {cell['std_error']:.4f} "
                f"[{per_seed}]"
            )
    for name, target in result["targets"].items():
        lines.append(f"  target {name}: {json.dumps(target)}")
    return "\n".join(lines)


def plot(dataset: str, result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"active": "joint entropy", "uncertainty": "uncertainty only", "random": "random"}
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for i, (oracle, entry) in enumerate(result["table"].items()):
        cells = sorted(entry["budgets"].items(), key=lambda kv: int(kv[0]))
        x = [int(b) for b, _ in cells]
        y = [c["mean_error"] for _, c in cells]
        err = [c["std_error"] for _, c in cells]
        label = f"{names.get(oracle, oracle)} ({len(entry['seeds'])} seeds)"
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=f"C{i}", label=label)
    ax.set_xscale("log")
    title = f"{dataset}: active learning (mean ± std over seeds)"
    finish_plot(fig, ax, path, "labels used", "5-NN test error", title)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["fashion-mnist"])
    p.add_argument("--oracles", nargs="+", default=list(ORACLES), choices=list(ORACLES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    p.add_argument("--batch", type=int, default=BATCH, help=f"questions per round ({BATCH})")
    p.add_argument("--jobs", type=int, default=1, help="runs in parallel (default: 1)")
    args = p.parse_args()
    if min(args.budgets) < 1:
        p.error(f"--budgets: each must be a positive number of labels, got {min(args.budgets)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        specs = [
            {
                "dataset": dataset,
                "oracle": oracle,
                "seed": seed,
                "budgets": sorted(set(args.budgets)),
                "batch": args.batch,
            }
            for oracle in args.oracles
            for seed in args.seeds
        ]
        result = aggregate(run_all(run_cached, specs, args.jobs))
        (RESULTS / f"active-{dataset}.json").write_text(json.dumps(result, indent=1))
        plot(dataset, result, RESULTS / f"active-{dataset}.png")
        print(format_table(dataset, result))


if __name__ == "__main__":
    main()
