"""What the pairwise Mahalanobis baselines (LEGO, RDML) share: a symmetric PSD matrix A, the
distance d_A(u, v) = (u − v)ᵀ A (u − v), an embedding x ↦ Gᵀx with G Gᵀ = A, and the way a
triplet stream is fed to a pair learner.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np

from oahu.baselines._linalg import (
    as_fortran64,
    fortran_identity,
    mahalanobis_factor,
    single_threaded_blas,
    symmetrized,
    to_tensor,
)
from oahu.learner import ConstraintKind, Learner, MetricKind, as_feature_matrix


class PairwiseMahalanobis(Learner):
    """Base of learners that keep A (d x d, PSD, A0 = I) and learn from labelled pairs.

    Subclasses implement ``_update_pair(z, similar)`` for one pair difference z = u − v and
    return whether A changed. A lives in ``self._a`` with only its upper triangle valid (see
    ``oahu.baselines._linalg``).
    """

    constraint_kind: ClassVar[ConstraintKind] = "pair"
    metric: ClassVar[MetricKind] = "l2"

    def __init__(self, n_features: int) -> None:
        super().__init__(n_features)
        self._a = fortran_identity(self.n_features)
        self._factor: tuple[int, np.ndarray] | None = None  # (self.updates when built, G)

    @property
    def metric_matrix(self) -> np.ndarray:
        """The current A as a full symmetric float64 copy."""
        return symmetrized(self._a)

    # ----------------------------------------------------------------- learning
    @abstractmethod
    def _update_pair(self, z: np.ndarray, similar: bool) -> bool:
        """Learn from one pair with difference ``z`` (float64); True if A changed."""

    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        diffs = u.astype(np.float64) - v.astype(np.float64)
        with single_threaded_blas():
            return np.array(
                [self._update_pair(z, bool(s)) for z, s in zip(diffs, similar, strict=True)],
                dtype=bool,
            )

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        # A triplet (a, p, n) is the similar pair (a, p) followed by the dissimilar pair (a, n);
        # it counts as used when either pair changed A.
        anchors = a.astype(np.float64)
        to_pos = anchors - p.astype(np.float64)
        to_neg = anchors - n.astype(np.float64)
        used = np.zeros(len(a), dtype=bool)
        with single_threaded_blas():
            for i in range(len(a)):
                pulled = self._update_pair(to_pos[i], True)
                pushed = self._update_pair(to_neg[i], False)
                used[i] = pulled or pushed
        return used

    # ----------------------------------------------------------------- inference
    def embed(self, x: Any, role: Literal["query", "gallery"] = "query") -> np.ndarray:
        """x ↦ Gᵀx with G Gᵀ = A, so Euclidean distances of embeddings are d_A distances.

        G is factored once per model version (not per update) and cached until A changes.
        """
        items = as_feature_matrix(x, self.n_features, "x")
        if self._factor is None or self._factor[0] != self.updates:
            g = mahalanobis_factor(self.metric_matrix).astype(np.float32)
            self._factor = (self.updates, g)
        return (items @ self._factor[1])[None]

    # ----------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        return {"A": to_tensor(self.metric_matrix)}

    def _set_state(self, state: dict[str, Any]) -> None:
        self._a = as_fortran64(state["A"])
        self._factor = None
