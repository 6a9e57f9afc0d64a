"""Concept drift: detection, recovery and final error on drifting streams, false alarms on
stationary ones, and what detection costs.

For each dataset, drift kind (:mod:`oahu.streams.drift`: abrupt, gradual, covariate, novel) and
seed, one stream of N constraints with the drift at M (gradual: over W from M) is learned in one
pass by:

* ``oahu (adapting)``: the default learner, which detects drifts with river's ADWIN on its
  prequential mistakes and adapts (``drift_adaptation="alpha+step+memory"``);
* ``oahu (no adaptation)``: the same learner, detecting but not adapting: its model is the one
  a learner without drift handling learns (detection never changes the model by itself), each
  adaptation step alone (``oahu (alpha)``, ``oahu (step)``, ``oahu (memory)``) with
  ``--policies``;
* ``oasis`` and ``opml``, which report drifts with the same detector and do not adapt;
* ``oahu (new concept alone)``: the default learner on the stream's constraints of the new
  concept only (as many as the drifting stream holds after M), prepared on the final gallery:
  the final error a learner that never saw the old concept reaches.

Measured per run: every constraint's prequential outcome (did the combined metric rank it right
before learning it; the values the detector sees), from which the rolling prequential accuracy
over ``WINDOW`` constraints (plotted), the detection delay (constraints from M to the first
detection of the combined metric at or after M; OPML, which learns from its own pass of samples:
in samples from the matching share of its pass), false alarms (detections before M), the
recovery time (constraints from M until the rolling accuracy of the constraints after M is back,
for at least 500 constraints, within 2 points of the lower of its level over the 2,000
constraints before M and its level over the last 3,000 of the stream: its pre-drift level or its
new plateau; 0 if it never fell below; OAHU's variants all recover to the no-adaptation
learner's level, so that the times compare), the prequential accuracy over the 2,000 constraints
after M, and the 5-NN test error under the final concept (its labels, and the final items for
covariate drift).

    python -m benchmarks.drift --policies abrupt                 # both datasets, seeds 0-2
    python -m benchmarks.drift --stationary                      # false alarms, N = 100,000
    python -m benchmarks.drift --overhead                        # what detection costs

Runs are cached as JSON under benchmarks/results/drift/ (delete one to re-run it); aggregates go
to results/drift-<dataset>.json, plots to results/drift-<dataset>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stream_runs import cached_run, evaluate_on_stream, run_all
from oahu.drift import COMBINED
from oahu.experiments.stream_replay import replay
from oahu.learner import Learner
from oahu.registry import make_learner
from oahu.streams import build_drift_stream
from oahu.streams.benchmark_stream import build_stream
from oahu.streams.drift import DRIFTS
from oahu.streams.stream_file import ConstraintStream

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "drift"
WINDOW = 250  # constraints in the rolling prequential accuracy
PRE_LEVEL = 2000  # constraints before M that give the pre-drift level
PLATEAU = 3000  # last constraints of the stream that give the new plateau
TOLERANCE = 0.02  # "back within 2 points"
SUSTAIN = 500  # constraints the accuracy must stay back for
AFTER = 2000  # constraints after M over which accuracy_after is taken
OVERHEAD_CHUNK = 100  # constraints each learner learns in its turn (--overhead)
MAX_QUERIES = 5000  # seeded sample of the final queries for the error (Fashion-MNIST: 35,000)
# label -> (registered learner, constructor parameters)
LEARNERS: dict[str, tuple[str, dict[str, Any]]] = {
    "oahu (adapting)": ("oahu", {}),
    "oahu (no adaptation)": ("oahu", {"drift_adaptation": "none"}),
    "oasis": ("oasis", {}),
    "opml": ("opml", {}),
    "oahu (new concept alone)": ("oahu", {}),
}
POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    f"oahu ({step})": ("oahu", {"drift_adaptation": step}) for step in ("alpha", "step", "memory")
}
ALONE = "oahu (new concept alone)"
NO_ADAPTATION = "oahu (no adaptation)"


def record_outcomes(learner: Learner) -> list[np.ndarray]:
    """Collect the prequential outcomes the learner hands its drift detector (rows: constraints,
    column 0: the combined metric's mistake), whether or not it detects."""
    outcomes: list[np.ndarray] = []
    observe = learner._observe_mistakes

    def recording(mistakes: np.ndarray, update_sizes: Sequence[int] | None = None) -> Any:
        outcomes.append(np.asarray(mistakes, dtype=bool)[:, 0].copy())
        return observe(mistakes, update_sizes)

    learner._observe_mistakes = recording  # type: ignore[method-assign]
    return outcomes


def new_concept_alone(stream: ConstraintStream) -> ConstraintStream:
    """The drifting stream's constraints of the final concept only, in order."""
    assert stream.concepts is not None
    keep = stream.concepts == stream.concepts.max()
    similar = None if stream.similar is None else stream.similar[keep]
    return ConstraintStream(
        stream.X,
        stream.y,
        stream.dev_idx,
        stream.test_idx,
        stream.kind,
        stream.constraints[keep],
        similar,
        dict(stream.meta),
    )


def drifting_stream(dataset: str, kind: str, seed: int, n: int, at: int, width: int):
    return build_drift_stream(
        dataset, n, seed, kind, at, drift_width=width if kind == "gradual" else 0
    )


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One learner on one stream: outcomes, detections and the final error."""
    name, params = (LEARNERS | POLICIES)[spec["label"]]
    if spec["kind"] == "none":
        stream = build_stream(spec["dataset"], spec["n"], spec["seed"])
    else:
        stream = drifting_stream(
            spec["dataset"], spec["kind"], spec["seed"], spec["n"], spec["at"], spec["width"]
        )
    prepare_idx = stream.prepare_idx
    if spec["label"] == ALONE:
        stream, prepare_idx = new_concept_alone(stream), stream.eval_gallery_idx
    learner = make_learner(name, stream.n_features, **params, **seed_param(name, spec["seed"]))
    outcomes = record_outcomes(learner)
    learner.prepare(stream.X[prepare_idx])
    stats = replay(learner, stream)
    result = evaluate_on_stream(learner, stream, spec["seed"], MAX_QUERIES)
    mistakes = np.concatenate(outcomes) if outcomes else np.zeros(0, dtype=bool)
    return {
        **spec,
        "learner": name,
        "learner_params": learner.get_params(),
        "error": result.error,
        "macro_f1": result.macro_f1,
        "constraints": stats.constraints,
        "constraints_per_s": stats.constraints_per_s,
        "detections": [e.to_dict() for e in learner.drift_events],
        # packed: 1 bit per constraint keeps a 100,000-constraint run's file small
        "mistakes": np.packbits(mistakes).tolist(),
        "n_outcomes": len(mistakes),
        "load_average": os.getloadavg(),
    }


def seed_param(name: str, seed: int) -> dict[str, int]:
    return {"seed": seed} if name == "oahu" else {}


def run_cached(spec: dict[str, Any]) -> dict[str, Any]:
    slug = (
        "-".join(str(spec[k]) for k in ("dataset", "kind", "seed", "n", "at", "width"))
        + "-"
        + spec["label"].replace(" ", "").replace("(", "-").replace(")", "")
    )
    name, params = (LEARNERS | POLICIES)[spec["label"]]
    learner = (name, {**params, **seed_param(name, spec["seed"])})
    return cached_run(RUNS / f"{slug}.json", learner, lambda: run_one(spec))


# ----------------------------------------------------------------------------- measures
def mistakes_of(run: dict[str, Any]) -> np.ndarray:
    bits = np.unpackbits(np.array(run["mistakes"], dtype=np.uint8))
    return bits[: run["n_outcomes"]].astype(bool)


def rolling_accuracy(mistakes: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """Accuracy of each trailing window: entry i covers outcomes [i, i + window)."""
    correct = np.concatenate([[0], np.cumsum(~mistakes)])
    return (correct[window:] - correct[:-window]) / window


def levels(mistakes: np.ndarray, at: int) -> tuple[float, float]:
    """(pre-drift level, new plateau): the prequential accuracy over the PRE_LEVEL constraints
    before ``at`` and over the last PLATEAU of the stream."""
    before = 1.0 - mistakes[max(0, at - PRE_LEVEL) : at].mean()
    return float(before), float(1.0 - mistakes[-PLATEAU:].mean())


def recovery_target(run: dict[str, Any]) -> float:
    """Within 2 points of the lower of the run's pre-drift level and its new plateau."""
    return min(levels(mistakes_of(run), run["at"])) - TOLERANCE


def measures(run: dict[str, Any], target: float | None = None) -> dict[str, Any]:
    """Detection delay, false alarms, recovery time and the accuracy after the drift of a
    drifting run (see the module docstring); recovery to ``target`` (default: the run's own,
    :func:`recovery_target`)."""
    mistakes = mistakes_of(run)
    at = run["at"]
    if run["learner"] == "opml":
        # OPML's outcomes are over its own pass of samples, each labelled by the concept in
        # force at the same share of the stream (oahu.experiments.stream_replay.sample_labels).
        at = round(at * len(mistakes) / run["n"])
    combined = [e["constraint"] for e in run["detections"] if e["signal"] == COMBINED]
    out: dict[str, Any] = {
        "error": run["error"],
        "false_alarms": sum(c < at for c in combined),
        "detection_delay": next((c - at for c in combined if c >= at), None),
        "recovery": None,
        "accuracy_after": None,
    }
    if run["label"] == ALONE or run["learner"] == "opml" or len(mistakes) < at + PLATEAU:
        return out
    before, plateau = levels(mistakes, at)
    target = min(before, plateau) - TOLERANCE if target is None else target
    # Back for good: from there on the rolling accuracy stays at the target for SUSTAIN
    # constraints (or to the end of the stream), so a lucky window does not count.
    below = rolling_accuracy(mistakes[at:]) < target
    # below_from[t]: windows below the target among t .. t + SUSTAIN - 1
    counts = np.concatenate([[0], np.cumsum(below)])
    ends = np.minimum(np.arange(len(below)) + SUSTAIN, len(below))
    back = np.flatnonzero(counts[ends] - counts[: len(below)] == 0)
    out["recovery"] = int(back[0]) + WINDOW if len(back) else None
    if not below.any():
        out["recovery"] = 0  # never below the target
    out["accuracy_after"] = float(1.0 - mistakes[at : at + AFTER].mean())
    out["pre_drift_accuracy"], out["plateau_accuracy"] = before, plateau
    out["recovery_target"] = target
    return out


def summarise(values: list[Any]) -> dict[str, Any]:
    known = [v for v in values if v is not None]
    return {
        "mean": float(np.mean(known)) if known else None,
        "per_seed": values,
    }


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds per drift kind and learner. OAHU's variants on a stream recover to one
    target, the no-adaptation learner's own: how long each takes to get back to where doing
    nothing ends up (their own plateaus would reward a learner for settling lower)."""
    reference = {
        (r["kind"], r["seed"]): recovery_target(r)
        for r in runs
        if r["label"] == NO_ADAPTATION and r["kind"] != "none"
    }
    table: dict[str, Any] = {}
    for run in runs:
        entry = table.setdefault(run["kind"], {}).setdefault(run["label"], [])
        shared = run["learner"] == "oahu" and run["label"] != ALONE
        target = reference.get((run["kind"], run["seed"])) if shared else None
        entry.append({"seed": run["seed"], **measures(run, target)})
    return {
        kind: {
            label: {
                key: summarise([r[key] for r in rows])
                for key in (
                    "error",
                    "detection_delay",
                    "false_alarms",
                    "recovery",
                    "accuracy_after",
                )
            }
            | {"seeds": [r["seed"] for r in rows]}
            for label, rows in labels.items()
        }
        for kind, labels in table.items()
    }


def format_table(dataset: str, table: dict[str, Any]) -> str:
    """One line per drift kind and learner: means over seeds (per seed in brackets)."""

    def cell(entry: dict[str, Any], digits: int) -> str:
        per_seed = ", ".join("-" if v is None else f"{v:.{digits}f}" for v in entry["per_seed"])
        mean = "-" if entry["mean"] is None else f"{entry['mean']:.{digits}f}"
        return f"{mean} [{per_seed}]"

    lines = [
        f"{dataset}: kind / learner: error | detection delay | false alarms | recovery | "
        f"prequential accuracy over the {AFTER} constraints after M"
    ]
    for kind, labels in table.items():
        for label, row in labels.items():
            lines.append(
                f"  {kind:9s} {label:26s} {cell(row['error'], 4)} | "
                f"{cell(row['detection_delay'], 0)} | {cell(row['false_alarms'], 0)} | "
                f"{cell(row['recovery'], 0)} | {cell(row['accuracy_after'], 3)}"
            )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- plot
def plot(dataset: str, runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(r["kind"] for r in runs))
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.6 * len(kinds), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        mine = [r for r in runs if r["kind"] == kind and r["learner"] != "opml"]
        for i, label in enumerate(dict.fromkeys(r["label"] for r in mine)):
            curves = [rolling_accuracy(mistakes_of(r)) for r in mine if r["label"] == label]
            offset = mine[0]["at"] if label == ALONE else 0
            length = min(len(c) for c in curves)
            mean = np.mean([c[:length] for c in curves], axis=0)
            x = np.arange(length) + WINDOW + offset
            ax.plot(x[::10], mean[::10], color=f"C{i}", linewidth=1, label=label)
            for r in mine:
                if r["label"] == label:
                    hits = [e["constraint"] for e in r["detections"] if e["signal"] == COMBINED]
                    ax.plot(hits, [1.0] * len(hits), "v", color=f"C{i}", markersize=5)
        at = mine[0]["at"]
        ax.axvline(at, color="k", linestyle=":", linewidth=1)
        if kind == "gradual":
            ax.axvspan(at, at + mine[0]["width"], color="k", alpha=0.07)
        ax.set_title(f"{dataset}: {kind} drift at {at}")
        ax.set_xlabel("constraint")
        ax.set_ylabel(f"prequential accuracy (last {WINDOW})")
        ax.set_ylim(0.5, 1.01)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle("▼ = a drift detected (combined metric); mean over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- modes
def overhead(dataset: str, n: int, seeds: list[int], repeats: int) -> dict[str, Any]:
    """What detection costs the default learner, measured two ways.

    Paired: learners that detect (``adwin``) and that do not (``none``, twice: the second,
    ``none (control)``, measures how far two identical learners' times differ) learn the same
    stream in the same process, chunk by chunk, taking turns in a rotating order, so that a
    change of machine speed falls on all alike. Per chunk, the time ratio of each learner to the
    detecting one; the overhead is 1 − the median ratio of ``none`` (the throughput detection
    costs). The control, 1 − the median time ratio of the two identical learners, is what a
    zero overhead measures as: the resolution of the measurement. Attributed:
    the time the detecting learner spends inside its :class:`~oahu.drift.DriftMonitor` (its
    share of that learner's time). On a stationary stream no learner adapts, so all do the same
    learning work.
    """
    names = ("adwin", "none", "none (control)")
    chunks: dict[str, list[float]] = {name: [] for name in names}
    in_monitor = 0.0
    for seed in seeds:
        stream = build_stream(dataset, n, seed)
        for _ in range(repeats):
            learners = {
                name: make_learner(
                    "oahu", stream.n_features, seed=seed, drift_detector=name.split()[0]
                )
                for name in names
            }
            for learner in learners.values():
                learner.prepare(stream.X[stream.dev_idx])
            monitor = learners["adwin"].drift
            assert monitor is not None
            timed = _timed(monitor.update)
            monitor.update = timed  # type: ignore[method-assign]
            for turn, start in enumerate(range(0, n, OVERHEAD_CHUNK)):
                stop = min(start + OVERHEAD_CHUNK, n)
                features = stream.features(start, stop)
                similar = None if stream.similar is None else stream.similar[start:stop]
                for name in names[turn % 3 :] + names[: turn % 3]:
                    started = time.perf_counter()
                    learners[name].learn(stream.kind, features, similar)
                    chunks[name].append(time.perf_counter() - started)
            in_monitor += timed.seconds  # type: ignore[attr-defined]
    times = {name: np.array(values) for name, values in chunks.items()}
    # per chunk: how much faster not detecting is, and how much the two identical learners differ
    ratio = float(np.median(times["none"] / times["adwin"]))
    control = float(np.median(times["none (control)"] / times["none"]))
    total = n * len(seeds) * repeats
    return {
        "dataset": dataset,
        "constraints": n,
        "seeds": seeds,
        "repeats": repeats,
        "chunk": OVERHEAD_CHUNK,
        "constraints_per_s": {name: total / float(t.sum()) for name, t in times.items()},
        "overhead": 1.0 - ratio,
        "control": 1.0 - control,
        "monitor_us_per_constraint": 1e6 * in_monitor / total,
        "monitor_share": in_monitor / float(times["adwin"].sum()),
        "load_average": os.getloadavg(),
    }


def _timed(function: Any) -> Any:
    """``function`` that adds the seconds it runs to its own ``seconds`` attribute."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timed.seconds += time.perf_counter() - started  # type: ignore[attr-defined]

    timed.seconds = 0.0  # type: ignore[attr-defined]
    return timed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["digits", "fashion-mnist"])
    p.add_argument("--kinds", nargs="+", default=list(DRIFTS), choices=DRIFTS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--constraints",
        type=int,
        default=None,
        metavar="N",
        help="stream length (default: 20,000; with --stationary 100,000)",
    )
    p.add_argument("--drift-at", type=int, default=10_000, metavar="M")
    p.add_argument("--drift-width", type=int, default=4_000, metavar="W")
    p.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=list(LEARNERS))
    p.add_argument(
        "--policies",
        nargs="*",
        default=[],
        choices=DRIFTS,
        metavar="KIND",
        help="on these drift kinds, also each adaptation step alone",
    )
    p.add_argument("--stationary", action="store_true", help="false alarms, no drift")
    p.add_argument("--overhead", action="store_true", help="throughput with/without detection")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (default: 2)")
    args = p.parse_args()
    if args.constraints is None:
        args.constraints = 100_000 if args.stationary else 20_000
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.overhead:
        for dataset in args.datasets:
            report = overhead(dataset, args.constraints, args.seeds, args.repeats)
            (RESULTS / f"drift-overhead-{dataset}.json").write_text(json.dumps(report, indent=1))
            keys = ("dataset", "constraints_per_s", "overhead", "control", "monitor_share")
            print(json.dumps({k: report[k] for k in keys}))
        return
    labels = [label for label in args.learners if not (args.stationary and label == ALONE)]
    for dataset in args.datasets:
        kinds = ["none"] if args.stationary else args.kinds
        n = args.constraints
        at = n if args.stationary else args.drift_at
        specs = [
            {
                "dataset": dataset,
                "kind": kind,
                "seed": seed,
                "n": n,
                "at": at,
                "width": args.drift_width,
                "label": label,
            }
            for kind in kinds
            for seed in args.seeds
            for label in labels + (list(POLICIES) if kind in args.policies else [])
        ]
        runs = run_all(run_cached, specs, args.jobs)
        table = aggregate(runs)
        name = f"drift-stationary-{dataset}" if args.stationary else f"drift-{dataset}"
        (RESULTS / f"{name}.json").write_text(json.dumps(table, indent=1))
        if not args.stationary:
            plot(dataset, runs, RESULTS / f"{name}.png")
        print(format_table(dataset, table))


if __name__ == "__main__":
    main()
