"""The OAHU paper's Figure 4a: test error against the number of constraints on Fashion-MNIST.

Each point is ``oahu replay --json`` with ``--constraints N`` (the paper's stream: N/2 seeds + N/2
by transitive closure), for N in 1k, 2k, 5k, 10k, averaged over the seeds given (error bars:
sample standard deviation when there are several). Runs share Table 3's cache
(benchmarks/results/runs/), so the N = 10,000 points are Table 3's runs. Two rows do not depend
on N and are drawn as horizontal lines from their N = 10,000 run: Euclidean learns nothing, and
OPML makes its own one pass over the development split (Section 4.3.2) whatever N is.

    python -m benchmarks.figure4a                    # seed 0
    python -m benchmarks.figure4a --seeds 0 1 2

Writes benchmarks/results/figure4a.json and figure4a.png, and the table between the figure4a
markers in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.table3 import (
    RESULTS,
    Row,
    collect,
    mean_std,
    replay_command,
    table_rows,
    update_readme,
    write_json,
)

SIZES = (1_000, 2_000, 5_000, 10_000)
INDEPENDENT_OF_N = frozenset({"euclidean", "opml"})


def curves(
    rows: Sequence[Row], dataset: str, sizes: Sequence[int], seeds: Sequence[int], results: Path
) -> dict[str, Any]:
    """Error (mean ± std over ``seeds``) per row and N; rows independent of N get one point."""
    out: dict[str, Any] = {}
    for row in rows:
        flat = row.learner in INDEPENDENT_OF_N
        points = []
        for n in [max(sizes)] if flat else sorted(sizes):
            errors = [r["error"] for r in collect([row], dataset, n, seeds, results)[row.label]]
            points.append({"constraints": n, "error": mean_std(errors), "errors": errors})
        command = replay_command(row, dataset, max(sizes) if flat else "N", "S")
        out[row.label] = {
            "learner": row.learner,
            "independent_of_n": flat,
            "command": shlex.join(command),
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
    means = [p["error"]["mean"] for c in figure["curves"].values() for p in c["points"]]
    low = min(means)
    close = [m for m in means if m <= low + 0.03]
    axes[1].set_ylim(low - 0.004, max(close) + 0.004)
    seeds = ("seeds " if len(figure["seeds"]) > 1 else "seed ") + ", ".join(
        map(str, figure["seeds"])
    )
    axes[0].set_title(f"{figure['dataset']}: error vs constraints ({seeds})")
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
    ax.set_xlabel("number of constraints N (N/2 seeds + N/2 by closure)")
    ax.set_ylabel("test error rate (5-NN, Eq. 23-25)")
    ax.grid(True, alpha=0.3)


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
            cells.append("—" if cell is None else f"{cell['mean']:.3f} ± {cell['std']:.3f}")
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
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--no-readme", action="store_true", help="do not touch benchmarks/README.md")
    args = p.parse_args(argv)
    from oahu.config import PRESETS

    rows = table_rows(args.dataset, PRESETS, args.learner_args, args.learners, args.results)
    figure = {
        "dataset": args.dataset,
        "sizes": sorted(args.sizes),
        "seeds": args.seeds,
        "command": shlex.join(["python", "-m", "benchmarks.figure4a", *(argv or sys.argv[1:])]),
        "curves": curves(rows, args.dataset, args.sizes, args.seeds, args.results),
    }
    stem = "figure4a" if args.dataset == "fashion-mnist" else f"figure4a-{args.dataset}"
    write_json(args.results / f"{stem}.json", figure)
    plot(figure, args.results / f"{stem}.png")
    if not args.no_readme and args.dataset == "fashion-mnist":
        update_readme("figure4a", "Figure 4a", markdown(figure, f"results/{stem}.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
