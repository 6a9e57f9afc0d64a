"""``oahu produce``: replay a benchmark stream file into a Kafka topic."""

from __future__ import annotations

import argparse
import sys
import time

from oahu.connectors.kafka_uri import parse_kafka_uri
from oahu.connectors.messages import encode_stream
from oahu.settings import parse_settings


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="replay a stream file into a Kafka topic",
        description="Send the constraints of a stream file (.npz from `oahu make-stream`, or "
        "JSON Lines) to a Kafka topic in stream order, as JSON or binary messages. Exit status "
        "1: the brokers could not be reached or did not take the records; 2: bad arguments.",
    )
    parser.add_argument("--stream", required=True, metavar="FILE", help="stream file")
    parser.add_argument(
        "--to", required=True, metavar="kafka://HOST:PORT/TOPIC", help="destination topic"
    )
    parser.add_argument(
        "--rate", type=float, metavar="N", help="messages per second (default: as fast as possible)"
    )
    parser.add_argument(
        "--format",
        choices=("json", "binary"),
        default="binary",
        help="message encoding (default: binary)",
    )
    parser.add_argument(
        "--inline",
        action="store_true",
        help="carry feature vectors in the messages instead of item ids",
    )
    parser.add_argument(
        "--start", type=int, default=0, metavar="N", help="first constraint to send (default 0)"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="send at most N constraints")
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="kafka-python producer setting (repeatable), e.g. security_protocol=SSL",
    )
    parser.set_defaults(func=produce)


def produce(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from oahu.connectors.kafka_sink import KafkaSink

    target = parse_kafka_uri(args.to, "to", form="kafka://HOST:PORT/TOPIC")
    if args.rate is not None and args.rate <= 0:
        raise ValueError(f"rate: must be > 0, got {args.rate}")
    messages = encode_stream(args.stream, args.format, args.inline, args.start, args.limit)
    options = parse_settings(args.kafka_option, "--kafka-option")
    started = time.perf_counter()
    sink = None
    try:
        sink = KafkaSink(target.topic, target.bootstrap, rate=args.rate, config=options)
        sink.send_many(messages)
        sink.flush()
    except KafkaError as exc:
        # An unreachable or refusing broker is the operator's to fix, not a bug: no traceback.
        print(f"oahu produce: error: cannot deliver to {args.to}: {exc}", file=sys.stderr)
        return 1
    finally:
        if sink is not None:
            sink.close()
    seconds = time.perf_counter() - started
    print(
        f"oahu produce: {len(messages)} {args.format} messages to {args.to} in {seconds:.2f}s "
        f"({len(messages) / max(seconds, 1e-9):,.0f}/s)",
        file=sys.stderr,
    )
    return 0
