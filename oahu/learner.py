"""The one interface every online metric learner in oahu implements.

A learner consumes constraints in stream order and maps items to one embedding per depth.
Single-depth learners (the Mahalanobis and bilinear baselines, plain Euclidean) have one depth
and ``alpha == [1.0]``; OAHU has ``L + 1`` depths and learned hedge weights. Everything
downstream (inference, evaluation, checkpoints, serving) talks only to this interface.

Input validation lives here, once, so that no learner can silently learn from bad data:

* a batch whose feature dimension is wrong raises ``ValueError`` naming the field and shape;
* a constraint with a non-finite value, or a degenerate one (anchor identical to the negative,
  or a pair of identical items), is skipped and counted in ``skipped`` by reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import Any, ClassVar, Literal

import numpy as np

from oahu.preprocessing import InputScaler

ConstraintKind = Literal["triplet", "pair"]
MetricKind = Literal["l2", "ip"]

SKIP_NON_FINITE = "non_finite"
SKIP_DEGENERATE = "degenerate"


def as_feature_matrix(x: Any, n_features: int, field: str) -> np.ndarray:
    """Return ``x`` as a C-contiguous float32 matrix of shape (n, n_features).

    A single vector is promoted to one row. Raises ``ValueError`` naming ``field`` when the
    shape is wrong, so a caller sees which input was bad and what it looked like.
    """
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != n_features:
        raise ValueError(
            f"{field}: expected shape (n, {n_features}) with n_features={n_features}, "
            f"got shape {tuple(np.shape(x))}"
        )
    return np.ascontiguousarray(arr)


class Learner(ABC):
    """Base class of all online metric learners.

    Subclasses set the class attributes and implement ``_learn_triplets`` or ``_learn_pairs``
    (whichever their ``constraint_kind`` is; a learner may implement both), ``_embed``,
    ``_get_state`` and ``_set_state``. They receive inputs already validated and preprocessed
    (see :mod:`oahu.preprocessing`; ``preprocess="none"`` by default).

    Class attributes
    ----------------
    name : registry name used by the CLI and in checkpoints (``"oahu"``, ``"lego"``, ...).
    constraint_kind : the kind of constraint the learner learns from in the paper's protocol.
    metric : ``"l2"`` when items are compared by Euclidean distance between embeddings (smaller is
        closer), ``"ip"`` when they are compared by inner product (a bilinear similarity such as
        OASIS: larger is closer). For ``"ip"``, ``embed(x, role="query")`` and
        ``embed(x, role="gallery")`` may differ, so that ``S(p, q) = <embed_q(p), embed_g(q)>``.
    """

    name: ClassVar[str] = "learner"
    constraint_kind: ClassVar[ConstraintKind] = "triplet"
    metric: ClassVar[MetricKind] = "l2"

    def __init__(self, n_features: int, preprocess: str = "none") -> None:
        if int(n_features) < 1:
            raise ValueError(f"n_features: must be a positive integer, got {n_features!r}")
        self.n_features = int(n_features)
        self.input_scaler = InputScaler(preprocess, self.n_features)
        self.constraints_seen = 0  # every constraint offered, valid or not
        self.constraints_used = 0  # constraints that changed the model (numerator of U)
        self.updates = 0  # parameter steps taken (a micro-batch step counts once)
        self.skipped: Counter[str] = Counter()

    # ----------------------------------------------------------------- counters
    @property
    def constraints_learned(self) -> int:
        """Valid constraints the learner processed (seen minus skipped)."""
        return self.constraints_seen - sum(self.skipped.values())

    @property
    def utilization(self) -> float:
        """Constraint utilisation U: fraction of valid constraints that changed the model."""
        learned = self.constraints_learned
        return self.constraints_used / learned if learned else 0.0

    @property
    def n_depths(self) -> int:
        return 1

    @property
    def alpha(self) -> np.ndarray:
        """Hedge weight per depth (sums to 1)."""
        return np.ones(1, dtype=np.float64)

    # ----------------------------------------------------------------- learning
    @property
    def needs_prepare(self) -> bool:
        """Whether ``prepare(X)`` has yet to run: something is fitted on items before learning."""
        return self.input_scaler.needs_fit

    def prepare(self, x: Any) -> None:
        """Fit input preprocessing on unlabelled items (e.g. the development split), once,
        before the stream starts, then hand the preprocessed items to ``_prepare``."""
        items = as_feature_matrix(x, self.n_features, "x")
        self.input_scaler.fit(items)
        self._prepare(self.input_scaler.transform(items))

    def _prepare(self, items: np.ndarray) -> None:  # noqa: B027 (optional hook, no-op default)
        """What a learner itself fits on the preprocessed items (nothing by default)."""

    def learn_triplets(self, anchors: Any, positives: Any, negatives: Any) -> np.ndarray:
        """Learn from triplets in stream order; return a bool mask of those that changed the model.

        Rows that are non-finite or degenerate (anchor identical to negative) are skipped,
        counted in ``skipped`` and reported as ``False``.
        """
        a = as_feature_matrix(anchors, self.n_features, "anchors")
        p = as_feature_matrix(positives, self.n_features, "positives")
        n = as_feature_matrix(negatives, self.n_features, "negatives")
        if not (len(a) == len(p) == len(n)):
            raise ValueError(
                f"anchors, positives, negatives: lengths differ ({len(a)}, {len(p)}, {len(n)})"
            )
        valid = self._screen(
            np.isfinite(a).all(1) & np.isfinite(p).all(1) & np.isfinite(n).all(1),
            ~(a == n).all(1),
        )
        used = np.zeros(len(a), dtype=bool)
        if valid.any():
            idx = np.flatnonzero(valid)
            if len(idx) < len(a):
                a, p, n = a[idx], p[idx], n[idx]
            scale = self.input_scaler.transform
            used[idx] = self._learn_triplets(scale(a), scale(p), scale(n))
        self.constraints_used += int(used.sum())
        return used

    def learn_pairs(self, u: Any, v: Any, similar: Any) -> np.ndarray:
        """Learn from labelled pairs in stream order; return a bool mask of those that changed
        the model. ``similar`` is truthy for a similar pair and falsy for a dissimilar one."""
        xu = as_feature_matrix(u, self.n_features, "u")
        xv = as_feature_matrix(v, self.n_features, "v")
        sim = np.atleast_1d(np.asarray(similar)).astype(bool)
        if not (len(xu) == len(xv) == len(sim)):
            raise ValueError(f"u, v, similar: lengths differ ({len(xu)}, {len(xv)}, {len(sim)})")
        valid = self._screen(np.isfinite(xu).all(1) & np.isfinite(xv).all(1), ~(xu == xv).all(1))
        used = np.zeros(len(xu), dtype=bool)
        if valid.any():
            idx = np.flatnonzero(valid)
            scale = self.input_scaler.transform
            used[idx] = self._learn_pairs(scale(xu[idx]), scale(xv[idx]), sim[idx])
        self.constraints_used += int(used.sum())
        return used

    def _screen(self, finite: np.ndarray, non_degenerate: np.ndarray) -> np.ndarray:
        self.constraints_seen += len(finite)
        n_bad_values = int((~finite).sum())
        n_degenerate = int((finite & ~non_degenerate).sum())
        if n_bad_values:
            self.skipped[SKIP_NON_FINITE] += n_bad_values
        if n_degenerate:
            self.skipped[SKIP_DEGENERATE] += n_degenerate
        return finite & non_degenerate

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not learn from triplets")

    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not learn from pairs")

    # ----------------------------------------------------------------- inference
    def embed(self, x: Any, role: Literal["query", "gallery"] = "query") -> np.ndarray:
        """Embed items: float32 array of shape (n_depths, n_items, embedding_dim)."""
        if role not in ("query", "gallery"):
            raise ValueError(f"role: must be 'query' or 'gallery', got {role!r}")
        x = self.input_scaler.transform(as_feature_matrix(x, self.n_features, "x"))
        return self._embed(x, role)

    @abstractmethod
    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        """Embed validated, preprocessed float32 items (n, n_features)."""

    # ----------------------------------------------------------------- state
    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this learner stands.

        Only tensors, numbers, strings, lists and dicts, so that ``torch.load(...,
        weights_only=True)`` can read it back.
        """
        return {
            "learner": self.name,
            "n_features": self.n_features,
            "counters": {
                "constraints_seen": self.constraints_seen,
                "constraints_used": self.constraints_used,
                "updates": self.updates,
                "skipped": dict(self.skipped),
            },
            "params": {"preprocess": self.input_scaler.spec, **self.get_params()},
            "preprocess": self.input_scaler.get_state(),
            "model": self._get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("learner") != self.name:
            raise ValueError(
                f"learner: checkpoint holds {state.get('learner')!r}, not {self.name!r}"
            )
        counters = state["counters"]
        self.constraints_seen = int(counters["constraints_seen"])
        self.constraints_used = int(counters["constraints_used"])
        self.updates = int(counters["updates"])
        self.skipped = Counter({k: int(v) for k, v in counters["skipped"].items()})
        self.input_scaler.set_state(state["preprocess"])
        self._set_state(state["model"])

    def get_params(self) -> dict[str, Any]:
        """Constructor keyword arguments (besides ``n_features``), as plain values."""
        return {}

    @abstractmethod
    def _get_state(self) -> dict[str, Any]: ...

    @abstractmethod
    def _set_state(self, state: dict[str, Any]) -> None: ...

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and ``copy.deepcopy``) through :mod:`oahu.persistence`: the parameters and
        ``get_state``, never the live attributes (OAHU's weights are tensors that numpy views
        share, and a pickled view would no longer share them)."""
        from oahu import persistence  # imported here: persistence imports this module

        return (persistence.restore, (persistence.learner_to_bytes(self),))

    def summary(self) -> dict[str, Any]:
        """Counters and hedge weights as plain JSON-able values."""
        return {
            "learner": self.name,
            "constraints_seen": self.constraints_seen,
            "constraints_learned": self.constraints_learned,
            "constraints_used": self.constraints_used,
            "updates": self.updates,
            "skipped": dict(self.skipped),
            "utilization": self.utilization,
            "alpha": [float(a) for a in self.alpha],
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return (
            f"{type(self).__name__}(n_features={self.n_features}{', ' if params else ''}{params})"
        )
