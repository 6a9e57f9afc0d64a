"""Certified shortlists: which gallery columns a search must measure again so that ranking by
rounded matrix products still finds the exact nearest items.

The exact index (:class:`~oahu.inference.matmul.MatmulIndex`) ranks the gallery by a *partial
distance* p = b + q·(a·g) per column (b = |g|², a = −2 for Euclidean distance; b = 0, a = −1
for the inner product), computed by a matrix product whose rounding depends on the library, the
kernel, the batch of queries beside q and, for a ``bfloat16`` copy of the gallery, on 8-bit
mantissas. The product only *shortlists* columns; their distances are computed again from the
float32 rows, so the answer is exact if the shortlist holds every column that could be among
the k nearest.

A bound makes that a certainty instead of a hope. If every computed p̃ is within E of its p,
the k-th smallest true p is at most p̃₍k₎ + E, so every column that can be among the k nearest
has p̃ ≤ p̃₍k₎ + 2E. A shortlist of the m smallest p̃ therefore holds all of them when its last
value exceeds p̃₍k₎ + 2E + R (R: the rescoring's own rounding, which may reorder items whose
true distances differ by less). A query whose shortlist is not certified at any width is
measured against its band, every column with p̃ ≤ p̃₍k₎ + 2E + R, by the same argument.
Whatever a kernel or batch does to the product's bits, the answer is that of measuring every
row, so a query gets one answer whatever waits beside it.

E for one query, from the standard bounds on a dot product of n terms accumulated in float32
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Section 3.1; γ_n =
n·u/(1 − n·u), u = 2⁻²⁴), with inputs rounded to a format of unit roundoff v (bfloat16: 2⁻⁸;
none: 0) and the result rounded to one of unit roundoff w:

    |p̃ − p| ≤ |a|·((1 + v)²·(1 + γ_n)·(1 + w) − 1)·|q|·max|g| + u·(max b + 2|a|·|q|·max|g|)

since Σ|q_i·g_i| ≤ |q|·|g| (Cauchy–Schwarz); the last term is the float32 addition of b (with
room to spare). R = 4·γ_(n+2)·(|q| + max|g|)², twice what rescoring in float32 can move the
comparison of two squared distances, or of two inner products, by.
"""

from __future__ import annotations

import torch

__all__ = [
    "BFLOAT16_ROUNDOFF",
    "BLOCK",
    "FLOAT32_ROUNDOFF",
    "SHORTLIST_MARGINS",
    "certified_gap",
    "certified_shortlist",
    "smallest_k",
]

BLOCK = 512  # columns per block of smallest_k; a gallery is padded to a multiple of it

FLOAT32_ROUNDOFF = 2.0**-24  # unit roundoff u of float32 (round to nearest)
BFLOAT16_ROUNDOFF = 2.0**-8  # of bfloat16: 8 significant bits, u = 2^(1 - 8) / 2
# Columns shortlisted per query beyond its k: first a few (enough for almost every query of a
# float32 product), then more for the queries not yet certified. On a 35,000-item Fashion-MNIST
# gallery (unit rows, 200 dimensions) a bfloat16 product's certificate at k = 5 needed a
# shortlist of 13 columns for the median query, 26 at the 90th percentile, 55 at the 99th and
# at most 100 (1,800 queries and depths).
SHORTLIST_MARGINS = (8, 32, 128)


def smallest_k(
    values: torch.Tensor, k: int, block: int = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest entries of each row of ``values`` (Q, n·block), ascending, and their
    columns: exact, because a block holding one of them has its minimum at most the k-th
    smallest block minimum, so the k blocks with the smallest minima hold them all (exact ties
    aside) and ``torch.topk`` runs over k blocks instead of the whole row (4-5x faster than
    ``torch.topk`` over 35,000 columns).

    >>> v = torch.tensor([[5.0, 1.0, 7.0, 0.0, 3.0, 2.0, 9.0, 8.0]])
    >>> smallest_k(v, 3, block=2)
    (tensor([[0., 1., 2.]]), tensor([[3, 1, 5]]))
    """
    q, n = values.shape
    blocks = values.view(q, n // block, block)
    kb = min(k, n // block)
    _, best = torch.topk(blocks.amin(dim=2), kb, dim=1, largest=False)  # (Q, kb)
    picked = torch.gather(blocks, 1, best[:, :, None].expand(q, kb, block))
    found, at = torch.topk(picked.reshape(q, kb * block), k, dim=1, largest=False)
    return found, best.gather(1, at // block) * block + at % block


def _gamma(n: int) -> float:
    """γ_n = n·u/(1 − n·u): the relative error of a float32 sum of n terms, at most."""
    return n * FLOAT32_ROUNDOFF / (1 - n * FLOAT32_ROUNDOFF)


def certified_gap(
    query_norms: torch.Tensor,
    gallery_norm: float | torch.Tensor,
    bias_max: float | torch.Tensor,
    scale: float,
    dim: int,
    inputs_roundoff: float = 0.0,
    output_roundoff: float = 0.0,
) -> torch.Tensor:
    """2E + R for each query (module docstring): how far above the k-th shortlisted partial
    distance the shortlist's last one must lie for the shortlist to hold the k nearest.

    ``query_norms``: |q| per query; ``gallery_norm``: the largest |g|; ``bias_max``: the
    largest b (numbers, or tensors that broadcast against ``query_norms``); ``scale``: a;
    ``inputs_roundoff`` / ``output_roundoff``: the unit roundoff of the format the product's
    inputs and result are rounded to (0 for float32 throughout).

    A float32 product of unit vectors of 200 dimensions, and the same from bfloat16 copies:

    >>> norms = torch.tensor([1.0])
    >>> round(float(certified_gap(norms, 1.0, 1.0, -2.0, 200)), 5)
    0.00024
    >>> bf16 = BFLOAT16_ROUNDOFF
    >>> round(float(certified_gap(norms, 1.0, 1.0, -2.0, 200, bf16, bf16)), 4)
    0.0473
    """
    q = query_norms.double()
    growth = (1 + inputs_roundoff) ** 2 * (1 + _gamma(dim)) * (1 + output_roundoff) - 1
    product = abs(scale) * q * gallery_norm
    error = growth * product + FLOAT32_ROUNDOFF * (bias_max + 2 * product)
    rescoring = 4 * _gamma(dim + 2) * (q + gallery_norm) ** 2
    return (2 * error + rescoring).float()


def certified_shortlist(
    partial: torch.Tensor,
    found: int,
    gap: torch.Tensor,
    n_items: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's shortlist of columns of ``partial`` (Q, a multiple of :data:`BLOCK`
    columns; +inf past the ``n_items`` real ones) that holds its ``found`` nearest, and the
    queries no width certified.

    Tries each of :data:`SHORTLIST_MARGINS` in turn on the queries not yet certified (``gap``:
    :func:`certified_gap` per query). Returns ``(columns, uncertified)``: columns (Q, m),
    padded with −1 where a query's shortlist is narrower than the widest tried, and the rows of
    the queries that must be measured against every column.

    Over 512 columns, the first query's partial distances 0, 1, 2, ... (its 9-column shortlist
    ends at 8, more than 2 above its best: certified), the second's all equal (no width is):

    >>> partial = torch.stack([torch.arange(512.0), torch.zeros(512)])
    >>> columns, uncertified = certified_shortlist(partial, 1, torch.tensor([2.0, 2.0]), 512)
    >>> columns.shape, columns[0, :10].tolist(), uncertified.tolist()
    (torch.Size([2, 129]), [0, 1, 2, 3, 4, 5, 6, 7, 8, -1], [1])
    """
    widths = list(dict.fromkeys(min(found + margin, n_items) for margin in SHORTLIST_MARGINS))
    columns, pending = None, None  # both None while every query is still pending
    for width in widths:
        rows, row_gap = (partial, gap) if pending is None else (partial[pending], gap[pending])
        values, at = smallest_k(rows, width)
        certified = values[:, -1] > values[:, found - 1] + row_gap
        if width == n_items:  # the whole gallery is shortlisted
            certified = torch.ones_like(certified)
        if pending is None:
            if bool(certified.all()):  # the usual case: no copy, no padding
                return at, torch.zeros(0, dtype=torch.int64, device=partial.device)
            columns = torch.full(
                (len(partial), widths[-1]), -1, dtype=torch.int64, device=partial.device
            )
            columns[:, :width] = at
            pending = torch.arange(len(partial), device=partial.device)
        else:
            columns[pending, :width] = at
        pending = pending[~certified]
        if len(pending) == 0:
            return columns[:, :width], pending
    return columns, pending
