"""``oahu make-stream --cross-modal``: the options of a cross-modal stream (streams/cross_modal.py),
the single-modality options it refuses, and what the command says it wrote."""

from __future__ import annotations

import argparse
import textwrap

from oahu.checks import check_number
from oahu.streams.cross_modal import CrossModalStream
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.datasets import looks_like_path
from oahu.streams.linked import LinkedObjects, load_cross_modal_data
from oahu.streams.views import DEFAULT_VIEWS, VIEWS, TwoViews, load_views

__all__ = [
    "CROSS_MODAL_HELP",
    "CROSS_MODAL_OPTIONS",
    "add_cross_modal_arguments",
    "build_cross_modal",
    "check_single_modality",
    "describe_cross_modal",
]

#: The epilog of ``oahu make-stream --help`` on cross-modal streams.
CROSS_MODAL_HELP = (
    "cross-modal streams (--cross-modal; the CSLP protocol, streams/FORMAT.md):\n"
    + textwrap.fill(
        "objects seen in two views, one class label each, are split 1:1 into development and "
        "test objects (the split of the single-view stream of the same seed); N constraints "
        "are drawn from the development objects: round(S * N) pairs (--pair-share S), each "
        "an item in one view and one in the other, linked (same class) with probability 1/2, "
        "and triplets, an anchor in one view with a positive of its class and a negative of "
        "another class in the other view; --within-share W puts round(W * N) of them within "
        "one view instead. The views (--views A,B, the first is modality A):",
        width=79,
        initial_indent="  ",
        subsequent_indent="  ",
    )
    + "\n"
    + "\n".join(
        f"  {dataset:<14} {', '.join(views)} (default: {','.join(DEFAULT_VIEWS[dataset])})"
        for dataset, views in VIEWS.items()
    )
    + "\n  PATH.npz       your own paired data: arrays XA, XB (rows aligned objects), y"
    + "\n"
    + textwrap.fill(
        "or your own linked objects: arrays XA and XB (the objects of each modality, any "
        "number of each) and links (row of XA, row of XB); each modality's objects are split "
        "1:1, the pairs and triplets drawn from the links between two development objects, "
        "none within one view (docs/cross-modal.md)",
        width=79,
        initial_indent="  PATH.npz       ",
        subsequent_indent="                 ",
    )
)
#: The single-modality options that mean nothing with --cross-modal, and why.
CROSS_MODAL_OPTIONS: dict[str, str] = {
    "kind": "a cross-modal stream mixes pairs and triplets; --pair-share sets the mix",
    "hierarchy": "quadruplets from a label hierarchy are single-modality",
    "drift": "cross-modal streams do not drift",
    "drift_at": "cross-modal streams do not drift",
    "drift_width": "cross-modal streams do not drift",
    "grouping": "cross-modal streams do not drift",
    "noise": "cross-modal streams carry no label noise",
    "noise_model": "cross-modal streams carry no label noise",
    "protocol": "every cross-modal constraint is drawn, there is no closure",
    "label_column": "a paired .npz holds its labels in the array y, a linked one has none",
}
_NEW_OPTIONS = ("views", "pair_share", "within_share")  # only with --cross-modal


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_cross_modal_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cross-modal``, ``--views``, ``--pair-share`` and ``--within-share``."""
    parser.add_argument(
        "--cross-modal",
        action="store_true",
        help="write a cross-modal stream instead: pairs and triplets whose items are objects "
        "seen in two views, or linked objects of two modalities (listed below); --dataset is "
        "mfeat, fashion-mnist, or a paired or linked .npz",
    )
    parser.add_argument(
        "--views",
        default=None,
        metavar="A,B",
        help="--cross-modal only: the dataset's two views, modality A then B (default: the "
        "dataset's, listed below)",
    )
    parser.add_argument(
        "--pair-share",
        type=float,
        default=None,
        metavar="S",
        help="--cross-modal only: the share of pairs, the rest triplets, S in [0, 1] "
        "(default: 0.5)",
    )
    parser.add_argument(
        "--within-share",
        type=float,
        default=None,
        metavar="W",
        help="--cross-modal only: the share of constraints with all items in one view, W in "
        "[0, 1] (default: 0, all across the views)",
    )


def check_single_modality(args: argparse.Namespace) -> None:
    """Refuse the cross-modal options without --cross-modal (they would be ignored)."""
    for dest in _NEW_OPTIONS:
        if getattr(args, dest) is not None:
            raise ValueError(f"{_option(dest)}: only with --cross-modal, got {getattr(args, dest)}")


def build_cross_modal(
    args: argparse.Namespace,
) -> tuple[CrossModalStream, TwoViews | LinkedObjects]:
    """The stream ``oahu make-stream --cross-modal`` writes, and the views (or the linked
    objects) it comes from."""
    # Checked before the dataset loads.
    for dest, why in CROSS_MODAL_OPTIONS.items():
        if getattr(args, dest) is not None:
            raise ValueError(
                f"{_option(dest)}: not with --cross-modal ({why}), got {getattr(args, dest)}"
            )
    if args.split != "items":
        raise ValueError(
            f"--split {args.split}: not with --cross-modal (its objects are split 1:1, "
            "--split items)"
        )
    pair_share = check_number(
        0.5 if args.pair_share is None else args.pair_share, "--pair-share", low=0.0, high=1.0
    )
    within_share = check_number(
        0.0 if args.within_share is None else args.within_share,
        "--within-share",
        low=0.0,
        high=1.0,
    )
    views = _views(args)
    if isinstance(views, LinkedObjects) and within_share > 0:
        raise ValueError(
            f"--within-share: not with linked objects ({args.dataset} holds links, no labels, "
            "and a link joins an object of A to one of B: nothing says which objects of one "
            f"view belong together), got {args.within_share}"
        )
    stream = build_cross_modal_stream(views, args.constraints, args.seed, pair_share, within_share)
    return stream, views


def _views(args: argparse.Namespace) -> TwoViews | LinkedObjects:
    if args.dataset not in VIEWS and looks_like_path(args.dataset):
        if args.views is not None:
            raise ValueError(
                f"--views: not with a paired file ({args.dataset}: its arrays XA and XB are the "
                f"views, named by its array names), got {args.views}"
            )
        return load_cross_modal_data(args.dataset)
    if args.views is None:
        return load_views(args.dataset)
    names = tuple(name.strip() for name in args.views.split(","))
    if len(names) != 2:
        raise ValueError(
            f"--views: expected two view names separated by a comma (A,B), got {args.views!r}"
        )
    return load_views(args.dataset, names)  # type: ignore[arg-type]


def describe_cross_modal(
    stream: CrossModalStream, views: TwoViews | LinkedObjects, out: str
) -> str:
    """The line ``oahu make-stream --cross-modal`` prints about the stream it wrote."""
    meta = stream.meta
    (a, b), (d_a, d_b) = stream.modalities, stream.dims
    wrote = (
        f"wrote {len(stream)} cross-modal constraints ({meta['n_pairs']} pairs, "
        f"{meta['n_triplets']} triplets"
    )
    if isinstance(views, LinkedObjects):
        (n_a, n_b), (dev_a, dev_b) = stream.sizes, (len(stream.dev_objects(m)) for m in (0, 1))
        return (
            f"{wrote}) over {views.dataset}: {n_a} objects in {a} ({d_a} features) and {n_b} "
            f"in {b} ({d_b}) ({dev_a} and {dev_b} development), linked by {meta['n_links']} "
            f"links ({meta['n_dev_links']} development, {meta['n_test_links']} test, "
            f"{meta['n_unused_links']} between a development and a test object, unused) to {out}"
        )
    derived = "".join(
        f"; {name} is derived from the other view (a weaker cross-modal benchmark)"
        for name in stream.modalities
        if views.derived and (view := VIEWS.get(views.dataset, {}).get(name)) and view.derived
    )
    return (
        f"{wrote}; {meta['n_cross']} across the views, "
        f"{meta['n_within']} within one) over {stream.n_objects} {views.dataset} objects in "
        f"views {a} ({d_a} features) and {b} ({d_b}) ({len(stream.dev_idx)} development, "
        f"{len(stream.test_idx)} test) to {out}{derived}"
    )
