"""OPML: a one-pass closed-form solution for online metric learning (Li, Gao, Wang, Zhou, Huo,
Shi, Pattern Recognition 2018).

The metric is M = Lᵀ L with L0 = I. A triplet (x, x_p, x_q) with a = x − x_p, b = x − x_q that
violates the unit margin, ‖L a‖² + 1 − ‖L b‖² > 0, moves L to the minimiser of
½‖L − L_t‖²_F + (λ/2)(‖L a‖² − ‖L b‖²), which is L_t (I + λ(a aᵀ − b bᵀ))⁻¹; SPEC §6 writes it
out by Woodbury so that a step costs O(d²):

    Btr = λ(aᵀa − bᵀb),  Btr2 = λ²((aᵀa)² − 2(aᵀb)² + (bᵀb)²),  η = 1 + Btr,  β = (Btr² − Btr2)/2
    L ← L − ηλ/(η+β) (L a aᵀ − L b bᵀ)
          + λ²/(η+β) ((aᵀa) L a aᵀ − (aᵀb) L a bᵀ − (bᵀa) L b aᵀ + (bᵀb) L b bᵀ)

η + β equals det(I + λ(a aᵀ − b bᵀ)) restricted to span{a, b}. When it is not positive the
objective has no minimiser (the step would be a saddle point or a division by ~0), so that
triplet is skipped and counted under ``skipped["ill_posed"]``; with λ = 1e-3 this only happens
for ‖b‖² ≳ 1000, i.e. unscaled features.

Triplets come from ``learn_samples`` (the paper's one-pass triplet construction: each arriving
labelled sample x forms one triplet with the latest earlier sample of its class as x_p and the
latest earlier sample of any other class as x_q) or, in oahu's services, from any triplet stream.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch

from oahu.baselines._linalg import (
    as_fortran64,
    fortran_identity,
    matmul_columns,
    rank_k_update,
    single_threaded_blas,
    to_tensor,
)
from oahu.baselines._params import positive_float
from oahu.learner import ConstraintKind, Learner, MetricKind, as_feature_matrix

SKIP_ILL_POSED = "ill_posed"
_MIN_DETERMINANT = 1e-12


class OPML(Learner):
    """OPML one-pass online Mahalanobis metric learner.

    Parameters
    ----------
    n_features : input dimension d.
    regularization : λ, the weight of the triplet loss against staying close to the previous L
        (the paper's default 1e-3).

    >>> import numpy as np
    >>> opml = OPML(n_features=2, regularization=0.1)
    >>> x = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 1.0]]
    >>> opml.learn_samples(x, [0, 1, 1, 0]).tolist()  # a sample's triplet needs an earlier
    [False, False, True, True]
    >>> opml.metric_matrix.round(4).tolist()           # sample of its class and of another one
    [[0.9256, 0.3738], [0.3738, 1.1125]]
    """

    name: ClassVar[str] = "opml"
    constraint_kind: ClassVar[ConstraintKind] = "triplet"
    metric: ClassVar[MetricKind] = "l2"

    def __init__(self, n_features: int, regularization: float = 1e-3) -> None:
        super().__init__(n_features)
        self.regularization = positive_float("regularization", regularization)
        self._l = fortran_identity(self.n_features)
        # latest sample per class, least recently updated class first (dicts keep insertion order)
        self._latest: dict[Any, np.ndarray] = {}

    @property
    def transform_matrix(self) -> np.ndarray:
        """The current L (float64 copy); items embed as L x."""
        return np.array(self._l, order="C", copy=True)

    @property
    def metric_matrix(self) -> np.ndarray:
        """M = Lᵀ L (float64), positive semi-definite by construction."""
        return self._l.T @ self._l

    def get_params(self) -> dict[str, Any]:
        return {"regularization": self.regularization}

    # ----------------------------------------------------------------- learning
    def learn_samples(self, x: Any, y: Any) -> np.ndarray:
        """One pass over labelled samples in order; return a bool mask of the samples whose
        triplet changed the model.

        A sample with no earlier sample of its class, or none of another class, forms no
        triplet (False, and not counted as a constraint). Non-finite samples are never kept as
        the latest of their class; their triplet is skipped and counted by ``learn_triplets``.
        The latest sample per class persists across calls and in checkpoints.
        """
        items = as_feature_matrix(x, self.n_features, "X")
        labels = np.asarray(y)
        if labels.ndim != 1 or len(labels) != len(items):
            raise ValueError(f"y: expected {len(items)} labels, got shape {labels.shape}")
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

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        anchors = a.astype(np.float64)
        to_pos = anchors - p.astype(np.float64)
        to_neg = anchors - n.astype(np.float64)
        used = np.zeros(len(a), dtype=bool)
        with single_threaded_blas():
            for i in range(len(a)):
                used[i] = self._update(to_pos[i], to_neg[i])
        return used

    def _update(self, a: np.ndarray, b: np.ndarray) -> bool:
        ab_cols = np.empty((self.n_features, 2), order="F")
        ab_cols[:, 0], ab_cols[:, 1] = a, b
        l_ab = matmul_columns(self._l, ab_cols)
        la, lb = l_ab[:, 0], l_ab[:, 1]
        if float(la @ la) + 1.0 - float(lb @ lb) <= 0.0:
            return False
        lam = self.regularization
        aa, ab, bb = float(a @ a), float(a @ b), float(b @ b)
        btr = lam * (aa - bb)
        btr2 = lam * lam * (aa * aa - 2.0 * ab * ab + bb * bb)
        eta = 1.0 + btr
        det = eta + (btr * btr - btr2) / 2.0  # η + β
        if det <= _MIN_DETERMINANT:
            self.skipped[SKIP_ILL_POSED] += 1
            return False
        # The SPEC's four outer products grouped by their right factor: L += u aᵀ + w bᵀ.
        sq = lam * lam / det
        uw_cols = np.empty((self.n_features, 2), order="F")
        uw_cols[:, 0] = ((lam * lam * aa - eta * lam) / det) * la - (sq * ab) * lb
        uw_cols[:, 1] = ((eta * lam + lam * lam * bb) / det) * lb - (sq * ab) * la
        rank_k_update(self._l, uw_cols, ab_cols)
        self.updates += 1
        return True

    # ----------------------------------------------------------------- inference
    def embed(self, x: Any, role: Literal["query", "gallery"] = "query") -> np.ndarray:
        """x ↦ L x, so Euclidean distances of embeddings are distances under M = LᵀL."""
        items = as_feature_matrix(x, self.n_features, "x")
        return (items @ self._l.T.astype(np.float32))[None]

    # ----------------------------------------------------------------- state
    def _get_state(self) -> dict[str, Any]:
        items = np.stack(list(self._latest.values())) if self._latest else np.zeros((0, 0))
        return {
            "L": to_tensor(self._l),
            "latest_labels": list(self._latest),
            "latest_items": torch.from_numpy(items.astype(np.float32)),
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        self._l = as_fortran64(state["L"])
        items = state["latest_items"].numpy()
        self._latest = {
            _label_key(k): row.copy() for k, row in zip(state["latest_labels"], items, strict=True)
        }


def _label_key(label: Any) -> Any:
    """A plain Python label (int, str, ...) usable as a dict key and storable in a checkpoint."""
    return label.item() if isinstance(label, np.generic) else label
