"""Ingest throughput: consume binary constraint messages from Kafka, decode and validate them.

No learning: this measures what the service's consumer loop can feed a learner. Steps:
produce ``--n`` binary triplets (items by id, or inline with ``--inline``) to a fresh topic,
then time ``KafkaSource.poll`` + ``decode_batch`` + ``resolve_batch`` (item lookup, dimension
and finiteness checks) until every constraint is through. Also reports the decode+resolve rate
on the same messages in memory, without Kafka.

    PYTHONPATH=. python benchmarks/ingest.py                      # starts its own broker
    PYTHONPATH=. python benchmarks/ingest.py --bootstrap 127.0.0.1:9092 --n 500000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from oahu.connectors.binary_codec import encode_binary_batch
from oahu.connectors.constraint import ConstraintBatch
from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.kafka_source import KafkaSource
from oahu.connectors.messages import decode_batch
from oahu.service.item_store import ItemStore
from oahu.service.learning.resolve import resolve_batch

KAFKA_SH = Path(__file__).resolve().parents[1] / "scripts" / "kafka" / "kafka.sh"


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The given broker, or a fresh one from scripts/kafka/kafka.sh for the run."""
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="oahu-bench-kafka-") as run_dir:
        out = subprocess.run(
            ["bash", str(KAFKA_SH), "start", run_dir], check=True, capture_output=True, text=True
        )
        try:
            yield out.stdout.strip().splitlines()[-1]
        finally:
            subprocess.run(["bash", str(KAFKA_SH), "stop", run_dir], check=True)


def make_messages(args: argparse.Namespace, rng: np.random.Generator) -> list[bytes]:
    ids = rng.integers(0, args.items, size=(args.n, 3))
    if args.inline:
        x = rng.normal(size=(args.n, 3, args.dim)).astype(np.float32)
        return encode_binary_batch(ConstraintBatch("triplet", np.arange(args.n), x=x))
    return encode_binary_batch(ConstraintBatch("triplet", np.arange(args.n), ids=ids))


def decode_and_validate(values: list[bytes], store: ItemStore) -> int:
    """Constraints that made it through decoding and resolution."""
    n_ok = 0
    for batch in decode_batch(values).batches:
        resolved, _ = resolve_batch(batch, store)
        n_ok += 0 if resolved is None else len(resolved)
    return n_ok


def run(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(args.seed)
    store = ItemStore(dim=args.dim)
    store.add(np.arange(args.items), rng.normal(size=(args.items, args.dim)))
    messages = make_messages(args, rng)

    start = time.perf_counter()
    n_mem = decode_and_validate(messages, store)
    in_memory = time.perf_counter() - start

    with broker(args.bootstrap) as bootstrap:
        topic = f"ingest-{uuid.uuid4().hex[:8]}"
        start = time.perf_counter()
        sink = KafkaSink(topic, bootstrap)
        sink.send_many(messages)
        sink.flush()
        sink.close()
        produce_s = time.perf_counter() - start

        source = KafkaSource(
            topic,
            f"bench-{uuid.uuid4().hex[:8]}",
            bootstrap,
            config={"max_partition_fetch_bytes": 16 * 1024 * 1024},
        )
        while not source.assignment:  # join the group before the clock starts
            source.poll(max_records=1, timeout=0.5)
        source.seek({0: 0})
        n_read = n_ok = 0
        start = time.perf_counter()
        while n_read < args.n:
            records = source.poll(max_records=args.max_records, timeout=1.0)
            n_read += len(records)
            n_ok += decode_and_validate([r.value for r in records], store)
        consume_s = time.perf_counter() - start
        source.close()

    assert n_ok == n_mem == args.n, (n_ok, n_mem, args.n)
    return {
        "n": args.n,
        "inline": args.inline,
        "dim": args.dim,
        "message_bytes": len(messages[0]),
        "kafka_consume_decode_validate_per_s": round(args.n / consume_s),
        "in_memory_decode_validate_per_s": round(args.n / in_memory),
        "produce_per_s": round(args.n / produce_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--n", type=int, default=200_000, help="constraints to send")
    parser.add_argument("--items", type=int, default=10_000, help="items in the store")
    parser.add_argument("--dim", type=int, default=64, help="feature dimension")
    parser.add_argument("--inline", action="store_true", help="vectors inline instead of ids")
    parser.add_argument("--max-records", type=int, default=5000, help="records per poll")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
