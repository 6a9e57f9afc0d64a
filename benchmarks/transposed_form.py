"""What computing x·Wᵀ as (W·xᵀ)ᵀ buys a strict step on this CPU, side by side.

The forward pass takes the transposed form for 9-128 rows only where a probe shows that it gives
the plain product's bits (:mod:`oahu.learners.oahu.arrays`). This learns the same Fashion-MNIST
stream with the default learner, strict, alternately with the transposed form forced for every
shape of the step (what the code did before the probe, whatever the CPU) and with the probe's
choice, and prints triplets/s of each and the ratio probe / forced.

    python benchmarks/transposed_form.py --constraints 6000 --repeats 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import oahu
from oahu.learners.oahu import arrays


def rate(stream: oahu.ConstraintStream, force_transposed: bool) -> float:
    learner = oahu.OAHU(stream.n_features, device="cpu")
    learner.prepare(stream.X[stream.dev_idx])
    arrays._AGREES.clear()
    if force_transposed:
        w = learner.network
        shapes = [tuple(w.weights[0].shape), tuple(w.head0.shape), tuple(w.heads.shape)]
        for rows in arrays._TRANSPOSED_ROWS:
            for shape in shapes:
                arrays._AGREES[(rows, *shape)] = True
    start = time.perf_counter()
    oahu.replay(learner, stream)
    return len(stream) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constraints", type=int, default=6000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stream = oahu.build_stream("fashion-mnist", n_constraints=args.constraints, seed=args.seed)
    rates: dict[str, list[float]] = {"forced": [], "probe": []}
    for _ in range(args.repeats):  # interleaved, so that both see the same machine
        rates["forced"].append(rate(stream, True))
        rates["probe"].append(rate(stream, False))
    ratio = statistics.median(rates["probe"]) / statistics.median(rates["forced"])
    agrees = sorted({key[0] for key, same in arrays._AGREES.items() if same})
    print(
        json.dumps(
            {
                "triplets_per_s": {k: [round(v) for v in vals] for k, vals in rates.items()},
                "probe_over_forced": round(ratio, 3),
                "rows_where_the_forms_agree": agrees,
            }
        )
    )


if __name__ == "__main__":
    main()
