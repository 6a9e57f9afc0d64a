"""The reference of OAHU's parameter step: autograd in float64 on the paper's loss (ABTL), for
tests/test_network_step.py and tests/test_oahu_quadruplets.py."""

import numpy as np
import torch

from oahu.learners.oahu.learner import OAHU
from oahu.learners.oahu.loss import dissimilarity_threshold, similarity_threshold

TAU, ETA = 0.1, 0.3


def reference_step(model: OAHU, constraints: np.ndarray, per_depth: bool):
    """Autograd in float64 on Σ α L of ABTL (or on each L(l) separately, to assemble Eq.
    21-22), for triplets (B, 3, d) or quadruplets (B, 4, d): D+ = D(a, p) and D− = D(a, n), or
    D+ = D(a, b) and D− = D(c, d)."""
    net = model.network
    params = {k: v.detach().double().clone().requires_grad_(True) for k, v in net.tensors().items()}
    n_layers = model.config.n_hidden_layers

    def embed(x):
        hidden, h = [], x
        for l in range(n_layers):
            h = torch.relu(h @ params[f"W{l + 1}"].T + params[f"b{l + 1}"])
            hidden.append(h)
        raw = [x @ params["head0"].T] + [hidden[l] @ params["heads"][l].T for l in range(n_layers)]
        return [r / r.norm(dim=-1, keepdim=True) for r in raw]

    x = torch.from_numpy(constraints).double()
    roles = (0, 1, 0, 2) if x.shape[1] == 3 else (0, 1, 2, 3)
    f = [embed(x[:, role]) for role in roles]
    losses = []
    for l in range(model.n_depths):
        d_pos = (f[0][l] - f[1][l]).norm(dim=-1)
        d_neg = (f[2][l] - f[3][l]).norm(dim=-1)
        c1 = similarity_threshold(d_pos.detach(), TAU)
        c2 = dissimilarity_threshold(d_neg.detach(), TAU)
        attr = torch.clamp((d_pos - c1) / (2 - c1), min=0)
        rep = torch.clamp(1 - d_neg / c2, min=0)
        losses.append((0.5 * (attr + rep)).mean())
    alpha = torch.from_numpy(model.alpha)
    if not per_depth:
        sum(a * loss for a, loss in zip(alpha, losses, strict=True)).backward()
        return {k: (v - ETA * v.grad).detach() for k, v in params.items()}, losses
    grads = []
    for loss in losses:
        got = torch.autograd.grad(loss, list(params.values()), retain_graph=True, allow_unused=True)
        grads.append(
            [
                torch.zeros_like(p) if g is None else g
                for g, p in zip(got, params.values(), strict=True)
            ]
        )
    return dict(zip(params, zip(*grads, strict=True), strict=True)), losses
