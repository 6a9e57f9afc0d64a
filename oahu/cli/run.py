"""``oahu run``: learn from a constraint stream while serving queries (see oahu.service)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from oahu.cli.serve import REPLICA_ONLY
from oahu.service.config import ServiceConfig, configure_logging
from oahu.service.config_flags import add_arguments
from oahu.service.config_sources import resolve_config

EPILOG = """\
examples:
  oahu run                                   # bundled digits stream, http://127.0.0.1:8000
  oahu run --source file:///data/stream.npz --checkpoint-dir /var/lib/oahu --exit-at-end
  oahu run --source 'kafka://broker:9092/constraints?group=oahu' --items /data/items.npz \\
           --gallery /data/gallery.npz --http 0.0.0.0:8000 \\
           --kafka-option security_protocol=SASL_SSL --kafka-option sasl_mechanism=PLAIN
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="learn from a stream (Kafka or file) while serving queries over HTTP",
        description="Consume similarity constraints, update the learner after every one, "
        "serve kNN classification / verification / retrieval and Prometheus metrics, and "
        "checkpoint so that a crash never loses or repeats a constraint.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser, [f.name for f in fields(ServiceConfig) if f.name not in REPLICA_ONLY])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = resolve_config(args)
    configure_logging(config.log_level)
    from oahu.service.serving.app import Service  # heavy imports only when actually running

    return Service(config).run()
