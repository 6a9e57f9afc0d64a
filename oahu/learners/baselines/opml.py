"""OPML: a one-pass closed-form solution for online metric learning (Li, Gao, Wang, Zhou, Huo,
Shi, Pattern Recognition 2018).

The metric is M = Lᵀ L with L0 = I. A triplet (x, x_p, x_q) with a = x − x_p, b = x − x_q that
violates the unit margin, ‖L a‖² + 1 − ‖L b‖² > 0, moves L to the minimiser of
½‖L − L_t‖²_F + (λ/2)(‖L a‖² − ‖L b‖²), in closed form (docs/algorithms.md):

    L ← L T⁻¹,   T = I + λ (a aᵀ − b bᵀ)

which expands term by term (Btr, Btr2, η, β) by Woodbury. We keep M instead of L, which
gives the same metric at every step (M ← T⁻¹ M T⁻¹ since T is symmetric) and lets a step read
and write only half of a symmetric matrix. With P = [a b] and T⁻¹ = I + P C Pᵀ (Woodbury, C a
2 x 2 matrix), Q = M P and S = Pᵀ M P:

    M ← M + P Xᵀ + X Pᵀ,   X = Q C + ½ P (C S C)

i.e. two symmetric matrix-vector products and one symmetric rank-2k update: O(d²).

det(T) on span{a, b} is that expansion's η + β = (1 + λ aᵀa)(1 − λ bᵀb) + λ² (aᵀb)². When it is not
positive, T is indefinite and the objective has no minimiser (the "closed form" is a saddle
point or a division by ~0), so the triplet is skipped and counted under ``skipped["ill_posed"]``;
with λ = 1e-3 that needs ‖b‖² ≳ 1000, i.e. unscaled features. Keep λ ‖b‖² well below 1: as it
nears 1 each step amplifies M along b by up to 1 / det(T)².

Triplets come from ``learn_samples`` (the paper's one-pass triplet construction: each arriving
labelled sample x forms one triplet with the latest earlier sample of its class as x_p and the
latest earlier sample of any other class as x_q) or, in oahu's services, from any triplet stream.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from oahu.capabilities import Capabilities
from oahu.checks import check_number
from oahu.learners.baselines._linalg import (
    sym_matvec,
    sym_rank2k_update,
)
from oahu.learners.baselines.mahalanobis import MahalanobisLearner

SKIP_ILL_POSED = "ill_posed"
_MIN_DETERMINANT = 1e-12


class OPML(MahalanobisLearner):
    """OPML one-pass online Mahalanobis metric learner.

    Parameters
    ----------
    n_features : input dimension d.
    regularization : λ, the weight of the triplet loss against staying close to the previous L
        (the paper's default 1e-3, kept).
    preprocess : input preprocessing (``oahu.preprocessing``), fitted by ``prepare``.
    drift_detector : the river detector watching the prequential mistakes, ‖L a‖² ≥ ‖L b‖²
        before the update (``oahu.drift``; "none" = no watch). OPML reports drifts and does not
        adapt to them.

    The preprocessing default (none) was chosen on the development split of Fashion-MNIST only
    (benchmarks/README.md, "Defaults and presets").

    >>> import numpy as np
    >>> opml = OPML(n_features=2, regularization=0.1)
    >>> x = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 1.0]]
    >>> opml.learn_samples(x, [0, 1, 1, 0]).tolist()  # a sample's triplet needs an earlier
    [False, False, True, True]
    >>> opml.metric_matrix.round(4).tolist()           # sample of its class and of another one
    [[0.9256, 0.3738], [0.3738, 1.1125]]
    """

    name: ClassVar[str] = "opml"
    # Its update reads a triplet only through a − p and a − n, so a quadruplet (a, b, c, d)
    # is learned from a − b and c − d alike.
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=("triplet", "quadruplet"), learns_samples=True, detects_drift=True
    )

    def __init__(
        self,
        n_features: int,
        regularization: float = 1e-3,
        preprocess: str = "none",
        drift_detector: str = "adwin",
    ) -> None:
        super().__init__(n_features, preprocess=preprocess)
        self.regularization = check_number(
            regularization, "regularization", low=0.0, closed="neither"
        )
        self.drift_detector = drift_detector
        self._watch_for_drift(drift_detector)
        self._wrong: list[bool] = []  # prequential outcomes of the triplets being learned
        # latest sample per class, least recently updated class first (dicts keep insertion order)
        self._latest: dict[Any, np.ndarray] = {}

    # ----------------------------------------------------------------- learning
    def _learn_samples(self, items: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """One pass over labelled samples in order (``learn_samples``).

        A sample with no earlier sample of its class, or none of another class, forms no
        triplet (False, and not counted as a constraint). Non-finite samples are never kept as
        the latest of their class; their triplet is skipped and counted by ``learn_triplets``.
        The latest sample per class persists across calls and in checkpoints.
        """
        finite = np.isfinite(items).all(axis=1)
        rows, positives, negatives = [], [], []
        for t, (item, label) in enumerate(zip(items, labels, strict=True)):
            key = _label_key(label)
            other = next((k for k in reversed(self._latest) if k != key), None)
            if key in self._latest and other is not None:
                rows.append(t)
                positives.append(self._latest[key])
                negatives.append(self._latest[other])
            if finite[t]:
                self._latest.pop(key, None)  # re-insert: this class is now the most recent
                self._latest[key] = item.copy()
        used = np.zeros(len(items), dtype=bool)
        if rows:
            used[rows] = self.learn_triplets(items[rows], np.stack(positives), np.stack(negatives))
        return used

    def _learn_differences(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        # Triplets and quadruplets alike: the prequential outcomes of the call feed the drift
        # detector.
        self._wrong = []
        used = super()._learn_differences(near, far)
        self._observe_mistakes(np.array(self._wrong, dtype=bool).reshape(-1, 1))
        return used

    def _learn_quadruplets(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
    ) -> np.ndarray:
        near = a.astype(np.float64) - b.astype(np.float64)
        return self._learn_differences(near, c.astype(np.float64) - d.astype(np.float64))

    def _update_triplet(self, a: np.ndarray, b: np.ndarray) -> bool:
        ma, mb = sym_matvec(self._a, a), sym_matvec(self._a, b)
        to_pos, to_neg = float(a @ ma), float(b @ mb)  # ‖La‖², ‖Lb‖² with ‖Lv‖² = vᵀMv
        self._wrong.append(to_pos >= to_neg)
        if to_pos + 1.0 - to_neg <= 0.0:
            return False
        lam = self.regularization
        aa, ab, bb = float(a @ a), float(a @ b), float(b @ b)
        det = (1.0 + lam * aa) * (1.0 - lam * bb) + lam * lam * ab * ab  # the expansion's η + β
        if det <= _MIN_DETERMINANT:
            self.skipped[SKIP_ILL_POSED] += 1
            return False
        # T⁻¹ = I + P C Pᵀ with C = −(diag(1/λ, −1/λ) + PᵀP)⁻¹, written out for 2 x 2
        c = (lam * lam / det) * np.array([[bb - 1.0 / lam, -ab], [-ab, 1.0 / lam + aa]])
        p = np.empty((self.n_features, 2), order="F")
        p[:, 0], p[:, 1] = a, b
        q = np.empty((self.n_features, 2), order="F")
        q[:, 0], q[:, 1] = ma, mb
        s = p.T @ q
        s = (s + s.T) / 2.0  # PᵀMP is symmetric; drop the round-off that is not
        x = np.asfortranarray(q @ c + p @ (0.5 * (c @ s @ c)))
        sym_rank2k_update(self._a, p, x)
        self.updates += 1
        return True

    # ----------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        items = np.stack(list(self._latest.values())) if self._latest else np.zeros((0, 0))
        return {
            **super()._get_state(),
            "latest_labels": list(self._latest),
            "latest_items": torch.from_numpy(items.astype(np.float32)),
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        items = state["latest_items"].numpy()
        self._latest = {
            _label_key(k): row.copy() for k, row in zip(state["latest_labels"], items, strict=True)
        }


def _label_key(label: Any) -> Any:
    """A plain Python label (int, str, ...) usable as a dict key and storable in a checkpoint."""
    return label.item() if isinstance(label, np.generic) else label
