"""``oahu replay``: learn over a benchmark stream, then evaluate on its test split."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from oahu.checks import check_int, check_number
from oahu.cli.cross_modal_options import add_cross_modal_arguments, check_single_modality
from oahu.cli.replay_cross_modal import REFERENCES, run_cross_modal
from oahu.cli.stream_arguments import add_stream_arguments
from oahu.drift import COMBINED
from oahu.experiments.active_loop import INITIAL, ORACLES, ActiveStats, active_learning
from oahu.experiments.evaluation import evaluate
from oahu.experiments.stream_replay import ReplayStats, as_json_floats, replay
from oahu.learners.oahu.config import PRESETS
from oahu.registry import LEARNER_NAMES, check_params, learner_class, make_learner
from oahu.settings import parse_settings
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_dataset
from oahu.streams.groupings import Grouping
from oahu.streams.stream_families import OtherStreamFamily
from oahu.streams.stream_file import ConstraintStream, load_stream

DEFAULT_BATCH = 100  # questions per round of --oracle

_DESCRIPTION = """\
Replay a constraint stream through one learner and evaluate it the paper's way.

The stream is either built on the fly from --dataset (seeded 1:1 development/test split, N
constraints from the development split: N/2 seeds and N/2 by transitive closure; triplets for
OAHU and OASIS, pairs for LEGO and RDML, OPML's own one-pass triplets) or read from --stream
(a file written by `oahu make-stream`). After learning, the development split is the kNN gallery
and the test split the queries (for a drifting stream from `oahu make-stream --drift`: their
items and labels under the concept in force at the end). With --split classes (the retrieval
protocol of Section 4.5) the constraints come from the items of a seeded half of the classes
and the test items, of the other classes, never seen, are both gallery and queries (each query
left out). Reported: kNN error rate and macro-F1 (Eq. 23-25), constraint utilisation U,
verification ROC AUC on a fixed sample of test pairs, half same-class (Eq. 26 score; Section
4.4), Recall@1,2,4,8 within the test split (Eq. 27), training constraints/s, the final hedge
weights alpha, and the constraints at which a concept drift was detected (drift_events).

With --oracle the learner is taught by a simulated annotator instead (docs/active-learning.md):
it starts from 500 constraints of the paper's protocol (500 labels), then in rounds oahu.active
proposes --batch questions over the development split ("is x more similar to a or to b?"), the
annotator answers each from the development labels (the option of x's class; "neither" when both
or none share it: the label is spent, nothing is learned), and the learner learns the answers,
until --budget labels are used. The learner never sees the labels themselves. --oracle random is
the baseline: the first --budget constraints of the paper's protocol, one label each. The report
adds labels_used and answered (the labels that gave a constraint; both count the 500).
"""

_EPILOG = """\
learner parameters:
  Any constructor parameter of the chosen learner can be set with --set KEY=VALUE
  (repeatable; VALUE is read as JSON when it parses, e.g. 0.3, 5, true, else as a string).
  --show-params prints the chosen learner's parameters and their defaults.

examples:
  oahu replay --dataset digits --constraints 2000 --seed 0
  oahu replay --dataset fashion-mnist --learner oahu --preset paper --json
  oahu replay --dataset fashion-mnist --learner oahu --batch-size 256 --device auto
  oahu replay --stream stream.npz --learner oasis --set C=0.1
  oahu replay --dataset fashion-mnist --oracle active --budget 5000 --batch 100 --json
  oahu replay --dataset mfeat --cross-modal --constraints 20000 --seed 0 --json
  oahu replay --dataset mfeat --cross-modal --learner cca --json
  oahu replay --dataset fashion-mnist --cross-modal --max-queries 2000
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="learn over a benchmark stream, then evaluate on its test split",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group()
    add_stream_arguments(p, source)
    source.add_argument(
        "--stream",
        metavar="FILE",
        default=None,
        help="read the stream from FILE (.npz or .jsonl from oahu make-stream)",
    )
    p.add_argument(
        "--learner",
        choices=(*LEARNER_NAMES, *REFERENCES),
        default="oahu",
        help="the learner to train (default: oahu); with --cross-modal oahu (the cross-modal "
        "learner) or an offline reference fitted on the development split's paired items: cca "
        "or pls",
    )
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="OAHU only: a named configuration (paper = Section 4.3.2 as published, whose "
        "deep heads collapse; default: oahu's own learner, the OAHUConfig defaults)",
    )
    p.add_argument(
        "--device", default=None, help="OAHU only: auto, cpu, cuda or cuda:N (default: auto)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="B",
        help="OAHU only: triplets learned together (a micro-batch), as updates of at most "
        "256 (--set max_update_size=N; 0: the whole batch); 1 is the paper's strict "
        "Algorithm 1 (default: 1)",
    )
    p.add_argument(
        "--self-paced",
        action="store_true",
        default=None,
        help="OAHU only: self-paced learning (after LEAP): hold back new constraints too hard for "
        "the model yet, admitting harder ones as the stream goes (the JSON's diagnostics count "
        "them: self_paced_held_back)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a learner parameter (repeatable; see 'learner parameters' below)",
    )
    p.add_argument(
        "--show-params",
        action="store_true",
        help="print the learner's parameters with their defaults, then exit",
    )
    p.add_argument("--k", type=int, default=5, help="neighbours per depth for kNN (default: 5)")
    p.add_argument(
        "--pairs",
        type=int,
        default=10_000,
        metavar="N",
        help="test pairs sampled for the verification AUC (default: 10000)",
    )
    p.add_argument(
        "--max-queries",
        type=int,
        default=None,
        metavar="N",
        help="evaluate on a seeded random N of the test queries instead of all (galleries stay "
        "whole; for sweeps; default: all)",
    )
    p.add_argument(
        "--save-model",
        metavar="FILE",
        default=None,
        help="save the trained learner (a checkpoint oahu run --resume can load)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print exactly one JSON object (keys: error, macro_f1, utilization, "
        "auc, recall_at, triplets_per_s, alpha, constraints, seed, drift_events, ...) to stdout",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    active = p.add_argument_group(
        "active learning", "an annotator loop instead of a stream (docs/active-learning.md)"
    )
    active.add_argument(
        "--oracle",
        choices=tuple(ORACLES),
        default=None,
        help="teach the learner by questions to a simulated annotator: active (joint-entropy "
        "batches), uncertainty (the most uncertain questions) or random (the paper's protocol, "
        "the baseline); starts from 500 protocol constraints (default: off, replay the stream)",
    )
    active.add_argument(
        "--budget",
        type=int,
        default=None,
        metavar="N",
        help="with --oracle: labels to spend, the 500 initial constraints included; an "
        "unanswered question costs one too (default: --constraints)",
    )
    active.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="K",
        help=f"with --oracle: questions per round, answered before the next round is chosen "
        f"(not --batch-size, the learner's micro-batch) (default: {DEFAULT_BATCH})",
    )
    active.add_argument(
        "--oracle-noise",
        type=float,
        default=None,
        metavar="RHO",
        help="with --oracle active or uncertainty: the annotator names the wrong option in a "
        "seeded share RHO of its answers (default: 0)",
    )
    add_cross_modal_arguments(p)
    # None: "not given", so that --cross-modal, whose constraints are all drawn, can refuse one.
    p.set_defaults(func=run, protocol=None)


def learner_params(args: argparse.Namespace) -> dict[str, Any]:
    """The learner's constructor parameters: ``--set`` values, the flags for OAHU's common ones
    (``--preset``, ``--device``, ``--batch-size``, ``--self-paced``) and ``--seed`` for a
    learner with a seed."""
    params = parse_settings(args.set, "--set")
    check_params(args.learner, params, "--set")
    names = learner_class(args.learner).param_names()
    shortcuts = {
        "preset": args.preset,
        "device": args.device,
        "batch_size": args.batch_size,
        "self_paced": args.self_paced,
    }
    for key, value in shortcuts.items():
        if value is None:
            continue
        if key not in names:
            raise ValueError(
                f"--{key.replace('_', '-')}: {args.learner} has no parameter {key!r}; "
                f"--show-params lists its parameters, --set sets them"
            )
        params[key] = value
    if "seed" in names:
        params.setdefault("seed", args.seed)
    return params


def load_or_build_stream(args: argparse.Namespace, kind: str) -> ConstraintStream:
    if args.stream:
        for option, value, default in (
            ("--label-column", args.label_column, None),
            ("--split", args.split, "items"),
        ):
            if value != default:
                raise ValueError(f"{option}: only with --dataset (the stream file has its own)")
        try:
            return load_stream(args.stream)
        except OtherStreamFamily:
            raise ValueError(
                f"--stream {args.stream}: a cross-modal stream; replay it with --cross-modal"
            ) from None
    return build_stream(
        args.dataset or "digits",
        args.constraints,
        args.seed,
        kind,
        args.protocol or "closure",
        split=args.split,
        label_column=args.label_column,
    )


def run(args: argparse.Namespace) -> int:
    if args.cross_modal:
        return run_cross_modal(args)
    check_single_modality(args)
    if args.learner in REFERENCES:
        raise ValueError(f"--learner {args.learner}: an offline reference for --cross-modal only")
    if args.show_params:
        learner = make_learner(args.learner, n_features=2, **learner_params(args))
        for key, value in learner.get_params().items():
            print(f"{key} = {value!r}")
        return 0
    params = learner_params(args)
    active = active_options(args)
    if active is None:
        kind = learner_class(args.learner).capabilities.protocol_kind
        stream = load_or_build_stream(args, kind)
        learner = make_learner(args.learner, stream.n_features, **params)
        if not args.stream:
            assert stream.kind == learner.capabilities.protocol_kind
        learner.prepare(stream.X[stream.prepare_idx])
        stats: ReplayStats = replay(learner, stream, progress=not args.no_progress)
    else:
        source: str | ConstraintStream
        if args.stream:
            source = load_stream(args.stream)
            n_features = source.n_features
        else:
            if args.split != "items":
                raise ValueError("--split: the annotator loop (--oracle) splits the items")
            source = load_dataset(args.dataset or "digits", args.label_column)
            n_features = source.n_features
        learner = make_learner(args.learner, n_features, **params)
        stream, stats = active_learning(
            learner, source, **active, seed=args.seed, progress=not args.no_progress
        )
    if args.save_model:
        from oahu.persistence import save_learner

        save_learner(learner, args.save_model, {"stream_meta": json.dumps(stream.meta)})
    result = evaluate(
        learner,
        stream.X,
        stream.y,
        stream.eval_gallery_idx,  # a drifting stream's items under the final concept
        stream.eval_query_idx,
        k=args.k,
        n_pairs=args.pairs,
        seed=args.seed,
        max_queries=args.max_queries,
        coarse=hierarchy_labels(stream),
        leave_one_out=stream.class_disjoint,
    )
    report = {
        **result.to_dict(),
        "utilization": learner.utilization,
        "triplets_per_s": stats.constraints_per_s,
        "alpha": as_json_floats(learner.alpha),
        "constraints": stats.constraints,
        "seed": args.seed,
        "learner": learner.name,
        "dataset": stream.meta.get("dataset"),
        "split": stream.meta.get("split", "items"),
        "train_seconds": stats.seconds,
        "updates": learner.updates,
        "skipped": dict(learner.skipped),
        "diagnostics": learner.diagnostics(),
        "prequential": [[n, accuracy] for n, accuracy in stats.prequential],
        # Where the combined metric's mistakes rose (the drifts a learner adapts to); every
        # signal's detections, with their mistake rates, under drift_detections.
        "drift_events": [e.constraint for e in learner.drift_events if e.signal == COMBINED],
        "drift_detections": [e.to_dict() for e in learner.drift_events],
    }
    if active is not None:
        assert isinstance(stats, ActiveStats)
        report.update(
            stats.to_dict(), oracle=args.oracle, batch=active["batch"], oracle_noise=active["noise"]
        )
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0


def hierarchy_labels(stream: ConstraintStream) -> np.ndarray | None:
    """Each item's group under the label hierarchy a quadruplet stream was drawn from (its meta's
    ``groups``), so that the report scores retrieval by graded nDCG@10 too; None otherwise."""
    name, groups = stream.meta.get("hierarchy"), stream.meta.get("groups")
    if not (name and groups):
        return None
    return Grouping(name, groups).coarse(stream.y)


def active_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The annotator loop's settings from ``--oracle``, ``--budget``, ``--batch`` and
    ``--oracle-noise``; None without ``--oracle`` (the others then are errors)."""
    given = {
        "--budget": args.budget,
        "--batch": args.batch,
        "--oracle-noise": args.oracle_noise,
    }
    if args.oracle is None:
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise ValueError(f"{stray[0]}: only with --oracle (an annotator loop)")
        return None
    budget = args.constraints if args.budget is None else args.budget
    batch = DEFAULT_BATCH if args.batch is None else args.batch
    noise = 0.0 if args.oracle_noise is None else args.oracle_noise
    check_int(budget, "--budget")
    check_int(batch, "--batch")
    check_number(noise, "--oracle-noise", low=0.0, high=1.0)
    if noise and args.oracle == "random":
        raise ValueError(
            "--oracle-noise: the random oracle replays the protocol as it is; for noisy "
            "constraints use oahu make-stream --noise and --stream"
        )
    return {
        "oracle": args.oracle,
        "budget": budget,
        "batch": batch,
        "noise": noise,
        "initial": INITIAL,
        "protocol": args.protocol or "closure",
    }


def format_report(r: dict[str, Any]) -> str:
    recall = "  ".join(f"R@{k}={v:.4f}" for k, v in r["recall_at"].items())
    alpha = np.array2string(np.asarray(r["alpha"]), precision=3, separator=", ")
    drift = (
        f"detected at constraint(s) {', '.join(map(str, r['drift_events']))}"
        if r["drift_events"]
        else "none detected"
    )
    rate = "n/a" if r["triplets_per_s"] is None else f"{r['triplets_per_s']:.0f}"
    return "\n".join(
        [
            f"learner        {r['learner']} on {r['dataset']} ({r['constraints']} constraints, "
            f"seed {r['seed']})",
            f"error rate     {r['error']:.4f}",
            f"macro-F1       {r['macro_f1']:.4f}",
            f"utilisation U  {r['utilization']:.4f}",
            f"verify AUC     {r['auc']:.4f}",
            f"recall         {recall}",
            *([f"graded nDCG@10 {r['ndcg_at_10']:.4f}"] if "ndcg_at_10" in r else []),
            f"training       {rate} constraints/s ({r['train_seconds']:.2f} s)",
            f"alpha          {alpha}",
            f"drift          {drift}",
        ]
        + (
            [
                f"labels         {r['labels_used']} used by oracle {r['oracle']}, "
                f"{r['answered']} gave a constraint"
            ]
            if "labels_used" in r
            else []
        )
    )
