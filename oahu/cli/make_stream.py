"""``oahu make-stream``: write a benchmark constraint stream (docs/algorithms.md) to a file."""

from __future__ import annotations

import argparse

from oahu.cli.stream_arguments import add_stream_arguments
from oahu.streams.stream_file import KINDS, build_stream, write_jsonl


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-stream",
        help="write a benchmark constraint stream to a file",
        description="Build the paper's benchmark stream (Section 4.3.2): a seeded 1:1 "
        "development/test split of the dataset, then N constraints from the development "
        "split, N/2 sampled seeds interleaved with N/2 derived by transitive closure. The file "
        "stores the items once, the split, and the constraints as item indices in stream order "
        "(see streams/FORMAT.md).",
    )
    add_stream_arguments(p)
    p.add_argument(
        "--kind",
        choices=KINDS,
        default="triplet",
        help="triplets (OAHU, OASIS) or labelled pairs (LEGO, RDML) (default: triplet)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="output file: .npz (compact, the format oahu run reads) or .jsonl "
        "(JSON Lines, for interchange)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    stream = build_stream(args.dataset, args.constraints, args.seed, args.kind, args.protocol)
    if str(args.out).endswith(".jsonl"):
        write_jsonl(stream, args.out)
    else:
        stream.save(args.out)
    print(
        f"wrote {len(stream)} {stream.kind} constraints over {stream.n_items} {args.dataset} "
        f"items ({len(stream.dev_idx)} development, {len(stream.test_idx)} test) to {args.out}"
    )
    return 0
