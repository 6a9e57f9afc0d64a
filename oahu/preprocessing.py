"""Input preprocessing shared by every learner: centering, standardising, a projection onto the
principal axes, unit-length rows.

The online metric learners are sensitive to the scale and offset of their input: RDML's threshold
and OASIS's inner product assume unit-scale rows, and raw pixels (all non-negative) crowd OAHU's
normalised embeddings into one small cap of the sphere. A learner therefore carries an
:class:`InputScaler` that it applies to everything it learns from and everything it embeds.

Statistics come from unlabelled items only, handed to :meth:`Learner.prepare` once before the
stream starts (the development split in the paper's protocol, the gallery in the service), and
are part of the learner's checkpointed state. ``"none"`` (the default) leaves inputs untouched.

``"pca:K"`` centres the items (or standardises them, with ``standardize``) and projects them onto
their top K principal axes, so a learner works in K dimensions instead of d: OAHU's default
starts from the cosine metric of that projection and learns on top of it (docs/algorithms.md,
"Input projection"). If the items span fewer than K axes, the missing axes are zero.

``"lift"`` (ours, last) appends one constant coordinate r, the root-mean-square norm of the
prepared items after the other steps: x -> (x, r). A learner that normalises its embeddings
(OAHU) then starts from the cosine of lifted items, which keeps what the unit sphere discards,
the norm: for items near the centre it is Euclidean distance over r, for items far out the
angle (docs/algorithms.md, "Input projection").

``"auto"`` (OAHU's default) picks by the items' dimension: ``pca:200`` for more than 200
features (images: the angle of their leading principal axes describes them), ``pca:200+lift``
for at most 200 (measured features, which the projection only rotates and whose norm carries
class information); chosen on validation splits of nine datasets (docs/algorithms.md, "Input
preprocessing").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "AUTO",
    "STEPS",
    "InputScaler",
    "check_preprocess",
    "parse_preprocess",
    "pca_components",
    "resolve_preprocess",
]

STEPS = ("center", "standardize", "pca:K", "unit", "lift")
AUTO = "auto"
# "auto" projects onto this many principal axes and lifts items of at most this many features.
AUTO_COMPONENTS = 200
_STD_FLOOR = 1e-6  # constant features (e.g. always-black pixels) keep scale 1, not 1/0
_NORM_FLOOR = 1e-12


def resolve_preprocess(spec: str, n_features: int) -> str:
    """The steps ``spec`` stands for on items of ``n_features`` features: ``spec`` itself, but
    ``"auto"`` becomes ``pca:200`` above 200 features and ``pca:200+lift`` up to 200.

    >>> resolve_preprocess("auto", 784), resolve_preprocess("auto", 16)
    ('pca:200', 'pca:200+lift')
    >>> resolve_preprocess("center+unit", 16)
    'center+unit'
    """
    if spec != AUTO:
        return spec
    lift = "+lift" if n_features <= AUTO_COMPONENTS else ""
    return f"pca:{AUTO_COMPONENTS}{lift}"


def check_preprocess(spec: str) -> None:
    """Raise ValueError unless ``spec`` is ``"auto"`` or steps :func:`parse_preprocess` reads.

    >>> check_preprocess("auto"); check_preprocess("pca:64+lift")
    >>> check_preprocess("lift+pca:64")
    Traceback (most recent call last):
    ...
    ValueError: preprocess: 'lift+pca:64' — lift must be the last step
    """
    if spec != AUTO:
        parse_preprocess(spec)


def parse_preprocess(spec: str) -> tuple[str, ...]:
    """``"standardize+unit"`` → ``("standardize", "unit")``; ``"none"`` → ``()``; ``"auto"``
    names no steps until the items' dimension is known (:func:`resolve_preprocess`).

    >>> parse_preprocess("center+unit")
    ('center', 'unit')
    >>> parse_preprocess("pca:64")
    ('pca:64',)
    >>> parse_preprocess("zscore")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: preprocess: unknown step 'zscore' in 'zscore'; use 'auto', 'none' or '+'-joined...
    """
    if not isinstance(spec, str):
        raise ValueError(f"preprocess: expected a string such as 'center+unit', got {spec!r}")
    if spec in ("", "none"):
        return ()
    steps = tuple(spec.split("+"))
    for step in steps:
        if step not in STEPS and pca_components(step) is None:
            raise ValueError(
                f"preprocess: unknown step {step!r} in {spec!r}; use 'auto', 'none' or "
                f"'+'-joined steps of {', '.join(STEPS)}, pca:K"
            )
    names = [step.partition(":")[0] for step in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"preprocess: {spec!r} repeats a step")
    for centring in ("standardize", "pca"):
        if "center" in steps and centring in names:
            raise ValueError(f"preprocess: {spec!r} — {centring} already centers")
    if "lift" in steps and not {"center", "standardize", "pca"} & set(names):
        # A constant coordinate lifts items around their centre; uncentred it only adds a bias.
        raise ValueError(f"preprocess: {spec!r} — lift needs center, standardize or pca:K first")
    for last in ("unit", "lift"):
        if last in steps and steps[-1] != last:
            raise ValueError(f"preprocess: {spec!r} — {last} must be the last step")
    return steps


def pca_components(step: str) -> int | None:
    """K of a ``"pca:K"`` step (a positive integer), None for any other step.

    >>> pca_components("pca:128"), pca_components("center"), pca_components("pca:0")
    (128, None, None)
    """
    name, sep, count = step.partition(":")
    if name != "pca" or not sep or not count.isdigit() or int(count) < 1:
        return None
    return int(count)


class InputScaler:
    """Column centering / standardising / principal axes fitted on unlabelled items, then
    optional unit rows.

    >>> scaler = InputScaler("standardize+unit", n_features=2)
    >>> scaler.fit(np.array([[0.0, 10.0], [2.0, 30.0]]))
    >>> out = scaler.transform(np.array([[2.0, 10.0]], dtype=np.float32))
    >>> [round(float(v), 4) for v in out.ravel()]
    [0.7071, -0.7071]
    >>> pca = InputScaler("pca:1", n_features=2)
    >>> pca.fit(np.array([[0.0, 0.0], [2.0, 2.0], [4.0, 4.0]]))
    >>> projected = pca.transform(np.ones((1, 2), np.float32))  # (1, 1) is 1.4142 from the mean
    >>> pca.n_outputs, round(abs(float(projected[0, 0])), 4)
    (1, 1.4142)
    """

    def __init__(self, spec: str, n_features: int) -> None:
        # The steps themselves, "auto" resolved: what a checkpoint's state must match.
        spec = resolve_preprocess(spec, n_features)
        self.spec = "none" if spec in ("", "none") else spec
        self.steps = parse_preprocess(spec)
        self.n_features = n_features
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None
        self.components: np.ndarray | None = None  # (K, d) principal axes, rows of unit norm
        self.lift: float | None = None  # the constant coordinate of "lift"
        # components.T in float64 for row-invariant projections, made once per set of axes:
        # converting the (d, K) matrix on every call cost more than projecting one row
        self._axes64: tuple[np.ndarray, np.ndarray] | None = None
        k = next((c for c in map(pca_components, self.steps) if c is not None), None)
        self._pca = None if k is None else min(k, n_features)

    @property
    def n_outputs(self) -> int:
        """Dimension of the transformed items: K for ``pca:K`` (at most d), else d; one more
        with ``lift``."""
        width = self.n_features if self._pca is None else self._pca
        return width + int("lift" in self.steps)

    @property
    def _fits(self) -> bool:
        return (
            "center" in self.steps
            or "standardize" in self.steps
            or self._pca is not None
            or "lift" in self.steps
        )

    @property
    def needs_fit(self) -> bool:
        return self._fits and self.mean is None

    def fit(self, x: np.ndarray) -> None:
        """Column statistics (and principal axes) from ``x`` (n, d); a no-op for steps that
        need none."""
        if not self._fits:
            return
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features or len(x) == 0:
            raise ValueError(
                f"x: prepare needs items of shape (n >= 1, {self.n_features}), got {x.shape}"
            )
        if not np.isfinite(x).all():
            raise ValueError("x: prepare needs finite items")
        self.mean = x.mean(axis=0).astype(np.float32)
        if "standardize" in self.steps:
            self.scale = np.maximum(x.std(axis=0), _STD_FLOOR).astype(np.float32)
        if self._pca is not None:
            self.components = _principal_axes(x, self.mean, self.scale, self._pca)
        if "lift" in self.steps:
            self.lift = None  # the other steps' output, without the coordinate being fitted
            before = self.transform(x.astype(np.float32), defer_projection=True)
            norms = np.linalg.norm(self._project_axes(before, row_invariant=True), axis=1)
            self.lift = float(max(np.sqrt(np.mean(norms.astype(np.float64) ** 2)), _NORM_FLOOR))

    def transform(self, x: np.ndarray, defer_projection: bool = False) -> np.ndarray:
        """Apply the steps to a float32 matrix (returns ``x`` itself when there are none).

        With ``defer_projection``, only the steps that treat every value on its own (centre,
        standardise); :meth:`project` does the rest. A matrix product's rounding depends on how
        many rows it multiplies at once, so a learner that must learn the same model however its
        stream is chunked (OAHU's strict mode) projects each update's rows itself.
        """
        if not self.steps:
            return x
        if self.needs_fit:
            raise ValueError(
                f"preprocess: {self.spec!r} needs statistics: call learner.prepare(X) with "
                "unlabelled items (e.g. the development split) before learning or embedding"
            )
        out = x
        if self.mean is not None:
            out = out - self.mean
        if self.scale is not None:
            out = out / self.scale
        out = np.ascontiguousarray(out, dtype=np.float32)
        return out if defer_projection else self.project(out, row_invariant=True)

    def project(self, x: np.ndarray, row_invariant: bool = False) -> np.ndarray:
        """The steps after the elementwise ones: the principal-axes projection and unit rows.

        With ``row_invariant``, each row's projection does not depend on the rows projected with
        it: the product is accumulated in float64 and rounded to float32 once, where float32
        BLAS rounds a row differently by how many rows it multiplies at once. Embedding needs
        this (the service embeds a query alone or batched with other requests' queries, and must
        give one answer per model); a learner's own fixed-size update blocks do not.
        """
        out = self._project_axes(x, row_invariant)
        if "unit" in self.steps:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, _NORM_FLOOR)
        if self.lift is not None:
            column = np.full((len(out), 1), self.lift, dtype=np.float32)
            out = np.concatenate([out, column], axis=1)
        return np.ascontiguousarray(out, dtype=np.float32)

    def _project_axes(self, x: np.ndarray, row_invariant: bool) -> np.ndarray:
        if self.components is None:
            return x
        if row_invariant:
            return (x.astype(np.float64) @ self._components_t64()).astype(np.float32)
        return x @ self.components.T

    def _components_t64(self) -> np.ndarray:
        """``components.T`` in float64, converted again only when the axes are replaced."""
        assert self.components is not None
        if self._axes64 is None or self._axes64[0] is not self.components:
            self._axes64 = (self.components, self.components.T.astype(np.float64))
        return self._axes64[1]

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"spec": self.spec}
        if self.mean is not None:
            state["mean"] = torch.from_numpy(self.mean.copy())
        if self.scale is not None:
            state["scale"] = torch.from_numpy(self.scale.copy())
        if self.components is not None:
            state["components"] = torch.from_numpy(self.components.copy())
        if self.lift is not None:
            state["lift"] = self.lift
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if state["spec"] != self.spec:
            raise ValueError(f"preprocess: checkpoint has {state['spec']!r}, not {self.spec!r}")
        self.mean = state["mean"].numpy().astype(np.float32) if "mean" in state else None
        self.scale = state["scale"].numpy().astype(np.float32) if "scale" in state else None
        self.components = (
            state["components"].numpy().astype(np.float32) if "components" in state else None
        )
        self.lift = float(state["lift"]) if "lift" in state else None
        if "lift" in self.steps and self.lift is None:
            raise ValueError(f"preprocess: {self.spec!r} needs its lift in the checkpoint")
        if self._pca is not None and (
            self.components is None or self.components.shape != (self._pca, self.n_features)
        ):
            raise ValueError(
                f"preprocess: {self.spec!r} needs principal axes of shape "
                f"({self._pca}, {self.n_features}) in the checkpoint"
            )


def _principal_axes(
    x: np.ndarray, mean: np.ndarray, scale: np.ndarray | None, k: int
) -> np.ndarray:
    """The top ``k`` principal axes of ``x`` (rows, float32); zero rows beyond its rank."""
    from sklearn.decomposition import PCA  # only fitting needs scikit-learn

    centred = (x - mean) / (1.0 if scale is None else scale)
    available = min(k, *centred.shape)
    axes = np.zeros((k, x.shape[1]), dtype=np.float32)
    if available:
        pca = PCA(n_components=available, svd_solver="covariance_eigh").fit(centred)
        axes[:available] = pca.components_
    return axes
