"""The over-complete multi-depth network of OAHU (Section 3.2, Eq. 1; docs/algorithms.md).

h(0) = x, h(l) = ReLU(W(l) h(l−1) + b(l)) for l = 1..L, and one bias-free embedding head per
depth, f(l)(x) = normalize(Θ(l) h(l)), l = 0..L, so that every embedding lies on the unit sphere.
With residual heads (ours, docs/algorithms.md) the deeper heads add to E0's output,
f(l)(x) = normalize(E0 x + Θ(l) h(l)) for l >= 1, and start at Θ(l) = 0: every depth begins at
E0's metric and learns a nonlinear correction of it, instead of starting from a random one.

The parameter step is written out by hand rather than through autograd: Eq. 21 (Θ(l) sees only
its own depth's loss) and Eq. 22 (W(l) receives Σ_{j≥l} α(j)∇L(j)) are exactly what backprop gives,
and doing it by hand lets each weight be updated in place with one fused GEMM (``addmm_`` or BLAS
``sgemm``). That keeps the network's part of a strict (one-triplet) step at a few dozen small array
operations, whose per-call
overhead is what bounds its speed: on the CPU the step runs on numpy views of the weights, where
that overhead is smallest (:mod:`oahu.learners.oahu.arrays`). ``tests/test_network_step.py`` checks
the step
against autograd and against a hand computation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from oahu.learners.oahu.arrays import (
    Array,
    add_batched_outer_,
    add_outer_,
    concat,
    host_view,
    namespace,
    product,
    relu_,
    relu_backward,
    row_norms,
    times_transposed,
)
from oahu.learners.oahu.config import OAHUConfig

_NORM_EPS = 1e-12  # as torch.nn.functional.normalize


@dataclass
class ForwardCache:
    """What the backward pass needs from the forward pass."""

    x: Array  # (m, d)
    hidden: Array  # (L, m, H): h(1)..h(L)
    norms: Array  # (L+1, m, 1): ‖Θ(l) h(l)‖ clamped at _NORM_EPS
    embeddings: Array  # (L+1, m, E): f(l)(x)
    # Which of these m rows each row of the step is, when the step's repeated rows went through
    # the network once (oahu.learners.oahu.distinct_rows); None: row i is row i.
    row_of: Array | None = None

    def rows(self, index: Array) -> ForwardCache:
        """The cache of the step's rows ``index`` alone, in that order (a row repeated as
        often as ``index`` names it): a step on it is the step on the whole cache whenever the
        other rows' embedding gradients are zero (each row's contributions to the weights'
        gradients are separate terms of their sums).

        >>> cache = ForwardCache(
        ...     np.arange(6.0).reshape(3, 2), np.zeros((1, 3, 4)), np.ones((2, 3, 1)),
        ...     np.zeros((2, 3, 5)))
        >>> part = cache.rows(np.array([2, 0]))
        >>> part.x.tolist(), part.hidden.shape, part.norms.shape, part.embeddings.shape
        ([[4.0, 5.0], [0.0, 1.0]], (1, 2, 4), (2, 2, 1), (2, 2, 5))
        >>> cache.row_of = np.array([0, 1, 0, 2])  # the step's rows 0 and 2 are one row
        >>> cache.rows(np.array([3, 2])).x.tolist()
        [[4.0, 5.0], [0.0, 1.0]]
        """
        if self.row_of is not None:
            index = self.row_of[index]
        return ForwardCache(
            self.x[index], self.hidden[:, index], self.norms[:, index], self.embeddings[:, index]
        )


class MultiDepthNetwork:
    """Parameters of the OAHU network and its forward pass and in-place gradient step.

    Not an ``nn.Module``: OAHU never uses an optimiser or autograd on it, and plain tensors keep
    the state explicit (``state_dict``/``load_state_dict`` still work the usual way).

    >>> net = MultiDepthNetwork(4, OAHUConfig(n_hidden_layers=2, hidden_width=3, embedding_dim=2))
    >>> f = net.embed(torch.ones(5, 4))
    >>> tuple(f.shape)
    (3, 5, 2)
    >>> bool(torch.allclose(f.norm(dim=-1), torch.ones(3, 5)))
    True
    """

    def __init__(self, n_features: int, config: OAHUConfig, device: torch.device | str = "cpu"):
        self.n_features = n_features
        self.config = config
        L, H = config.n_hidden_layers, config.hidden_width
        E = config.embedding_dim or n_features
        self.embedding_dim = E
        gen = torch.Generator().manual_seed(config.seed)
        # Initialised on the CPU from one seeded generator: the same seed gives the same network
        # on every device.
        self.weights = [self._init_matrix(H, n_features if l == 0 else H, gen) for l in range(L)]
        self.biases = [self._init_bias(H, n_features if l == 0 else H, gen) for l in range(L)]
        if config.head0_init == "identity":
            # The input's own (cosine) metric; rows beyond the input's dimension stay zero.
            self.head0 = torch.eye(E, n_features) * config.head0_init_scale
        else:
            self.head0 = self._init_matrix(E, n_features, gen) * config.head0_init_scale
        self.residual = config.residual_heads
        self.heads = (
            torch.zeros(L, E, H)
            if self.residual or not L
            else torch.stack([self._init_matrix(E, H, gen) for _ in range(L)])
        )
        self.to(device)

    # ------------------------------------------------------------------ init
    def _init_matrix(self, rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
        if self.config.init == "orthogonal":
            # Semi-orthogonal: distances in the input are preserved as far as the shape allows.
            a = torch.randn(max(rows, cols), min(rows, cols), generator=gen, dtype=torch.float64)
            q, r = torch.linalg.qr(a)
            q = q * torch.sign(torch.diagonal(r))
            w = q if rows >= cols else q.T
            return w.to(torch.float32).contiguous()
        # torch.nn.Linear's default: U(−1/√fan_in, 1/√fan_in).
        bound = 1.0 / math.sqrt(cols)
        return (torch.rand(rows, cols, generator=gen) * 2.0 - 1.0) * bound

    @staticmethod
    def _init_bias(size: int, fan_in: int, gen: torch.Generator) -> torch.Tensor:
        bound = 1.0 / math.sqrt(fan_in)
        return (torch.rand(size, generator=gen) * 2.0 - 1.0) * bound

    # ------------------------------------------------------------------ state
    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"head0": self.head0, "heads": self.heads}
        for l, (w, b) in enumerate(zip(self.weights, self.biases, strict=True), start=1):
            out[f"W{l}"] = w
            out[f"b{l}"] = b
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.tensors().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        own = self.tensors()
        if set(state) != set(own):
            raise ValueError(f"network state: expected keys {sorted(own)}, got {sorted(state)}")
        for k, v in state.items():
            if tuple(v.shape) != tuple(own[k].shape):
                raise ValueError(
                    f"network state: {k} has shape {tuple(v.shape)}, expected {tuple(own[k].shape)}"
                )
            own[k].copy_(v)

    def set_head0(self, rows: np.ndarray) -> None:
        """E0 := ``rows`` (k, d) in its first k rows and zero below, in place (k <= S_emb)."""
        k = len(rows)
        if rows.ndim != 2 or rows.shape[1] != self.n_features or k > self.head0.shape[0]:
            raise ValueError(
                f"head0 rows: expected shape (<= {self.head0.shape[0]}, {self.n_features}), "
                f"got {rows.shape}"
            )
        self.head0.zero_()
        self.head0[:k] = torch.as_tensor(rows, dtype=torch.float32, device=self.device)

    def to(self, device: torch.device | str) -> MultiDepthNetwork:
        self.weights = [w.to(device).contiguous() for w in self.weights]
        self.biases = [b.to(device).contiguous() for b in self.biases]
        self.head0 = self.head0.to(device).contiguous()
        self.heads = self.heads.to(device).contiguous()
        # numpy views of the same memory for the CPU step (see oahu.learners.oahu.arrays); None on
        # a GPU.
        self._host = (
            (
                [host_view(w) for w in self.weights],
                [host_view(b) for b in self.biases],
                host_view(self.head0),
                host_view(self.heads),
            )
            if self.head0.device.type == "cpu"
            else None
        )
        return self

    @property
    def device(self) -> torch.device:
        return self.head0.device

    # ------------------------------------------------------------------ forward
    def forward(self, x: Array) -> ForwardCache:
        """Embeddings at every depth, shape (L+1, m, E), plus what ``step`` needs.

        ``x`` is a numpy array (CPU only: the step then runs on numpy views of the weights, see
        :mod:`oahu.learners.oahu.arrays`) or a tensor on the network's device.
        """
        weights, biases, head0, heads = self._parameters(x)
        xp = namespace(x)
        hidden = []
        h = x
        # On numpy the layers' outputs are written where the deeper heads read them stacked,
        # instead of stacked after: the same sums, one copy fewer.
        layers = (
            np.empty((len(weights), x.shape[0], self.config.hidden_width), x.dtype)
            if xp is np and len(weights) > 1
            else None
        )
        for l, (w, b) in enumerate(zip(weights, biases, strict=True)):
            if layers is None:
                h = relu_(times_transposed(h, w) + b)
            else:
                h = relu_(np.add(times_transposed(h, w), b, out=layers[l]))
            hidden.append(h)
        raw0 = times_transposed(x, head0)[None]
        if hidden:
            if layers is not None:
                stacked = layers
            elif len(hidden) == 1:  # one hidden layer needs no copy to stack
                stacked = hidden[0][None]
            else:
                stacked = xp.stack(hidden)
            deep = times_transposed(stacked, heads)
            if self.residual:
                deep += raw0
            raw = concat([raw0, deep], axis=0)
        else:
            width = (0, x.shape[0], self.config.hidden_width)
            stacked = x.new_zeros(width) if xp is torch else np.zeros(width, x.dtype)
            raw = raw0
        norms = row_norms(raw).clip(min=_NORM_EPS)
        raw /= norms  # normalised in place: the raw outputs are not needed again
        return ForwardCache(x, stacked, norms, raw)

    def embed(self, x: Array) -> Array:
        """f(l)(x) for l = 0..L: (L+1, m, E), rows of unit norm."""
        return self.forward(x).embeddings

    def _parameters(self, x: Array) -> tuple[list[Array], list[Array], Array, Array]:
        """The weights as the same kind of array as ``x``."""
        if isinstance(x, torch.Tensor):
            return self.weights, self.biases, self.head0, self.heads
        if self._host is None:
            raise TypeError(f"forward: numpy input needs a CPU network, not one on {self.device}")
        return self._host

    # ------------------------------------------------------------------ step
    def step(
        self,
        cache: ForwardCache,
        grad_embeddings: Array,
        lr: float,
        max_change: float | None = None,
    ) -> Array | float:
        """One gradient-descent step given ∂loss/∂f(l) for every depth (Eq. 21-22), in place.

        With ``max_change`` the step is a trust region (ours, docs/algorithms.md B2): scaled
        down, where it would, so that the parameters move by at most ``max_change`` times their
        norm, ‖Δθ‖ ≤ max_change · ‖θ‖ over all of them at once. Returns the scale the step was
        taken at (1.0 without ``max_change``; an array, kept where the step runs, with it).
        """
        gradients = self._gradients(cache, grad_embeddings)
        if max_change is None:
            # Each weight is updated in place with one fused product as its gradient comes.
            for param, a, b in gradients:
                if a is None:
                    param -= lr * b.sum(0)
                elif param.ndim == 3:
                    add_batched_outer_(param, a, b, -lr)
                else:
                    add_outer_(param, a, b, -lr)
            return 1.0
        steps = [
            (param, b.sum(0) if a is None else a.swapaxes(-1, -2) @ b) for param, a, b in gradients
        ]
        xp = namespace(cache.x)
        change = lr * xp.sqrt(sum((d * d).sum() for _, d in steps))
        size = xp.sqrt(sum((param * param).sum() for param, _ in steps))
        scale = (max_change * size / change.clip(min=_NORM_EPS)).clip(max=1.0)
        for param, d in steps:
            param -= (lr * scale) * d
        return scale

    def _gradients(
        self, cache: ForwardCache, grad_embeddings: Array
    ) -> Iterator[tuple[Array, Array | None, Array]]:
        """The gradient of every parameter, as ``(parameter, a, b)``: a weight's gradient is
        aᵀb (a sum of outer products over the step's rows), a bias's the column sums of b
        (``a`` None). Every gradient is taken at the pre-step parameters: each parameter is
        yielded once nothing left to compute reads it, so the caller may update it in place.
        """
        weights, biases, head0, heads = self._parameters(cache.x)
        f = cache.embeddings
        # Back through f = g/‖g‖: ∂g = (∂f − f(f·∂f))/‖g‖. (Where ‖g‖ was clamped, g ≈ 0 and the
        # f-term vanishes with it.)
        radial = (f * grad_embeddings).sum(-1)[..., None]
        grad_raw = grad_embeddings - f * radial
        grad_raw /= cache.norms
        # Eq. 21, l = 0; with residual heads E0 also feeds every deeper depth, whose gradient
        # reaches it through the skip.
        yield head0, (grad_raw.sum(0) if self.residual else grad_raw[0]), cache.x
        n_layers = len(weights)
        if not n_layers:
            return
        grad_hidden = product(grad_raw[1:], heads)  # (L, m, H), before Θ moves
        yield heads, grad_raw[1:], cache.hidden  # Eq. 21
        grad_h = grad_hidden[n_layers - 1]
        for l in range(n_layers - 1, -1, -1):
            grad_z = relu_backward(grad_h, cache.hidden[l])
            below = cache.hidden[l - 1] if l else cache.x
            if l:
                # Eq. 22: layer l's input gradient collects every deeper head's loss.
                grad_h = grad_hidden[l - 1] + product(grad_z, weights[l])
            yield weights[l], grad_z, below
            yield biases[l], None, grad_z
