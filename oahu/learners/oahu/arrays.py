"""Array arithmetic that runs on numpy or torch alike.

A strict OAHU step is a few hundred small calls (docs/architecture.md counts them) on matrices of a
dozen rows. On the CPU each torch operation costs several microseconds of dispatch, which dominates
such a step; numpy views of the same memory cost about a microsecond each. So on the CPU the step
runs on numpy views of the torch tensors (the tensors stay the model's storage: checkpoints and
serving see every update), and on a GPU it stays in torch, on the device. The functions here are the
few places where the two libraries need different calls; everything else is written with calls both
share (``@``, ``xp.exp``, ``xp.where``, ``.clip(min=...)``, ...)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import torch
from scipy.linalg import blas

Array = Any  # a numpy array or a torch tensor


def namespace(x: Any) -> ModuleType:
    """``torch`` for a tensor, ``numpy`` otherwise.

    >>> namespace(torch.zeros(1)).__name__, namespace(np.zeros(1)).__name__
    ('torch', 'numpy')
    """
    return torch if isinstance(x, torch.Tensor) else np


def host_view(t: torch.Tensor) -> np.ndarray:
    """A numpy array sharing ``t``'s memory (``t`` on the CPU, float32, C-contiguous).

    In-place writes through the view are in-place writes to the tensor; the float32 and layout
    requirements are those of :func:`add_outer_`, checked here once rather than per step.
    """
    if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
        raise ValueError(
            f"host_view: needs a contiguous float32 CPU tensor, got {t.dtype} on {t.device}"
        )
    return t.numpy()


# Row counts for which OpenBLAS computes x·Wᵀ faster as (W·xᵀ)ᵀ, measured with OpenBLAS 0.3.31
# on SkylakeX for weights of 128-200 by 128-200: from 9 rows on it takes a slower path for the
# first form (25-35% slower at a strict step's 12 rows), and from about 200 rows the second form
# is the slower one (it still won at 96 rows, lost at 192); 128 is between the two.
_TRANSPOSED_ROWS = range(9, 129)
# Whether the second form gives the first one's bits, per shape (rows, weight shape). The two sum
# the same products, but whether in the same order depends on the BLAS kernels the CPU selects:
# on SkylakeX they agree, on AMD EPYC (Zen) they do not from 9 rows on. A model must not depend
# on which form a row count picks (a strict step and a micro-batch would round differently), so
# the faster form is used only where a probe shows that it agrees to the bit.
_AGREES: dict[tuple[int, ...], bool] = {}


def _transposed_form_agrees(rows: int, w_shape: tuple[int, ...]) -> bool:
    """Whether ``(w @ xᵀ)ᵀ`` equals ``x @ wᵀ`` to the bit for x of ``rows`` rows, on this CPU:
    probed once per shape with random operands (different summation orders differ in some of
    their ``rows · n`` sums with near certainty), then remembered."""
    key = (rows, *w_shape)
    agrees = _AGREES.get(key)
    if agrees is None:
        rng = np.random.default_rng(rows)
        w = rng.standard_normal(w_shape, dtype=np.float32)
        x = rng.standard_normal((*w_shape[:-2], rows, w_shape[-1]), dtype=np.float32)
        plain = x @ w.swapaxes(-1, -2)
        agrees = _AGREES[key] = bool(
            np.array_equal((w @ x.swapaxes(-1, -2)).swapaxes(-1, -2), plain)
        )
    return agrees


def times_transposed(x: Array, w: Array) -> Array:
    """``x @ wᵀ`` over the last two axes: x (..., m, k) and weights w (..., n, k), (..., m, n).

    On numpy, for the row counts m of ``_TRANSPOSED_ROWS`` it is computed as ``(w @ xᵀ)ᵀ``,
    through BLAS's faster kernel for that shape, where this CPU's kernels give that form the
    same bits as the plain product (probed once per shape); elsewhere it is the plain product.
    Either way the result is ``x @ wᵀ`` to the bit, in C order.

    >>> x, w = np.arange(24, dtype=np.float32).reshape(12, 2), np.ones((3, 2), np.float32)
    >>> times_transposed(x, w).shape, bool((times_transposed(x, w) == x @ w.T).all())
    ((12, 3), True)
    """
    if (
        isinstance(x, np.ndarray)
        and x.shape[-2] in _TRANSPOSED_ROWS
        and _transposed_form_agrees(x.shape[-2], w.shape)
    ):
        # C order, as x @ wᵀ gives: what is computed from it next must see the same layout.
        return np.ascontiguousarray((w @ x.swapaxes(-1, -2)).swapaxes(-1, -2))
    return product(x, w.swapaxes(-1, -2))


# Rows up to which a product on a GPU is a broadcast multiply and a sum over the shared axis,
# not a BLAS call. cuBLAS runs a product of a dozen rows (a strict step's, by weights of 128-200
# columns) as one thread block of 32 rows that walks the shared axis alone, latency-bound at
# 40-50 µs on an H200, where the same arithmetic compiled as one reduction spreads over the
# device: a strict device step went from 241 to 63 µs of kernel time per update. (The weights'
# outer-product steps, aᵀb over the same rows, take cuBLAS kernels of 32×32 tiles, 3 µs each.)
SMALL_PRODUCT_ROWS = 32
_SMALL_PRODUCT_DEVICES = ("cuda",)


def _broadcast(rows: Array, n: int) -> bool:
    """Whether a product whose operand ``rows`` has ``n`` rows is written as a broadcast."""
    return (
        isinstance(rows, torch.Tensor)
        and rows.device.type in _SMALL_PRODUCT_DEVICES
        and n <= SMALL_PRODUCT_ROWS
    )


def product(a: Array, b: Array) -> Array:
    """``a @ b`` over the last two axes: a (..., m, k), b (..., k, n) into (..., m, n).

    >>> a, b = torch.ones(2, 3), torch.arange(6.0).reshape(3, 2)
    >>> product(a, b).tolist()
    [[6.0, 9.0], [6.0, 9.0]]
    """
    if _broadcast(a, a.shape[-2]):
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
    return a @ b


def relu_(x: Array) -> Array:
    """max(x, 0) in place; returns ``x``."""
    if isinstance(x, torch.Tensor):
        return x.relu_()
    return np.maximum(x, 0.0, out=x)


def relu_backward(grad: Array, output: Array) -> Array:
    """The gradient through a ReLU given its output: zero where the output is <= 0."""
    if isinstance(grad, torch.Tensor):
        return torch.ops.aten.threshold_backward.default(grad, output, 0.0)
    return grad * (output > 0.0)


def row_norms(x: Array) -> Array:
    """Euclidean norms over the last axis, which is kept (size 1)."""
    if isinstance(x, torch.Tensor):
        return torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return np.sqrt(np.einsum("...i,...i->...", x, x))[..., None]


def concat(parts: list[Array], axis: int) -> Array:
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts, dim=axis)
    return np.concatenate(parts, axis=axis)


def add_outer_(out: Array, a: Array, b: Array, alpha: float) -> None:
    """``out += alpha · aᵀ b`` in place, one fused GEMM: (m, r)ᵀ (m, c) into (r, c).

    This is the gradient step of a weight matrix, whose gradient is a sum of outer products over
    the m rows of a step. On numpy it is BLAS ``sgemm`` with β = 1 on the transposed (column-major)
    view of ``out``, so the matrix is read and written once and nothing of its size is allocated.

    >>> w = np.zeros((2, 3), np.float32)
    >>> a, b = np.array([[1.0, 2.0]], np.float32), np.array([[1.0, 2.0, 3.0]], np.float32)
    >>> add_outer_(w, a, b, 0.5)
    >>> w.tolist()
    [[0.5, 1.0, 1.5], [1.0, 2.0, 3.0]]
    """
    if isinstance(out, torch.Tensor):
        out.addmm_(a.T, b, alpha=alpha)
        return
    # outᵀ (c, r) += alpha · bᵀ (c, m) · a (m, r); f2py passes bᵀ and aᵀ as column-major views.
    result = blas.sgemm(alpha, b.T, a.T, beta=1.0, c=out.T, trans_b=1, overwrite_c=1)
    if not np.may_share_memory(result, out):  # f2py copied out: the step would be lost
        raise RuntimeError("add_outer_: the update was not in place (out must be float32, C order)")


def add_batched_outer_(out: Array, a: Array, b: Array, alpha: float) -> None:
    """``out[i] += alpha · a[i]ᵀ b[i]`` for every i, in place: (n, m, r), (n, m, c) into (n, r, c).

    On numpy, one :func:`add_outer_` per i (the n depths of a network).
    """
    if isinstance(out, torch.Tensor):
        out.baddbmm_(a.transpose(1, 2), b, alpha=alpha)
        return
    for out_i, a_i, b_i in zip(out, a, b, strict=True):
        add_outer_(out_i, a_i, b_i, alpha)
