"""The offline reference for learners of quadruplet streams: LSML (Liu et al., "Metric Learning
from Relative Comparisons by Minimizing Squared Residual", ICDM 2012), metric-learn's
implementation.

LSML learns one Mahalanobis matrix M (d x d) from quadruplets (a, b, c, d), each saying
D(a, b) < D(c, d): it minimises the squared residuals (√D_M(a, b) − √D_M(c, d))² of the
violated constraints plus the LogDet divergence of M from a prior, by projected gradient
descent with a line search. Each step costs O(n·d²) for the residuals and an eigendecomposition
of M, so the items are first reduced by PCA fitted on the development items (784 pixels ->
``n_components``): :func:`fit_lsml`. :class:`LSMLMetric` puts the result behind the
:class:`oahu.learner.Learner` interface so that :func:`oahu.experiments.evaluation.evaluate` scores
it like
any online learner; it learns nothing from a stream.

metric-learn 0.7.0's gradient leaves out the constraint weights (1/N each) that its loss applies
(reported upstream: https://github.com/scikit-learn-contrib/metric-learn/issues/83), so its steps
follow the constraints N times too strongly and the line search soon finds none that lowers the
loss: the fit stops by itself after some 10-25 steps, well before ``max_iter``. It is used as
released, the reference as others would run it.

Measured with ``python -m benchmarks.lsml_reference`` on Fashion-MNIST (35,000 development
items; 10,000 ``garment`` hierarchy quadruplets, half fine and half coarse; seed 0; the 2-core
machine under a load average of 6-7, so times are upper bounds), kNN over the whole test split:

==========  =====  ========  ========  ===============  ===============  ===============
components  steps  LSML fit  fit_lsml violated         5-NN error       nDCG@10
                             in all   (PCA, LSML)      (PCA, LSML)      (PCA, LSML)
==========  =====  ========  ========  ===============  ===============  ===============
32          2      0.3 s     13 s      0.310, 0.281     0.1474, 0.1411   0.881, 0.886
64          24     4.8 s     11 s      0.314, 0.290     0.1405, 0.1371   0.886, 0.889
100         19     4.5-9 s   8-15 s    0.316, 0.294     0.1380, 0.1323   0.887, 0.890
150         16     7.9 s     9 s       0.317, 0.296     0.1366, 0.1319   0.888, 0.890
==========  =====  ========  ========  ===============  ===============  ===============

100 components is the default: 150 gains nothing measurable. At 100 components 1,000
quadruplets fit in 1.1 s, 30,000 in 9.5 s (12 steps). Install with the ``bench`` extra
(``pip install -e '.[bench]'``; scripts/bootstrap.sh does).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np
from threadpoolctl import threadpool_limits

from oahu.capabilities import Capabilities
from oahu.learner import Learner, MetricKind

DEFAULT_N_COMPONENTS = 100
# A cap, not a budget: LSML stops by itself after 10-25 steps (module doc); 200 steps of
# 100 components and 10,000 quadruplets would take about 1.5 minutes.
DEFAULT_MAX_ITER = 200


def _accept_force_all_finite() -> None:
    """Let metric-learn 0.7.0 run on scikit-learn >= 1.8.

    scikit-learn 1.6 renamed ``check_array``'s and ``check_X_y``'s ``force_all_finite`` to
    ``ensure_all_finite`` and 1.8 removed the old name; metric-learn 0.7.0 (the latest release)
    still passes it, so every fit fails with a ``TypeError``. metric-learn's main branch fixed it
    with wrappers that rename the keyword, not yet in a release
    (https://github.com/scikit-learn-contrib/metric-learn/pull/360).
    This installs the same renaming wrappers in metric-learn's validation module; it changes
    nothing where scikit-learn still takes the old name or metric-learn no longer passes it.
    """
    from metric_learn import _util
    from sklearn.utils import validation

    if "force_all_finite" in inspect.signature(validation.check_array).parameters:
        return

    def renamed(check: Any) -> Any:
        if getattr(check, "_oahu_renames_force_all_finite", False):
            return check  # already wrapped (idempotent on re-import)

        @functools.wraps(check)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if "force_all_finite" in kwargs:
                kwargs["ensure_all_finite"] = kwargs.pop("force_all_finite")
            return check(*args, **kwargs)

        wrapper._oahu_renames_force_all_finite = True  # type: ignore[attr-defined]
        return wrapper

    _util.check_array = renamed(_util.check_array)
    _util.check_X_y = renamed(_util.check_X_y)


@dataclass(frozen=True)
class LSMLReference:
    """A fitted LSML metric on PCA-reduced items: ``transform(X) = (X − mean)·Pᵀ·Lᵀ``, where P
    (n_components, n_features) holds the principal axes and L (n_components, n_components) is
    LSML's factor of its metric, M = LᵀL. Euclidean distances between transformed items are the
    learned Mahalanobis distances.

    ``n_iter``: LSML's gradient steps; ``fit_seconds``: the LSML fit alone, ``pca_seconds``:
    the PCA; ``n_quadruplets``: those fitted (degenerate ones dropped, see :func:`fit_lsml`);
    ``violated_before``, ``violated_after``: the share of them violated (D(a, b) >= D(c, d))
    in the PCA space under the identity metric and under M.
    """

    mean: np.ndarray
    pca_components: np.ndarray
    lsml_components: np.ndarray
    n_iter: int
    fit_seconds: float
    pca_seconds: float
    n_quadruplets: int
    violated_before: float
    violated_after: float

    @property
    def n_features(self) -> int:
        return self.pca_components.shape[1]

    @property
    def projection(self) -> np.ndarray:
        """The whole linear map, L·P (n_components, n_features)."""
        return self.lsml_components @ self.pca_components

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Items (n, n_features) as points of the learned metric's space, (n, n_components)."""
        return (np.asarray(X, dtype=np.float64) - self.mean) @ self.projection.T


def _violated(vab: np.ndarray, vcd: np.ndarray, factor: np.ndarray | None = None) -> float:
    """The share of quadruplets (differences a − b and c − d) with D(a, b) >= D(c, d) under
    the metric LᵀL of ``factor`` L (the identity when None)."""
    if factor is not None:
        vab, vcd = vab @ factor.T, vcd @ factor.T
    return float(np.mean((vab**2).sum(1) >= (vcd**2).sum(1)))


def fit_lsml(
    X_dev: np.ndarray,
    quadruplets: np.ndarray,
    n_components: int = DEFAULT_N_COMPONENTS,
    seed: int = 0,
    max_iter: int = DEFAULT_MAX_ITER,
    prior: str = "identity",
    tol: float = 1e-3,
) -> LSMLReference:
    """PCA to ``n_components`` fitted on the development items ``X_dev`` (n, n_features), then
    metric-learn's LSML on ``quadruplets`` in that space.

    ``quadruplets`` are (N, 4) integer positions into ``X_dev`` or (N, 4, n_features) items
    (``ConstraintStream.features`` of a quadruplet stream), each (a, b, c, d) saying
    D(a, b) < D(c, d). ``max_iter`` caps LSML's gradient steps (it stops earlier when no step
    of its line search lowers the loss or the gradient norm falls below ``tol``); ``prior`` is
    LSML's (``"identity"``: the PCA space's Euclidean metric; ``"covariance"``: its inverse
    covariance). ``seed`` seeds the PCA's randomised solver and a ``"random"`` prior.

    A quadruplet whose second pair is one point (c = d after the PCA) is dropped: LSML divides
    by D(c, d) in its gradient and would step to infinity.

    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 5))
    >>> quads = rng.integers(0, 60, size=(40, 4))
    >>> ref = fit_lsml(X, quads, n_components=3, max_iter=5)
    >>> ref.transform(X).shape, ref.n_quadruplets, ref.n_iter <= 5
    ((60, 3), 40, True)
    """
    from metric_learn import LSML
    from sklearn.decomposition import PCA

    _accept_force_all_finite()
    X_dev = np.asarray(X_dev, dtype=np.float64)
    quadruplets = np.asarray(quadruplets)
    if quadruplets.ndim == 2 and quadruplets.shape[1] == 4:
        if not np.issubdtype(quadruplets.dtype, np.integer):
            raise ValueError(
                f"quadruplets: (N, 4) positions must be integers, got {quadruplets.dtype}"
            )
        items = X_dev[quadruplets]
    elif quadruplets.ndim == 3 and quadruplets.shape[1:] == (4, X_dev.shape[1]):
        items = quadruplets.astype(np.float64)
    else:
        raise ValueError(
            f"quadruplets: expected (N, 4) positions or (N, 4, {X_dev.shape[1]}) items, got "
            f"shape {quadruplets.shape}"
        )
    if not 1 <= n_components <= min(X_dev.shape):
        raise ValueError(f"n_components: must be in 1..{min(X_dev.shape)}, got {n_components}")

    started = time.perf_counter()
    pca = PCA(n_components, random_state=seed).fit(X_dev)
    pca_seconds = time.perf_counter() - started
    reduced = pca.transform(items.reshape(-1, X_dev.shape[1])).reshape(len(items), 4, -1)
    keep = np.any(reduced[:, 2] != reduced[:, 3], axis=1)
    reduced = reduced[keep]
    if len(reduced) == 0:
        raise ValueError("quadruplets: none left with two distinct points in its second pair")
    vab, vcd = reduced[:, 0] - reduced[:, 1], reduced[:, 2] - reduced[:, 3]

    lsml = LSML(prior=prior, tol=tol, max_iter=max_iter, random_state=seed)
    started = time.perf_counter()
    # One BLAS thread: LSML's steps are small (d x d eigendecompositions, n x d by d x d
    # products), and two threads fighting over them ran 1.5-4x slower than one (measured, d =
    # 64 and 100 on the 2-core machine).
    with threadpool_limits(1):
        lsml.fit(reduced)
    fit_seconds = time.perf_counter() - started
    return LSMLReference(
        mean=pca.mean_.copy(),
        pca_components=pca.components_.copy(),
        lsml_components=np.asarray(lsml.components_, dtype=np.float64),
        n_iter=int(lsml.n_iter_),
        fit_seconds=fit_seconds,
        pca_seconds=pca_seconds,
        n_quadruplets=len(reduced),
        violated_before=_violated(vab, vcd),
        violated_after=_violated(vab, vcd, lsml.components_),
    )


class LSMLMetric(Learner):
    """A fitted :class:`LSMLReference` as a (fixed) oahu learner, for
    :mod:`oahu.experiments.evaluation`:
    one depth, Euclidean distances between ``reference.transform`` of the items. Like
    ``Euclidean`` it accepts quadruplets and learns nothing from them.

    >>> ref = LSMLReference(np.zeros(2), np.eye(2), 2 * np.eye(2), 0, 0.0, 0.0, 0, 0.0, 0.0)
    >>> LSMLMetric(2, ref).embed([[1.0, 3.0]]).tolist()
    [[[2.0, 6.0]]]
    """

    name: ClassVar[str] = "lsml"
    capabilities: ClassVar[Capabilities] = Capabilities(constraint_kinds=("quadruplet",))
    metric: ClassVar[MetricKind] = "l2"

    def __init__(self, n_features: int, reference: LSMLReference) -> None:
        super().__init__(n_features)
        if reference.n_features != self.n_features:
            raise ValueError(
                f"reference: fitted on {reference.n_features} features, not {self.n_features}"
            )
        self.reference = reference

    def _learn_quadruplets(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
    ) -> np.ndarray:
        return np.zeros(len(a), dtype=bool)  # fitted offline: a stream changes nothing

    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        return self.reference.transform(x).astype(np.float32)[None]

    def _get_state(self) -> dict[str, Any]:
        return {}  # the model is the constructor's reference

    def _set_state(self, state: dict[str, Any]) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    """Fit LSML on a hierarchy quadruplet stream at each number of components; print one JSON
    line each: steps, times, violated shares and the 5-NN error and graded nDCG@10 of the PCA
    alone and of LSML over the stream's evaluation items."""
    from oahu.experiments.evaluation import evaluate
    from oahu.streams.groupings import coarse_labels
    from oahu.streams.hierarchy import build_hierarchy_stream

    parser = argparse.ArgumentParser(prog="python -m benchmarks.lsml_reference")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--hierarchy", default="garment")
    parser.add_argument("--quadruplets", type=int, default=10_000)
    parser.add_argument("--components", type=int, nargs="+", default=[32, 64, 100, 150])
    parser.add_argument("--max-iter", type=int, default=DEFAULT_MAX_ITER)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-queries", type=int, default=None)
    args = parser.parse_args(argv)
    stream = build_hierarchy_stream(args.dataset, args.quadruplets, args.seed, args.hierarchy)
    coarse = coarse_labels(stream.meta["dataset"], stream.y, args.hierarchy)
    x_dev, quadruplets = stream.X[stream.dev_idx], stream.features(0, len(stream))
    for n_components in args.components:
        ref = fit_lsml(x_dev, quadruplets, n_components, args.seed, args.max_iter)
        pca_alone = replace(ref, lsml_components=np.eye(n_components))
        row: dict[str, Any] = {
            "n_components": n_components,
            "n_quadruplets": ref.n_quadruplets,
            "n_iter": ref.n_iter,
            "fit_seconds": ref.fit_seconds,
            "pca_seconds": ref.pca_seconds,
            "violated": {"pca": ref.violated_before, "lsml": ref.violated_after},
        }
        for name, fitted in (("pca", pca_alone), ("lsml", ref)):
            quality = evaluate(
                LSMLMetric(stream.n_features, fitted),
                stream.X,
                stream.y,
                stream.eval_gallery_idx,
                stream.eval_query_idx,
                n_pairs=1000,
                seed=args.seed,
                max_queries=args.max_queries,
                coarse=coarse,
            )
            row[name] = {"error": quality.error, "ndcg_at_10": quality.ndcg_at_10}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
