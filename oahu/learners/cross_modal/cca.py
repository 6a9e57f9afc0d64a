"""Offline references for cross-modal retrieval: CCA, PLS and CCA-sign hashing.

Canonical correlation analysis (Hotelling 1936) finds projections of two views of the same
objects whose coordinates correlate most; items of either view are then compared by the cosine
of their projections. It is fitted on the development split's paired items, without labels, as
a user would fit it on paired data before any constraint. CCA is solved in closed form: whiten
each standardised view (covariance plus a small ridge, ``regularization`` times its mean
variance, which keeps the whitening stable when a view has more dimensions than its items
resolve), then take the singular vectors of the whitened cross-covariance. That gives every
component at once, where scikit-learn's iterative ``CCA`` takes minutes for the 64 components of
a 64-bit code on 35,000 items; on few components the two agree (tests/test_cross_modal.py).
PLS is scikit-learn's ``PLSCanonical``.

The sign of the first c CCA projections is the cross-view hashing baseline (in the manner of
CVH, Kumar and Udupa, IJCAI 2011): a c-bit code per item.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oahu.learners.cross_modal.codes import pack_codes

__all__ = ["COMPONENT_CHOICES", "CanonicalReference", "choose_components"]

#: The numbers of components :func:`choose_components` tries.
COMPONENT_CHOICES = (2, 4, 8, 10, 16, 32, 64)


class CanonicalReference:
    """CCA (closed form) or PLS fitted on paired items of two views.

    Parameters
    ----------
    n_components : projections kept for real-valued retrieval.
    method : ``"cca"`` or ``"pls"``.
    regularization : CCA's ridge, relative to each view's mean variance.
    code_bits : the length of the CCA-sign codes (at most the smaller view's dimension).

    >>> rng = np.random.default_rng(0)
    >>> shared = rng.normal(size=(200, 2))
    >>> a = np.hstack([shared, rng.normal(size=(200, 3))])
    >>> b = np.hstack([shared @ [[1.0, 2.0], [0.5, -1.0]], rng.normal(size=(200, 2))])
    >>> ref = CanonicalReference(n_components=2, code_bits=4).fit(a, b)
    >>> [round(float(c), 2) for c in ref.correlations[:2]]
    [1.0, 1.0]
    >>> ref.embed(a[:3], 0).shape, ref.codes(b[:3], 1).shape
    ((3, 2), (3, 1))
    """

    def __init__(
        self,
        n_components: int = 10,
        method: str = "cca",
        regularization: float = 1e-3,
        code_bits: int = 64,
    ) -> None:
        if method not in ("cca", "pls"):
            raise ValueError(f"method: 'cca' or 'pls', got {method!r}")
        if int(n_components) < 1:
            raise ValueError(f"n_components: a positive integer, got {n_components!r}")
        self.n_components = int(n_components)
        self.method = method
        self.regularization = float(regularization)
        self.code_bits = int(code_bits)

    def fit(self, view_a: np.ndarray, view_b: np.ndarray) -> CanonicalReference:
        """Fit on paired items: row i of both views is the same object."""
        views = [np.asarray(v, dtype=np.float64) for v in (view_a, view_b)]
        if len(views[0]) != len(views[1]):
            raise ValueError(
                f"view_b: must pair row for row with view_a ({len(views[0])} rows), got "
                f"{len(views[1])}"
            )
        self.means = [v.mean(0) for v in views]
        self.scales = [np.where(v.std(0) > 1e-9, v.std(0), 1.0) for v in views]
        z = [(v - m) / s for v, m, s in zip(views, self.means, self.scales, strict=True)]
        n_max = min(z[0].shape[1], z[1].shape[1], len(z[0]) - 1)
        if self.n_components > n_max:
            raise ValueError(
                f"n_components: at most {n_max} for views of {z[0].shape[1]} and "
                f"{z[1].shape[1]} dimensions, got {self.n_components}"
            )
        # Every component the views allow: codes of any length up to it come from one fit.
        self._fit_cca(z, n_max)
        if self.method == "pls":
            from sklearn.cross_decomposition import PLSCanonical  # only fitting needs it

            self._pls = PLSCanonical(self.n_components, scale=False, max_iter=1000).fit(*z)
        return self

    def _fit_cca(self, z: list[np.ndarray], k: int) -> None:
        n = len(z[0])
        whiten = []
        for v in z:
            cov = v.T @ v / (n - 1)
            cov += self.regularization * np.trace(cov) / len(cov) * np.eye(len(cov))
            vals, vecs = np.linalg.eigh(cov)
            whiten.append(vecs / np.sqrt(np.maximum(vals, 1e-12)) @ vecs.T)
        cross = whiten[0] @ (z[0].T @ z[1] / (n - 1)) @ whiten[1]
        u, s, vt = np.linalg.svd(cross, full_matrices=False)
        self.correlations = s[:k]
        self.weights = [whiten[0] @ u[:, :k], whiten[1] @ vt[:k].T]

    def _projections(self, x: np.ndarray, view: int) -> np.ndarray:
        if view not in (0, 1):
            raise ValueError(f"view: 0 (A) or 1 (B), got {view!r}")
        z = (np.asarray(x, dtype=np.float64) - self.means[view]) / self.scales[view]
        return z @ self.weights[view]

    def embed(self, x: np.ndarray, view: int) -> np.ndarray:
        """Unit-length projections (n, n_components): squared distance is 2 − 2 cosine."""
        if self.method == "pls":
            z = (np.asarray(x, dtype=np.float64) - self.means[view]) / self.scales[view]
            rot = self._pls.x_rotations_ if view == 0 else self._pls.y_rotations_
            p = z @ rot
        else:
            p = self._projections(x, view)[:, : self.n_components]
        norms = np.linalg.norm(p, axis=1, keepdims=True)
        return (p / np.maximum(norms, 1e-12)).astype(np.float32)

    @property
    def max_bits(self) -> int:
        """The longest CCA-sign code these views give: one bit per canonical component."""
        return self.weights[0].shape[1]

    def codes(self, x: np.ndarray, view: int, bits: int | None = None) -> np.ndarray:
        """Packed CCA-sign codes (n, bits / 8): the signs of the first ``bits`` (default
        ``code_bits``) canonical projections."""
        bits = self.code_bits if bits is None else int(bits)
        if bits > self.max_bits:
            raise ValueError(
                f"code_bits: {bits} bits need as many canonical components; these views give "
                f"{self.max_bits}"
            )
        return pack_codes(self._projections(x, view)[:, :bits] > 0)


def choose_components(
    view_a: np.ndarray,
    view_b: np.ndarray,
    labels: np.ndarray,
    score,
    method: str = "cca",
    choices: Sequence[int] = COMPONENT_CHOICES,
    seed: int = 0,
) -> int:
    """The number of components with the best ``score(reference, a_val, b_val, y_val)`` on a
    seeded half of the development objects, fitted on the other half (never the test split)."""
    n = len(labels)
    order = np.random.default_rng(seed).permutation(n)
    fit, val = order[: n // 2], order[n // 2 :]
    limit = min(np.shape(view_a)[1], np.shape(view_b)[1], len(fit) - 1)
    best, best_score = None, -np.inf
    for k in choices:
        if k > limit:
            continue
        ref = CanonicalReference(k, method, code_bits=min(k, 8)).fit(view_a[fit], view_b[fit])
        value = score(ref, view_a[val], view_b[val], labels[val])
        if value > best_score:
            best, best_score = k, value
    if best is None:
        raise ValueError(f"choices: none of {tuple(choices)} fits views this small")
    return best
