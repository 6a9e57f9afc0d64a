"""A learning group against one learner process: constraints/s and test error on a
Fashion-MNIST triplet stream (the paper's protocol), strict (B = 1) and micro-batch.

Each run is the service's learner process as ``oahu run`` spawns it (a real
:class:`~oahu.service.serving.process.LearnerProcess` over the stream file with
``--exit-at-end``): with ``--learners 1`` today's one process, with 2 a group of two that
combines every ``--combine-every`` updates. Constraints/s are counted over the same stretch of
the stream for every run of a batch size: from its first status report at or past the count at
which the latest of those runs first reported records consumed, to its last report (start-up
and rendezvous left out; the final checkpoint, which both write before their last report, in).
A group reports after its first round, which at B = 256 is a third of a 100,000-constraint
stream, and a learner's first updates are its smallest (the micro-batch ramp), so counting each
run from its own first report would leave the slow start out of the group's rate only. Best and
median of ``--repeats`` interleaved runs; test error is the kNN error (k = 5) of the final
checkpoint on the test queries (all of them by default). The stream is made once with
``oahu make-stream --dataset fashion-mnist``. The machine's load average is recorded beside each
figure: on a shared 2-core machine other processes cost a lot, and two members need both cores.

    python benchmarks/learning_group.py --constraints 100000          # the default K
    python benchmarks/learning_group.py --constraints 100000 --combine-every 16 64
    python benchmarks/learning_group.py --constraints 20000 --batch-sizes 1 \
        --members 2 --combine-every 1 4 16 64 --out benchmarks/results/learning-group-k.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

from oahu.experiments.evaluation import evaluate
from oahu.persistence import learner_to_bytes
from oahu.registry import make_learner
from oahu.service.checkpoints import Progress, checkpoint_path, read_checkpoint
from oahu.service.config import ServiceConfig
from oahu.service.group.loop import round_updates
from oahu.service.learning.main import learner_main
from oahu.service.messages import Start
from oahu.service.serving.process import LearnerProcess
from oahu.streams.stream_file import load_stream

RESULTS = Path(__file__).resolve().parent / "results"


def make_stream(constraints: int, seed: int, directory: Path) -> Path:
    path = directory / f"fashion-mnist-{constraints}-seed{seed}.npz"
    if not path.exists():
        subprocess.run(
            [sys.executable, "-m", "oahu.cli.main", "make-stream", "--dataset", "fashion-mnist",
             "--constraints", str(constraints), "--seed", str(seed), "--out", str(path)],
            check=True, capture_output=True,
        )  # fmt: skip
    return path


def run_one(stream_path: Path, members: int, batch: int, every: int, state: Path) -> dict:
    """One run of the learner process (a group of ``members``); its rate and final model."""
    state.mkdir(parents=True, exist_ok=True)  # what the serving process does before it spawns
    stream = load_stream(stream_path)
    learner = make_learner("oahu", stream.n_features, batch_size=batch)
    learner.prepare(stream.X[stream.dev_idx])
    config = ServiceConfig(
        source=stream_path.as_uri(), checkpoint_dir=str(state), exit_at_end=True,
        learners=members, combine_every=every, learner_params={"batch_size": batch},
        checkpoint_every=10**9, checkpoint_interval=10**6, learner_nice=0, log_level="warning",
    )  # fmt: skip
    reports: list[tuple[float, int]] = []
    lock = threading.Lock()

    def on_status(status: dict[str, Any]) -> None:
        with lock:
            reports.append((time.perf_counter(), int(status.get("constraints_consumed", 0))))

    process = LearnerProcess(
        learner_main, (config,), Start(learner_to_bytes(learner), Progress().to_extra()), {},
        lambda _: None, lambda _: None, on_status,
    )  # fmt: skip
    load_before = os.getloadavg()
    process.start()
    process.finished.wait()
    if process.error:
        raise RuntimeError(process.error)
    model, progress = read_checkpoint(checkpoint_path(state))
    assert progress.consumed == len(stream), (progress.consumed, len(stream))
    return {
        "members": members,
        "batch_size": batch,
        "combine_every": round_updates(config, learner) if members > 1 else None,
        "reports": reports,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "model": model,
    }


def rate_from(record: dict[str, Any], start: int) -> dict[str, float]:
    """Constraints/s of a run from its first status report at or past ``start`` constraints to
    its last, and the seconds between them."""
    reports = record["reports"]
    t0, c0 = next((t, c) for t, c in reports if c >= start)
    t1, c1 = reports[-1]
    return {"constraints_per_s": (c1 - c0) / (t1 - t0), "from": c0, "seconds": t1 - t0}


def test_error(model: Any, stream: Any, queries: int) -> float:
    report = evaluate(
        model, stream.X, stream.y, stream.eval_gallery_idx, stream.eval_query_idx,
        n_pairs=100, max_queries=queries, seed=0,
    )  # fmt: skip
    return float(report.error)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constraints", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--combine-every", type=int, nargs="+", default=[None],
        help="K values to run (default: the service's, by the learner's mode)",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting, interleaved")
    parser.add_argument(
        "--queries", type=int, default=None, help="test queries evaluated (default: all)"
    )
    parser.add_argument(
        "--no-eval", action="store_true", help="constraints/s only (the models are deterministic)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="oahu-group-bench-"))
    stream_path = make_stream(args.constraints, args.seed, work)
    stream = load_stream(stream_path)
    settings = []
    for batch in args.batch_sizes:
        for members in args.members:
            for every in args.combine_every if members > 1 else args.combine_every[:1]:
                settings.append((members, batch, every))
    results: dict[tuple[int, int, int], dict] = {}
    # Interleaved, so that every setting sees the machine as it is through the whole run. The
    # model is deterministic (each member learns its shard in the same rounds), so the first
    # run's is evaluated.
    for repeat in range(args.repeats):
        for members, batch, every in settings:
            state = work / f"state-{members}-{batch}-{every}-{repeat}"
            record = run_one(stream_path, members, batch, every, state)
            model = record.pop("model")
            kept = {k: v for k, v in record.items() if k != "reports"}
            entry = results.setdefault((members, batch, every), {**kept, "runs": []})
            entry["runs"].append(
                {k: record[k] for k in ("reports", "load_average_before", "load_average_after")}
            )
            if repeat == 0:
                entry["test_error"] = (
                    None if args.no_eval else test_error(model, stream, args.queries)
                )
    # the same stretch of the stream for every run of a batch size (see the docstring)
    for batch in args.batch_sizes:
        entries = [e for (_, b, _), e in results.items() if b == batch]
        start = max(next(c for _, c in r["reports"] if c > 0) for e in entries for r in e["runs"])
        for entry in entries:
            for repeat, run in enumerate(entry["runs"]):
                run.update(rate_from(run, start))
                summary = {k: v for k, v in run.items() if k != "reports"}
                print(json.dumps({**summary, "members": entry["members"], "batch_size": batch,
                                  "repeat": repeat}), flush=True)  # fmt: skip
                del run["reports"]
    rows = []
    for (members, batch, _), entry in results.items():
        rates = [r["constraints_per_s"] for r in entry["runs"]]
        one = results[(1, batch, args.combine_every[0])] if 1 in args.members else None
        one_rates = [r["constraints_per_s"] for r in one["runs"]] if one else None
        row = {
            "members": members,
            "batch_size": batch,
            "combine_every": entry["combine_every"],
            "constraints_per_s_best": max(rates),
            "constraints_per_s_median": statistics.median(rates),
            "runs": entry["runs"],
            "test_error": entry["test_error"],
        }
        if one is not None:
            row["speedup_median"] = statistics.median(rates) / statistics.median(one_rates)
            if not args.no_eval:
                row["error_minus_one_learner"] = entry["test_error"] - one["test_error"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    report = {
        "benchmark": "learning_group",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load_note": "each run records the machine's load averages before it: whatever else "
        "runs beside the group takes cores its members need",
        "code": code_version(),
        "command": "python benchmarks/learning_group.py " + " ".join(sys.argv[1:]),
        "stream": f"oahu make-stream --dataset fashion-mnist --constraints {args.constraints} "
        f"--seed {args.seed}",
        "constraints": args.constraints,
        "test_queries": args.queries or len(stream.eval_query_idx),
        "results": rows,
    }
    out = args.out or RESULTS / f"learning-group-{args.constraints}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
