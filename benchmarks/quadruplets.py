"""Quadruplets against triplets at equal annotation cost, and against an offline reference.

For each dataset and seed:

* ``oahu-quadruplets``: the default OAHU learns, in one pass, N quadruplets of a label-hierarchy
  stream (:func:`oahu.streams.build_hierarchy_stream`: half "a same-class pair is closer than a
  same-group pair of different classes", half "a same-group pair is closer than a pair across
  groups"; Fashion-MNIST's ``garment`` hierarchy, digits' ``shape``);
* ``oahu-triplets``: the default OAHU learns the paper protocol's triplet stream with as many item
  references, ceil(4N / 3) triplets (:func:`oahu.streams.matched_triplet_stream`, same split);
* ``lsml``: metric-learn's LSML fitted offline on the same N quadruplets, on the development
  items reduced by PCA (``benchmarks/lsml_reference.py``);
* ``start``: the default OAHU before any constraint (the cosine metric of the principal axes),
  the point both streams start from.

Each is evaluated like ``oahu replay`` (5-NN error over the test split, development split as
gallery) plus the graded nDCG@10 of retrieval within the test split (gain 2 for the query's
class, 1 for another class of its group: :func:`oahu.experiments.evaluation.graded_ndcg`).

    python -m benchmarks.quadruplets                              # Fashion-MNIST, seeds 0-2
    python -m benchmarks.quadruplets --datasets digits --constraints 3000 --seeds 0 1 2
    python -m benchmarks.quadruplets --hierarchy season         # a grouping pixels do not show

Runs are cached as JSON under benchmarks/results/quadruplets/ (delete one to re-run it); the
table goes to results/quadruplets-<dataset>[-<hierarchy>].json (the hierarchy named when it is not
the dataset's default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.stream_runs import cached_run, run_all
from oahu.experiments.evaluation import evaluate
from oahu.experiments.stream_replay import replay
from oahu.learners.oahu.learner import OAHU
from oahu.streams import build_hierarchy_stream, matched_triplet_stream
from oahu.streams.groupings import GROUPINGS

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "quadruplets"
HIERARCHIES = {"fashion-mnist": "garment", "digits": "shape"}
LABELS = ("oahu-quadruplets", "oahu-triplets", "lsml", "start")


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One learner of ``spec["label"]`` on its stream: error, nDCG@10 and throughput."""
    dataset, n, seed, hierarchy = spec["dataset"], spec["n"], spec["seed"], spec["hierarchy"]
    quadruplets = build_hierarchy_stream(dataset, n, seed, hierarchy)
    stream = (
        matched_triplet_stream(dataset, n, seed)
        if spec["label"] == "oahu-triplets"
        else quadruplets
    )
    extra: dict[str, Any] = {"constraints": len(stream), "kind": stream.kind}
    if spec["label"] == "lsml":
        from benchmarks.lsml_reference import DEFAULT_N_COMPONENTS, LSMLMetric, fit_lsml

        started = time.perf_counter()
        dims = min(DEFAULT_N_COMPONENTS, stream.n_features)  # digits have 64 pixels
        reference = fit_lsml(
            stream.X[stream.dev_idx], stream.features(0, len(stream)), dims, seed=seed
        )
        extra["fit_seconds"] = time.perf_counter() - started
        learner = LSMLMetric(stream.n_features, reference)
        params: dict[str, Any] = {"n_components": len(reference.pca_components)}
    else:
        learner = OAHU(stream.n_features, seed=seed)
        learner.prepare(stream.X[stream.prepare_idx])
        if spec["label"] != "start":
            stats = replay(learner, stream)
            extra["constraints_per_s"] = stats.constraints_per_s
        params = learner.get_params()
    coarse = GROUPINGS[dataset][hierarchy].coarse(stream.y)
    result = evaluate(
        learner, stream.X, stream.y, stream.eval_gallery_idx, stream.eval_query_idx,
        k=5, n_pairs=1000, seed=seed, coarse=coarse,
    )  # fmt: skip
    return {
        **spec,
        **extra,
        "learner_params": params,
        "error": result.error,
        "macro_f1": result.macro_f1,
        "ndcg_at_10": result.ndcg_at_10,
        "load_average": os.getloadavg(),
    }


def run_cached(spec: dict[str, Any]) -> dict[str, Any]:
    slug = f"{spec['dataset']}-{spec['hierarchy']}-{spec['label']}-{spec['seed']}-{spec['n']}"
    # LSML is no registered learner: its runs stay valid while their files exist.
    learner = None if spec["label"] == "lsml" else ("oahu", {"seed": spec["seed"]})
    return cached_run(RUNS / f"{slug}.json", learner, lambda: run_one(spec))


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per learner: error, nDCG@10 and throughput, mean and per seed."""
    table: dict[str, Any] = {}
    for r in sorted(runs, key=lambda r: (LABELS.index(r["label"]), r["seed"])):
        cell = table.setdefault(
            r["label"], {"seeds": [], "error": [], "ndcg_at_10": [], "constraints_per_s": []}
        )
        cell["seeds"].append(r["seed"])
        cell["error"].append(r["error"])
        cell["ndcg_at_10"].append(r["ndcg_at_10"])
        if "constraints_per_s" in r:
            cell["constraints_per_s"].append(r["constraints_per_s"])
        cell["constraints"] = r["constraints"]
    for cell in table.values():
        for key in ("error", "ndcg_at_10", "constraints_per_s"):
            if cell[key]:
                cell[f"mean_{key}"] = statistics.fmean(cell[key])
    return table


def format_table(dataset: str, table: dict[str, Any]) -> str:
    lines = [
        f"{dataset}: mean over seeds {table[next(iter(table))]['seeds']}",
        "| learner | constraints | error | nDCG@10 | constraints/s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, cell in table.items():
        rate = f"{cell['mean_constraints_per_s']:,.0f}" if "mean_constraints_per_s" in cell else ""
        lines.append(
            f"| {label} | {cell['constraints']:,} | {cell['mean_error']:.4f} | "
            f"{cell['mean_ndcg_at_10']:.4f} | {rate} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["fashion-mnist"], choices=list(HIERARCHIES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--constraints", type=int, default=10_000, metavar="N", help="quadruplets")
    p.add_argument("--learners", nargs="+", default=list(LABELS), choices=LABELS)
    p.add_argument(
        "--hierarchy",
        default=None,
        help="grouping of streams/groupings.py (default: garment for fashion-mnist, shape for "
        "digits)",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (default: 2)")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        hierarchy = args.hierarchy or HIERARCHIES[dataset]
        if hierarchy not in GROUPINGS[dataset]:
            p.error(
                f"--hierarchy: {dataset} has {', '.join(GROUPINGS[dataset])}, not {hierarchy!r}"
            )
        specs = [
            {"dataset": dataset, "hierarchy": hierarchy, "seed": seed, "n": args.constraints}
            | {"label": label}
            for label in args.learners
            for seed in args.seeds
        ]
        table = aggregate(run_all(run_cached, specs, args.jobs))
        suffix = "" if hierarchy == HIERARCHIES[dataset] else f"-{hierarchy}"
        (RESULTS / f"quadruplets-{dataset}{suffix}.json").write_text(json.dumps(table, indent=1))
        print(format_table(dataset, table))


if __name__ == "__main__":
    main()
