"""OASIS: Online Algorithm for Scalable Image Similarity (Chechik, Sharma, Shalit, Bengio,
JMLR 2010).

A bilinear similarity S(p, q) = pᵀ W q, W0 = I, learned passive-aggressively from triplets
(p, p⁺, p⁻) (the OASIS paper's Eq. 2 loss and its PA-I step; docs/algorithms.md):

    l = max(0, 1 − S(p, p⁺) + S(p, p⁻))
    V = p (p⁺ − p⁻)ᵀ,   τ = min(C, l / ‖V‖²_F),   W ← W + τ V

W is neither symmetric nor PSD; items are compared by inner product (metric "ip") with the query
embedded as itself and the gallery item q as W q, so <embed_q(p), embed_g(q)> = pᵀ W q.

Speed: a step reads W once for its margin and, applied at once, would read and write it again
for the rank-one update (d = 784: 4.9 MB of float64 each way). Instead the last few steps are
kept as thin factors, W = W_base + U Vᵀ with U = [τ_i p_i], V = [p⁺_i − p⁻_i], so the margin
costs one pass over W_base plus O(d k), and every ``PENDING_STEPS`` steps U Vᵀ is folded into
W_base in one pass (``dgemm``). That is the same W as step-by-step updates up to round-off
(1e-14 at d = 784), at about half the memory traffic per step. The factors are part of the
checkpointed state, so a resumed learner continues bit for bit.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np

from oahu.capabilities import Capabilities
from oahu.checks import check_number
from oahu.learner import Learner, MetricKind
from oahu.learners.baselines._linalg import (
    as_fortran64,
    fortran_identity,
    low_rank_update,
    matvec,
    to_tensor,
)
from oahu.threads import blas_threads

PENDING_STEPS = 32  # rank-one steps kept as factors before they are folded into W


class OASIS(Learner):
    """OASIS online bilinear similarity learner from triplets.

    Parameters
    ----------
    n_features : input dimension d.
    aggressiveness : C, the cap on the passive-aggressive step τ (0.1 in Chechik et al.).
    preprocess : input preprocessing (``oahu.preprocessing``), fitted by ``prepare``.
    drift_detector : the river detector watching the prequential mistakes, S(p, p⁺) ≤ S(p, p⁻)
        before the update (``oahu.drift``; "none" = no watch). OASIS reports drifts and does
        not adapt to them.

    The defaults (C = 1e-4, unit-length rows, i.e. the cosine similarity at W0 = I) were tuned
    on the development split of Fashion-MNIST only (benchmarks/README.md, "Defaults and presets").

    >>> import numpy as np
    >>> oasis = OASIS(n_features=2, aggressiveness=0.1, preprocess="none")
    >>> oasis.learn_triplets([[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.5]]).tolist()  # l = 2
    [True]
    >>> oasis.similarity_matrix.round(3).tolist()  # τ = min(0.1, 2 / 1.25) = 0.1
    [[0.9, 0.05], [0.0, 1.0]]
    >>> q, g = oasis.embed([[1.0, 0.0]]), oasis.embed([[0.0, 1.0]], role="gallery")
    >>> round(float(q[0, 0] @ g[0, 0]), 6)  # S(e1, e2) = e1ᵀ W e2
    0.05
    """

    name: ClassVar[str] = "oasis"
    metric: ClassVar[MetricKind] = "ip"
    capabilities: ClassVar[Capabilities] = Capabilities(detects_drift=True)

    def __init__(
        self,
        n_features: int,
        aggressiveness: float = 1e-4,
        preprocess: str = "unit",
        drift_detector: str = "adwin",
    ) -> None:
        super().__init__(n_features, preprocess=preprocess)
        self.aggressiveness = check_number(
            aggressiveness, "aggressiveness", low=0.0, closed="neither"
        )
        self.drift_detector = drift_detector
        self._watch_for_drift(drift_detector)
        self._w = fortran_identity(self.n_features)  # W_base: W without the pending steps
        self._u = np.zeros((self.n_features, PENDING_STEPS), order="F")  # τ_i p_i
        self._v = np.zeros((self.n_features, PENDING_STEPS), order="F")  # p⁺_i − p⁻_i
        self._pending = 0
        self._gallery_map: tuple[int, np.ndarray] | None = None  # (self.updates, Wᵀ float32)

    @property
    def similarity_matrix(self) -> np.ndarray:
        """The current W = W_base + U Vᵀ (float64 copy)."""
        j = self._pending
        return np.array(self._w + self._u[:, :j] @ self._v[:, :j].T, order="C")

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        queries = a.astype(np.float64)
        pos_minus_neg = p.astype(np.float64) - n.astype(np.float64)
        used = np.zeros(len(a), dtype=bool)
        wrong = np.zeros((len(a), 1), dtype=bool)
        with blas_threads(1):  # see oahu.threads
            for i in range(len(a)):
                used[i], wrong[i] = self._update(queries[i], pos_minus_neg[i])
        self._observe_mistakes(wrong)
        return used

    def _update(self, query: np.ndarray, pos_minus_neg: np.ndarray) -> tuple[bool, bool]:
        """One PA step; (whether W changed, whether W ranked the triplet wrongly before)."""
        # S(p, p⁺) − S(p, p⁻) = pᵀ W (p⁺ − p⁻) = pᵀ W_base (p⁺ − p⁻) + (pᵀU)(Vᵀ(p⁺ − p⁻))
        j = self._pending
        margin = float(query @ matvec(self._w, pos_minus_neg))
        if j:
            margin += float((query @ self._u[:, :j]) @ (pos_minus_neg @ self._v[:, :j]))
        loss = 1.0 - margin
        v_norm_sq = float(query @ query) * float(pos_minus_neg @ pos_minus_neg)  # ‖p (p⁺−p⁻)ᵀ‖²_F
        if loss <= 0.0 or v_norm_sq == 0.0:
            return False, margin <= 0.0
        tau = min(self.aggressiveness, loss / v_norm_sq)
        self._u[:, j] = tau * query  # W ← W + τ p (p⁺ − p⁻)ᵀ, pending
        self._v[:, j] = pos_minus_neg
        self._pending = j + 1
        if self._pending == PENDING_STEPS:
            low_rank_update(self._w, self._u, self._v)
            self._pending = 0
        self.updates += 1
        return True, margin <= 0.0

    def _embed(self, x: np.ndarray, role: Literal["query", "gallery"]) -> np.ndarray:
        """Queries embed as themselves, gallery items q as W q (rows: X Wᵀ)."""
        if role == "query":
            return x.copy()[None]  # a copy: never hand back a view of the caller's input
        if self._gallery_map is None or self._gallery_map[0] != self.updates:
            self._gallery_map = (self.updates, self.similarity_matrix.T.astype(np.float32))
        return (x @ self._gallery_map[1])[None]

    def _get_state(self) -> dict[str, Any]:
        j = self._pending
        return {
            "W": to_tensor(self._w),
            "pending_u": to_tensor(self._u[:, :j]),
            "pending_v": to_tensor(self._v[:, :j]),
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        self._w = as_fortran64(state["W"])
        self._u[:], self._v[:] = 0.0, 0.0
        pending_u, pending_v = state.get("pending_u"), state.get("pending_v")
        self._pending = 0 if pending_u is None else pending_u.shape[1]  # older checkpoints: none
        if self._pending:
            self._u[:, : self._pending] = pending_u.numpy()
            self._v[:, : self._pending] = pending_v.numpy()
        self._gallery_map = None
