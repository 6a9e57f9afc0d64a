"""The Adaptive-Bound Triplet Loss (ABTL), Eq. 9-13 of the OAHU paper, vectorised.

Every function works elementwise on arrays of any shape, so one call covers all depths and a
whole micro-batch: pass distances of shape (n_depths, batch). They accept torch tensors or numpy
arrays (see :func:`oahu.learners.oahu.arrays.namespace`).

The thresholds c1 = d_sim(D+) and c2 = d_dis(D-) are computed from the distances measured before
the update and are *targets*: they are held constant in the gradient step (docs/algorithms.md).
"""

from __future__ import annotations

import math

import torch

from oahu.learners.oahu.arrays import namespace

_E2M1 = math.exp(2.0) - 1.0  # e^2 - 1
_1ME2 = 1.0 - math.exp(-2.0)  # 1 - e^-2


def similarity_threshold(d_pos: torch.Tensor, tau: float) -> torch.Tensor:
    """d_sim(D+) = τ/(e²−1)·(e^{D+} − 1) ∈ [0, τ] (Eq. 9 with the boundary conditions of Eq. 10).

    >>> similarity_threshold(torch.tensor([0.0, 2.0]), tau=0.1)
    tensor([0.0000, 0.1000])
    """
    return (tau / _E2M1) * namespace(d_pos).expm1(d_pos)


def dissimilarity_threshold(d_neg: torch.Tensor, tau: float) -> torch.Tensor:
    """d_dis(D−) = τ/(1−e^{−2})·(1 − e^{−D−}) + (2 − τ) ∈ [2 − τ, 2] (Eq. 9-10).

    >>> dissimilarity_threshold(torch.tensor([0.0, 2.0]), tau=0.1)
    tensor([1.9000, 2.0000])
    """
    return (tau / _1ME2) * -namespace(d_neg).expm1(-d_neg) + (2.0 - tau)


def abtl(
    d_pos: torch.Tensor, d_neg: torch.Tensor, tau: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ABTL per element: ``(loss, attractive, repulsive)``.

    L_attr = max(0, (D+ − c1)/(2 − c1))   (Eq. 11)
    L_rep  = max(0, 1 − D−/c2)            (Eq. 12)
    L      = (L_attr + L_rep)/2           (Eq. 13), in [0, 1]

    >>> loss, attr, rep = abtl(torch.tensor([0.0]), torch.tensor([2.0]), tau=0.1)
    >>> float(loss), float(attr), float(rep)
    (0.0, 0.0, 0.0)
    """
    c1 = similarity_threshold(d_pos, tau)
    c2 = dissimilarity_threshold(d_neg, tau)
    attractive = ((d_pos - c1) / (2.0 - c1)).clip(min=0.0)
    repulsive = (1.0 - d_neg / c2).clip(min=0.0)
    return 0.5 * (attractive + repulsive), attractive, repulsive


def abtl_with_gradients(
    d_pos: torch.Tensor, d_neg: torch.Tensor, tau: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss of Eq. 13 with ∂L/∂D+ and ∂L/∂D−, thresholds c1, c2 held constant.

    ∂L/∂D+ = 1/(2(2 − c1)) where D+ > c1, else 0;  ∂L/∂D− = −1/(2 c2) where D− < c2, else 0.
    Returns ``(loss, grad_pos, grad_neg)``; the thresholds are computed once for both.

    >>> loss, g_pos, g_neg = abtl_with_gradients(torch.tensor([1.0]), torch.tensor([1.0]), tau=0.1)
    >>> round(float(g_pos), 6), round(float(g_neg), 6)
    (0.253408, -0.253408)
    """
    xp = namespace(d_pos)
    c1 = similarity_threshold(d_pos, tau)
    c2 = dissimilarity_threshold(d_neg, tau)
    inv_span = 1.0 / (2.0 - c1)
    attractive = ((d_pos - c1) * inv_span).clip(min=0.0)
    repulsive = (1.0 - d_neg / c2).clip(min=0.0)
    grad_pos = xp.where(d_pos > c1, 0.5 * inv_span, 0.0)
    grad_neg = xp.where(d_neg < c2, -0.5 / c2, 0.0)
    return 0.5 * (attractive + repulsive), grad_pos, grad_neg


def margin_with_gradients(
    d_pos: torch.Tensor, d_neg: torch.Tensor, margin: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The margin triplet loss max(0, D+ − D− + m) with ∂L/∂D+ and ∂L/∂D− (ours, docs/algorithms.md
    "Margin loss"): ``(loss, grad_pos, grad_neg)``.

    In ABTL's terms both bounds are relative to the triplet itself (c1 = D− − m, c2 = D+ + m), so
    a triplet that already ranks its positive closer by the margin is inactive and leaves the
    metric alone; ABTL's absolute bounds keep nearly every triplet active (Eq. 9-13).

    >>> loss, g_pos, g_neg = margin_with_gradients(
    ...     torch.tensor([0.5, 0.2]), torch.tensor([0.5, 0.9]), margin=0.1)
    >>> [round(v, 4) for v in loss.tolist()], g_pos.tolist(), g_neg.tolist()
    ([0.1, 0.0], [1.0, 0.0], [-1.0, -0.0])
    """
    xp = namespace(d_pos)
    violation = d_pos - d_neg + margin
    active = violation > 0.0
    # ones_like/zeros_like keep the distances' dtype (float32), where a Python 1.0 would not.
    grad_pos = xp.where(active, xp.ones_like(d_pos), xp.zeros_like(d_pos))
    return violation.clip(min=0.0), grad_pos, -grad_pos
