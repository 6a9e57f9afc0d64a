"""Learning curves: test error against the number of constraints, 1k to 100k, in one pass.

For each learner and seed, one stream of the largest size is built with the paper's protocol
(seeded 1:1 development/test split; N/2 seeds and N/2 by transitive closure; triplets, or pairs
for LEGO and RDML) and learned in order, once; at each size the learner is evaluated as it stands
then (5-NN of Eq. 23-25, the development split as gallery, the whole test split as queries):
error, macro-F1, each depth's own error and embedding spread, and the rolling prequential
accuracy. A stream's first N constraints are what a stream of N would hold, up to the closure's
last few, so each point is the learner after N constraints of the paper's protocol. OPML makes
its own one pass over the development split whatever N is, and Euclidean learns nothing: both are
drawn as horizontal lines. The hedge weights α are recorded every 1,000 constraints (the OAHU
paper's Figure 4c), with the learning seconds so far and the process's resident memory, so that
each run also says how fast it learned along the stream and whether its memory stayed bounded.

    python -m benchmarks.learning_curves                          # Fashion-MNIST, seeds 0-2
    python -m benchmarks.learning_curves --dataset digits --sizes 300 1000 3000 \
        --seeds 0 1 2 3 4 5 6 7 8 9
    python -m benchmarks.learning_curves --tag -long \
        --learners "oahu (default)" "oahu (B=256)" "oahu (B=1024)" \
        --sizes 1000 3000 10000 30000 100000 300000 1000000    # 10^6: hours of CPU

Each run is cached as JSON under benchmarks/results/learning-curves/ with every parameter of its
learner, defaults included, and reused while they are the same (delete a file to re-run it); the
aggregate goes to results/learning-curves-<dataset><tag>.json and the plots to
results/learning-curves-<dataset><tag>.png, results/alpha-<dataset><tag>.png and, for streams
longer than 100,000 constraints, results/throughput-<dataset><tag>.png (triplets/s over each
twentieth of the stream, and resident memory).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stream_runs import same_learner
from oahu.experiments.evaluation import classification_quality
from oahu.experiments.stream_replay import replay
from oahu.learner import Learner
from oahu.registry import make_learner
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "learning-curves"
SIZES = (1_000, 3_000, 10_000, 30_000, 100_000)
ALPHA_EVERY = 1_000
# label -> (registered learner, constructor parameters)
LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "oahu (default)": ("oahu", {}),
    "oahu (B=256)": ("oahu", {"batch_size": 256}),
    "oahu (B=1024)": ("oahu", {"batch_size": 1024}),
    "oahu (paper)": ("oahu", {"preset": "paper"}),
    "lego": ("lego", {}),
    "rdml": ("rdml", {}),
    "oasis": ("oasis", {}),
    "opml": ("opml", {}),
    "euclidean": ("euclidean", {}),
}
INDEPENDENT_OF_N = frozenset({"opml", "euclidean"})


def evaluate_now(learner: Learner, stream: ConstraintStream) -> dict[str, Any]:
    """kNN error and macro-F1 of the learner as it stands, with per-depth error and spread."""
    queries = learner.embed(stream.X[stream.test_idx], role="query")
    return {
        **classification_quality(
            learner,
            stream.X[stream.dev_idx],
            stream.y[stream.dev_idx],
            queries,
            stream.y[stream.test_idx],
        ),
        "alpha": [float(a) for a in learner.alpha],
        "prequential_accuracy": learner.diagnostics().get("prequential_accuracy"),
    }


def learner_params(label: str) -> dict[str, Any]:
    """Every constructor parameter of the learner behind ``label``, defaults included: what a
    cached run must match to be reused (a changed default invalidates it)."""
    name, params = LEARNERS[label]
    return json.loads(json.dumps(make_learner(name, 2, **params).get_params(), default=str))


def resident_mb() -> float:
    """The process's resident memory now, in MiB (Linux's /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_one(dataset: str, label: str, seed: int, sizes: list[int]) -> dict[str, Any]:
    name, params = LEARNERS[label]
    largest = max(sizes)
    probe = make_learner(name, 2, **params)
    stream = build_stream(dataset, largest, seed, probe.capabilities.protocol_kind)
    seeded = {"seed": seed} if name == "oahu" else {}
    learner = make_learner(name, stream.n_features, **params, **seeded)
    learner.prepare(stream.X[stream.dev_idx])
    points: list[dict[str, Any]] = []
    alpha_curve: list[tuple[int, list[float]]] = []
    # [constraints, learning seconds so far, resident MiB] at each α checkpoint: throughput over
    # windows of the stream, and whether memory stays bounded.
    progress: list[tuple[int, float, float]] = []
    # OPML makes one pass over the development samples whatever N is; Euclidean learns nothing.
    final = len(stream.dev_idx) if learner.capabilities.learns_samples else largest
    outside = 0.0  # seconds spent in evaluation, which are not learning

    def at(n: int) -> None:
        nonlocal outside
        entered = time.perf_counter()
        progress.append((n, entered - started - outside, resident_mb()))
        alpha_curve.append((n, [float(a) for a in learner.alpha]))
        learns = name not in INDEPENDENT_OF_N
        if (learns and (n in sizes or n == 0)) or n == final:
            points.append({"constraints": n, **evaluate_now(learner, stream)})
            print(f"  {label} seed {seed} N={n}: error {points[-1]['error']:.4f}", flush=True)
        outside += time.perf_counter() - entered

    # α is recorded at whole updates of a micro-batch learner, so that recording cuts none.
    per_update = learner.constraints_per_update
    every = -(-ALPHA_EVERY // per_update) * per_update
    checkpoints = sorted(set(sizes) | set(range(0, largest + 1, every)) | {0, final})
    started = time.perf_counter()
    stats = replay(learner, stream, checkpoints=checkpoints, at_checkpoint=at)
    return {
        "dataset": dataset,
        "label": label,
        "learner": name,
        "params": params,
        "learner_params": learner_params(label),
        "seed": seed,
        "points": points,
        "alpha": alpha_curve,
        "progress": progress,
        "prequential": stats.prequential,
        "learning_seconds": stats.seconds,
        "wall_seconds": time.perf_counter() - started,
        "load_average": os.getloadavg(),
    }


def run_cached(
    dataset: str, label: str, seed: int, sizes: list[int], runs: Path = RUNS
) -> dict[str, Any]:
    """The run of ``label`` on ``dataset`` and ``seed``, from ``runs`` if a run there has every
    size and the learner's current parameters, else run now and cached there."""
    slug = label.replace(" ", "").replace("(", "-").replace(")", "")
    path = runs / f"{dataset}-{slug}-s{seed}-N{max(sizes)}.json"
    if path.exists():
        cached = json.loads(path.read_text())
        has_sizes = {p["constraints"] for p in cached["points"]} >= set(sizes)
        today = same_learner(cached.get("learner_params"), *LEARNERS[label])
        if today and (has_sizes or cached["learner"] in INDEPENDENT_OF_N):
            return cached
    result = run_one(dataset, label, seed, sizes)
    runs.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def window_rates(run: dict[str, Any], windows: int = 20) -> list[tuple[int, float]]:
    """Triplets/s learned in each of ``windows`` equal windows of a run's stream, as (end of
    the window, rate), from the learning seconds recorded along it."""
    progress = run.get("progress") or []
    if len(progress) < 2:
        return []
    ns = np.array([p[0] for p in progress], dtype=float)
    seconds = np.array([p[1] for p in progress])
    ends = np.linspace(0, ns[-1], windows + 1)
    at = np.interp(ends, ns, seconds)
    spans = zip(ends[:-1], ends[1:], at[:-1], at[1:], strict=True)
    return [(int(e), float((e - b) / (t1 - t0))) for b, e, t0, t1 in spans]


def throughput(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Triplets/s over the first and the last tenth of the stream, their ratio (mean over the
    seeds' runs), and the largest resident memory any run reached."""
    tenths = [window_rates(r, 10) for r in runs]
    tenths = [t for t in tenths if t]
    if not tenths:
        return None
    first = float(np.mean([t[0][1] for t in tenths]))
    last = float(np.mean([t[-1][1] for t in tenths]))
    return {
        "first_tenth_per_s": first,
        "last_tenth_per_s": last,
        "last_over_first": last / first,
        "peak_resident_mb": max(p[2] for r in runs for p in r["progress"]),
    }


def aggregate(runs: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Mean and standard deviation over seeds of each learner's error and macro-F1 per size,
    and its throughput along the stream."""
    table: dict[str, Any] = {}
    for label in dict.fromkeys(r["label"] for r in runs):
        mine = [r for r in runs if r["label"] == label]
        rows = {}
        for n in [0, *sizes]:  # 0: the learner as prepared, before any constraint
            at_n = [
                next(
                    (p for p in r["points"] if p["constraints"] == n),
                    r["points"][-1] if r["learner"] in INDEPENDENT_OF_N and n else None,
                )
                for r in mine
            ]
            at_n = [p for p in at_n if p is not None]
            if not at_n:
                continue
            rows[str(n)] = {
                key: {
                    "mean": float(np.mean([p[key] for p in at_n])),
                    "std": float(np.std([p[key] for p in at_n], ddof=1)) if len(at_n) > 1 else 0.0,
                    "per_seed": [p[key] for p in at_n],
                }
                for key in ("error", "macro_f1")
            }
        table[label] = {"seeds": [r["seed"] for r in mine], "sizes": rows}
        if label not in ("opml", "euclidean"):
            table[label]["throughput"] = throughput(mine)
    return table


def plot(
    dataset: str, runs: list[dict[str, Any]], table: dict[str, Any], sizes: list[int], tag: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Left every learner; right a close-up without the ones far above the rest (the paper's OAHU).
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    finals = {
        label: entry["sizes"][str(sizes[-1])]["error"]["mean"] for label, entry in table.items()
    }
    best = min(finals.values())
    close = [label for label, error in finals.items() if error <= 2 * best]
    seeds = sorted({r["seed"] for r in runs})
    for ax, labels in zip(axes, (list(table), close), strict=True):
        for label in labels:
            entry = table[label]
            colour = f"C{list(table).index(label)}"
            ns = [int(n) for n in entry["sizes"] if int(n) > 0]
            mean = np.array([entry["sizes"][str(n)]["error"]["mean"] for n in ns])
            std = np.array([entry["sizes"][str(n)]["error"]["std"] for n in ns])
            style = "--" if LEARNERS[label][0] in INDEPENDENT_OF_N else "-o"
            ax.plot(ns, mean, style, label=label, markersize=4, color=colour)
            ax.fill_between(ns, mean - std, mean + std, color=colour, alpha=0.15)
            if "0" in entry["sizes"] and LEARNERS[label][0] == "oahu":
                # OAHU as prepared, before any constraint: what it must never do worse than
                start = entry["sizes"]["0"]["error"]["mean"]
                ax.axhline(start, color=colour, linestyle=":", label=f"{label}, start")
        ax.set_xscale("log")
        ax.set_xlabel("constraints learned (one pass, paper's protocol)")
        ax.set_ylabel("5-NN test error (whole test split)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
    axes[0].set_title(f"{dataset}: every learner (mean ± sd, seeds {seeds})", fontsize=10)
    axes[1].set_title("close-up: learners within 2x of the best", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / f"learning-curves-{dataset}{tag}.png", dpi=120)
    plt.close(fig)

    oahu_runs = [r for r in runs if r["learner"] == "oahu" and r["seed"] == seeds[0]]
    if not oahu_runs:
        return
    fig, axes = plt.subplots(1, len(oahu_runs), figsize=(6 * len(oahu_runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], oahu_runs, strict=True):
        ns = [n for n, _ in run["alpha"]]
        alphas = np.array([a for _, a in run["alpha"]])
        for depth in range(alphas.shape[1]):
            ax.plot(ns, alphas[:, depth], label=f"α({depth})")
        if ns[-1] > 100_000:  # a long stream: every decade as wide
            ax.set_xscale("log")
        ax.set_xlabel("constraints")
        ax.set_ylabel("hedge weight α")
        ax.set_title(f"{run['label']}, seed {run['seed']}")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"alpha-{dataset}{tag}.png", dpi=120)
    plt.close(fig)

    timed = [r for r in runs if r.get("progress") and r["learner"] not in INDEPENDENT_OF_N]
    if not timed or max(sizes) <= 100_000:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    for label in dict.fromkeys(r["label"] for r in timed):
        colour = f"C{list(table).index(label)}"
        for i, run in enumerate(r for r in timed if r["label"] == label):
            ends, rates = zip(*window_rates(run), strict=True)
            axes[0].plot(
                ends, rates, "-o", markersize=3, color=colour, label=label if not i else None
            )
            ns = [p[0] for p in run["progress"]]
            axes[1].plot(
                ns, [p[2] for p in run["progress"]], color=colour, label=label if not i else None
            )
    axes[0].set_ylabel("triplets/s over each twentieth of the stream")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("resident memory of the process (MiB)")
    for ax in axes:
        ax.set_xlabel("constraints")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title(f"{dataset}: learning speed along the stream (each seed)", fontsize=10)
    axes[1].set_title("memory along the stream", fontsize=10)
    fig.tight_layout()
    fig.savefig(RESULTS / f"throughput-{dataset}{tag}.png", dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument(
        "--learners", nargs="+", default=list(LEARNERS), choices=list(LEARNERS), metavar="LABEL"
    )
    parser.add_argument(
        "--tag",
        default="",
        help="suffix of the aggregate's and the plots' file names (e.g. -long for the 10^6 runs)",
    )
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    runs = [
        run_cached(args.dataset, label, seed, sizes)
        for label in args.learners
        for seed in args.seeds
    ]
    table = aggregate(runs, sizes)
    out = RESULTS / f"learning-curves-{args.dataset}{args.tag}.json"
    out.write_text(json.dumps({"sizes": sizes, "table": table}, indent=1))
    plot(args.dataset, runs, table, sizes, args.tag)
    for label, entry in table.items():
        cells = "  ".join(
            f"{n}: {v['error']['mean']:.4f}±{v['error']['std']:.4f}"
            for n, v in entry["sizes"].items()
        )
        print(f"{label:16s} {cells}")


if __name__ == "__main__":
    main()
