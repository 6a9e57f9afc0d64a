"""``oahu group-member``: one rank of a learning group that runs on another machine than rank 0
(``oahu run --learners N --local-learners M --group-address tcp://HOST:PORT`` there)."""

from __future__ import annotations

import argparse

from oahu.service.config import configure_logging
from oahu.service.config_flags import add_arguments
from oahu.service.config_sources import resolve_config

EPILOG = """\
example: rank 0 and 1 on host a, ranks 2 and 3 on host b, one model over a topic's partitions
  a$ oahu run --learners 4 --local-learners 2 --group-address tcp://a:29500 \\
              --source 'kafka://broker:9092/constraints?group=oahu' --items /data/items.npz
  b$ oahu group-member --rank 2 --learners 4 --group-address tcp://a:29500 \\
              --source 'kafka://broker:9092/constraints?group=oahu' --items /data/items.npz
  b$ oahu group-member --rank 3 ...   (the same settings)
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "group-member",
        help="run one rank of a learning group on this machine (rank 0 runs `oahu run`)",
        description="Join the learning group at --group-address as --rank and learn its share "
        "of the source's partitions until the group stops; exit 1 when the group fails (run it "
        "under a supervisor that restarts it: the group re-forms from its last checkpoint).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rank", type=int, required=True, metavar="R", help="this member's rank")
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rank = args.rank
    del args.rank  # not a setting of the service
    config = resolve_config(args)
    configure_logging(config.log_level)
    local = config.local_learners or config.learners
    if config.group_address is None:
        raise ValueError("group_address: a member on another machine needs rank 0's address")
    if not local <= rank < config.learners:
        raise ValueError(
            f"rank: {rank} is not a rank another machine runs; rank 0's machine runs ranks 0 to "
            f"{local - 1} of {config.learners} (--local-learners)"
        )
    from oahu.service.group.members import member_main

    member_main(config, rank, config.group_address, None)
    return 0
