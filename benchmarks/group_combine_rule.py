"""How a learning group should combine its members: the weighted mean of their models, or their
changes since the last combine added up. Measured on development data only.

Two members are simulated in one process, as the schedule replay of a learning group does
(:func:`oahu.service.group.combine.combine_in_process`): in each round each member learns K
updates' worth of constraints of a validation stream (``validation_search.validation_stream``:
a seed's development split halved into learning items and validation queries), sharded by
``--sharding``, and they are combined by ``--rules``;
one learner over the same stream is the reference. The score is the kNN (k = 5) error count on
the validation queries after the stream, member 0's model (every member holds the same one).

``--sharding records``: member i learns the constraints at positions i mod N, as the group
dealt a stream file out before it cut files in blocks (in the paper's protocol a derived
constraint follows each seed, so with two members one learns every seed and the other every
derived constraint; results written then call it ``file``); ``blocks``: each member learns the
next K updates' worth in turn, as the group reads a stream file now and as Kafka partitions
filled in batches would hold them.

    python -m benchmarks.group_combine_rule --out benchmarks/results/group-combine-rule.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.provenance import code_version, machine
from benchmarks.validation_search import validation_errors, validation_stream
from oahu.experiments.stream_replay import replay
from oahu.registry import make_learner
from oahu.service.group.combine import CombineRule, combine_in_process

SINGLE = "one learner"


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One rule's pass over one seed's validation stream at one batch size."""
    torch.set_num_threads(1)
    seed, batch, n, every = spec["seed"], spec["batch_size"], spec["constraints"], spec["every"]
    stream = validation_stream(spec["dataset"], seed, n)

    def learner():
        made = make_learner("oahu", stream.n_features, seed=seed, batch_size=batch)
        made.prepare(stream.X[stream.dev_idx])
        return made

    started = time.perf_counter()
    if spec["rule"] == SINGLE:
        model = learner()
        replay(model, stream)
    else:
        rule: CombineRule = spec["rule"]
        n_members = spec["members"]
        members = [learner() for _ in range(n_members)]
        last = members[0].combine_values()
        share = every * batch
        for start in range(0, n, share * n_members):
            weights = []
            for rank, member in enumerate(members):
                if spec["sharding"] == "records":  # record o to member o mod N
                    mine = np.arange(start + rank, min(start + share * n_members, n), n_members)
                else:
                    mine = np.arange(start + rank * share, min(start + (rank + 1) * share, n))
                if len(mine):
                    member.learn("triplet", stream.X[stream.constraints[mine]])
                weights.append(float(len(mine)))
            last = combine_in_process(members, weights, last, rule)
        model = members[0]
    return {
        **spec,
        "validation_errors": validation_errors(model, stream),
        "n_validation": len(stream.test_idx),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101],
                        help="development seeds (never the test seeds 0-2)")  # fmt: skip
    parser.add_argument("--constraints", type=int, default=100_000)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--every", type=int, default=64, help="updates per member per round (K)")
    parser.add_argument("--rules", nargs="+", default=[SINGLE, "mean", "sum"])
    parser.add_argument("--sharding", choices=["records", "blocks"], default="blocks",
                        help="which constraints each member learns (see above)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one core each)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    specs = [
        {"dataset": args.dataset, "seed": seed, "batch_size": batch, "rule": rule,
         "constraints": args.constraints, "members": args.members, "every": args.every,
         "sharding": args.sharding}
        for batch in args.batch_sizes for seed in args.seeds for rule in args.rules
    ]  # fmt: skip
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = []
        for result in pool.map(run, specs):
            print(json.dumps(result), flush=True)
            runs.append(result)
    report = {
        "benchmark": "group_combine_rule",
        "command": "python -m benchmarks.group_combine_rule " + " ".join(sys.argv[1:]),
        "code": code_version(),
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "runs": runs,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
