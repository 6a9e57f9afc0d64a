"""RDML: online regularized distance metric learning (Jin, Wang, Zhou, NIPS 2009).

Pairs carry y = +1 (similar) or −1 (dissimilar) and the decision threshold is 1 on
d_A = ‖u − v‖²_A. On a mistake, y (1 − d_A) ≤ 0, the online algorithm takes the step
(docs/algorithms.md)

    A ← A − λ_t y z zᵀ,   z = u − v

with λ_t = λ for dissimilar pairs (adding λ z zᵀ keeps A PSD) and, for similar pairs, λ_t no
larger than 1 / (zᵀ A⁻¹ z), the largest step for which A − λ_t z zᵀ stays PSD. No projection and
no eigendecomposition is needed.

Deviations, each forced by keeping A⁻¹ usable:

* A0 = I (the bound needs A⁻¹ from the first similar pair on);
* the step is capped at (1 − psd_margin) / (zᵀ A⁻¹ z) rather than exactly 1 / (zᵀ A⁻¹ z): the
  exact bound makes A singular, after which A⁻¹ in the next bound would not exist;
* a similar pair whose capped step is negligible (< 1e-6 λ) leaves A unchanged: each capped step
  leaves A' ⪰ psd_margin · A, i.e. shrinks A along A⁻¹z by up to that factor, and repeating
  vanishing steps would grow A⁻¹ geometrically until Sherman-Morrison loses all accuracy.

The threshold 1 fixes the scale: inputs should be scaled so that squared distances are O(1)
(e.g. unit-length rows). With λ ‖z‖² ≫ 1 the step cap binds on every similar pair, A collapses
along the first few of them, and the rule then allows no further similar step, so learning
stalls; that is the step rule's behaviour, not a numerical accident.

A⁻¹ is kept alongside A by Sherman-Morrison, so a step costs O(d²): two symmetric
matrix-vector products and two symmetric rank-one updates.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from oahu.checks import check_number
from oahu.learners.baselines._linalg import (
    as_fortran64,
    fortran_identity,
    sym_matvec,
    sym_rank1_update,
    symmetrized,
    to_tensor,
)
from oahu.learners.baselines.mahalanobis import PairwiseMahalanobis

_NEGLIGIBLE_STEP = 1e-6  # relative to λ


class RDML(PairwiseMahalanobis):
    """RDML online Mahalanobis metric learner from labelled pairs (triplets are split into pairs).

    Parameters
    ----------
    n_features : input dimension d.
    learning_rate : λ, the step on a mistake (in units of 1 / squared distance).
    psd_margin : fraction of the largest PSD-preserving step that a similar pair leaves untaken,
        so that A stays invertible (0 < psd_margin < 1).
    preprocess : input preprocessing (``oahu.preprocessing``), fitted by ``prepare``.

    The defaults (λ = 0.1, unit-length rows, psd_margin = 0.5) were tuned on the development
    split of Fashion-MNIST only (benchmarks/README.md, "Defaults and presets").

    >>> import numpy as np
    >>> rdml = RDML(n_features=2, learning_rate=0.1, preprocess="none")
    >>> rdml.learn_pairs([[2.0, 0.0]], [[0.0, 0.0]], [True]).tolist()  # d_A = 4 >= 1: a mistake
    [True]
    >>> rdml.metric_matrix.round(2).tolist()  # A = I − min(0.1, 0.5 / 4) z zᵀ, z = (2, 0)
    [[0.6, 0.0], [0.0, 1.0]]
    """

    name: ClassVar[str] = "rdml"

    def __init__(
        self,
        n_features: int,
        learning_rate: float = 0.1,
        psd_margin: float = 0.5,
        preprocess: str = "unit",
    ) -> None:
        super().__init__(n_features, preprocess=preprocess)
        self.learning_rate = check_number(learning_rate, "learning_rate", low=0.0, closed="neither")
        self.psd_margin = check_number(
            psd_margin, "psd_margin", low=0.0, high=1.0, closed="neither"
        )
        self._a_inv = fortran_identity(self.n_features)

    @property
    def inverse_metric_matrix(self) -> np.ndarray:
        """The A⁻¹ maintained by Sherman-Morrison, as a full symmetric float64 copy."""
        return symmetrized(self._a_inv)

    def _update_pair(self, z: np.ndarray, similar: bool) -> bool:
        distance = float(z @ sym_matvec(self._a, z))
        y = 1.0 if similar else -1.0
        if y * (1.0 - distance) > 0.0:
            return False
        a_inv_z = sym_matvec(self._a_inv, z)
        q = float(z @ a_inv_z)
        if q <= 0.0:  # impossible for a PD A and z ≠ 0; only round-off gets here
            return False
        step = self.learning_rate
        if similar:
            step = min(step, (1.0 - self.psd_margin) / q)
            if step < _NEGLIGIBLE_STEP * self.learning_rate:
                # A is (numerically) singular along z: no PSD-preserving step is left to take,
                # and taking a vanishing one would only inflate A⁻¹ towards overflow.
                return False
        # A ← A − λ_t y z zᵀ and, by Sherman-Morrison, A⁻¹ ← A⁻¹ + λ_t y A⁻¹z zᵀA⁻¹ / (1 − λ_t y q)
        sym_rank1_update(self._a, -step * y, z)
        sym_rank1_update(self._a_inv, step * y / (1.0 - step * y * q), a_inv_z)
        self.updates += 1
        return True

    def _get_state(self) -> dict[str, Any]:
        # A⁻¹ is saved rather than recomputed so a resumed run continues bit for bit.
        return {**super()._get_state(), "A_inv": to_tensor(self.inverse_metric_matrix)}

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        self._a_inv = as_fortran64(state["A_inv"])
