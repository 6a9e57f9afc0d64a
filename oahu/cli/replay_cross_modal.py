"""``oahu replay --cross-modal``: learn a cross-modal stream with the cross-modal learner (or fit
an offline reference on its development split) and report cross-modal retrieval on its test
split (:mod:`oahu.experiments.cross_modal_replay` lists the report's keys)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from oahu.cli.cross_modal_options import CROSS_MODAL_OPTIONS, build_cross_modal
from oahu.experiments.cross_modal_active import cross_modal_oracle
from oahu.experiments.cross_modal_replay import CROSS_MODAL_LEARNERS, replay_cross_modal
from oahu.settings import parse_settings
from oahu.streams.cross_modal import CrossModalStream, load_cross_modal_stream

__all__ = ["REFERENCES", "run_cross_modal"]

#: The offline references ``--learner`` takes with --cross-modal only.
REFERENCES = tuple(name for name in CROSS_MODAL_LEARNERS if name != "oahu")
# replay's options that have no meaning for a cross-modal stream, and why.
_REFUSED = {
    "preset": "the cross-modal learner has no presets; --set sets its parameters",
    "device": "the cross-modal learner runs on the CPU",
    "batch_size": "the cross-modal learner learns one constraint at a time",
    "self_paced": "not for the cross-modal learner",
    "oracle_noise": "the cross-modal annotator answers from the labels",
}


def _stream(args: argparse.Namespace) -> CrossModalStream:
    if args.stream:
        return load_cross_modal_stream(args.stream)
    # make-stream's options that replay lacks count as not given.
    for dest in CROSS_MODAL_OPTIONS:
        if not hasattr(args, dest):
            setattr(args, dest, None)
    args.dataset = args.dataset or "mfeat"
    stream, _ = build_cross_modal(args)
    return stream


def run_cross_modal(args: argparse.Namespace) -> int:
    """What ``oahu replay --cross-modal`` does."""
    for dest, why in _REFUSED.items():
        if getattr(args, dest, None) not in (None, False):
            flag = "--" + dest.replace("_", "-")
            raise ValueError(f"{flag}: not with --cross-modal ({why}), got {getattr(args, dest)}")
    if args.learner not in CROSS_MODAL_LEARNERS:
        raise ValueError(
            f"--learner: with --cross-modal one of {', '.join(CROSS_MODAL_LEARNERS)}, got "
            f"{args.learner!r}"
        )
    params: dict[str, Any] = parse_settings(args.set, "--set")
    if params and args.learner != "oahu":
        raise ValueError(f"--set: the offline reference {args.learner} takes no parameters")
    stream = _stream(args)
    if args.oracle is not None:
        if stream.is_linked:
            raise ValueError(
                "--oracle: the simulated annotator answers from class labels, and linked "
                "objects have none; replay the stream's own constraints instead"
            )
        if args.learner != "oahu":
            raise ValueError("--oracle: teaches the streaming learner (--learner oahu)")
        budget = len(stream) if args.budget is None else args.budget
        stream = cross_modal_oracle(
            stream, args.oracle, budget, batch=args.batch or 100, seed=args.seed, params=params
        )
    elif args.budget is not None or args.batch is not None:
        raise ValueError("--budget, --batch: only with --oracle (an annotator loop)")
    if args.save_model and args.learner != "oahu":
        raise ValueError(f"--save-model: saves the streaming learner, not {args.learner}")
    report = replay_cross_modal(
        stream,
        args.learner,
        seed=args.seed,
        params=params,
        max_queries=args.max_queries,
        progress=None if args.no_progress or args.json else _progress(len(stream)),
        save_to=args.save_model,
    )
    report["dataset"] = stream.meta.get("dataset")
    if args.oracle is not None:
        report.update(oracle=args.oracle, **stream.meta.get("oracle", {}))
    if args.json:
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(format_cross_modal(report))
    return 0


def _progress(total: int):
    def report(done: int) -> None:
        print(f"\r{done}/{total} constraints", end="" if done < total else "\n", file=sys.stderr)

    return report


def format_cross_modal(r: dict[str, Any]) -> str:
    a, b = r["modalities"]
    rate = r.get("constraints_per_s")
    lines = [
        f"learner        {r['learner']} on {r['dataset']} ({a} -> {b}; {r['constraints']} "
        f"constraints, seed {r['seed']})",
        f"mAP            {a}->{b} {r['map_ab']:.4f}   {b}->{a} {r['map_ba']:.4f}",
        f"Hamming mAP    {a}->{b} {r['hamming_map_ab']:.4f}   {b}->{a} "
        f"{r['hamming_map_ba']:.4f}   ({r['code_bits']} bits)",
        f"Recall@1,10    {a}->{b} {r['recall_ab']['1']:.4f} {r['recall_ab']['10']:.4f}   "
        f"{b}->{a} {r['recall_ba']['1']:.4f} {r['recall_ba']['10']:.4f}",
        f"link AUC       {r['link_auc']:.4f}",
        f"kNN error      {r['error']:.4f} ({a} queries, {b} development gallery)"
        if r["error"] is not None
        else "kNN error      none (linked objects have no labels to classify by)",
    ]
    if rate:
        lines.append(f"training       {rate:.0f} constraints/s ({r['train_seconds']:.2f} s)")
    return "\n".join(lines)
