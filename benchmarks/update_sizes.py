"""How far each update moves a micro-batch learner's parameters, along a development stream.

A micro-batch update sums B constraints' gradients at one point (docs/algorithms.md, B1), and
the trust region (B2, ``max_step_change``) bounds how far it may move the parameters, relative
to their norm. This measures that move, ‖θ_after − θ_before‖ / ‖θ_before‖ over every parameter
of the network, for every update of one pass over a seed's validation stream (the learning half
of its development split, :func:`benchmarks.validation_search.validation_stream`; the test split
is never read), and summarises it per window of constraints: the sizes of the window's updates
and the 10th, 50th and 90th percentiles and the largest of their moves. It tells whether a
bound would bind, and on which stretch of the stream.

    python benchmarks/update_sizes.py --seed 100 --constraints 300000 \
        --set batch_size=1024 --set batch_ramp=300 --window 50000

The learner steps per update on the host (``step_engine="update"``), one ``learn_triplets``
call per update (each call takes :meth:`~oahu.learners.oahu.update.UpdateStep.update_size`
constraints). The summary is printed as JSON and, with ``--out``, written there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the repo
from benchmarks.validation_search import validation_stream
from oahu import OAHU
from oahu.settings import parse_settings


def parameters(model: OAHU) -> np.ndarray:
    """Every parameter of the model's network, flat, float64."""
    network = model.network.state_dict()  # the network alone: a checkpoint copies far more
    return np.concatenate([w.double().ravel().numpy() for w in network.values()])


def update_moves(
    model: OAHU, X: np.ndarray, constraints: np.ndarray
) -> list[tuple[int, int, float]]:
    """Learn the triplets ``constraints`` (n, 3 indices into ``X``) one update at a time; per
    update, the constraints learned after it, its size and its relative move ‖Δθ‖ / ‖θ‖. Each
    update's rows are gathered when it is learned, not the whole stream's at once."""
    out, done = [], 0
    before = parameters(model)
    while done < len(constraints):
        size = min(model.update_step.update_size(), len(constraints) - done)
        block = constraints[done : done + size]
        model.learn_triplets(X[block[:, 0]], X[block[:, 1]], X[block[:, 2]])
        after = parameters(model)
        done += size
        move = float(np.linalg.norm(after - before) / np.linalg.norm(before))
        out.append((done, size, move))
        before = after
    return out


def summarise(moves: list[tuple[int, int, float]], window: int) -> list[dict[str, Any]]:
    """Per window of ``window`` constraints: update sizes and percentiles of the moves.

    >>> rows = summarise([(10, 10, 0.1), (30, 20, 0.3), (60, 30, 0.2)], 50)
    >>> [(r["end"], r["updates"], r["size_max"], r["move_max"]) for r in rows]
    [(50, 2, 20, 0.3), (100, 1, 30, 0.2)]
    """
    ends = np.array([m[0] for m in moves])
    sizes = np.array([m[1] for m in moves])
    rel = np.array([m[2] for m in moves])
    rows = []
    for end in range(window, int(ends[-1]) + window, window):
        inside = (ends > end - window) & (ends <= end)
        if not inside.any():
            continue
        p10, p50, p90 = np.percentile(rel[inside], [10, 50, 90])
        rows.append(
            {
                "end": end,
                "updates": int(inside.sum()),
                "size_min": int(sizes[inside].min()),
                "size_max": int(sizes[inside].max()),
                "move_p10": round(float(p10), 5),
                "move_p50": round(float(p50), 5),
                "move_p90": round(float(p90), 5),
                "move_max": round(float(rel[inside].max()), 5),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--seed", type=int, default=100, help="a development seed (100 and up)")
    parser.add_argument("--constraints", type=int, default=300_000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.seed < 100:
        parser.error("--seed: use a development seed (100 and up); 0-99 are for reporting")
    settings = parse_settings(args.set, "--set")
    stream = validation_stream(args.dataset, args.seed, args.constraints)
    model = OAHU(stream.n_features, seed=args.seed, step_engine="update", **settings)
    model.prepare(stream.X[stream.dev_idx])
    moves = update_moves(model, stream.X, stream.constraints)
    summary = {
        "command": "python benchmarks/update_sizes.py " + " ".join(argv or sys.argv[1:]),
        "settings": settings,
        "max_step_change": model.config.max_step_change,
        "windows": summarise(moves, args.window),
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
