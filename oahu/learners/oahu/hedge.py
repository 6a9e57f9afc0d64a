"""The hedge update of the metric weights α (Eq. 20 and the smoothing of Algorithm 1).

α is not a trainable parameter: it is updated after the parameter step from the losses each
depth suffered on the constraint (Algorithm 1; docs/algorithms.md, "One update").
"""

from __future__ import annotations

import math

import torch

from oahu.learners.oahu.arrays import namespace


def hedge_update(
    alpha: torch.Tensor, losses: torch.Tensor, beta: float, smoothing: float
) -> torch.Tensor:
    """One hedge step; returns the new α (the input is not modified).

    Eq. 20: if β^{L_min}·ln(L_min) > β − 1 then α ← α·β^{L}, else α ← α·(1 − (1 − β)L), with
    L_min = min_l L(l) (ln 0 = −∞, so L_min = 0 takes the second branch). Then the floor
    α ← max(α, s/(L+1)) and renormalisation to Σα = 1.

    Works on torch tensors or numpy arrays (:func:`oahu.learners.oahu.arrays.namespace`); on a
    device it runs
    without a host synchronisation (the branch is a ``where``).

    >>> a = hedge_update(torch.full((2,), 0.5), torch.tensor([0.0, 1.0]), beta=0.5, smoothing=0.1)
    >>> [round(v, 4) for v in a.tolist()]
    [0.6667, 0.3333]
    """
    xp = namespace(alpha)
    n_depths = alpha.shape[0]
    log_beta = math.log(beta)
    l_min = losses.min()
    # β^{L_min}·ln(L_min); at L_min = 0 this is 0·(−∞): ln 0 = −∞ makes the condition False,
    # and so does the clipped value ln(1e-30)·β^0 ≈ −69 < β − 1.
    lhs = xp.exp(l_min * log_beta) * xp.log(l_min.clip(min=1e-30))
    multiplicative = xp.exp(losses * log_beta)
    linear = 1.0 - (1.0 - beta) * losses
    updated = (xp.where(lhs > beta - 1.0, multiplicative, linear) * alpha).clip(
        min=smoothing / n_depths
    )
    return updated / updated.sum()
