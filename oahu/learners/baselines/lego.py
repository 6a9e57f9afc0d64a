"""LEGO: LogDet Exact Gradient Online metric learning (Jain, Kulis, Dhillon, Grauman, NIPS 2008).

Each pair (u, v) with target squared distance y updates A by the closed-form minimiser of
D_ld(A, A_t) + η ℓ(d_A(u, v), y) with the squared loss ℓ evaluated at the new distance
(docs/algorithms.md):

    z = u − v,  ŷ = zᵀ A z
    ȳ = (η y ŷ − 1 + sqrt((η y ŷ − 1)² + 4 η ŷ²)) / (2 η ŷ)      (the distance after the update)
    A ← A − η (ȳ − y) A z zᵀ A / (1 + η (ȳ − y) ŷ)

Since 1 + η (ȳ − y) ŷ = ŷ / ȳ > 0 the update is a Sherman-Morrison step on A⁻¹ that keeps A
positive definite. As in the OAHU paper's use of LEGO, similar pairs target a small distance u and
dissimilar pairs a large distance l, and a pair updates A only when it violates its bound
(similar: ŷ > u, dissimilar: ŷ < l).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from oahu.checks import check_number
from oahu.learners.baselines._linalg import sym_matvec, sym_rank1_update
from oahu.learners.baselines.mahalanobis import PairwiseMahalanobis

# (u, l) when neither the caller nor ``prepare`` set them: the 5th / 95th percentile squared
# distances of unit-length rows (standardised digits: 1.07 / 2.71), the scale the other
# baselines assume too.
UNIT_SCALE_TARGETS = (1.0, 2.7)


class LEGO(PairwiseMahalanobis):
    """LEGO online Mahalanobis metric learner from labelled pairs (triplets are split into pairs).

    Parameters
    ----------
    n_features : input dimension d.
    learning_rate : η of the LogDet step (in units of 1 / squared distance, so it depends on the
        scale of the data).
    target_similar : u, the squared distance similar pairs are pulled to.
    target_dissimilar : l, the squared distance dissimilar pairs are pushed to; l > u.
        Both targets are squared distances in the (preprocessed) input's scale. Left as None,
        ``prepare(x)`` sets them from ``x`` by ``LEGO.targets_from_sample`` (the 5th and 95th
        percentiles of squared Euclidean distances, as in Jain et al.'s experiments); a learner
        that is never prepared uses ``UNIT_SCALE_TARGETS``, which suit unit-length rows.
    preprocess : input preprocessing (``oahu.preprocessing``), fitted by ``prepare``.

    The defaults (η = 0.1, unit-length rows) were tuned on the development split of
    Fashion-MNIST only (benchmarks/README.md, "Defaults and presets").

    >>> import numpy as np
    >>> lego = LEGO(n_features=2, learning_rate=1.0, target_similar=1.0, target_dissimilar=4.0,
    ...             preprocess="none")
    >>> lego.learn_pairs([[2.0, 0.0]], [[0.0, 0.0]], [True]).tolist()  # ŷ = 4 > u = 1
    [True]
    >>> d = lego.embed([[2.0, 0.0]]) - lego.embed([[0.0, 0.0]])
    >>> round(float((d ** 2).sum()), 4)  # ȳ = (3 + sqrt(9 + 64)) / 8
    1.443
    """

    name: ClassVar[str] = "lego"

    def __init__(
        self,
        n_features: int,
        learning_rate: float = 0.1,
        target_similar: float | None = None,
        target_dissimilar: float | None = None,
        preprocess: str = "unit",
    ) -> None:
        super().__init__(n_features, preprocess=preprocess)
        self.learning_rate = check_number(learning_rate, "learning_rate", low=0.0, closed="neither")
        self.target_similar = _optional_target("target_similar", target_similar)
        self.target_dissimilar = _optional_target("target_dissimilar", target_dissimilar)
        self._targets: tuple[float, float] | None = None  # (u, l) once both are known
        if self.target_similar is not None and self.target_dissimilar is not None:
            self._resolve_targets(self.target_similar, self.target_dissimilar)

    @property
    def targets(self) -> tuple[float, float] | None:
        """(u, l) in use: the given targets, the rest filled by ``prepare`` or, if the learner
        learns unprepared, by ``UNIT_SCALE_TARGETS``; None until then."""
        return self._targets

    def _prepare(self, items: np.ndarray) -> None:
        """Fill the targets left as None from the preprocessed items (``targets_from_sample``
        with its defaults)."""
        if self._targets is None:
            self._resolve_targets(*self.targets_from_sample(items))

    def _resolve_targets(self, near: float, far: float) -> tuple[float, float]:
        """The targets in use, the ones not given taken from ``near`` / ``far``; return (u, l)."""
        if self._targets is None:
            u = near if self.target_similar is None else self.target_similar
            l = far if self.target_dissimilar is None else self.target_dissimilar
            _check_target_order(u, l)
            self._targets = (u, l)
        return self._targets

    @staticmethod
    def targets_from_sample(
        x: Any,
        low_pct: float = 5.0,
        high_pct: float = 95.0,
        n_pairs: int = 10_000,
        seed: int = 0,
    ) -> tuple[float, float]:
        """(target_similar, target_dissimilar) from percentiles of squared Euclidean distances
        between ``n_pairs`` random pairs of rows of ``x`` (drawn with ``seed``).

        >>> u, l = LEGO.targets_from_sample([[0.0], [1.0], [3.0]], low_pct=0, high_pct=100)
        >>> (u, l)
        (1.0, 9.0)
        """
        if not 0.0 <= low_pct < high_pct <= 100.0:
            raise ValueError(
                f"low_pct, high_pct: need 0 <= low_pct < high_pct <= 100, got {low_pct!r}, "
                f"{high_pct!r}"
            )
        data = np.asarray(x, dtype=np.float64)
        if data.ndim != 2 or len(data) < 2:
            raise ValueError(f"x: need a 2-D array of at least 2 rows, got shape {data.shape}")
        rng = np.random.default_rng(seed)
        i = rng.integers(0, len(data), size=int(n_pairs))
        j = rng.integers(0, len(data), size=int(n_pairs))
        distinct = i != j
        sq = ((data[i[distinct]] - data[j[distinct]]) ** 2).sum(axis=1)
        sq = sq[sq > 0]
        if len(sq) == 0:
            raise ValueError("x: all sampled pairs are identical; cannot derive targets")
        low, high = np.percentile(sq, [low_pct, high_pct])
        return float(low), float(high)

    # An unprepared learner falls back to the unit-scale targets when it first learns.
    def _learn_pairs(self, u: np.ndarray, v: np.ndarray, similar: np.ndarray) -> np.ndarray:
        self._resolve_targets(*UNIT_SCALE_TARGETS)  # a no-op once the targets are set
        return super()._learn_pairs(u, v, similar)

    def _learn_triplets(self, a: np.ndarray, p: np.ndarray, n: np.ndarray) -> np.ndarray:
        self._resolve_targets(*UNIT_SCALE_TARGETS)
        return super()._learn_triplets(a, p, n)

    def _get_state(self) -> dict[str, Any]:
        return {
            **super()._get_state(),
            "targets": None if self._targets is None else [*self._targets],
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        targets = state.get("targets")  # absent from older checkpoints: the params held them
        if targets is not None:
            self._targets = (float(targets[0]), float(targets[1]))

    def _update_pair(self, z: np.ndarray, similar: bool) -> bool:
        az = sym_matvec(self._a, z)
        y_hat = float(z @ az)
        assert self._targets is not None  # resolved by _learn_pairs / _learn_triplets
        target = self._targets[0] if similar else self._targets[1]
        satisfied = y_hat <= target if similar else y_hat >= target
        if satisfied or y_hat <= 0.0:
            return False
        eta = self.learning_rate
        y_bar = _lego_new_distance(eta, target, y_hat)
        step = eta * (y_bar - target)
        sym_rank1_update(self._a, -step / (1.0 + step * y_hat), az)
        self.updates += 1
        return True


def _optional_target(name: str, value: Any) -> float | None:
    return None if value is None else check_number(value, name, low=0.0, closed="neither")


def _check_target_order(near: float, far: float) -> None:
    if far <= near:
        raise ValueError(f"target_dissimilar: must be > target_similar={near!r}, got {far!r}")


def _lego_new_distance(eta: float, target: float, y_hat: float) -> float:
    """ȳ, the positive root of η ŷ ȳ² + (1 − η y ŷ) ȳ − ŷ = 0 (the LEGO update's closed form).

    With b = 1 − η y ŷ the textbook root (−b + s) / (2 η ŷ) cancels catastrophically when b > 0
    and η ŷ is small; the conjugate form 2 ŷ / (b + s) is the same number without cancellation.
    """
    b = 1.0 - eta * target * y_hat
    s = math.sqrt(b * b + 4.0 * eta * y_hat * y_hat)
    return 2.0 * y_hat / (b + s) if b > 0.0 else (s - b) / (2.0 * eta * y_hat)
