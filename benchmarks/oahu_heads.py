"""Per-depth kNN error of OAHU before and after one pass: what each head learns, and what α picks.

How the first release explored OAHU's heads (benchmarks/README.md, "OAHU on Fashion-MNIST"); it
runs oahu's default learner, or ``--preset paper``. For one seed of the paper's Fashion-MNIST
protocol (10,000 constraints) it prints two JSON lines, before and after the pass, each with α
and the 5-NN error / macro-F1 of the α-weighted metric and of every depth alone, on a seeded
sample of test queries (the gallery is the whole development split).

    python benchmarks/oahu_heads.py --seed 0
    python benchmarks/oahu_heads.py --seed 0 --preset paper
    python benchmarks/oahu_heads.py --seed 0 --preset paper --set embedding_dim=200 --svd-head0 200

``--svd-head0 K`` is how the exploration first tried a principal-axes E0, before
``head0_init="pca"`` existed: E0's first K rows are set to the top right singular vectors of the
first 10,000 centred development items (the rest zero). ``head0_init="pca"`` does the same from
all of them.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from sklearn.metrics import f1_score

from oahu.experiments.stream_replay import replay
from oahu.inference import classify, index_gallery
from oahu.learners.oahu.learner import OAHU
from oahu.settings import parse_settings
from oahu.streams.benchmark_stream import build_stream


def depth_errors(model: OAHU, stream, queries: np.ndarray) -> dict:
    embedded = model.embed(stream.X[stream.test_idx[queries]], role="query")
    labels = stream.y[stream.test_idx[queries]]
    index = index_gallery(model, stream.X[stream.dev_idx], stream.y[stream.dev_idx]).index
    weights = [("combined", model.alpha)] + [
        (f"d{l}", np.eye(model.n_depths)[l]) for l in range(model.n_depths)
    ]
    out = {"alpha": model.alpha.round(3).tolist()}
    for name, alpha in weights:
        predicted = classify(index, embedded, alpha, k=5).labels
        out[name] = {
            "error": round(float(np.mean(predicted != labels)), 4),
            "macro_f1": round(float(f1_score(labels, predicted, average="macro")), 4),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default=None, help="e.g. paper (default: oahu's own learner)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--svd-head0", type=int, default=0, metavar="K")
    parser.add_argument("--queries", type=int, default=5000)
    args = parser.parse_args()
    stream = build_stream("fashion-mnist", 10_000, seed=args.seed)
    model = OAHU(stream.n_features, preset=args.preset, **parse_settings(args.set, "--set"))
    model.prepare(stream.X[stream.dev_idx])
    if args.svd_head0:
        centred = model.input_scaler.transform(stream.X[stream.dev_idx].astype(np.float32))
        axes = np.linalg.svd(centred[:10_000], full_matrices=False)[2][: args.svd_head0]
        head0 = torch.zeros_like(model.network.head0)
        head0[: args.svd_head0] = torch.from_numpy(axes.copy())
        model.network.head0.copy_(head0)
    rng = np.random.default_rng([args.seed, 0x51])
    queries = np.sort(rng.choice(len(stream.test_idx), args.queries, replace=False))
    print(json.dumps({"when": "before", **depth_errors(model, stream, queries)}), flush=True)
    started = time.perf_counter()
    replay(model, stream)
    seconds = round(time.perf_counter() - started, 1)
    after = {"when": "after", "train_seconds": seconds, **depth_errors(model, stream, queries)}
    print(json.dumps(after), flush=True)


if __name__ == "__main__":
    main()
