"""What the stream benchmarks (drift, noise) share: the evaluation of a learner after its pass
over a stream, runs cached as JSON files that stay valid while the learner's parameters do, and
runs in parallel processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from oahu.experiments.evaluation import Evaluation, evaluate
from oahu.learner import Learner
from oahu.registry import learner_class, make_learner
from oahu.streams.stream_file import ConstraintStream


def evaluate_on_stream(
    learner: Learner, stream: ConstraintStream, seed: int, max_queries: int | None = None
) -> Evaluation:
    """5-NN quality over the stream's evaluation items (its gallery and queries), as the
    benchmarks report it; a seeded sample of ``max_queries`` queries when given."""
    return evaluate(
        learner,
        stream.X,
        stream.y,
        stream.eval_gallery_idx,
        stream.eval_query_idx,
        k=5,
        n_pairs=1000,
        seed=seed,
        max_queries=max_queries,
        leave_one_out=stream.class_disjoint,
    )


def cached_run(
    path: Path, learner: tuple[str, dict[str, Any]] | None, run: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """The run stored at ``path`` if it was made with the parameters ``learner`` (registered
    name, constructor parameters) has today (:func:`same_learner`), or whatever it holds when
    ``learner`` is None (a reference outside the registry); otherwise ``run()``, stored there."""
    if path.exists():
        cached = json.loads(path.read_text())
        if learner is None or same_learner(cached.get("learner_params"), *learner):
            return cached
    result = run()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def same_learner(stored: dict[str, Any] | None, name: str, params: dict[str, Any]) -> bool:
    """Whether a run that stored the constructor parameters ``stored`` was made by learner
    ``name`` built with ``params`` today. ``stored`` is read as a checkpoint's parameters are
    (the class's ``migrate_params``): a run made before a parameter existed learned as that
    parameter's migrated value does, so it stands for a learner built with that value, and not
    for one built with a new default. Both sides are compared settled (``settled_params``): a
    value written out and the ``"auto"`` that settles to it learn alike."""
    if stored is None:
        return False
    cls = learner_class(name)
    migrated = json.loads(json.dumps(cls.migrate_params(stored), default=str))
    return cls.settled_params(migrated) == cls.settled_params(probed_params(name, params))


def probed_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Every constructor parameter of learner ``name`` built with ``params`` (defaults filled
    in), as JSON gives them back: what a cached run stores to be checked against."""
    return json.loads(json.dumps(make_learner(name, 4, **params).get_params(), default=str))


def run_all(
    run: Callable[[dict[str, Any]], dict[str, Any]], specs: list[dict[str, Any]], jobs: int
) -> list[dict[str, Any]]:
    """``run(spec)`` for each spec, results in order, in ``jobs`` processes (in this one when
    ``jobs`` <= 1; with more, ``run`` must be a module-level function, which can be pickled)."""
    if jobs <= 1:
        return [run(spec) for spec in specs]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(run, specs))


def finish_plot(fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    """Label, grid, legend and save a benchmark's figure (matplotlib), then close it."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
