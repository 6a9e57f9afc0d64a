"""``oahu make-stream``: write a benchmark constraint stream (docs/algorithms.md) to a file,
optionally with concept drift (streams/drift.py) and label noise (streams/noise.py), or a
quadruplet stream from a label hierarchy (streams/hierarchy.py)."""

from __future__ import annotations

import argparse
import textwrap

from oahu.checks import check_number
from oahu.cli.cross_modal_options import (
    CROSS_MODAL_HELP,
    add_cross_modal_arguments,
    build_cross_modal,
    check_single_modality,
    describe_cross_modal,
)
from oahu.cli.stream_arguments import add_stream_arguments
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.cross_modal import write_cross_modal_jsonl
from oahu.streams.dataset import Dataset
from oahu.streams.datasets import load_dataset
from oahu.streams.drift import DRIFTS, build_drift_stream
from oahu.streams.groupings import DRIFT_GROUPINGS, GROUPINGS, grouping_for
from oahu.streams.hierarchy import build_hierarchy_stream
from oahu.streams.noise import NOISE_MODELS, add_noise
from oahu.streams.stream_file import KINDS, ConstraintStream, write_jsonl

#: One line per kind of drift, for --help (M: --drift-at, W: --drift-width).
DRIFT_HELP: dict[str, str] = {
    "abrupt": "from M on, constraints follow a coarse grouping of the classes",
    "gradual": "the same, phased in: i in [M, M+W) is new with probability (i-M)/W",
    "covariate": "same classes; from M on, the items are rotated by 90 degrees",
    "novel": "30% of the classes (seeded) are absent before M, present from M on",
}
#: One line per noise model, for --help (RHO: --noise).
NOISE_HELP: dict[str, str] = {
    "uniform": "a uniform sample: every constraint equally likely to be wrong",
    "confusable": "more likely where the classes look alike (close class centroids)",
}
#: The drift kinds whose new concept is a grouping of the classes (--grouping).
GROUPED_DRIFTS: tuple[str, ...] = ("abrupt", "gradual")
_GROUPING_HELP = (
    "groupings of the classes (--grouping NAME, abrupt and gradual drift; also the label\n"
    "hierarchies of --kind quadruplet, --hierarchy NAME):\n"
    + "\n".join(
        f"  {dataset:<14} "
        + ", ".join(
            name + (" (default)" if name == DRIFT_GROUPINGS[dataset] else "") for name in named
        )
        for dataset, named in GROUPINGS.items()
    )
    + "\n"
    + textwrap.fill(
        "the default is a drift the class metric does not already imply: on fashion-mnist, "
        "garment raises the default learner's mistake rate no more than a stream without "
        "drift fluctuates (streams/FORMAT.md). As a label hierarchy (class within group), "
        "--hierarchy has no default: name one.",
        width=79,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
    )
)
_DESCRIPTION = (
    "Build the paper's benchmark stream (Section 4.3.2): a seeded 1:1 development/test split "
    "of the dataset (with --split classes: the items of a seeded half of the classes against "
    "the others', the retrieval protocol of Section 4.5), then N constraints from the "
    "development split, N/2 sampled seeds interleaved with N/2 derived by transitive closure."
    " The file stores the items once, the split, and the constraints as item indices in "
    "stream order (see streams/FORMAT.md). With --drift, the concept changes at constraint M:"
    " each concept's constraints come from a stream of their own, the file records the "
    "concept of each constraint, and its labels are those of the final concept "
    "(streams/drift.py). With --noise RHO, round(RHO * N) of the constraints, chosen by "
    "--noise-model with the stream's seed, are made wrong (a triplet's positive and negative "
    "swapped, a pair's similar flag flipped, a quadruplet (a, b, c, d) made (c, d, a, b)) "
    "after any drift is built; the file records which (streams/noise.py). With --kind "
    "quadruplet --hierarchy NAME, the stream is instead N quadruplets (a, b, c, d), each "
    "saying D(a, b) < D(c, d), from the same development split under a grouping of the "
    "classes: half say a pair of one class is closer than a pair of one group but different "
    "classes, half that such a pair is closer than a pair of different groups (seeded draws, "
    "no closure; streams/hierarchy.py)."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-stream",
        help="write a benchmark constraint stream to a file",
        # Raw: the epilog's one line per kind stays one line; the description is wrapped here.
        description=textwrap.fill(_DESCRIPTION, width=79),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="kinds of drift (--drift):\n"
        + "\n".join(f"  {kind:<10} {line}" for kind, line in DRIFT_HELP.items())
        + "\n\n"
        + _GROUPING_HELP
        + "\n\nnoise models (--noise-model, with --noise RHO):\n"
        + "\n".join(f"  {model:<10} {line}" for model, line in NOISE_HELP.items())
        + "\n\n"
        + CROSS_MODAL_HELP,
    )
    add_stream_arguments(p)
    p.add_argument(
        "--kind",
        choices=KINDS,
        # None: "not given", so that --cross-modal can refuse one given; else triplet.
        default=None,
        help="triplets (OAHU, OASIS), labelled pairs (LEGO, RDML) or quadruplets from a label "
        "hierarchy (needs --hierarchy) (default: triplet)",
    )
    p.add_argument(
        "--hierarchy",
        default=None,
        metavar="NAME",
        help="--kind quadruplet only, and required there: the grouping of the classes (listed "
        "below) whose groups are the upper level of the label hierarchy the quadruplets rank "
        "pairs by",
    )
    p.add_argument(
        "--drift",
        choices=DRIFTS,
        default=None,
        help="make the concept drift at constraint M (--drift-at); the kinds are listed below "
        "(default: no drift)",
    )
    p.add_argument(
        "--drift-at",
        type=int,
        default=None,
        metavar="M",
        help="the constraint at which the drift starts, 0..N (required with --drift)",
    )
    p.add_argument(
        "--drift-width",
        type=int,
        default=None,
        metavar="W",
        help="gradual drift only: constraints over which the new concept phases in (> 0, "
        "required with --drift gradual)",
    )
    p.add_argument(
        "--grouping",
        default=None,
        metavar="NAME",
        help="abrupt and gradual drift only: the grouping of the classes that is the new "
        "concept; the dataset's groupings are listed below (default: the dataset's drift "
        "default, marked there)",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=None,
        metavar="RHO",
        help="make round(RHO * N) constraints wrong, RHO in [0, 1): triplets get positive and "
        "negative swapped, pairs the similar flag flipped, quadruplets their two pairs swapped; "
        "the file marks them (default: no noise)",
    )
    p.add_argument(
        "--noise-model",
        choices=NOISE_MODELS,
        default=None,
        help="with --noise only: which constraints are made wrong; the models are listed below "
        "(default: uniform)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="output file: .npz (compact, the format oahu run reads) or .jsonl "
        "(JSON Lines, for interchange)",
    )
    add_cross_modal_arguments(p)
    # None: "not given", so that a quadruplet stream, which has no --protocol, can refuse one
    # given (triplet and pair streams take the documented default, closure).
    p.set_defaults(func=run, protocol=None)


def _build(args: argparse.Namespace) -> ConstraintStream:
    # Checked before the dataset loads.
    if args.noise is None and args.noise_model is not None:
        raise ValueError(f"--noise-model: only with --noise, got {args.noise_model}")
    if args.noise is not None:
        check_number(args.noise, "--noise", low=0.0, high=1.0, closed="left")
    stream = _build_clean(args)
    if args.noise is None:
        return stream
    return add_noise(stream, args.noise, args.noise_model or "uniform", seed=args.seed)


def _build_clean(args: argparse.Namespace) -> ConstraintStream:
    if args.split != "items" and (
        args.kind == "quadruplet" or args.hierarchy is not None or args.drift is not None
    ):
        raise ValueError(
            f"--split {args.split}: only for a plain triplet or pair stream (no --drift, no "
            "--kind quadruplet)"
        )
    if args.kind == "quadruplet" or args.hierarchy is not None:
        return _build_hierarchy(args)
    protocol = args.protocol or "closure"
    if args.drift is None:
        # A drift option without --drift would be silently ignored: refuse it instead.
        for option, value in (
            ("--drift-at", args.drift_at),
            ("--drift-width", args.drift_width),
            ("--grouping", args.grouping),
        ):
            if value is not None:
                raise ValueError(f"{option}: only with --drift, got {value}")
        return build_stream(
            args.dataset,
            args.constraints,
            args.seed,
            args.kind,
            protocol,
            split=args.split,
            label_column=args.label_column,
        )
    if args.drift_at is None:
        raise ValueError(f"--drift-at: required with --drift {args.drift}")
    if args.drift == "gradual" and args.drift_width is None:
        raise ValueError("--drift-width: required with --drift gradual")
    if args.grouping is not None and args.drift not in GROUPED_DRIFTS:
        raise ValueError(
            f"--grouping: only with --drift {' or '.join(GROUPED_DRIFTS)} (the new concept is a "
            f"grouping of the classes), not with --drift {args.drift}"
        )
    # Checked before the dataset loads; None: the dataset's drift default.
    grouping = grouping_for(args.dataset, args.grouping) if args.drift in GROUPED_DRIFTS else None
    return build_drift_stream(
        _dataset(args),
        args.constraints,
        args.seed,
        args.drift,
        args.drift_at,
        0 if args.drift_width is None else args.drift_width,
        args.kind,
        protocol,
        grouping,
    )


def _build_hierarchy(args: argparse.Namespace) -> ConstraintStream:
    # Checked before the dataset loads.
    if args.kind != "quadruplet":
        raise ValueError(
            f"--hierarchy: only with --kind quadruplet (quadruplets are drawn from a label "
            f"hierarchy), not with --kind {args.kind}"
        )
    if args.hierarchy is None:
        raise ValueError(
            "--hierarchy: required with --kind quadruplet; the groupings of "
            f"{args.dataset}'s classes are {', '.join(GROUPINGS.get(args.dataset, {}))}"
        )
    for option, value, why in (
        ("--drift", args.drift, "drifting streams are triplet or pair streams"),
        ("--drift-at", args.drift_at, "only with --drift"),
        ("--drift-width", args.drift_width, "only with --drift"),
        ("--grouping", args.grouping, "the hierarchy is --hierarchy"),
        ("--protocol", args.protocol, "quadruplets are all drawn, there is no closure"),
    ):
        if value is not None:
            raise ValueError(f"{option}: not with --kind quadruplet ({why}), got {value}")
    grouping = grouping_for(args.dataset, args.hierarchy)
    return build_hierarchy_stream(_dataset(args), args.constraints, args.seed, grouping)


def _dataset(args: argparse.Namespace) -> str | Dataset:
    # A name stays a name where the builder looks up the dataset's groupings by it.
    return (
        args.dataset if args.label_column is None else load_dataset(args.dataset, args.label_column)
    )


def _describe_drift(stream: ConstraintStream) -> str:
    drift = stream.meta.get("drift")
    if drift is None:
        return ""
    old, new = drift["concepts"]
    width = f" over {drift['width']} constraints" if drift["kind"] == "gradual" else ""
    return (
        f"; {drift['kind']} drift at constraint {drift['at']}{width}, {old} -> {new} "
        f"({int(stream.concepts.sum())} constraints of the new concept)"
    )


def _describe_hierarchy(stream: ConstraintStream) -> str:
    mix = stream.meta.get("mix")
    if stream.meta.get("protocol") != "hierarchy" or mix is None:
        return ""
    return (
        f"; hierarchy {stream.meta['hierarchy']}: {mix['fine']} fine (same class < same group), "
        f"{mix['coarse']} coarse (same group < different groups)"
    )


def _describe_noise(stream: ConstraintStream) -> str:
    noise = stream.meta.get("noise")
    if noise is None:
        return ""
    return (
        f"; {noise['model']} noise at rate {noise['rate']:g}, {noise['flipped']} of "
        f"{len(stream)} constraints flipped"
    )


def run(args: argparse.Namespace) -> int:
    if args.cross_modal:
        return _run_cross_modal(args)
    check_single_modality(args)
    args.kind = args.kind or "triplet"
    stream = _build(args)
    if str(args.out).endswith(".jsonl"):
        write_jsonl(stream, args.out)
    else:
        stream.save(args.out)
    print(
        f"wrote {len(stream)} {stream.kind} constraints over {stream.n_items} {args.dataset} "
        f"items ({len(stream.dev_idx)} development, {len(stream.test_idx)} test"
        + (", class-disjoint" if stream.meta.get("split") == "classes" else "")
        + f") to {args.out}"
        + _describe_drift(stream)
        + _describe_hierarchy(stream)
        + _describe_noise(stream)
    )
    return 0


def _run_cross_modal(args: argparse.Namespace) -> int:
    stream, views = build_cross_modal(args)
    if str(args.out).endswith(".jsonl"):
        write_cross_modal_jsonl(stream, args.out)
    else:
        stream.save(args.out)
    print(describe_cross_modal(stream, views, args.out))
    return 0
