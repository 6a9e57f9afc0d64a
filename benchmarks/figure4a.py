"""The OAHU paper's Figure 4a: test error against the number of constraints on Fashion-MNIST.

Each point is one ``oahu replay --json`` run per seed, for N in 1k, 2k, 5k, 10k (error bars:
sample standard deviation when there are several seeds). The N = 10,000 points are Table 3's
runs (the runs share its cache, benchmarks/results/runs/). Smaller N, two ways:

* ``--sampling subsample`` (the paper's, its footnote 7): the 10,000-constraint stream of the
  seed, uniformly subsampled to N constraints (kept in stream order) and written to a stream file
  (``--stream-dir``) that the run reads with ``oahu replay --stream``;
* ``--sampling fresh``: a stream built for N, i.e. N/2 seeds + N/2 by transitive closure
  (``oahu replay --constraints N``).

Two rows do not depend on N and are drawn as horizontal lines from their N = 10,000 run:
Euclidean learns nothing, and OPML makes its own one pass over the development split (the paper
leaves it out of Figure 4a for that reason).

    python -m benchmarks.figure4a                           # subsample, seed 0
    python -m benchmarks.figure4a --sampling fresh --seeds 0 1 2

Writes benchmarks/results/figure4a.json / .png (figure4a-fresh.* for fresh streams) and the
tables between the figure4a markers in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.table3 import (
    RESULTS,
    Row,
    collect,
    mean_std,
    replay_command,
    run_cached,
    table_rows,
    update_readme,
    write_json,
)
from oahu.registry import learner_class
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream

SIZES = (1_000, 2_000, 5_000, 10_000)
INDEPENDENT_OF_N = frozenset({"euclidean", "opml"})
SAMPLINGS = ("subsample", "fresh")
STREAM_DIR = Path.home() / ".cache" / "oahu" / "figure4a-streams"
_SUBSAMPLE_TAG = 4  # keeps the subsample's draws apart from the stream's own


def subsample(stream: ConstraintStream, n: int, seed: int) -> ConstraintStream:
    """``n`` of the stream's constraints drawn uniformly without replacement, in stream order.

    >>> from oahu.streams.benchmark_stream import build_stream
    >>> full = build_stream("digits", 100, seed=0)
    >>> part = subsample(full, 10, seed=0)
    >>> len(part), part.meta["subsample_of"], set(map(tuple, part.constraints)) <= set(
    ...     map(tuple, full.constraints))
    (10, 100, True)
    """
    rng = np.random.default_rng([seed, n, _SUBSAMPLE_TAG])
    keep = np.sort(rng.choice(len(stream), size=n, replace=False))
    similar = None if stream.similar is None else stream.similar[keep]
    meta = {k: v for k, v in stream.meta.items() if k != "n_seeds"}  # unknown after sampling
    meta.update(n_constraints=n, subsample_of=len(stream), subsample_seed=[seed, n])
    return ConstraintStream(
        stream.X, stream.y, stream.dev_idx, stream.test_idx, stream.kind,
        stream.constraints[keep], similar, meta,
    )  # fmt: skip


def subsample_file(
    dataset: str, kind: str, n: int, full_n: int, seed: int, stream_dir: Path
) -> Path:
    """The stream file of :func:`subsample` of the seed's ``full_n`` stream (written once)."""
    path = stream_dir / f"{dataset}-{kind}-n{n}-of{full_n}-seed{seed}.npz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subsample(build_stream(dataset, full_n, seed, kind), n, seed).save(path)
    return path


def point_results(
    row: Row, dataset: str, n: int, full_n: int, seeds: Sequence[int], opts: argparse.Namespace
) -> list[dict[str, Any]]:
    """The per-seed reports of one point of the figure."""
    if opts.sampling == "fresh" or n == full_n:
        return collect([row], dataset, n, seeds, opts.results)[row.label]
    kind = learner_class(row.learner).capabilities.protocol_kind
    out = []
    for seed in seeds:
        stream = subsample_file(dataset, kind, n, full_n, seed, opts.stream_dir)
        command = replay_command(row, dataset, n, seed, stream=str(stream))
        path = opts.results / "runs" / dataset / f"{row.slug}-n{n}-of{full_n}-seed{seed}.json"
        out.append(run_cached(command, path))
        print(f"{dataset} {row.label} N={n} seed {seed}: error {out[-1]['error']:.4f}", flush=True)
    return out


def curves(
    rows: Sequence[Row], dataset: str, sizes: Sequence[int], opts: argparse.Namespace
) -> dict[str, Any]:
    """Error (mean ± std over the seeds) per row and N; rows independent of N get one point."""
    out: dict[str, Any] = {}
    full_n = max(sizes)
    for row in rows:
        flat = row.learner in INDEPENDENT_OF_N
        points = []
        for n in [full_n] if flat else sorted(sizes):
            errors = [r["error"] for r in point_results(row, dataset, n, full_n, opts.seeds, opts)]
            points.append({"constraints": n, "error": mean_std(errors), "errors": errors})
        if flat or opts.sampling == "fresh":
            command = shlex.join(replay_command(row, dataset, full_n if flat else "N", "S"))
        else:
            stream = opts.stream_dir / f"{dataset}-KIND-nN-of{full_n}-seedS.npz"
            command = shlex.join(replay_command(row, dataset, "N", "S", stream=str(stream)))
        out[row.label] = {
            "learner": row.learner,
            "independent_of_n": flat,
            "command": command,
            "points": points,
        }
    return out


def plot(figure: dict[str, Any], path: Path) -> None:
    """Error against N (log axis), like the paper's Figure 4a, saved as PNG: all rows on the
    left, and on the right the same axes zoomed on the rows within 0.03 of the best."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.8))
    for ax in axes:
        draw_curves(ax, figure, plt.rcParams["axes.prop_cycle"].by_key()["color"])
        ax.set_xlabel(
            "number of constraints N, uniformly subsampled from the seed's 10k stream"
            if figure.get("sampling") == "subsample"
            else "number of constraints N (N/2 seeds + N/2 by closure)"
        )
    means = [p["error"]["mean"] for c in figure["curves"].values() for p in c["points"]]
    low = min(means)
    close = [m for m in means if m <= low + 0.03]
    axes[1].set_ylim(low - 0.004, max(close) + 0.004)
    seeds = ("seeds " if len(figure["seeds"]) > 1 else "seed ") + ", ".join(
        map(str, figure["seeds"])
    )
    how = "subsampled from 10k" if figure.get("sampling") == "subsample" else "fresh streams"
    axes[0].set_title(f"{figure['dataset']}: error vs constraints ({how}; {seeds})")
    axes[1].set_title("zoomed on the rows within 0.03 of the best")
    axes[0].legend(fontsize=8, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def draw_curves(ax: Any, figure: dict[str, Any], colors: list[str]) -> None:
    """One line per row (dashed and flat for rows that do not depend on N)."""
    sizes = figure["sizes"]
    for i, (label, curve) in enumerate(figure["curves"].items()):
        color = colors[i % len(colors)]
        means = [p["error"]["mean"] for p in curve["points"]]
        if curve["independent_of_n"]:
            ax.axhline(means[0], color=color, linestyle="--", label=f"{label} (no N)")
            continue
        stds = [p["error"]["std"] for p in curve["points"]]
        xs = [p["constraints"] for p in curve["points"]]
        ax.errorbar(xs, means, yerr=stds, color=color, marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xticks(sizes, [f"{n / 1000:g}k" if n >= 1000 else str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_ylabel("test error rate (5-NN, Eq. 23-25)")
    ax.grid(True, alpha=0.3)


def error_cell(cell: dict[str, float] | None) -> str:
    """``0.1324`` for one seed, ``0.1324 ± 0.0021`` for several, ``—`` for no run.

    >>> error_cell({"mean": 0.13241, "std": 0.0, "n": 1}), error_cell(None)
    ('0.1324', '—')
    """
    if cell is None:
        return "—"
    return f"{cell['mean']:.4f}" + (f" ± {cell['std']:.4f}" if cell["n"] > 1 else "")


def markdown(figure: dict[str, Any], png: str) -> str:
    """The figure, its numbers as a table, and the commands."""
    sizes = figure["sizes"]
    head = "| Method | " + " | ".join(f"N = {n:,}" for n in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for label, curve in figure["curves"].items():
        by_n = {p["constraints"]: p["error"] for p in curve["points"]}
        cells = []
        for n in sizes:
            cell = by_n.get(n) or (
                curve["points"][0]["error"] if curve["independent_of_n"] else None
            )
            cells.append(error_cell(cell))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    commands = "\n".join(
        f"- {label}: `{curve['command']}`" + (" (independent of N)" * curve["independent_of_n"])
        for label, curve in figure["curves"].items()
    )
    return (
        f"`{figure['command']}`\n\n![Figure 4a: error vs number of constraints]({png})\n\n"
        + "\n".join(lines)
        + f"\n\nEach point's runs (`S` = seed):\n\n{commands}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dataset", default="fashion-mnist", choices=("digits", "fashion-mnist"))
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--learners", nargs="+", default=None, help="row labels (default: all)")
    p.add_argument("--learner-args", action="append", default=[], metavar="LABEL=ARGS")
    p.add_argument("--sampling", choices=SAMPLINGS, default="subsample")
    p.add_argument("--stream-dir", type=Path, default=STREAM_DIR, help="subsampled stream files")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--no-readme", action="store_true", help="do not touch benchmarks/README.md")
    args = p.parse_args(argv)

    rows = table_rows(args.dataset, args.learner_args, args.learners, args.results)
    figure = {
        "dataset": args.dataset,
        "sampling": args.sampling,
        "sizes": sorted(args.sizes),
        "seeds": args.seeds,
        "command": shlex.join(["python", "-m", "benchmarks.figure4a", *(argv or sys.argv[1:])]),
        "curves": curves(rows, args.dataset, args.sizes, args),
    }
    write_json(args.results / f"{figure_stem(args.dataset, args.sampling)}.json", figure)
    plot(figure, args.results / f"{figure_stem(args.dataset, args.sampling)}.png")
    if not args.no_readme and args.dataset == "fashion-mnist":
        blocks = []
        for sampling in SAMPLINGS:
            stem = figure_stem(args.dataset, sampling)
            if (args.results / f"{stem}.json").exists():
                saved = json.loads((args.results / f"{stem}.json").read_text())
                blocks.append(
                    f"#### {SAMPLING_TITLES[sampling]}\n\n" + markdown(saved, f"results/{stem}.png")
                )
        update_readme("figure4a", "Figure 4a", "\n\n".join(blocks))
    return 0


SAMPLING_TITLES = {
    "subsample": "N constraints subsampled from the seed's 10,000-constraint stream (the paper's)",
    "fresh": "A fresh stream of N constraints (N/2 seeds + N/2 by closure)",
}


def figure_stem(dataset: str, sampling: str) -> str:
    """``figure4a`` for the paper's figure, with ``-fresh`` / ``-<dataset>`` for the others."""
    return (
        "figure4a"
        + ("-fresh" if sampling == "fresh" else "")
        + ("" if dataset == "fashion-mnist" else f"-{dataset}")
    )


if __name__ == "__main__":
    raise SystemExit(main())
