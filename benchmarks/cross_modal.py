"""Cross-modal retrieval (CSLP's setting): the cross-modal learner against offline CCA, PLS and
CCA-sign hashing, active against random queries, and its learning speed beside the
single-modality default.

For each dataset (mfeat pixel averages <-> Fourier coefficients; Fashion-MNIST pixels <-> HOG,
a derived view) and seed, one cross-modal stream of the largest N is built with the defaults
(``oahu make-stream --cross-modal``) and learned in one pass; the test split's mAP@all in both
directions (real-valued and Hamming at the chosen code length), Recall@1/10 and link-prediction
AUC are taken at each N on the way (the stream's first N constraints: the protocol of a stream
of N, though not the very draw ``--constraints N`` makes).
CCA and PLS are fitted on the development split's paired items, their number of components
chosen on development data; CCA-sign codes have 64 bits. On Fashion-MNIST, mAP is over a
seeded 2,000 test queries per direction against the whole test split.

Active queries (mfeat): ``oahu replay --cross-modal --oracle active --budget B`` against the
protocol's first B constraints (``--oracle random``).

Speed: constraints/s of the cross-modal learner and of the single-modality default
(``oahu replay --dataset D``, triplets over the joined features) alternately, one pair of runs
per seed, on the same machine.

    python benchmarks/cross_modal.py                  # both datasets, seeds 0-2
    python benchmarks/cross_modal.py --datasets mfeat --seeds 0

Results: benchmarks/results/cross_modal.json and cross_modal-<dataset>.png. Nothing was tuned on
these seeds: the learner's defaults are OAHU's (step size, margin, replay, hedge β).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from oahu.experiments.cross_modal_active import cross_modal_oracle
from oahu.experiments.cross_modal_replay import replay_cross_modal
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.views import load_views

RESULTS = Path(__file__).resolve().parent / "results"
MAX_QUERIES = {"mfeat": None, "fashion-mnist": 2000}
CHECKPOINTS = (2000, 5000, 10000, 20000, 50000, 100000)
# PLS by scikit-learn's iterative PLSCanonical over 7 numbers of components on 17,500
# development objects of 784 and 324 features is too slow for a benchmark of three seeds.
REFERENCES = {"mfeat": ("cca", "pls"), "fashion-mnist": ("cca",)}


def learning(dataset: str, seed: int, n: int) -> dict:
    views = load_views(dataset)
    stream = build_cross_modal_stream(views, n, seed)
    mq = MAX_QUERIES[dataset]
    out = {"oahu": replay_cross_modal(stream, "oahu", seed, eval_every=CHECKPOINTS, max_queries=mq)}
    for ref in REFERENCES[dataset]:
        out[ref] = replay_cross_modal(stream, ref, seed, max_queries=mq)
    return out


def within(seed: int, n: int = 20_000, share: float = 0.2) -> dict:
    """The same budget with a share of within-modality constraints, against none."""
    views = load_views("mfeat")
    out = {}
    for w in (0.0, share):
        r = replay_cross_modal(
            build_cross_modal_stream(views, n, seed, within_share=w), "oahu", seed
        )
        out[str(w)] = {k: r[k] for k in ("map_ab", "map_ba", "link_auc")}
    return out


def active(seed: int) -> dict:
    stream = build_cross_modal_stream(load_views("mfeat"), 10_000, seed)
    out = {}
    for oracle, budget in (("random", 5000), ("random", 10000), ("active", 5000)):
        taught = cross_modal_oracle(stream, oracle, budget, seed=seed)
        r = replay_cross_modal(taught, "oahu", seed)
        out[f"{oracle}-{budget}"] = {
            "map_ab": r["map_ab"],
            "map_ba": r["map_ba"],
            **taught.meta["oracle"],
        }
        print(seed, oracle, budget, out[f"{oracle}-{budget}"], flush=True)
    return out


def speed(dataset: str, seed: int, n: int) -> dict:
    oahu = [str(Path(sys.executable).with_name("oahu")), "replay"]
    rates = {}
    for name, extra in (("single", []), ("cross_modal", ["--cross-modal"])):
        cmd = [
            *oahu,
            "--dataset",
            dataset,
            "--constraints",
            str(n),
            "--seed",
            str(seed),
            "--json",
            "--no-progress",
            *extra,
        ]
        if dataset == "fashion-mnist":
            cmd += ["--max-queries", "500"]
        report = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        rates[name] = report.get("constraints_per_s") or report["triplets_per_s"]
    rates["ratio"] = rates["cross_modal"] / rates["single"]
    return rates


def plot(dataset: str, runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, ref_key in ((axes[0], "map", "map"), (axes[1], "hamming_map", "hamming_map")):
        for direction, style in (("ab", "-"), ("ba", "--")):
            curves = [[p[f"{key}_{direction}"] for p in r["oahu"]["curve"]] for r in runs.values()]
            xs = [p["constraints"] for p in next(iter(runs.values()))["oahu"]["curve"]]
            ax.plot(xs, np.mean(curves, axis=0), style, label=f"oahu {direction.upper()}")
            ref = np.mean([r["cca"][f"{ref_key}_{direction}"] for r in runs.values()])
            ax.axhline(ref, ls=style, color="grey", label=f"CCA {direction.upper()}")
        ax.set_xscale("log")
        ax.set_xlabel("constraints")
        ax.set_ylabel("mAP@all" if key == "map" else "Hamming mAP@all")
        ax.legend(fontsize=7)
    fig.suptitle(f"cross-modal retrieval, {dataset} (mean of {len(runs)} seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_active(active_runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("random-5000", "random-10000", "active-5000")
    fig, ax = plt.subplots(figsize=(6, 4))
    for offset, direction in ((-0.2, "ab"), (0.2, "ba")):
        means = [np.mean([r[k][f"map_{direction}"] for r in active_runs.values()]) for k in keys]
        ax.bar(np.arange(len(keys)) + offset, means, width=0.4, label=direction.upper())
        for x, k in enumerate(keys):  # each seed as a dot
            ys = [r[k][f"map_{direction}"] for r in active_runs.values()]
            ax.plot([x + offset] * len(ys), ys, "k.", ms=4)
    ax.set_xticks(range(len(keys)), ["random, 5,000", "random, 10,000", "active, 5,000"])
    ax.set_ylim(0.5, None)
    ax.set_ylabel("mAP@all")
    ax.legend(title="direction")
    ax.set_title(f"mfeat: active pair questions against random labels ({len(active_runs)} seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["mfeat", "fashion-mnist"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--constraints", type=int, default=100_000)
    ap.add_argument("--no-active", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "cross_modal.json"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the plots from --out")
    args = ap.parse_args()
    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    if args.plot_only:
        for dataset in args.datasets:
            plot(dataset, results[dataset]["learning"], RESULTS / f"cross_modal-{dataset}.png")
        plot_active(results["mfeat"]["active"], RESULTS / "cross_modal-active.png")
        return
    started = time.time()
    for dataset in args.datasets:
        runs = results.setdefault(dataset, {}).setdefault("learning", {})
        for seed in args.seeds:
            runs[str(seed)] = learning(dataset, seed, args.constraints)
            r = runs[str(seed)]
            print(
                dataset,
                seed,
                {k: round(r["oahu"][k], 4) for k in ("map_ab", "map_ba")},
                "cca",
                {k: round(r["cca"][k], 4) for k in ("map_ab", "map_ba")},
                flush=True,
            )
            out_path.write_text(json.dumps(results, indent=1))
        plot(dataset, runs, RESULTS / f"cross_modal-{dataset}.png")
        sp = results[dataset].setdefault("speed", {})
        for seed in args.seeds:
            sp[str(seed)] = speed(dataset, seed, 20_000)
            print(dataset, "speed", sp[str(seed)], flush=True)
        out_path.write_text(json.dumps(results, indent=1))
    if not args.no_active:
        act = results.setdefault("mfeat", {}).setdefault("active", {})
        for seed in args.seeds:
            act[str(seed)] = active(seed)
            out_path.write_text(json.dumps(results, indent=1))
        plot_active(act, RESULTS / "cross_modal-active.png")
        mixed = results["mfeat"].setdefault("within", {})
        for seed in args.seeds:
            mixed[str(seed)] = within(seed)
            print("within", seed, mixed[str(seed)], flush=True)
            out_path.write_text(json.dumps(results, indent=1))
    results["seconds"] = time.time() - started
    out_path.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
