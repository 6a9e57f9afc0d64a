"""The ``oahu`` command: one sub-command per module of this package."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines ``add_parser(subparsers)``; the parser it adds sets ``func(args) -> int``.
# A command's name is its module's with "-" for "_".
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


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``oahu`` parser (see :func:`_build`)."""
    return _build(argv)[0]


def _build(
    argv: list[str] | None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``oahu`` parser and its commands' parsers by name. When ``argv`` names a command,
    only that command's module is imported: ``run`` and ``replay`` load torch (seconds), and
    ``oahu suggest`` or ``oahu produce`` in a labelling script should not wait for it.
    Otherwise (``oahu --help``, a mistyped command) every command is there, so that the
    listing and the error are complete.
    """
    parser = argparse.ArgumentParser(
        prog="oahu",
        description="Streaming online metric learning: learn a metric from a stream of "
        "similarity constraints, replay benchmark streams, serve the metric over HTTP.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    words = sys.argv[1:] if argv is None else argv
    named = [name for name in COMMANDS if words[:1] == [name.replace("_", "-")]]
    for name in named or COMMANDS:
        importlib.import_module(f"oahu.cli.{name}").add_parser(sub)
    return parser, sub.choices


def main(argv: list[str] | None = None) -> int:
    parser, commands = _build(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Said by the command's own parser, as its other argument errors are: "oahu
        # make-stream: error: ..." after that command's usage (its options), where the top
        # parser would say "oahu: error: ..." after the list of commands.
        commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args) or 0)
    except (ValueError, *_FILE_ERRORS) as exc:
        print(f"oahu {args.command}: error: {_message(exc)}", file=sys.stderr)
        return 2


# A file the user named that cannot be read is a mistake in the command, as a bad value is.
_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _message(exc: Exception) -> str:
    """The error as the other errors are said, ``WHAT: why``; for a file, its name first.

    >>> _message(FileNotFoundError(2, "No such file or directory", "g.npz"))
    'g.npz: no such file or directory'
    """
    if isinstance(exc, _FILE_ERRORS) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror[0].lower()}{exc.strerror[1:]}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
