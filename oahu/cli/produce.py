"""``oahu produce``: replay a benchmark stream file into a Kafka topic."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from oahu.connectors.binary_codec import encode_binary_batch
from oahu.connectors.constraint import ConstraintBatch
from oahu.connectors.json_codec import encode_json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="replay a stream file into a Kafka topic",
        description="Send the constraints of a stream file (.npz from `oahu make-stream`, or "
        "JSON Lines) to a Kafka topic in stream order, as JSON or binary messages.",
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


def parse_kafka_uri(uri: str) -> tuple[str, str]:
    """(bootstrap servers, topic) of ``kafka://HOST:PORT/TOPIC``.

    >>> parse_kafka_uri("kafka://127.0.0.1:9092/constraints")
    ('127.0.0.1:9092', 'constraints')
    """
    parsed = urlparse(uri)
    topic = parsed.path.strip("/")
    if parsed.scheme != "kafka" or not parsed.netloc or not topic:
        raise ValueError(f"to: expected kafka://HOST:PORT/TOPIC, got {uri!r}")
    return parsed.netloc, topic


def encode_stream(
    path: str | Path,
    fmt: str = "binary",
    inline: bool = False,
    start: int = 0,
    limit: int | None = None,
) -> list[bytes]:
    """The messages of a stream file's constraints ``start:start+limit``, in stream order.

    >>> import tempfile
    >>> from oahu.streams.stream_file import ConstraintStream
    >>> path = Path(tempfile.mkdtemp()) / "s.npz"
    >>> ConstraintStream(np.eye(3), [0, 0, 1], [0, 1, 2], [], "triplet", [[0, 1, 2]]).save(path)
    >>> encode_stream(path, "json")
    [b'{"v":1,"kind":"triplet","anchor":{"id":"0"},"positive":{"id":"1"},"negative":{"id":"2"}}']
    """
    from oahu.streams.stream_file import ConstraintStream, read_jsonl

    path = Path(path)
    stream = ConstraintStream.load(path) if path.suffix == ".npz" else read_jsonl(path)
    stop = len(stream) if limit is None else min(len(stream), start + limit)
    ids = stream.constraints[start:stop]
    similar = None if stream.similar is None else stream.similar[start:stop]
    batch = ConstraintBatch(
        stream.kind,
        index=np.arange(len(ids)),
        ids=None if inline else ids,
        x=stream.X[ids] if inline else None,
        similar=similar,
    )
    if fmt == "binary":
        return encode_binary_batch(batch)
    return [encode_json(batch.row(i)) for i in range(len(batch))]


def produce(args: argparse.Namespace) -> int:
    from oahu.connectors.kafka_sink import KafkaSink
    from oahu.service.config import parse_pairs, parse_value

    bootstrap, topic = parse_kafka_uri(args.to)
    if args.rate is not None and args.rate <= 0:
        raise ValueError(f"rate: must be > 0, got {args.rate}")
    messages = encode_stream(args.stream, args.format, args.inline, args.start, args.limit)
    options = {k: parse_value(v) for k, v in parse_pairs(args.kafka_option, "kafka_option").items()}
    sink = KafkaSink(topic, bootstrap, rate=args.rate, config=options)
    started = time.perf_counter()
    try:
        sink.send_many(messages)
        sink.flush()
    finally:
        sink.close()
    seconds = time.perf_counter() - started
    print(
        f"oahu produce: {len(messages)} {args.format} messages to {args.to} in {seconds:.2f}s "
        f"({len(messages) / max(seconds, 1e-9):,.0f}/s)",
        file=sys.stderr,
    )
    return 0
