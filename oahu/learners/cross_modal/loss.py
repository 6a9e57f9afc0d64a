"""Cross-modal OAHU's per-depth losses (ours; docs/cross-modal.md, Eq. CM1-CM2) and their
gradients with respect to a constraint's embeddings: the margin triplet loss of oahu's default
learner, and a pair loss against the threshold b on the squared distance between unit
embeddings, averaged over depths.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PAIR_THRESHOLD", "constraint_gradients"]

#: Squared distance between unit embeddings below which a pair counts as linked (60°).
PAIR_THRESHOLD = 1.0


def constraint_gradients(
    f: list[np.ndarray], similar: bool | None, margin: float, alpha: np.ndarray
) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, float]:
    """The mean over depths of one constraint's per-depth losses (docs/cross-modal.md, Eq.
    CM1-CM2), differentiated with respect to its items' embeddings.

    ``f`` holds each item's embeddings (n_depths, E) in role order (anchor, positive, negative;
    or the pair's two items); ``similar`` is the pair's flag (None for a triplet). Returns each
    item's gradient, the depths whose loss is positive, the depths that rank the constraint
    wrongly, and whether the combined distance Σ α(l) D(l) ranks it wrongly (1.0) or not.

    >>> f = [np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])]
    >>> parts, active, wrong, combined = constraint_gradients(f, None, 0.1, np.ones(1))
    >>> [p.tolist() for p in parts], active.tolist(), wrong.tolist(), combined
    ([[[2.0, -2.0]], [[-2.0, 2.0]], [[0.0, 0.0]]], [True], [True], 1.0)
    """
    n_depths = len(f[0])
    if similar is None:
        d_pos = ((f[0] - f[1]) ** 2).sum(-1)
        d_neg = ((f[0] - f[2]) ** 2).sum(-1)
        active = d_pos - d_neg + margin > 0
        wrong = d_pos >= d_neg
        g = active[:, None] * (2.0 / n_depths)
        # ∂/∂a (‖a − p‖² − ‖a − n‖²) = 2(n − p); ∂/∂p = 2(p − a); ∂/∂n = 2(a − n).
        parts = (g * (f[2] - f[1]), g * (f[1] - f[0]), g * (f[0] - f[2]))
        return parts, active, wrong, float(alpha @ d_pos >= alpha @ d_neg)
    d = ((f[0] - f[1]) ** 2).sum(-1)
    sign = 1.0 if similar else -1.0
    active = sign * (d - PAIR_THRESHOLD) + margin > 0
    wrong = (d > PAIR_THRESHOLD) if similar else (d <= PAIR_THRESHOLD)
    g = active[:, None] * (2.0 * sign / n_depths)
    parts = (g * (f[0] - f[1]), g * (f[1] - f[0]))
    return parts, active, wrong, float((float(alpha @ d) > PAIR_THRESHOLD) == bool(similar))
