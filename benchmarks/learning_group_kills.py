"""A learning group of three on a real Kafka broker, ``kill -9`` of a random member (rank 0
included) at random points, ten times, re-formed from its last cut each time: are records lost
or learned twice, and does the one-process replay of the logged schedule learn the model?

The same check as ``tests/test_group_kafka.py`` with more kills and a longer stream (its
helpers are the test's), on a broker of its own (scripts/kafka/kafka.sh):

    python benchmarks/learning_group_kills.py --kills 10 --constraints 6000
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the kill test's helpers
from group_support import checkpointed, leader, prepared, replayed, start_of
from provenance import code_version, machine
from service_support import make_stream
from test_group_kafka import _gone, _pids, _wait, _wait_consumed

from oahu.connectors.kafka_sink import KafkaSink
from oahu.connectors.messages import encode_stream
from oahu.service.catalog import base_items
from oahu.service.config import ServiceConfig
from oahu.service.group.schedule import learn_values, learned_offsets, read_schedule
from oahu.streams.stream_file import load_stream

HERE = Path(__file__).resolve().parent
KAFKA_SH = HERE.parent / "scripts" / "kafka" / "kafka.sh"
MEMBERS = 3


def run(bootstrap: str, work: Path, n: int, kills: int, seed: int) -> dict:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    stream_file = make_stream(work, n, seed=seed)
    stream = load_stream(stream_file)
    topic, group = f"kills-{seed}", f"g-{seed}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, MEMBERS, 1)])
    admin.close()
    sink = KafkaSink(topic, bootstrap)
    values = encode_stream(stream_file)
    for i, value in enumerate(values):
        sink.send(value, partition=i % MEMBERS)
    sink.flush()
    sink.close()
    config = ServiceConfig(
        source=f"kafka://{bootstrap}/{topic}?group={group}", items=str(stream_file),
        checkpoint_dir=str(work / "state"), learners=MEMBERS, combine_every=4,
        checkpoint_every=97, learner_nice=0, group_timeout=5.0,
    )  # fmt: skip
    new = prepared(stream)
    rng = np.random.default_rng(seed)
    points = sorted(rng.choice(np.arange(100, n - 300), kills, replace=False))
    killed = []
    started = time.monotonic()
    for point in points:
        rank0 = leader(config, start_of(config, new))
        _wait_consumed(rank0, int(point), 120)
        pids = _pids(rank0)
        victim = int(rng.choice(pids))
        os.kill(victim, signal.SIGKILL)
        killed.append(
            {"rank": pids.index(victim), "consumed": rank0.status["constraints_consumed"]}
        )
        assert rank0.finished.wait(30) and rank0.error is not None
        for pid in pids:
            _wait(lambda pid=pid: _gone(pid), 10, f"pid {pid} to exit")
    rank0 = leader(config, start_of(config, new))
    _wait_consumed(rank0, n, 300)
    rank0.stop()
    seconds = time.monotonic() - started
    model, progress = checkpointed(config)
    rounds = read_schedule(config.checkpoint_dir, MEMBERS)
    counts = collections.Counter(learned_offsets(rounds))
    expected = {(p, o) for p in range(MEMBERS) for o in range(n // MEMBERS)}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    committed = [consumer.committed(TopicPartition(topic, p)) for p in range(MEMBERS)]
    consumer.close()
    by_offset = {}
    reader = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=10_000)  # fmt: skip
    for record in reader:
        by_offset[(record.partition, record.offset)] = record.value
        if len(by_offset) == n:
            break
    reader.close()
    items, _ = base_items(config)
    replay = replayed(
        config, MEMBERS, new(),
        lambda learner, pairs: learn_values(learner, [by_offset[o] for o in pairs], items),
    )  # fmt: skip
    a, b = model.get_state()["model"]["network"], replay.get_state()["model"]["network"]
    deviation = max(float((a[k] - b[k]).abs().max()) for k in a)
    return {
        "constraints": n,
        "members": MEMBERS,
        "kills": killed,
        "restarts_in_schedule": sum(r.restart for r in rounds),
        "seconds": seconds,
        "lost": len(expected - set(counts)),
        "learned_twice": sum(1 for c in counts.values() if c > 1),
        "checkpoint_offsets": progress.offsets,
        "checkpoint_consumed": progress.consumed,
        "model_constraints_seen": model.constraints_seen,
        "kafka_committed": committed,
        "replay_max_parameter_difference": deviation,
        "replay_alpha_difference": float(np.abs(model.alpha - replay.alpha).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--constraints", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "learning-group-kills.json")
    args = parser.parse_args()
    subprocess.run(["bash", str(KAFKA_SH), "install"], check=True)
    with tempfile.TemporaryDirectory(prefix="oahu-kills-") as tmp:
        work = Path(tmp)
        out = subprocess.run(["bash", str(KAFKA_SH), "start", str(work / "kafka")], check=True,
                             capture_output=True, text=True)  # fmt: skip
        bootstrap = out.stdout.strip().splitlines()[-1]
        try:
            result = run(bootstrap, work, args.constraints, args.kills, args.seed)
        finally:
            subprocess.run(["bash", str(KAFKA_SH), "stop", str(work / "kafka")], check=False)
    report = {
        "benchmark": "learning_group_kills",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "code": code_version(),
        "command": "python benchmarks/learning_group_kills.py " + " ".join(sys.argv[1:]),
        **result,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
