"""OAHU on Fashion-MNIST beside Euclidean 5-NN: the OAHU row of the paper's Table 3.

Each (row, seed) is one ``oahu replay --json`` run (the exact command is stored with its result),
cached under benchmarks/results/oahu-fashion/ so that an interrupted benchmark resumes. The
aggregate (mean ± std over seeds) goes to benchmarks/results/oahu-fashion.json and a markdown
table to stdout.

    python benchmarks/oahu_fashion.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROWS: dict[str, list[str]] = {
    "euclidean": ["--learner", "euclidean"],
    "oahu (paper)": ["--learner", "oahu", "--preset", "paper"],
    "oahu (paper, standardize+unit)": [
        "--learner",
        "oahu",
        "--preset",
        "paper",
        "--set",
        "preprocess=standardize+unit",
    ],
    "oahu (default)": ["--learner", "oahu"],
}
METRICS = ("error", "macro_f1", "utilization", "auc", "recall_at_1", "triplets_per_s")


def slug(row: str) -> str:
    """``"oahu (paper, standardize+unit)"`` → ``"oahu-paper-standardize-unit"``."""
    return re.sub(r"[^a-z0-9]+", "-", row.lower()).strip("-")


def run_one(row: str, seed: int, constraints: int, device: str, out_dir: Path) -> dict:
    path = out_dir / f"{slug(row)}-seed{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    command = [
        "oahu",
        "replay",
        "--dataset",
        "fashion-mnist",
        "--constraints",
        str(constraints),
        "--seed",
        str(seed),
        "--json",
        "--no-progress",
        *ROWS[row],
    ]
    if row.startswith("oahu"):
        command += ["--device", device]
    started = time.time()
    out = subprocess.run(
        [sys.executable, "-m", "oahu.cli.main", *command[1:]],
        check=True,
        capture_output=True,
        text=True,
    )
    record = json.loads(out.stdout)
    record.update(
        row=row,
        command=" ".join(command),
        wall_seconds=time.time() - started,
        load_average=os.getloadavg(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return record


def summarise(records: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for metric in METRICS:
        values = [r["recall_at"]["1"] if metric == "recall_at_1" else r[metric] for r in records]
        out[metric] = {
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        }
    return out


def markdown(rows: dict) -> str:
    lines = [
        "| row | seeds | error | macro-F1 | U | AUC | Recall@1 | triplets/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row, entry in rows.items():
        stats = entry["summary"]
        cells = [f"{stats[m]['mean']:.4f} ± {stats[m]['std']:.4f}" for m in METRICS[:-1]]
        cells.append(f"{stats['triplets_per_s']['mean']:.0f}")
        seeds = ",".join(map(str, entry["seeds"]))
        lines.append(f"| {row} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--constraints", type=int, default=10_000)
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    out_dir = RESULTS / "oahu-fashion"
    summary_path = RESULTS / "oahu-fashion.json"
    # Rows merge into the stored summary: rows may be measured over different seed sets.
    stored = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    rows = stored.get("rows", {})
    for row in args.rows:
        records = [run_one(row, s, args.constraints, args.device, out_dir) for s in args.seeds]
        for r in records:
            print(f"{row} seed {r['seed']}: error {r['error']:.4f}", file=sys.stderr, flush=True)
        rows[row] = {
            "seeds": args.seeds,
            "summary": summarise(records),
            "runs": [{k: r[k] for k in ("seed", "command", "error", "macro_f1")} for r in records],
        }
    ordered = {row: rows[row] for row in ROWS if row in rows}
    summary_path.write_text(
        json.dumps({"constraints": args.constraints, "rows": ordered}, indent=1)
    )
    print(markdown(ordered))


if __name__ == "__main__":
    main()
