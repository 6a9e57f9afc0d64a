"""What keeping the projections of known items saves an update: the default learner on one
Fashion-MNIST stream with and without them, side by side, one process per core.

An update on the CPU takes the preprocessed rows of items it has seen from
:class:`~oahu.learners.oahu.projection_cache.ProjectionCache` instead of projecting them again
(docs/algorithms.md, "Projections of known items"). Both runs learn the same stream (seed
``--seed``, strict or in micro-batches of ``--batch-size``) at the same time; each records its
triplets/s over the whole stream and its tenths, the cache's hits and misses (items), and a
digest of the learned weights, so that the result says whether the two models are the same bit
for bit on this machine. Written to ``results/projection-cache<tag>.json``.

    python benchmarks/projection_cache.py --constraints 100000
    python benchmarks/projection_cache.py --constraints 300000 --batch-size 256 --tag=-b256
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, cpu_model, machine
from throughput_windows import tenth_rate

import oahu

RESULTS = Path(__file__).resolve().parent / "results"
WINDOWS = 10


def run(keep: bool, constraints: int, seed: int, batch_size: int = 1) -> dict[str, Any]:
    """Learn the stream, keeping projections or not; rates and the weights' digest."""
    stream = oahu.build_stream("fashion-mnist", n_constraints=constraints, seed=seed)
    learner = oahu.OAHU(stream.n_features, device="cpu", batch_size=batch_size)
    learner.prepare(stream.X[stream.dev_idx])
    learner.update_step.keep_projections = keep
    marks = [constraints * i // WINDOWS for i in range(1, WINDOWS + 1)]
    ends: list[float] = []
    started = time.perf_counter()
    oahu.replay(
        learner,
        stream,
        checkpoints=marks,
        at_checkpoint=lambda n: ends.append(time.perf_counter() - started),
    )
    digest = hashlib.sha256()
    for tensor in learner.network.tensors().values():
        digest.update(tensor.numpy().tobytes())
    projections = learner.update_step.projections
    return {
        "keep_projections": keep,
        "whole_per_s": constraints / ends[-1],
        "first_tenth_per_s": tenth_rate(marks, ends, first=True),
        "last_tenth_per_s": tenth_rate(marks, ends, first=False),
        "hits": projections.hits if projections else 0,
        "misses": projections.misses if projections else 0,
        "items_kept": len(projections) if projections else 0,
        "weights_sha256": digest.hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--constraints", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1, help="1: strict updates")
    parser.add_argument("--tag", default="", help="suffix of the result's file name")
    args = parser.parse_args()
    with ProcessPoolExecutor(2) as pool:
        kept, projected = pool.map(
            run, [True, False], [args.constraints] * 2, [args.seed] * 2, [args.batch_size] * 2
        )
    result = {
        "command": " ".join(["python benchmarks/projection_cache.py", *sys.argv[1:]]),
        "constraints": args.constraints,
        "seed": args.seed,
        "batch_size": args.batch_size,
        "commit": code_version(),
        "cpu": cpu_model(),
        "machine": machine(),
        "runs": [kept, projected],
        "speedup": kept["whole_per_s"] / projected["whole_per_s"],
        "same_weights": kept["weights_sha256"] == projected["weights_sha256"],
    }
    out = RESULTS / f"projection-cache{args.tag}.json"
    out.write_text(json.dumps(result, indent=1))
    print(
        f"kept: {kept['whole_per_s']:,.0f}/s ({kept['hits']:,} items from the cache, "
        f"{kept['misses']:,} not), projected every time: {projected['whole_per_s']:,.0f}/s, "
        f"{result['speedup']:.3f}x; same weights: {result['same_weights']}"
    )


if __name__ == "__main__":
    main()
