"""What the Mahalanobis baselines (LEGO, RDML, OPML) share: a symmetric PSD matrix A (A0 = I),
the distance d_A(u, v) = (u − v)ᵀ A (u − v), an embedding x ↦ Gᵀx with G Gᵀ = A, and, for the
pair learners, the way a triplet stream is fed to them.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np

from oahu.capabilities import Capabilities
from oahu.learner import Learner, MetricKind
from oahu.learners.baselines._linalg import (
    as_fortran64,
    fortran_identity,
    mahalanobis_factor,
    symmetrized,
    to_tensor,
)
from oahu.threads import blas_threads


class MahalanobisLearner(Learner):
    """Base of learners that keep a PSD A in ``self._a`` (Fortran order, only the upper triangle
    valid; see ``oahu.learners.baselines._linalg``) and compare items by d_A.

    Subclasses implement ``_update_triplet(a − p, a − n)``, called once per triplet in stream
    order with BLAS on one thread.
    """

    metric: ClassVar[MetricKind] = "l2"

    def __init__(self, n_features: int, preprocess: str = "none") -> None:
        super().__init__(n_features, preprocess=preprocess)
        self._a = fortran_identity(self.n_features)
        self._factor: tuple[int, np.ndarray] | None = None  # (self.updates when built, G)

    @property
    def metric_matrix(self) -> np.ndarray:
        """The current A as a full symmetric float64 copy."""
        return symmetrized(self._a)

    @abstractmethod
    def _update_triplet(self, to_pos: np.ndarray, to_neg: np.ndarray) -> bool:
        """Learn from one triplet given a − p and a − n (float64); True if A changed."""

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        anchors = a.astype(np.float64)
        return self._learn_differences(
            anchors - p.astype(np.float64), anchors - n.astype(np.float64)
        )

    def _learn_differences(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        """Learn d_A(near row) < d_A(far row) for each pair of difference vectors, in order.

        A learner whose triplet update only sees the two differences a − p and a − n learns a
        quadruplet (a, b, c, d) the same way from a − b and c − d (Law et al. 2016, Eq. 7); its
        ``_learn_quadruplets`` is this, declared where the update allows it (OPML)."""
        used = np.zeros(len(near), dtype=bool)
        with blas_threads(1):  # see oahu.threads
            for i in range(len(near)):
                used[i] = self._update_triplet(near[i], far[i])
        return used

    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        """x ↦ Gᵀx with G Gᵀ = A, so Euclidean distances of embeddings are d_A distances.

        G is factored once per model version (not per update) and cached until A changes.
        """
        if self._factor is None or self._factor[0] != self.updates:
            g = mahalanobis_factor(self.metric_matrix).astype(np.float32)
            self._factor = (self.updates, g)
        return (x @ self._factor[1])[None]

    def _get_state(self) -> dict[str, Any]:
        return {"A": to_tensor(self.metric_matrix)}

    def _set_state(self, state: dict[str, Any]) -> None:
        self._a = as_fortran64(state["A"])
        self._factor = None


class PairwiseMahalanobis(MahalanobisLearner):
    """Base of Mahalanobis learners from labelled pairs (LEGO, RDML).

    Subclasses implement ``_update_pair(z, similar)`` for one pair difference z = u − v and
    return whether A changed.
    """

    # Pairs in the paper's protocol; a triplet (a, p, n) is learned as the pairs (a, p), (a, n).
    capabilities: ClassVar[Capabilities] = Capabilities(constraint_kinds=("pair", "triplet"))

    @abstractmethod
    def _update_pair(self, z: np.ndarray, similar: bool) -> bool:
        """Learn from one pair with difference ``z`` (float64); True if A changed."""

    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        diffs = u.astype(np.float64) - v.astype(np.float64)
        with blas_threads(1):  # see oahu.threads
            return np.array(
                [self._update_pair(z, bool(s)) for z, s in zip(diffs, similar, strict=True)],
                dtype=bool,
            )

    def _update_triplet(self, to_pos: np.ndarray, to_neg: np.ndarray) -> bool:
        # A triplet (a, p, n) is the similar pair (a, p) followed by the dissimilar pair (a, n);
        # it counts as used when either pair changed A.
        pulled = self._update_pair(to_pos, True)
        pushed = self._update_pair(to_neg, False)
        return pulled or pushed
