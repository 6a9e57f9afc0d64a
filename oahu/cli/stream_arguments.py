"""The options that describe the paper's benchmark stream, shared by ``oahu make-stream`` (which
writes it) and ``oahu replay`` (which builds it on the fly unless given ``--stream``)."""

from __future__ import annotations

import argparse

from oahu.streams.datasets import DATASETS
from oahu.streams.stream_file import PROTOCOLS


def add_stream_arguments(
    parser: argparse.ArgumentParser, source: argparse._MutuallyExclusiveGroup | None = None
) -> None:
    """``--dataset`` (into ``source``, a group of alternatives, if given; else required),
    ``--constraints``, ``--seed`` and ``--protocol``."""
    (source or parser).add_argument(
        "--dataset",
        choices=DATASETS,
        required=source is None,
        default=None,
        help="the dataset to build the paper's stream from: digits (scikit-learn, bundled) or "
        "fashion-mnist (Debian package dataset-fashion-mnist)"
        + ("" if source is None else " (default: digits)"),
    )
    parser.add_argument(
        "--constraints",
        type=int,
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
