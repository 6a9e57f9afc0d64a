"""Settings of oahu's learner compared on a validation split carved from the development split.

How a default is chosen without looking at the test split: each seed's development split (the
paper's protocol, :func:`oahu.streams.protocol.split_dev_test`) is halved at random (seeded by the
seed). The *learning* half carries the paper's stream of triplets (seeds plus transitive closure)
and is the kNN gallery; the *validation* half are the queries. The test split is never read.
Every candidate learns the same stream of each seed in one pass and is scored at each size by the
benchmarks' evaluation (5-NN of Eq. 23-25,
:func:`oahu.experiments.evaluation.classification_quality`), as
validation errors (misclassified validation items); Euclidean kNN is the reference.

    python -m benchmarks.validation_search --dataset digits --seeds 100 101 --sizes 1000 3000 \
        --candidate margin=0.1
    python -m benchmarks.validation_search --dataset fashion-mnist --seeds 100 101 102 103 104 \
        --sizes 1000 3000 10000 30000 100000 --candidate margin=0.1,replay_memory=10000

A candidate is ``KEY=VALUE`` changes to the default learner (``OAHUConfig`` fields, joined by
``,``; values read as ``oahu replay --set`` reads them); ``default`` is the default itself.
Runs are cached under ``results/validation-search/`` while the learner's parameters stay the
same; the summary goes to ``results/validation-search-<dataset>.json``: per candidate and size,
the mean validation error and, against the default and against Euclidean, the mean paired
difference and on how many seeds it is lower, equal, higher.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.learning_curves import evaluate_now
from benchmarks.stream_runs import cached_run, run_all
from oahu.experiments.stream_replay import replay
from oahu.learner import Learner
from oahu.learners.oahu.config import OAHUConfig
from oahu.registry import make_learner
from oahu.settings import parse_settings
from oahu.streams.datasets import DATASETS, load_dataset
from oahu.streams.protocol import split_dev_test, triplet_stream
from oahu.streams.stream_file import ConstraintStream

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT = "default"
EUCLIDEAN = "euclidean"
_HALVING = 0x7A1  # tags the halving's draws apart from the split's and the stream's


def parse_candidate(spec: str) -> dict[str, Any]:
    """``"margin=0.1,replay=2"`` → ``{"margin": 0.1, "replay": 2}``, checked against OAHUConfig.

    >>> parse_candidate("margin=0.1,replay=2,loss=abtl")
    {'margin': 0.1, 'replay': 2, 'loss': 'abtl'}
    >>> parse_candidate("default")
    {}
    >>> parse_candidate("margins=0.1")
    Traceback (most recent call last):
    ...
    ValueError: candidate: 'margins' is not a setting of OAHUConfig (in 'margins=0.1')
    """
    if spec == DEFAULT:
        return {}
    changes = parse_settings(spec.split(","), "candidate")
    for name in changes:
        if name not in OAHUConfig.__dataclass_fields__:
            raise ValueError(f"candidate: {name!r} is not a setting of OAHUConfig (in {spec!r})")
    OAHUConfig(**changes)  # a value out of range gets OAHUConfig's own error, naming the field
    return changes


def validation_stream(dataset: str, seed: int, n_constraints: int) -> ConstraintStream:
    """The seed's development split as a stream whose ``dev_idx`` is the learning half (stream
    and gallery) and whose ``test_idx`` is the validation half (queries); items are the
    development split's only."""
    ds = load_dataset(dataset)
    dev, _ = split_dev_test(ds.n_items, seed)
    dev = dev[np.random.default_rng([seed, _HALVING]).permutation(len(dev))]
    X, y = ds.X[dev], ds.y[dev]
    half = len(dev) // 2
    learning, validation = np.arange(half), np.arange(half, len(dev))
    constraints = triplet_stream(y, learning, n_constraints, seed)
    return ConstraintStream(X, y, learning, validation, "triplet", constraints)


def validation_errors(learner: Learner, stream: ConstraintStream) -> int:
    """Misclassified validation items: the learning curves' evaluation of the learner as it
    stands, gallery the stream's ``dev_idx``, queries its ``test_idx``."""
    return round(evaluate_now(learner, stream)["error"] * len(stream.test_idx))


def learner_spec(spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The registered learner and the parameters a run of ``spec`` builds it with."""
    if spec["candidate"] == EUCLIDEAN:
        return EUCLIDEAN, {}
    return "oahu", {**parse_candidate(spec["candidate"]), "seed": spec["seed"]}


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One candidate's pass over one seed's validation stream, scored at every size."""
    name, sizes = spec["candidate"], spec["sizes"]
    stream = validation_stream(spec["dataset"], spec["seed"], max(sizes))
    learner_name, params = learner_spec(spec)
    learner = make_learner(learner_name, stream.n_features, **params)
    learner.prepare(stream.X[stream.dev_idx])
    errors: dict[int, int] = {0: validation_errors(learner, stream)}
    started = time.perf_counter()
    if name != EUCLIDEAN:

        def at(n: int) -> None:
            errors[n] = validation_errors(learner, stream)

        replay(learner, stream, checkpoints=sizes, at_checkpoint=at)
    return {
        **spec,
        "n_validation": len(stream.test_idx),
        "n_learning": len(stream.dev_idx),
        "errors": {str(n): e for n, e in sorted(errors.items())},
        "seconds": time.perf_counter() - started,
        "learner_params": learner.get_params(),
    }


def _cached(spec: dict[str, Any]) -> dict[str, Any]:
    name = spec["candidate"]
    key = "".join(c if c.isalnum() or c in "._=-" else "_" for c in name)
    sizes = "_".join(map(str, spec["sizes"]))
    path = RESULTS / "validation-search" / f"{spec['dataset']}-{key}-s{spec['seed']}-N{sizes}.json"
    learner = None if name == EUCLIDEAN else learner_spec(spec)
    run = cached_run(path, learner, lambda: run_one(spec))
    # A Fashion-MNIST search takes tens of minutes: say what each finished run scored.
    print(f"{spec['dataset']} {name} seed {spec['seed']}: errors {run['errors']}", flush=True)
    return run


def summarise(runs: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Per candidate and size: mean validation errors and, paired by seed against the default
    (and against Euclidean), the mean difference and the seeds below / equal / above."""
    by = {(r["candidate"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["candidate"] for r in runs):
        rows = {}
        for n in [0, *sizes]:
            errs = np.array([_at(by[name, s], n) for s in seeds], dtype=float)
            row: dict[str, Any] = {"mean_errors": float(errs.mean())}
            for ref in (DEFAULT, EUCLIDEAN):
                if ref != name and all((ref, s) in by for s in seeds):
                    diff = errs - np.array([_at(by[ref, s], n) for s in seeds], dtype=float)
                    row[f"vs_{ref}"] = {
                        "mean_difference": float(diff.mean()),
                        "below": int((diff < 0).sum()),
                        "equal": int((diff == 0).sum()),
                        "above": int((diff > 0).sum()),
                    }
            rows[str(n)] = row
        out[name] = rows
    return out


def _at(run: dict[str, Any], n: int) -> int:
    """A run's validation errors after n constraints (Euclidean's whatever n is)."""
    errors = run["errors"]
    return errors[str(n)] if str(n) in errors else errors["0"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--dataset", default="digits", choices=DATASETS)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 120)))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        help="KEY=VALUE changes to the default learner, joined by ','; repeatable",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if min(args.seeds) < 100:
        parser.error("--seeds: use development seeds (100 and up); 0-99 are for reporting")
    for spec in args.candidate:
        parse_candidate(spec)  # fail before any run
    names = [DEFAULT, EUCLIDEAN, *args.candidate]
    sizes = sorted(set(args.sizes))
    specs = [
        {"dataset": args.dataset, "candidate": name, "seed": seed, "sizes": sizes}
        for name in names
        for seed in args.seeds
    ]
    runs = run_all(_cached, specs, args.jobs)
    summary = summarise(runs, sizes)
    for name, rows in summary.items():
        print(
            f"{name}: mean validation errors; paired by seed: mean difference (seeds "
            "below/equal/above)"
        )
        for n in [0, *sizes]:
            row = rows[str(n)]
            versus = [
                f"vs {ref} {v['mean_difference']:+.1f} ({v['below']}/{v['equal']}/{v['above']})"
                for ref in (DEFAULT, EUCLIDEAN)
                if (v := row.get(f"vs_{ref}"))
            ]
            print(f"  {n:>7}: {row['mean_errors']:8.1f}  " + "  ".join(versus))
    command = ["python -m benchmarks.validation_search", "--dataset", args.dataset]
    command += ["--seeds", *map(str, args.seeds), "--sizes", *map(str, sizes)]
    for spec in args.candidate:
        command += ["--candidate", spec]
    out = args.out or RESULTS / f"validation-search-{args.dataset}.json"
    out.write_text(
        json.dumps({"command": " ".join(command), "summary": summary, "runs": runs}, indent=1)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
