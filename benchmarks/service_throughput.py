"""End-to-end service rate beside the learner's own rate: the gap is the service's overhead.

1. learner alone: ``learn_triplets`` over the stream's feature arrays in one call;
2. the service (HTTP idle; the learn loop runs in its learner process) consuming the same stream
   from a file source;
3. the service consuming it from Kafka (binary messages, items by id), unless ``--no-kafka``.

Each service rate is measured from the first learned run to the last record (start-up and the
Kafka group join excluded). The learner state must equal the learner-alone one, which is checked.

    PYTHONPATH=. python benchmarks/service_throughput.py                 # digits, 5000 triplets
    PYTHONPATH=. python benchmarks/service_throughput.py --dataset fashion-mnist --n 5000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import broker

from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import encode_stream
from oahu.registry import make_learner
from oahu.service.config import ServiceConfig
from oahu.service.serving.app import Service
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.stream_file import ConstraintStream
from oahu.threads import use_native_threads

RESULTS = Path(__file__).resolve().parent / "results"


def learner_rate(stream: ConstraintStream, learner: str) -> tuple[float, dict]:
    model = make_learner(learner, stream.n_features)
    if model.needs_prepare:  # on what the service prepares it on: the stream's development split
        model.prepare(stream.X[stream.dev_idx])
    a, p, n = stream.batch(0, len(stream))
    started = time.perf_counter()
    model.learn_triplets(a, p, n)
    return len(stream) / (time.perf_counter() - started), model.summary()


def service_rate(config: ServiceConfig, n: int) -> tuple[float, dict]:
    service = Service(config)
    service.start()
    while (first := service.status["constraints_consumed"]) == 0:
        time.sleep(0.001)
    started = time.perf_counter()
    while service.status["constraints_consumed"] < n:
        time.sleep(0.005)
    seconds = time.perf_counter() - started
    summary = dict(service.status)
    service.shutdown()
    return (n - first) / seconds, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--n", type=int, default=5000, help="constraints")
    parser.add_argument("--learner", default="oahu")
    parser.add_argument("--bootstrap", help="use this Kafka broker instead of starting one")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "service_throughput.json")
    args = parser.parse_args()
    use_native_threads(1, faiss=True)

    stream = build_stream(args.dataset, args.n, seed=0)
    alone, reference = learner_rate(stream, args.learner)
    report: dict = {
        "benchmark": "service_throughput",
        "command": " ".join(["python", "benchmarks/service_throughput.py", *sys.argv[1:]]),
        "dataset": args.dataset,
        "learner": args.learner,
        "constraints": args.n,
        "learner_alone_per_s": alone,
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="oahu-throughput-") as tmp:
        stream_file = Path(tmp) / "stream.npz"
        stream.save(stream_file)
        common = {"learner": args.learner, "http": "127.0.0.1:0"}
        rate, summary = service_rate(
            ServiceConfig(source=stream_file.as_uri(), checkpoint_dir=f"{tmp}/file", **common),
            args.n,
        )
        assert np.allclose(summary["alpha"], reference["alpha"]), "file: model differs"
        report["service_file_per_s"] = rate
        if not args.no_kafka:
            with broker(args.bootstrap) as bootstrap:
                topic = f"throughput-{uuid.uuid4().hex[:8]}"
                sink = KafkaSink(topic, bootstrap)
                sink.send_many(encode_stream(stream_file, "binary"))
                sink.flush()
                sink.close()
                config = ServiceConfig(
                    source=f"kafka://{bootstrap}/{topic}?group=bench",
                    checkpoint_dir=f"{tmp}/kafka",
                    items=str(stream_file),
                    gallery=str(stream_file),
                    **common,
                )
                rate, summary = service_rate(config, args.n)
                assert np.allclose(summary["alpha"], reference["alpha"]), "kafka: model differs"
                report["service_kafka_per_s"] = rate
    for key in ("service_file_per_s", "service_kafka_per_s"):
        if key in report:
            report[key.replace("_per_s", "_overhead")] = 1 - report[key] / alone
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
