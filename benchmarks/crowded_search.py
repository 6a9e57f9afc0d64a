"""How long the exact index takes to search a crowded gallery, and what its bands hold.

A metric that collapses (the paper's preset: its deep heads map most of Fashion-MNIST near a
few points) leaves most queries' k-th nearest item among thousands within the product's
rounding, so no shortlist is certified and each such query is measured against its band
(oahu/inference/shortlist.py). This learns one stream of the paper's protocol with each
learner, and at each size embeds the development split (the gallery) and the test split (the
queries) and times ``MatmulIndex.search`` (k = 5, every depth) of all of them at once and of
the first 64 one at a time (the median; a service's request), with each way of drawing the
bands:

* ``float64`` (the index as it is): a band of more than ``REFINE_BAND`` items (in a block
  where ``REFINE_QUERIES`` queries have one) is drawn again from float64 partial distances;
* ``float32``: every band is drawn from the float32 product's partial distances
  (``REFINE_BAND`` set past any band), the refinement's ablation.

Both give every query the same answer (checked here, to the bit). Also recorded per depth: the
share of queries no shortlist certified and their bands' median and largest size with each
way. Written to ``results/crowded-search<tag>.json``.

    python -m benchmarks.crowded_search
    python -m benchmarks.crowded_search --learners paper --constraints 10000 --queries 4096
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its siblings
from provenance import code_version, cpu_model, machine

import oahu
from oahu.inference import band, matmul
from oahu.inference.matmul import MatmulIndex

RESULTS = Path(__file__).resolve().parent / "results"
LEARNERS = {"paper": "paper", "default": None}  # label → preset
ONE_AT_A_TIME = 64  # the first queries, also searched one by one
WAYS = {"float64": band.REFINE_BAND, "float32": 1 << 62}  # way → REFINE_BAND


def band_sizes(index: MatmulIndex, queries: np.ndarray, k: int) -> list[dict[str, Any]]:
    """Per depth: the share of ``queries`` no shortlist certified and their bands' sizes."""
    sizes: list[list[int]] = [[] for _ in range(index.n_depths)]
    for start in range(0, queries.shape[1], matmul.QUERY_BLOCK):
        block = torch.from_numpy(queries[:, start : start + matmul.QUERY_BLOCK])
        _, bands, _ = index._shortlists(block, k)
        for depth, banded in enumerate(bands):
            sizes[depth] += [len(band) for _, band in banded]
    return [
        {
            "uncertified": len(s) / queries.shape[1],
            "band_median": float(np.median(s)) if s else 0.0,
            "band_max": max(s, default=0),
        }
        for s in sizes
    ]


def measure(gallery: np.ndarray, queries: np.ndarray, k: int) -> dict[str, Any]:
    """Seconds of one search of every query, and the bands, with each way of drawing them."""
    out: dict[str, Any] = {}
    answers = []
    own = band.REFINE_BAND
    try:
        for way, refine_band in WAYS.items():
            band.REFINE_BAND = refine_band
            index = MatmulIndex(gallery)
            started = time.perf_counter()
            answers.append(index.search(queries, k))
            seconds = time.perf_counter() - started
            single = []  # a request's search: one query, as the service makes it
            for i in range(min(ONE_AT_A_TIME, queries.shape[1])):
                started = time.perf_counter()
                index.search(queries[:, i : i + 1], k)
                single.append(time.perf_counter() - started)
            out[way] = {
                "search_s": seconds,
                "one_query_ms_median": 1000 * float(np.median(single)),
                "depths": band_sizes(index, queries, k),
            }
            print(f"    {way}: {seconds:.2f} s, one query {1000 * np.median(single):.1f} ms")
    finally:
        band.REFINE_BAND = own  # the index's own, whatever a way set
    (d1, p1), (d2, p2) = answers
    out["same_answers"] = bool(np.array_equal(d1, d2) and np.array_equal(p1, p2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--learners", nargs="+", choices=list(LEARNERS), default=list(LEARNERS))
    parser.add_argument("--constraints", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=0, help="the first test queries (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    sizes = sorted(args.constraints)
    runs = []
    for label in args.learners:
        stream = oahu.build_stream("fashion-mnist", n_constraints=sizes[-1], seed=args.seed)
        learner = oahu.OAHU(stream.n_features, preset=LEARNERS[label], device="cpu", seed=args.seed)
        if learner.needs_prepare:
            learner.prepare(stream.X[stream.dev_idx])
        test = stream.test_idx[: args.queries] if args.queries else stream.test_idx

        def at(
            n: int,
            label: str = label,
            learner: Any = learner,
            stream: Any = stream,
            test: Any = test,
        ) -> None:
            print(f"  {label} after {n:,} constraints", flush=True)
            gallery = learner.embed(stream.X[stream.dev_idx], role="gallery")
            queries = learner.embed(stream.X[test], role="query")
            runs.append(
                {"learner": label, "constraints": n, "queries": len(test)}
                | measure(gallery, queries, 5)
            )

        oahu.replay(learner, stream, checkpoints=sizes, at_checkpoint=at)
    result = {
        "benchmark": "crowded_search",
        "commit": code_version(),
        "cpu": cpu_model(),
        "machine": machine(),
        "refine_band": band.REFINE_BAND,
        "seed": args.seed,
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"crowded-search{args.tag}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
