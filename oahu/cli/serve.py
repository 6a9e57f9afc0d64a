"""``oahu serve``: a serving replica that follows an ``oahu run --publish-model``."""

from __future__ import annotations

import argparse

from oahu.service.config import configure_logging
from oahu.service.config_flags import add_arguments
from oahu.service.config_sources import resolve_config

# The settings only a replica reads (oahu run has no flag for them).
REPLICA_ONLY = ("model_topic", "max_model_lag")
# The settings a replica reads: where the snapshots come from, its items, and how it answers.
SERVE_SETTINGS = (
    "model_topic",
    "gallery",
    "items",
    "http",
    "auth_token",
    "index",
    "ivf_nprobe",
    "k",
    "max_request_bytes",
    "max_batch_items",
    "max_model_lag",
    "kafka",
    "log_level",
)

EPILOG = """\
examples:
  oahu run --source 'kafka://broker:9092/constraints?group=oahu' --gallery /data/gallery.npz \\
           --publish-model kafka://broker:9092/oahu-model
  oahu serve --model-topic kafka://broker:9092/oahu-model --gallery /data/gallery.npz \\
             --http 0.0.0.0:8001
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve queries from the snapshots an oahu run --publish-model sends (a replica)",
        description="A serving replica: follow the model topic of an oahu run --publish-model "
        "(snapshots) and its items topic (item changes), build each snapshot in the background "
        "and answer the same HTTP API, with the same answers for the same snapshot number. "
        "Stateless: restarted, it reads the topics again. Give it the --gallery (and --items) "
        "the learner service has.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser, SERVE_SETTINGS)
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    config = resolve_config(args)
    configure_logging(config.log_level)
    from oahu.service.serving.replica import Replica  # heavy imports only when serving

    return Replica(config).run()
