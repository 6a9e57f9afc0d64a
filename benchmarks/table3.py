"""The OAHU paper's Table 3 (classification on image datasets), reproduced with ``oahu replay``.

Every cell is the mean ± sample standard deviation over seeds of ``oahu replay --json`` runs, one
subprocess per (dataset, learner, seed), so that every number has an exact command. Each seed
is a fresh 1:1 development/test shuffle and a fresh stream of the paper's protocol (N/2 seed
constraints + N/2 by transitive closure; pairs for LEGO and RDML, triplets for OASIS and OAHU,
OPML's own one pass over the development split, Euclidean learns nothing). Runs are cached under
benchmarks/results/runs/<dataset>/ with their command and the learner's defaults, and re-used while
both are unchanged, so an interrupted benchmark resumes and a changed default is run again.

OAHU against each other row: a two-sided t-test (``scipy.stats.ttest_ind``, equal variances)
on the per-seed error rates at 0.05, as the paper does: a win when OAHU's mean error is lower and
the difference significant, a loss when higher and significant, else a tie.

    python -m benchmarks.table3                                  # every built-in dataset
    python -m benchmarks.table3 --datasets digits --seeds 0 1 2 --learners lego oahu
    python -m benchmarks.table3 --datasets letter --split classes  # unseen classes, Recall@K
    python -m benchmarks.table3 --learner-args oahu="--preset paper --batch-size 8"

Writes benchmarks/results/table3-<dataset>[-classes].json, the tables between the table3 (or,
with ``--split classes``, retrieval) markers in benchmarks/README.md, and a bar chart of every
row relative to Euclidean, benchmarks/results/table3-summary[-classes].png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import ttest_ind

from benchmarks.stream_runs import probed_params, same_learner
from oahu.settings import split_setting
from oahu.streams.datasets import DATASETS
from oahu.streams.protocol import SPLITS

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
README = BENCHMARKS / "README.md"
SIGNIFICANCE = 0.05
# digits has 899 development items: 2,000 constraints already cover each item ~6 times.
CONSTRAINTS = {"digits": 2_000}
DEFAULT_CONSTRAINTS = 10_000
SEEDS = {"digits": tuple(range(10))}
DEFAULT_SEEDS = (0, 1, 2)
TUNED_LEARNERS = ("lego", "rdml", "oasis", "opml")  # Euclidean and OAHU are not tuned here
DEFAULT_OAHU = "oahu (default)"  # the row of oahu's default learner
RECALLS = ("recall_at_1", "recall_at_2", "recall_at_4", "recall_at_8")
METRICS = ("error", "macro_f1", "utilization", "auc", *RECALLS, "s_per_1k", "per_s")

# Table 3 of the paper, Fashion-MNIST columns: (mean, std) of error, macro-F1 and U; OAHU wins
# against every baseline there. The paper has no digits column.
PAPER: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    "fashion-mnist": {
        "lego": {"error": (0.35, 0.01), "macro_f1": (0.64, 0.00), "utilization": (0.58, 0.00)},
        "rdml": {"error": (0.22, 0.01), "macro_f1": (0.78, 0.00), "utilization": (0.47, 0.01)},
        "oasis": {"error": (0.21, 0.02), "macro_f1": (0.79, 0.01), "utilization": (0.14, 0.00)},
        "opml": {"error": (0.23, 0.00), "macro_f1": (0.78, 0.00), "utilization": (0.30, 0.01)},
        "oahu": {"error": (0.18, 0.00), "macro_f1": (0.81, 0.00), "utilization": (1.00, 0.00)},
    }
}


@dataclass(frozen=True)
class Row:
    """One row of the table: a label, the learner it runs and its extra ``oahu replay`` args."""

    label: str
    learner: str
    args: tuple[str, ...] = ()

    @property
    def is_oahu(self) -> bool:
        return self.learner == "oahu"

    @property
    def slug(self) -> str:
        """The label as a file-name part: ``"oahu (default)"`` → ``"oahu-default"``."""
        return re.sub(r"[^a-z0-9]+", "-", self.label.lower()).strip("-")


def default_rows() -> list[Row]:
    """The paper's five rows plus the Euclidean floor, and oahu's default learner.

    The "oahu" row runs the paper's preset; "oahu (default)" runs oahu's default learner (no
    preset). The baselines get their development-split choices from :func:`tuned_args` per
    dataset. A second Euclidean row on centred unit rows (the preprocessing most tuned baselines
    chose on Fashion-MNIST) separates what preprocessing gains from what learning gains.
    """
    rows = [Row("euclidean", "euclidean")]
    rows.append(Row("euclidean (center+unit)", "euclidean", ("--set", "preprocess=center+unit")))
    rows += [Row(name, name) for name in ("lego", "rdml", "oasis", "opml")]
    rows.append(Row("oahu", "oahu", ("--preset", "paper")))
    rows.append(Row("oahu (default)", "oahu"))
    return rows


def tuned_args(dataset: str, results: Path = RESULTS) -> dict[str, tuple[str, ...]]:
    """Per baseline, ``--set`` args of the grid point that benchmarks/tune_baselines.py chose on
    this dataset's development split (none when it has not been run)."""
    path = results / f"tune_baselines-{dataset}.json"
    best = json.loads(path.read_text()).get("best", {}) if path.exists() else {}
    return {
        learner: set_args(choice["params"])
        for learner, choice in best.items()
        if learner in TUNED_LEARNERS
    }


def set_args(params: dict[str, Any]) -> tuple[str, ...]:
    """``{"preprocess": "unit", "learning_rate": 0.01}`` → ``--set`` args for ``oahu replay``.

    >>> set_args({"preprocess": "unit", "learning_rate": 0.01})
    ('--set', 'preprocess=unit', '--set', 'learning_rate=0.01')
    """
    args: list[str] = []
    for key, value in params.items():
        args += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return tuple(args)


def with_tuned_args(rows: Sequence[Row], tuned: dict[str, tuple[str, ...]]) -> list[Row]:
    """Prefix each tuned baseline row's args with its tuned ``--set`` args."""
    return [
        Row(row.label, row.learner, tuned[row.learner] + row.args)
        if row.label == row.learner and row.learner in tuned
        else row
        for row in rows
    ]


def override_args(rows: list[Row], overrides: Sequence[str]) -> list[Row]:
    """Apply ``LABEL=ARGS`` overrides; an unknown label adds a row ("NAME (variant)" runs NAME).

    >>> overrides = ["oahu=--preset paper --batch-size 8", "lego (slow)=--set learning_rate=0.01"]
    >>> rows = override_args([Row("oahu", "oahu", ("--preset", "paper"))], overrides)
    >>> [(r.label, r.learner, r.args) for r in rows]  # doctest: +NORMALIZE_WHITESPACE
    [('oahu', 'oahu', ('--preset', 'paper', '--batch-size', '8')),
     ('lego (slow)', 'lego', ('--set', 'learning_rate=0.01'))]
    """
    by_label = {row.label: row for row in rows}
    for item in overrides:
        label, raw = split_setting(item, "--learner-args", form="LABEL=ARGS")
        learner = by_label[label].learner if label in by_label else label.split(" ")[0]
        by_label[label] = Row(label, learner, tuple(shlex.split(raw)))
    return list(by_label.values())


def replay_command(
    row: Row,
    dataset: str,
    constraints: int | str,
    seed: int | str,
    stream: str | None = None,
    split: str = "items",
) -> list[str]:
    """The exact ``oahu replay`` command of one run (or a template, e.g. with seed "S"); with
    ``stream``, the run reads that stream file instead of building ``dataset``'s; ``split``
    "classes" runs the class-disjoint retrieval protocol."""
    source = (
        ["--stream", stream]
        if stream
        else ["--dataset", dataset, "--constraints", str(constraints)]
    )
    if split != "items":
        source += ["--split", split]
    return [
        "oahu", "replay", *source, "--seed", str(seed), "--learner", row.learner, *row.args,
        "--json", "--no-progress",
    ]  # fmt: skip


def run_path(
    results: Path, dataset: str, row: Row, constraints: int, seed: int, split: str = "items"
) -> Path:
    folder = dataset if split == "items" else f"{dataset}-{split}"
    return results / "runs" / folder / f"{row.slug}-n{constraints}-seed{seed}.json"


def run_cached(command: list[str], path: Path) -> dict[str, Any]:
    """The run's JSON report: read from ``path`` when it holds this exact command, made while the
    learner's defaults were today's, else run it and store ``{"command", "learner_defaults",
    "result", "wall_seconds", "loadavg_before", "loadavg_after"}``. The command names only
    what a row sets, so a changed default would otherwise be read back from runs made before
    it. Stored defaults are read as a checkpoint's parameters are (``same_learner``), and a
    record from before defaults were stored is trusted (its command is all it has)."""
    defaults = learner_defaults(command)
    if path.exists():
        record = json.loads(path.read_text())
        name = command[command.index("--learner") + 1]
        made_with = record.get("learner_defaults")
        today = made_with is None or same_learner(made_with, name, {})
        if record.get("command") == command and today:
            return record["result"]
    oahu = Path(sys.executable).with_name("oahu")
    argv = [str(oahu) if oahu.exists() else "oahu", *command[1:]]
    load_before, started = os.getloadavg(), time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({proc.returncode}):\n{proc.stderr}")
    record = {
        "command": command,
        "learner_defaults": defaults,
        "result": json.loads(proc.stdout.strip().splitlines()[-1]),
        "wall_seconds": time.perf_counter() - started,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
    }
    write_json(path, record)
    return record["result"]


def learner_defaults(command: list[str]) -> dict[str, Any]:
    """The defaults of every parameter of the learner ``command`` replays (``--learner``), as
    JSON gives them back.

    >>> learner_defaults(["oahu", "replay", "--learner", "rdml"])["learning_rate"]
    0.1
    """
    return probed_params(command[command.index("--learner") + 1], {})


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ aggregation
def run_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers Table 3 reports from one run's ``oahu replay --json`` object.

    >>> recall = {"1": 0.7, "2": 0.8, "4": 0.9, "8": 1.0}
    >>> run_metrics({"error": 0.2, "macro_f1": 0.8, "utilization": 0.5, "auc": 0.9,
    ...              "recall_at": recall, "train_seconds": 2.0, "constraints": 4000})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'error': 0.2, 'macro_f1': 0.8, 'utilization': 0.5, 'auc': 0.9, 'recall_at_1': 0.7,
     'recall_at_2': 0.8, 'recall_at_4': 0.9, 'recall_at_8': 1.0, 's_per_1k': 0.5,
     'per_s': 2000.0}
    """
    seconds, constraints = float(result["train_seconds"]), int(result["constraints"])
    return {
        "error": float(result["error"]),
        "macro_f1": float(result["macro_f1"]),
        "utilization": float(result["utilization"]),
        "auc": float(result["auc"]),
        **{f"recall_at_{k}": float(result["recall_at"][k]) for k in ("1", "2", "4", "8")},
        "s_per_1k": seconds / constraints * 1000.0,
        "per_s": constraints / seconds if seconds > 0 else math.inf,
    }


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single value).

    >>> {k: round(v, 4) for k, v in mean_std([0.1, 0.3]).items()}
    {'mean': 0.2, 'std': 0.1414, 'n': 2}
    """
    arr = np.asarray(values, dtype=np.float64)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return {"mean": float(arr.mean()), "std": std, "n": len(arr)}


def compare(oahu_errors: Sequence[float], other_errors: Sequence[float]) -> dict[str, Any]:
    """OAHU's outcome against another learner from per-seed errors (two-sided t-test, 0.05).

    >>> compare([0.10, 0.11, 0.12], [0.20, 0.21, 0.22])["outcome"]
    'win'
    >>> compare([0.10, 0.30, 0.20], [0.12, 0.28, 0.22])["outcome"]
    'tie'
    """
    ours, theirs = np.asarray(oahu_errors, float), np.asarray(other_errors, float)
    if min(len(ours), len(theirs)) < 2:  # nothing can be significant with one run a side
        t, p = None, 1.0
    elif np.ptp(ours) == 0.0 and np.ptp(theirs) == 0.0:
        # No spread on either side: the t statistic is undefined; equal means tie, distinct
        # means are as certain as it gets.
        t, p = None, 1.0 if math.isclose(ours[0], theirs[0]) else 0.0
    else:
        test = ttest_ind(ours, theirs)
        t, p = float(test.statistic), float(test.pvalue)
    outcome = "tie" if p >= SIGNIFICANCE else ("win" if ours.mean() < theirs.mean() else "loss")
    return {"outcome": outcome, "p_value": p, "t": t}


def aggregate(
    rows: Sequence[Row],
    results: dict[str, list[dict[str, Any]]],
    dataset: str,
    split: str = "items",
) -> dict[str, Any]:
    """Table 3 for one dataset from ``results[label]`` = per-seed ``oahu replay`` reports.

    The t-test compares the classification error, or with ``split="classes"`` (retrieval of
    unseen classes) the retrieval miss rate 1 - Recall@1, so that lower is better in both."""
    table: dict[str, Any] = {}
    for row in rows:
        runs = [run_metrics(r) for r in results[row.label]]
        table[row.label] = {
            "learner": row.learner,
            "args": list(row.args),
            "seeds": [int(r["seed"]) for r in results[row.label]],
            **{m: mean_std([run[m] for run in runs]) for m in METRICS},
            "errors": [
                run["error"] if split == "items" else 1.0 - run["recall_at_1"] for run in runs
            ],
        }
    for row in rows:
        if row.is_oahu:
            continue
        table[row.label]["oahu_vs"] = {
            oahu.label: compare(table[oahu.label]["errors"], table[row.label]["errors"])
            for oahu in rows
            if oahu.is_oahu
        }
    compared = "error" if split == "items" else "1 - recall_at_1"
    paper = PAPER.get(dataset) if split == "items" else None
    return {"dataset": dataset, "split": split, "compared": compared, "rows": table, "paper": paper}


def win_tie_loss(tables: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Across datasets, like the paper's last column: ``[baseline][oahu label] -> counts``.

    >>> t = {"rows": {"lego": {"oahu_vs": {"oahu": {"outcome": "win"}}}, "oahu": {}}}
    >>> win_tie_loss([t, t])
    {'lego': {'oahu': {'win': 2, 'tie': 0, 'loss': 0}}}
    """
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for table in tables:
        for label, cells in table["rows"].items():
            for oahu, outcome in cells.get("oahu_vs", {}).items():
                tally = counts.setdefault(label, {}).setdefault(
                    oahu, {"win": 0, "tie": 0, "loss": 0}
                )
                tally[outcome["outcome"]] += 1
    return counts


# ------------------------------------------------------------------------------ reporting
def pm(cell: dict[str, float], digits: int = 3) -> str:
    """``mean ± std`` of a :func:`mean_std` cell.

    >>> pm({"mean": 0.1834, "std": 0.0041})
    '0.183 ± 0.004'
    """
    return f"{cell['mean']:.{digits}f} ± {cell['std']:.{digits}f}"


def paper_cell(paper: dict[str, Any] | None, label: str) -> str:
    if not paper or label not in paper:
        return "—"
    return " / ".join(f"{m:.2f}±{s:.2f}" for m, s in paper[label].values())


def versus_cell(cells: dict[str, Any]) -> str:
    """OAHU's outcomes against a row: ``"oahu: **win** (0.003)"``, ``; ``-joined."""
    return "; ".join(
        f"{oahu}: **{v['outcome']}** ({v['p_value']:.2g})"
        for oahu, v in cells.get("oahu_vs", {}).items()
    )


def markdown_table(table: dict[str, Any]) -> str:
    """Table 3 of one dataset as a markdown table; for a class-disjoint run (``split``
    "classes") the retrieval table, Recall@K on unseen classes."""
    retrieval = table.get("split", "items") == "classes"
    if retrieval:
        head = (
            "| Method | R@1 | R@2 | R@4 | R@8 | AUC | kNN error (leave-one-out) | constraints/s "
            "| OAHU vs method (t-test on R@1, p) |"
        )
    else:
        head = (
            "| Method | Error | Macro-F1 | U | AUC | R@1 | s / 1k constraints | constraints/s "
            "| OAHU vs method (t-test p) | Paper: error / F1 / U |"
        )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for label, cells in table["rows"].items():
        if retrieval:
            measured = [*(pm(cells[key]) for key in RECALLS), pm(cells["auc"]), pm(cells["error"])]
        else:
            measured = [
                pm(cells["error"]),
                pm(cells["macro_f1"]),
                pm(cells["utilization"], 2),
                pm(cells["auc"]),
                pm(cells["recall_at_1"]),
                pm(cells["s_per_1k"], 3),
            ]
        row = [label, *measured, f"{cells['per_s']['mean']:,.0f}", versus_cell(cells) or "—"]
        if not retrieval:
            row.append(paper_cell(table["paper"], label))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def markdown_report(tables: Sequence[dict[str, Any]]) -> str:
    """Every dataset's table with its commands, then win/tie/loss across datasets."""
    parts = [summary_caption(tables) + "\n\n" + summary_table(tables)] if len(tables) > 1 else []
    for table in tables:
        rows = table["rows"]
        seeds = next(iter(rows.values()))["seeds"]
        unseen = ", class-disjoint (unseen classes)" if table.get("split") == "classes" else ""
        parts.append(
            f"### {table['dataset']}{unseen}: N = {table['constraints']:,} constraints, "
            f"{len(seeds)} seeds ({', '.join(map(str, seeds))})\n\n"
            f"`{table['command']}`\n\n{markdown_table(table)}\n\nEach row's runs "
            "(`S` = seed):\n\n"
            + "\n".join(f"- {label}: `{cells['command']}`" for label, cells in rows.items())
        )
    counts = win_tie_loss(tables)
    oahus = sorted({oahu for per in counts.values() for oahu in per})
    lines = [
        "| Baseline | " + " | ".join(f"{o}: win/tie/loss" for o in oahus) + " |",
        "|---|" + "---|" * len(oahus),
    ]
    for label, per in counts.items():
        cells = ("{win}/{tie}/{loss}".format(**per[o]) if o in per else "—" for o in oahus)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    datasets = ", ".join(t["dataset"] for t in tables)
    parts.append(f"### win/tie/loss of OAHU over the datasets ({datasets})\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def summary_table(tables: Sequence[dict[str, Any]]) -> str:
    """Every method's mean compared figure (error, or R@1 for unseen classes) per dataset side
    by side; the best of each dataset in bold, ``*`` where OAHU's default learner beats
    Euclidean and every baseline, and the paper's error in brackets where it has one.

    >>> cell = lambda e: {"error": {"mean": e}, "recall_at_1": {"mean": 1 - e}}
    >>> t = {"dataset": "d", "rows": {"euclidean": cell(0.2), "oahu (default)": cell(0.1)}}
    >>> print(summary_table([t]))
    | Method | d |
    |---|---|
    | euclidean | 0.2000 |
    | oahu (default) | **0.1000** * |
    """
    key = "error" if tables[0].get("split", "items") == "items" else "recall_at_1"
    labels: list[str] = []
    for table in tables:
        labels += [label for label in table["rows"] if label not in labels]
    lines = [
        "| Method | " + " | ".join(t["dataset"] for t in tables) + " |",
        "|---|" + "---|" * len(tables),
    ]
    best, beats_all = {}, {}
    for table in tables:
        values = {label: _compared_mean(cells, key) for label, cells in table["rows"].items()}
        best[table["dataset"]] = min(values.values())
        others = [v for label, v in values.items() if not label.startswith("oahu")]
        ours = values.get(DEFAULT_OAHU)
        beats_all[table["dataset"]] = ours is not None and all(ours < v for v in others)
    for label in labels:
        cells = []
        for table in tables:
            if label not in table["rows"]:
                cells.append("—")
                continue
            value = _compared_mean(table["rows"][label], key)
            text = f"{value:.4f}" if key == "error" else f"{1.0 - value:.4f}"
            if value == best[table["dataset"]]:
                text = f"**{text}**"
            if label == DEFAULT_OAHU and beats_all[table["dataset"]]:
                text += " *"
            paper = (table.get("paper") or {}).get(label)
            if paper and key == "error":
                text += f" (paper {paper['error'][0]:.2f})"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_caption(tables: Sequence[dict[str, Any]]) -> str:
    """What :func:`summary_table` shows, in one sentence."""
    what = (
        "Mean test error"
        if tables[0].get("split", "items") == "items"
        else "Mean Recall@1 on the unseen classes"
    )
    return (
        f"{what} of every row on every dataset (bold: the best of the dataset; *: oahu's default "
        "learner ahead of Euclidean and every baseline; in brackets the paper's figure where it "
        "has one; row `oahu` runs the paper's preset, `oahu (default)` oahu's own learner)."
    )


def plot_summary(tables: Sequence[dict[str, Any]], path: Path) -> None:
    """Each row's mean figure relative to Euclidean's on the same dataset, one group of bars per
    dataset, with each row's seed-to-seed spread: errors below 1 (or R@1 misses below 1) beat
    the raw-input floor. Rows far off the scale (the paper's preset) are clipped at 2 and
    marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "error" if tables[0].get("split", "items") == "items" else "recall_at_1"
    labels = [label for label in tables[0]["rows"] if label != "euclidean"]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(12.0, 4.2))
    for i, label in enumerate(labels):
        ratios, spreads = [], []
        for table in tables:
            cells, floor = table["rows"].get(label), table["rows"]["euclidean"]
            base = _compared_mean(floor, key)
            if cells is None or base <= 0:
                ratios.append(np.nan)
                spreads.append(0.0)
                continue
            ratios.append(_compared_mean(cells, key) / base)
            spreads.append(cells[key]["std"] / base)
        x = np.arange(len(tables)) + (i - (len(labels) - 1) / 2) * width
        ratio = np.asarray(ratios)
        off_scale = ratio > 2.0
        spread = np.where(off_scale, 0.0, spreads)  # a clipped bar's spread means nothing
        ax.bar(x, np.minimum(ratio, 2.0), width, yerr=spread, label=label, capsize=1.5)
        for xi, r in zip(x[off_scale], ratio[off_scale], strict=True):
            ax.text(xi, 2.02, f"{r:.1f}x", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(tables)), [t["dataset"] for t in tables])
    what = "test error" if key == "error" else "R@1 misses (1 - R@1) on unseen classes"
    ax.set_ylabel(("error" if key == "error" else "1 - R@1") + " / Euclidean's")
    ax.set_ylim(0, 2.35)
    ax.set_title(f"Every row's mean {what} relative to raw-input Euclidean 5-NN (below 1: better)")
    ax.legend(fontsize=8, ncol=len(labels), loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _compared_mean(cells: dict[str, Any], key: str) -> float:
    # Lower is better for both: the error, or the miss rate 1 - R@1.
    return cells[key]["mean"] if key == "error" else 1.0 - cells[key]["mean"]


def replace_block(text: str, name: str, heading: str, body: str) -> str:
    """Replace what lies between ``<!-- name:begin -->`` and ``<!-- name:end -->``; append a
    ``## heading`` section holding the markers when they are missing.

    >>> replace_block("# B\\n", "t", "T", "x")
    '# B\\n\\n## T\\n\\n<!-- t:begin -->\\nx\\n<!-- t:end -->\\n'
    >>> replace_block(_, "t", "T", "y").count("y"), replace_block(_, "t", "T", "y").count("x")
    (1, 0)
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        before, rest = text.split(begin, 1)
        return before + block + rest.split(end, 1)[1]
    return text.rstrip("\n") + f"\n\n## {heading}\n\n{block}\n"


def update_readme(name: str, heading: str, body: str, readme: Path = README) -> None:
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    readme.write_text(replace_block(text, name, heading, body))


# ------------------------------------------------------------------------------ running
def collect(
    rows: Sequence[Row],
    dataset: str,
    constraints: int,
    seeds: Sequence[int],
    results: Path,
    split: str = "items",
) -> dict[str, list[dict[str, Any]]]:
    """Run (or read from the cache) every (row, seed); reports per row label, in seed order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for seed in seeds:
            command = replay_command(row, dataset, constraints, seed, split=split)
            started = time.perf_counter()
            path = run_path(results, dataset, row, constraints, seed, split)
            result = run_cached(command, path)
            out.setdefault(row.label, []).append(result)
            print(
                f"{dataset} {row.label} seed {seed}: error {result['error']:.4f} "
                f"U {result['utilization']:.3f} {result['triplets_per_s']:.0f}/s "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    return out


def select_rows(rows: list[Row], labels: Sequence[str] | None) -> list[Row]:
    if not labels:
        return rows
    known = {row.label: row for row in rows}
    missing = [label for label in labels if label not in known]
    if missing:
        raise ValueError(f"--learners: unknown {missing}; rows are {list(known)}")
    return [known[label] for label in labels]


def table_rows(
    dataset: str,
    overrides: Sequence[str],
    labels: Sequence[str] | None,
    results: Path,
) -> list[Row]:
    """The rows run on ``dataset``: defaults, tuned baseline args, then command-line overrides."""
    rows = with_tuned_args(default_rows(), tuned_args(dataset, results))
    return select_rows(override_args(rows, overrides), labels)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--datasets",
        "--dataset",
        nargs="+",
        choices=DATASETS,
        default=list(DATASETS),
        help="default: every built-in dataset",
    )
    p.add_argument(
        "--split",
        choices=SPLITS,
        default="items",
        help="items: Table 3 (classification); classes: retrieval of unseen classes, Recall@K "
        "(Section 4.5); its README block is 'retrieval' (default: items)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default: per dataset")
    p.add_argument("--constraints", type=int, default=None, help="default: per dataset")
    p.add_argument("--learners", nargs="+", default=None, help="row labels (default: all)")
    p.add_argument(
        "--learner-args",
        action="append",
        default=[],
        metavar="LABEL=ARGS",
        help='extra oahu replay args of a row, e.g. oahu="--preset paper"',
    )
    p.add_argument("--jobs", type=int, default=1, choices=(1,), help="runs at a time (1)")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--no-readme", action="store_true", help="do not touch benchmarks/README.md")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    command = shlex.join(["python", "-m", "benchmarks.table3", *(argv or sys.argv[1:])])
    for dataset in args.datasets:
        rows = table_rows(dataset, args.learner_args, args.learners, args.results)
        constraints = args.constraints or CONSTRAINTS.get(dataset, DEFAULT_CONSTRAINTS)
        seeds = args.seeds or SEEDS.get(dataset, DEFAULT_SEEDS)
        runs = collect(rows, dataset, constraints, seeds, args.results, args.split)
        table = aggregate(rows, runs, dataset, args.split)
        table.update(command=command, constraints=constraints)
        for row in rows:
            table["rows"][row.label]["command"] = shlex.join(
                replay_command(row, dataset, constraints, "S", split=args.split)
            )
        write_json(table_path(args.results, dataset, args.split), table)
        print(markdown_table(table))
    if not args.no_readme:
        tables = [
            json.loads(path.read_text())
            for dataset in DATASETS
            if (path := table_path(args.results, dataset, args.split)).exists()
        ]
        if args.split == "items":
            update_readme("table3", "Table 3", markdown_report(tables))
        else:
            update_readme("retrieval", "Retrieval of unseen classes", markdown_report(tables))
        if len(tables) > 1:
            plot_summary(tables, args.results / f"table3-summary{_split_suffix(args.split)}.png")
    return 0


def table_path(results: Path, dataset: str, split: str) -> Path:
    return results / f"table3-{dataset}{_split_suffix(split)}.json"


def _split_suffix(split: str) -> str:
    return "" if split == "items" else f"-{split}"


if __name__ == "__main__":
    raise SystemExit(main())
