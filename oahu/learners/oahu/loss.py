"""The per-depth losses of a constraint, as a function of its embeddings: its two distances, a
loss on them with its derivatives, and the chain rule back to the embeddings.

A triplet (a, p, n) has D+ = ‖f(a) − f(p)‖ and D− = ‖f(a) − f(n)‖; a quadruplet (a, b, c, d),
which says D(a, b) < D(c, d), has D+ = D(a, b) and D− = D(c, d) (docs/algorithms.md,
"Quadruplets"). Everything after the two distances is the same for both kinds.

Two losses, each a :class:`DepthLoss` (a new loss is a new small class, named in
:data:`LOSSES`):

* :class:`ABTL`, the paper's Adaptive-Bound Triplet Loss (Eq. 6-13): thresholds c1 = d_sim(D+)
  and c2 = d_dis(D−) (Eq. 9-10) bound an attractive and a repulsive part (Eq. 11-12), averaged
  (Eq. 13). The thresholds are computed from the distances measured before the update and are
  *targets*: they are held constant in the gradient step (docs/algorithms.md).
* :class:`MarginLoss` (ours): max(0, D+ − D− + m) (docs/algorithms.md, "Margin loss").

Every function works elementwise on arrays of any shape, so one call covers all depths and a
whole micro-batch: distances of shape (n_depths, batch). They accept torch tensors or numpy
arrays (see :func:`oahu.learners.oahu.arrays.namespace`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import torch

from oahu.learners.oahu.arrays import Array, concat, namespace, row_norms

if TYPE_CHECKING:
    from oahu.learners.oahu.config import OAHUConfig

__all__ = [
    "ABTL",
    "LOSSES",
    "DepthLoss",
    "MarginLoss",
    "constraint_distances",
    "dissimilarity_threshold",
    "embedding_gradient",
    "similarity_threshold",
]

_E2M1 = math.exp(2.0) - 1.0  # e^2 - 1
_1ME2 = 1.0 - math.exp(-2.0)  # 1 - e^-2
# A distance of 0 has no direction: its unit difference vector is taken as 0 rather than 0/0.
_DIST_EPS = 1e-12


def constraint_distances(f: Array, n_roles: int) -> tuple[Array, Array]:
    """The two sides' difference vectors, (L+1, 2, T, E), and distances, (L+1, 2, T, 1), of T
    constraints embedded role by role as ``f`` (L+1, n_roles, T, E): [a − p, a − n] for
    triplets, [a − b, c − d] for quadruplets.

    >>> f = torch.tensor([[[[0.0, 0.0]], [[3.0, 4.0]], [[0.0, 1.0]]]])  # a, p, n of one triplet
    >>> diffs, dists = constraint_distances(f, n_roles=3)
    >>> dists.flatten().tolist()
    [5.0, 1.0]
    """
    diffs = f[:, :1] - f[:, 1:] if n_roles == 3 else f[:, 0::2] - f[:, 1::2]
    return diffs, row_norms(diffs)


def embedding_gradient(
    depth_scale: Array, g_pos: Array, g_neg: Array, diffs: Array, dists: Array, n_roles: int
) -> Array:
    """∂(Σ_l s(l) Σ_t L(l)_t)/∂f for every role, (L+1, n_roles, T, E), from the loss's
    ∂L/∂D+ and ∂L/∂D− (L+1, T) and the differences and distances of
    :func:`constraint_distances`; ``depth_scale`` s (L+1,) weighs each depth.

    ∂D/∂f is the unit difference vector, on the first item of a side and negated on the second;
    a triplet's anchor is the first item of both sides and collects both.

    >>> diffs = torch.tensor([[[[3.0, 4.0]], [[0.0, -1.0]]]])  # a − p, a − n of one triplet
    >>> dists = diffs.norm(dim=-1, keepdim=True)
    >>> grad = embedding_gradient(
    ...     torch.ones(1), torch.ones(1, 1), -torch.ones(1, 1), diffs, dists, n_roles=3)
    >>> [[round(v, 4) for v in item] for item in grad[0, :, 0].tolist()]  # a, p, n
    [[0.6, 1.8], [-0.6, -0.8], [0.0, -1.0]]
    """
    xp = namespace(dists)
    coef = depth_scale[:, None, None, None] * xp.stack([g_pos, g_neg], 1)[..., None]
    coef = coef / dists.clip(min=_DIST_EPS)
    towards = coef * diffs  # on the first item of each side
    if n_roles == 3:  # the anchor is the first item of both sides
        return concat([towards.sum(1)[:, None], -towards], axis=1)
    return concat([towards[:, :1], -towards[:, :1], towards[:, 1:], -towards[:, 1:]], axis=1)


class DepthLoss(ABC):
    """A loss on each depth's two distances of a constraint, with its derivatives.

    Called on D+ and D− (any shape, e.g. (n_depths, batch)), it returns ``(loss, ∂L/∂D+,
    ∂L/∂D−)`` elementwise, in the distances' dtype. ``always_active``: the update step takes its
    gradient step without first checking whether every loss is zero, which for a loss that is
    positive on nearly every constraint (ABTL) would only cost a host synchronisation on a GPU.

    >>> import numpy as np
    >>> class Pull(DepthLoss):  # D+²: pulls positives in, ignores negatives
    ...     def __call__(self, d_pos, d_neg):
    ...         return d_pos * d_pos, 2 * d_pos, 0 * d_neg
    >>> loss, g_pos, g_neg = Pull()(np.array([0.5]), np.array([1.0]))
    >>> loss.tolist(), g_pos.tolist(), g_neg.tolist(), Pull.always_active
    ([0.25], [1.0], [0.0], False)
    """

    always_active: ClassVar[bool] = False

    @abstractmethod
    def __call__(self, d_pos: Array, d_neg: Array) -> tuple[Array, Array, Array]: ...

    @classmethod
    def from_config(cls, config: OAHUConfig) -> DepthLoss:
        """The loss with its parameters from ``config``."""
        raise NotImplementedError(f"{cls.__name__}: takes no parameters from a config")


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


class ABTL(DepthLoss):
    """The paper's Adaptive-Bound Triplet Loss (Eq. 6-13) with ∂L/∂D+ and ∂L/∂D−, the
    thresholds c1 = d_sim(D+), c2 = d_dis(D−) (Eq. 9-10) held constant:

    L_attr = max(0, (D+ − c1)/(2 − c1))   (Eq. 11)
    L_rep  = max(0, 1 − D−/c2)            (Eq. 12)
    L      = (L_attr + L_rep)/2           (Eq. 13), in [0, 1]

    ∂L/∂D+ = 1/(2(2 − c1)) where D+ > c1, else 0;  ∂L/∂D− = −1/(2 c2) where D− < c2, else 0.
    Its absolute bounds keep nearly every triplet active (``always_active``).

    >>> loss, g_pos, g_neg = ABTL(tau=0.1)(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 2.0]))
    >>> [round(v, 6) for v in loss.tolist()], [round(v, 6) for v in g_pos.tolist()]
    ([0.493185, 0.0], [0.253408, 0.0])
    >>> [round(v, 6) for v in g_neg.tolist()]
    [-0.253408, 0.0]
    """

    always_active = True

    def __init__(self, tau: float) -> None:
        self.tau = tau

    @classmethod
    def from_config(cls, config: OAHUConfig) -> ABTL:
        return cls(config.tau)

    def __call__(self, d_pos: Array, d_neg: Array) -> tuple[Array, Array, Array]:
        xp = namespace(d_pos)
        c1 = similarity_threshold(d_pos, self.tau)
        c2 = dissimilarity_threshold(d_neg, self.tau)
        inv_span = 1.0 / (2.0 - c1)
        attractive = ((d_pos - c1) * inv_span).clip(min=0.0)
        repulsive = (1.0 - d_neg / c2).clip(min=0.0)
        grad_pos = xp.where(d_pos > c1, 0.5 * inv_span, 0.0)
        grad_neg = xp.where(d_neg < c2, -0.5 / c2, 0.0)
        return 0.5 * (attractive + repulsive), grad_pos, grad_neg

    def __repr__(self) -> str:
        return f"ABTL(tau={self.tau!r})"


class MarginLoss(DepthLoss):
    """The margin triplet loss max(0, D+ − D− + m) (ours, docs/algorithms.md "Margin loss"), with
    ∂L/∂D+ = 1 and ∂L/∂D− = −1 where it is positive, else 0.

    In ABTL's terms both bounds are relative to the triplet itself (c1 = D− − m, c2 = D+ + m), so
    a triplet that already ranks its positive closer by the margin is inactive and leaves the
    metric alone; ABTL's absolute bounds keep nearly every triplet active (Eq. 9-13).

    >>> loss, g_pos, g_neg = MarginLoss(margin=0.1)(
    ...     torch.tensor([0.5, 0.2]), torch.tensor([0.5, 0.9]))
    >>> [round(v, 4) for v in loss.tolist()], g_pos.tolist(), g_neg.tolist()
    ([0.1, 0.0], [1.0, 0.0], [-1.0, -0.0])
    """

    def __init__(self, margin: float) -> None:
        self.margin = margin

    @classmethod
    def from_config(cls, config: OAHUConfig) -> MarginLoss:
        return cls(config.margin)

    def __call__(self, d_pos: Array, d_neg: Array) -> tuple[Array, Array, Array]:
        xp = namespace(d_pos)
        violation = d_pos - d_neg + self.margin
        active = violation > 0.0
        # ones_like/zeros_like keep the distances' dtype (float32), where a Python 1.0 would not.
        grad_pos = xp.where(active, xp.ones_like(d_pos), xp.zeros_like(d_pos))
        return violation.clip(min=0.0), grad_pos, -grad_pos

    def __repr__(self) -> str:
        return f"MarginLoss(margin={self.margin!r})"


# OAHUConfig's ``loss`` names one of these.
LOSSES: dict[str, type[DepthLoss]] = {"margin": MarginLoss, "abtl": ABTL}
