"""Throughput over windows of one long stream: does a step cost the same late as early?

Learns one Fashion-MNIST stream of the paper's protocol with the default learner (or a preset),
strict unless ``--batch-size`` says otherwise, and prints the triplets/s of each of ``--windows``
equal windows of the stream, in order, as JSON.

    python benchmarks/throughput_windows.py --constraints 300000 --windows 20
    python benchmarks/throughput_windows.py --constraints 100000 --set drift_detector=none
"""

from __future__ import annotations

import argparse
import json
import time

import oahu
from oahu.settings import parse_settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constraints", type=int, default=300_000)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--preset", default=None)
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    stream = oahu.build_stream("fashion-mnist", n_constraints=args.constraints, seed=args.seed)
    params = parse_settings(args.set, "--set")
    learner = oahu.OAHU(
        stream.n_features, preset=args.preset, batch_size=args.batch_size, device="cpu", **params
    )
    learner.prepare(stream.X[stream.dev_idx])
    width = args.constraints // args.windows
    marks = list(range(width, width * args.windows + 1, width))
    ends: list[float] = []
    start = time.perf_counter()
    oahu.replay(
        learner, stream, checkpoints=marks, at_checkpoint=lambda n: ends.append(time.perf_counter())
    )
    rates = [width / (end - begin) for begin, end in zip([start, *ends], ends, strict=False)]
    print(json.dumps({"window": width, "triplets_per_s": [round(r) for r in rates]}))


if __name__ == "__main__":
    main()
