"""The cross-modal service's learning rate beside the model's own and beside a single-modality
service's, side by side on one machine.

For each repetition, on mfeat (pixel averages <-> Fourier coefficients, the default views) with
the same N and seed:

1. the model alone: ``CrossModalOAHU`` learning the cross-modal stream's rows one by one, as
   ``oahu replay --cross-modal`` does;
2. ``oahu run`` on that cross-modal stream file (in process, HTTP idle), from its first learned
   record to its last; its final model must be the one of 1 (checked: same hedge weights and
   counters);
3. ``oahu run`` on the single-modality mfeat stream of the same N and seed (the default learner,
   all six views joined), measured the same way.

    PYTHONPATH=. python benchmarks/cross_modal_service.py            # N = 20,000, 3 repetitions

Results: benchmarks/results/cross_modal_service.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_throughput import service_rate

from oahu.experiments.cross_modal_replay import learn_row, prepared_model
from oahu.service.config import ServiceConfig
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.cross_modal_protocol import build_cross_modal_stream
from oahu.streams.views import load_views
from oahu.threads import use_native_threads

RESULTS = Path(__file__).resolve().parent / "results"


def model_rate(path: Path) -> tuple[float, np.ndarray]:
    from oahu.streams.cross_modal import CrossModalStream

    stream = CrossModalStream.load(path)
    model = prepared_model(stream, seed=0)
    started = time.perf_counter()
    for i in range(len(stream)):
        learn_row(model, stream, i)
    return len(stream) / (time.perf_counter() - started), model.alpha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="constraints")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "cross_modal_service.json")
    args = parser.parse_args()
    use_native_threads(1, faiss=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="oahu-cross-modal-service-") as tmp:
        cross = Path(tmp) / "cross.npz"
        build_cross_modal_stream(load_views("mfeat"), args.n, seed=args.seed).save(cross)
        single = Path(tmp) / "single.npz"
        build_stream("mfeat", args.n, seed=args.seed).save(single)
        for rep in range(args.repetitions):
            alone, alpha = model_rate(cross)
            rate, status = service_rate(
                ServiceConfig(source=cross.as_uri(), checkpoint_dir=f"{tmp}/c{rep}",
                              http="127.0.0.1:0"), args.n,
            )  # fmt: skip
            assert np.allclose(status["alpha"], alpha), "the service learned another model"
            single_rate, _ = service_rate(
                ServiceConfig(source=single.as_uri(), checkpoint_dir=f"{tmp}/s{rep}",
                              http="127.0.0.1:0"), args.n,
            )  # fmt: skip
            run = {
                "model_alone_per_s": alone,
                "cross_modal_service_per_s": rate,
                "single_modality_service_per_s": single_rate,
            }
            runs.append(run)
            print(json.dumps(run), flush=True)
    mean = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
    report = {
        "benchmark": "cross_modal_service",
        "command": " ".join(["python", "benchmarks/cross_modal_service.py", *sys.argv[1:]]),
        "dataset": "mfeat",
        "constraints": args.n,
        "seed": args.seed,
        "cpus": os.cpu_count(),
        "runs": runs,
        "mean": mean,
        "service_over_model": mean["cross_modal_service_per_s"] / mean["model_alone_per_s"],
        "cross_over_single_service": mean["cross_modal_service_per_s"]
        / mean["single_modality_service_per_s"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
