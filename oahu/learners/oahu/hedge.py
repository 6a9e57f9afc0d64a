"""The hedge over depths: the update of the metric weights α (Eq. 20 and the smoothing of
Algorithm 1), and the signals that drive it.

α is not a trainable parameter: after the parameter step, each depth is discounted by a signal
in [0, 1] of how it did on the new constraints (docs/algorithms.md, "One update"). Two signals,
each a :class:`HedgeSignal` (a new signal is a new small class, named in
:data:`HEDGE_SIGNALS`):

* :class:`LossSignal`, the paper's: each depth's training loss on them (Algorithm 1, Eq. 20);
* :class:`MistakeSignal` (ours): each depth's share of them it ranked wrongly before the update,
  from the prequential record (:mod:`oahu.learners.oahu.prequential`). A depth is discounted for
  the mistakes it makes on constraints it has not yet learned, rather than for a training loss
  that every depth can drive down.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch

from oahu.learners.oahu.arrays import Array, namespace

__all__ = [
    "HEDGE_SIGNALS",
    "HedgeSignal",
    "LossSignal",
    "MistakeSignal",
    "floored",
    "hedge_update",
]


def hedge_update(
    alpha: torch.Tensor, losses: torch.Tensor, beta: float, smoothing: float
) -> torch.Tensor:
    """One hedge step; returns the new α (the input is not modified).

    Eq. 20: if β^{L_min}·ln(L_min) > β − 1 then α ← α·β^{L}, else α ← α·(1 − (1 − β)L), with
    L_min = min_l L(l) (ln 0 = −∞, so L_min = 0 takes the second branch). Then the floor
    α ← max(α, s/(L+1)) and renormalisation to Σα = 1. ``losses`` is the signal: the training
    losses (the paper) or the prequential mistakes (ours), (L+1,) for one update, or (L+1, B)
    with one column per new constraint of a micro-batch (ours, docs/algorithms.md H2): each
    column discounts α by its own factor of Eq. 20, as B updates would, and the product is
    taken relative to its largest depth, as renormalising after each of them would keep it.

    Works on torch tensors or numpy arrays (:func:`oahu.learners.oahu.arrays.namespace`); on a
    device it runs without a host synchronisation (the branch is a ``where``).

    >>> a = hedge_update(torch.full((2,), 0.5), torch.tensor([0.0, 1.0]), beta=0.5, smoothing=0.1)
    >>> [round(v, 4) for v in a.tolist()]
    [0.6667, 0.3333]
    """
    xp = namespace(alpha)
    log_beta = math.log(beta)
    if losses.ndim == 2 and losses.shape[1] == 1:
        losses = losses[:, 0]  # one constraint: one update's signal, exactly
    if losses.ndim == 1:
        l_min = losses.min()
    else:  # per constraint
        l_min = losses.min(0) if xp is not torch else losses.amin(0)
    # β^{L_min}·ln(L_min); at L_min = 0 this is 0·(−∞): ln 0 = −∞ makes the condition False,
    # and so does the clipped value ln(1e-30)·β^0 ≈ −69 < β − 1.
    lhs = xp.exp(l_min * log_beta) * xp.log(l_min.clip(min=1e-30))
    multiplicative = xp.exp(losses * log_beta)
    linear = 1.0 - (1.0 - beta) * losses
    factor = xp.where(lhs > beta - 1.0, multiplicative, linear)
    if factor.ndim == 2:
        # Both branches stay above β > 0 for signals in [0, 1]: the logarithm is finite, and
        # the sum of B of them does not underflow where their product would.
        log_factor = xp.log(factor).sum(1)
        factor = xp.exp(log_factor - log_factor.max())
    return floored(factor * alpha, smoothing)


def floored(weights: Array, smoothing: float) -> Array:
    """Eq. 20's last step: the floor α ← max(α, s/(L+1)), then renormalisation to Σα = 1.

    >>> [round(v, 4) for v in floored(torch.tensor([0.98, 0.01, 0.01]), 0.3).tolist()]
    [0.8305, 0.0847, 0.0847]
    """
    lifted = weights.clip(min=smoothing / weights.shape[0])
    return lifted / lifted.sum()


class HedgeSignal(ABC):
    """What the hedge (Eq. 20) discounts each depth by, chosen from what an update measured.

    Called with each depth's loss on each of the update's new constraints and whether each
    depth ranked each of them wrongly before the update (1.0) or not (0.0), both (L+1, B),
    float32, where the step's arithmetic runs, it returns the signal (L+1, B) in [0, 1], one
    column per constraint (:func:`hedge_update`), or None to leave α as it is.

    >>> import numpy as np
    >>> class Worst(HedgeSignal):  # discount only the depth that lost most on each constraint
    ...     def __call__(self, losses, mistakes):
    ...         return (losses == losses.max(0)).astype(losses.dtype)
    >>> Worst()(np.array([[0.1], [0.4]], np.float32), np.zeros((2, 1), np.float32)).tolist()
    [[0.0], [1.0]]
    """

    @abstractmethod
    def __call__(self, losses: Array, mistakes: Array) -> Array | None: ...

    def without_branching(
        self, losses: Array, mistakes: Array
    ) -> tuple[Array | None, Array | None]:
        """The signal for an update that may not branch on a device value (a captured CUDA
        graph, :mod:`oahu.learners.oahu.device_steps`), and a boolean tensor saying whether α
        changes at all (None: whenever there is a signal). A signal that decides with a host
        synchronisation overrides this with the decision as a tensor."""
        return self(losses, mistakes), None


class LossSignal(HedgeSignal):
    """The paper's signal: each depth's training loss on each new constraint (Algorithm 1,
    Eq. 20).

    >>> LossSignal()(torch.tensor([[0.25], [0.5]]), torch.tensor([[0.0], [1.0]])).tolist()
    [[0.25], [0.5]]
    """

    def __call__(self, losses: Array, mistakes: Array) -> Array | None:
        return losses

    def __repr__(self) -> str:
        return "LossSignal()"


class MistakeSignal(HedgeSignal):
    """Whether each depth ranked each new constraint wrongly before the update (ours).

    When no depth erred there is nothing to discount: every factor of Eq. 20 would be 1, and α
    is left exactly as it is instead of being floored and renormalised again.

    >>> MistakeSignal()(torch.tensor([[0.25], [0.5]]), torch.tensor([[0.0], [1.0]])).tolist()
    [[0.0], [1.0]]
    >>> MistakeSignal()(torch.tensor([[0.25], [0.5]]), torch.tensor([[0.0], [0.0]])) is None
    True
    """

    def __call__(self, losses: Array, mistakes: Array) -> Array | None:
        return mistakes if bool(mistakes.any()) else None

    def without_branching(self, losses: Array, mistakes: Array) -> tuple[Array, Array]:
        """The mistakes, and whether there is any.

        >>> signal, changes = MistakeSignal().without_branching(
        ...     torch.tensor([[0.25], [0.5]]), torch.tensor([[0.0], [0.0]]))
        >>> signal.tolist(), bool(changes)
        ([[0.0], [0.0]], False)
        """
        return mistakes, mistakes.any()

    def __repr__(self) -> str:
        return "MistakeSignal()"


# OAHUConfig's ``hedge_signal`` names one of these.
HEDGE_SIGNALS: dict[str, type[HedgeSignal]] = {"mistakes": MistakeSignal, "loss": LossSignal}
