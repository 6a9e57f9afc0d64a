"""Input preprocessing shared by every learner: centering, standardising, unit-length rows.

The online metric learners are sensitive to the scale and offset of their input: RDML's threshold
and OASIS's inner product assume unit-scale rows, and raw pixels (all non-negative) crowd OAHU's
normalised embeddings into one small cap of the sphere. A learner therefore carries an
:class:`InputScaler` that it applies to everything it learns from and everything it embeds.

Statistics come from unlabelled items only, handed to :meth:`Learner.prepare` once before the
stream starts (the development split in the paper's protocol, the gallery in the service), and
are part of the learner's checkpointed state. ``"none"`` (the default) leaves inputs untouched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

STEPS = ("center", "standardize", "unit")
_STD_FLOOR = 1e-6  # constant features (e.g. always-black pixels) keep scale 1, not 1/0
_NORM_FLOOR = 1e-12


def parse_preprocess(spec: str) -> tuple[str, ...]:
    """``"standardize+unit"`` → ``("standardize", "unit")``; ``"none"`` → ``()``.

    >>> parse_preprocess("center+unit")
    ('center', 'unit')
    >>> parse_preprocess("zscore")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: preprocess: unknown step 'zscore' in 'zscore'; use 'none' or '+'-joined steps...
    """
    if spec in ("", "none"):
        return ()
    steps = tuple(spec.split("+"))
    for step in steps:
        if step not in STEPS:
            raise ValueError(
                f"preprocess: unknown step {step!r} in {spec!r}; use 'none' or '+'-joined "
                f"steps of {', '.join(STEPS)}"
            )
    if "center" in steps and "standardize" in steps:
        raise ValueError(f"preprocess: {spec!r} — standardize already centers")
    return steps


class InputScaler:
    """Column centering / standardising fitted on unlabelled items, then optional unit rows.

    >>> scaler = InputScaler("standardize+unit", n_features=2)
    >>> scaler.fit(np.array([[0.0, 10.0], [2.0, 30.0]]))
    >>> out = scaler.transform(np.array([[2.0, 10.0]], dtype=np.float32))
    >>> [round(float(v), 4) for v in out.ravel()]
    [0.7071, -0.7071]
    """

    def __init__(self, spec: str, n_features: int) -> None:
        self.spec = "none" if spec in ("", "none") else spec
        self.steps = parse_preprocess(spec)
        self.n_features = n_features
        self.mean: np.ndarray | None = None
        self.scale: np.ndarray | None = None

    @property
    def needs_fit(self) -> bool:
        return ("center" in self.steps or "standardize" in self.steps) and self.mean is None

    def fit(self, x: np.ndarray) -> None:
        """Column statistics from ``x`` (n, d); a no-op for steps that need none."""
        if not ("center" in self.steps or "standardize" in self.steps):
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

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Apply the steps to a float32 matrix (returns ``x`` itself when there are none)."""
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
        if "unit" in self.steps:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, _NORM_FLOOR)
        return np.ascontiguousarray(out, dtype=np.float32)

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"spec": self.spec}
        if self.mean is not None:
            state["mean"] = torch.from_numpy(self.mean.copy())
        if self.scale is not None:
            state["scale"] = torch.from_numpy(self.scale.copy())
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if state["spec"] != self.spec:
            raise ValueError(f"preprocess: checkpoint has {state['spec']!r}, not {self.spec!r}")
        self.mean = state["mean"].numpy().astype(np.float32) if "mean" in state else None
        self.scale = state["scale"].numpy().astype(np.float32) if "scale" in state else None
