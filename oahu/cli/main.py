"""The ``oahu`` command: one sub-command per module of this package."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines ``add_parser(subparsers)``; the parser it adds sets ``func(args) -> int``.
COMMANDS: tuple[str, ...] = (
    "make_stream",
    "replay",
    "run",
    "serve",
    "group_member",
    "produce",
    "suggest",
    "datasets",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oahu",
        description="Streaming online metric learning: learn a metric from a stream of "
        "similarity constraints, replay benchmark streams, serve the metric over HTTP.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"oahu.cli.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"oahu {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
