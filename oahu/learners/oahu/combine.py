"""What combining copies of OAHU combines: the network's parameters and the hedge weights.

Members of a learning group (:mod:`oahu.service.group`) learn different constraints from one
model and are combined every few updates, by a weighted mean of their values or by adding up
their changes (:mod:`oahu.service.group.combine` says which when). The network is combined
parameter by parameter. The hedge weights α are combined as log-weights, then renormalised: the
mean gives α ← exp(Σ_i w_i log α_i) / Z, the weighted geometric mean; the sum multiplies every
copy's discounts of a depth together, as one learner taking all their steps would. The hedge is
multiplicative (Eq. 20: α ← α·β^L, renormalised), so a copy that discounted a depth by a factor f
contributes f^{w_i} (or f) to it, where combining α itself would dilute one copy's sharp
discount into an arithmetic mean. The floor s/(L+1) is applied again after either, as the hedge
applies it after its own step (the mean keeps it anyway; a product of discounts need not). The
last losses (a diagnostic) are combined by the same rule, and kept from going below zero.

>>> import torch
>>> from oahu.learners.oahu.learner import OAHU
>>> model = OAHU(n_features=2, hidden_width=4, device="cpu", n_hidden_layers=1)
>>> values = combinable_values(model.network, model.update_step)
>>> values.dtype, values.numel() == sum(t.numel() for t in model.network.tensors().values()) + 4
(torch.float64, True)
"""

from __future__ import annotations

import numpy as np
import torch

from oahu.learners.oahu.hedge import floored
from oahu.learners.oahu.network import MultiDepthNetwork
from oahu.learners.oahu.update import UpdateStep

__all__ = ["combinable_values", "set_combinable_values"]


def _as_tensor(a: np.ndarray | torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(a) if isinstance(a, np.ndarray) else a


def combinable_values(network: MultiDepthNetwork, step: UpdateStep) -> torch.Tensor:
    """The network's tensors (in ``tensors()`` order), log α and the last losses, as one flat
    float64 tensor on the network's device."""
    parts = [t.reshape(-1).to(torch.float64) for t in network.tensors().values()]
    parts.append(torch.log(_as_tensor(step.alpha).to(network.device, torch.float64)))
    parts.append(_as_tensor(step.last_losses).to(network.device, torch.float64))
    return torch.cat(parts)


def set_combinable_values(
    network: MultiDepthNetwork, step: UpdateStep, values: torch.Tensor
) -> None:
    """Set what :func:`combinable_values` returned, combined over copies: the tensors in place
    (the CPU step's numpy views of them stay valid), α renormalised from its combined logs and
    floored as the hedge floors it."""
    values = values.to(network.device)
    at = 0
    for tensor in network.tensors().values():
        n = tensor.numel()
        tensor.copy_(values[at : at + n].reshape(tensor.shape))
        at += n
    depths = step.n_depths
    alpha = torch.exp(values[at : at + depths])
    alpha = floored(alpha / alpha.sum(), step.config.smoothing).to(torch.float32)
    losses = values[at + depths : at + 2 * depths].clamp(min=0.0).to(torch.float32)
    step.alpha = step.per_depth(alpha.clone())
    step.last_losses = step.per_depth(losses.clone())
