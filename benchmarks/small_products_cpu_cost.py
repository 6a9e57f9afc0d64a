"""What the GPU's small-product dispatch costs the CPU step: nothing it should, measured.

On a GPU a strict step's products of a few rows are broadcast sums
(``oahu.learners.oahu.arrays.product``); on the CPU they stay ``@``, behind one more call and a
type check per product. This script learns the same Fashion-MNIST constraints with the default
learner, strict and at B = 256, with the network's products going through that dispatch
(``dispatch``) and through plain ``@`` (``plain``, the code before it), interleaved in one process
so that both see the same machine, and reports the rates and their median ratio. Runs on a shared
2-core machine move by ±20% (separate processes of two copies of one tree differed by 8%), far
more than a call and a type check can cost, so it also times each of a strict step's six
products alone, through both, and reports the difference per step::

    python benchmarks/small_products_cpu_cost.py --rounds 10 \
        --out benchmarks/results/small-products-cpu-cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, machine

from oahu import OAHU
from oahu.learners.oahu import arrays, network
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_fashion_mnist

WARM_UP = 500  # constraints learned before timing: the first updates allocate
# The products of a default strict step on the CPU (12 rows: four triplets of three items):
# x·Wᵀ through the two hidden layers, head 0 and the deeper heads (forward), g·Θ and g·W
# (backward).
STRICT_PRODUCTS = (
    ("times_transposed", (12, 200), (128, 200)),
    ("times_transposed", (12, 128), (128, 128)),
    ("times_transposed", (12, 200), (200, 200)),
    ("times_transposed", (2, 12, 128), (2, 200, 128)),
    ("product", (2, 12, 200), (2, 200, 128)),
    ("product", (12, 128), (128, 128)),
)


def _plain_product(a: Any, b: Any) -> Any:
    return a @ b


# The product each variant computes with: ``times_transposed`` (in arrays) and the backward
# products (in network) both call the module-level ``product`` of their module.
VARIANTS = {"dispatch": arrays.product, "plain": _plain_product}


@contextmanager
def products(variant: str) -> Iterator[None]:
    """Make the network's products go through ``variant``'s product, then the dispatch again."""
    arrays.product = network.product = VARIANTS[variant]
    try:
        yield
    finally:
        arrays.product = network.product = VARIANTS["dispatch"]


def per_call(calls: int) -> dict[str, dict[str, float]]:
    """Each strict-step product's time per call (µs, best of 5 interleaved repeats of
    ``calls`` calls) through the dispatch and through plain ``@``: the difference is all the
    dispatch can cost a step, measured without the step's own noise."""
    rng = np.random.default_rng(0)
    out = {}
    for name, a_shape, b_shape in STRICT_PRODUCTS:
        a = rng.standard_normal(a_shape, dtype=np.float32)
        b = rng.standard_normal(b_shape, dtype=np.float32)
        best = {variant: float("inf") for variant in VARIANTS}
        for _ in range(5):
            for variant in VARIANTS:
                with products(variant):
                    fn = arrays.times_transposed if name == "times_transposed" else network.product
                    seconds = timeit.timeit(lambda fn=fn, a=a, b=b: fn(a, b), number=calls)
                best[variant] = min(best[variant], seconds / calls * 1e6)
        out[f"{name} {a_shape} {b_shape}"] = best
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--strict-constraints", type=int, default=1500)
    parser.add_argument("--batch-constraints", type=int, default=8000)
    parser.add_argument("--calls", type=int, default=20_000, help="per product and repeat")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    longest = max(args.strict_constraints, args.batch_constraints)
    stream = build_stream(load_fashion_mnist(), WARM_UP + longest, args.seed)
    out: dict[str, Any] = {"code_version": code_version(), "machine": machine(), "runs": {}}
    out["strict_products_us"] = per_call(args.calls)
    extra = sum(v["dispatch"] - v["plain"] for v in out["strict_products_us"].values())
    out["strict_step_extra_us"] = extra
    print(f"a strict step's six products: {extra:+.2f} µs with the dispatch", flush=True)
    for batch, n in ((1, args.strict_constraints), (256, args.batch_constraints)):
        if not args.rounds:  # the per-call timings only
            break
        rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for r in range(args.rounds):
            for name in sorted(VARIANTS, reverse=bool(r % 2)):  # alternate which goes first
                with products(name):
                    model = OAHU(stream.n_features, batch_size=batch, seed=args.seed)
                    model.prepare(stream.X[stream.dev_idx])
                    model.learn(stream.kind, stream.features(0, WARM_UP))
                    started = time.perf_counter()
                    model.learn(stream.kind, stream.features(WARM_UP, WARM_UP + n))
                    rates[name].append(n / (time.perf_counter() - started))
        medians = {name: statistics.median(v) for name, v in rates.items()}
        out["runs"][f"B={batch}"] = {
            "constraints": n,
            "triplets_per_s": rates,
            "median": medians,
            "median_ratio": medians["dispatch"] / medians["plain"],
        }
        print(
            f"B={batch}: dispatch {medians['dispatch']:,.0f}/s, plain {medians['plain']:,.0f}/s "
            f"(median ratio {out['runs'][f'B={batch}']['median_ratio']:.3f})",
            flush=True,
        )
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
