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
measured against its band (below), by the same argument. Whatever a kernel or batch does to the
product's bits, the answer is that of measuring every row, so a query gets one answer whatever
waits beside it.

E for one query, from the standard bounds on a dot product of n terms accumulated in float32
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Section 3.1; γ_n =
n·u/(1 − n·u), u = 2⁻²⁴), with inputs rounded to a format of unit roundoff v (bfloat16: 2⁻⁸;
none: 0) and the result rounded to one of unit roundoff w:

    |p̃ − p| ≤ |a|·((1 + v)²·(1 + γ_n)·(1 + w) − 1)·|q|·max|g| + u·(max b + 2|a|·|q|·max|g|)

since Σ|q_i·g_i| ≤ |q|·|g| (Cauchy–Schwarz); the last term is the float32 addition of b (with
room to spare). R = 4·γ_(n+2)·(|q| + max|g|)², twice what rescoring in float32 can move the
comparison of two squared distances, or of two inner products, by.

The band. R must hold before the product, for any query; once a query's k-th partial distance
is known it can be smaller. Rescoring in float32 computes a squared distance s as a sum of n
non-negative rounded terms, within γ_(n+2)·s of it, and its square root may round two values
apart into a tie; so for Euclidean distance no item ranks with the k nearest unless its
p̃ ≤ p̃₍k₎ + 2E + R', R' = ρ·max(p̃₍k₎ + E + |q|², 0) (the k-th squared distance, at most) with
ρ = (1 + γ_(n+2))(1 + u)² / ((1 − u)²(1 − γ_(n+2))) − 1, about 2γ_(n+2). For the inner product
each rescored −q·g is within γ_n·|q|·max|g| of its value: R' = 2γ_n·|q|·max|g|. The band is
every column within 2E + R' of the k-th (:func:`band_gap`). A collapsed metric's band can
still be half the gallery, its items all within the float32 product's E of each other; there
the index computes the partial distances again in float64 from the same float32 rows, whose
error γ_(n+2)·(max b + 2|a|·|q|·max|g|) at u = 2⁻⁵³ (:func:`float64_product_error`) is ~10⁻¹⁴
for unit rows, and the band drawn from them keeps only what the float32 rescoring itself may
order either way.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = [
    "BFLOAT16_ROUNDOFF",
    "BLOCK",
    "FLOAT32_ROUNDOFF",
    "FLOAT64_ROUNDOFF",
    "SHORTLIST_MARGINS",
    "at_most_float32",
    "band_gap",
    "certified_gap",
    "certified_shortlist",
    "count_at_most",
    "float64_product_error",
    "product_error",
    "smallest_k",
]

BLOCK = 512  # columns per block of smallest_k; a gallery is padded to a multiple of it

FLOAT32_ROUNDOFF = 2.0**-24  # unit roundoff u of float32 (round to nearest)
FLOAT64_ROUNDOFF = 2.0**-53  # of float64
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


def _gamma(n: int, unit: float = FLOAT32_ROUNDOFF) -> float:
    """γ_n = n·u/(1 − n·u): the relative error of a sum of n terms rounded to unit roundoff u,
    at most (float32's by default)."""
    return n * unit / (1 - n * unit)


def product_error(
    query_norms: torch.Tensor,
    gallery_norm: float | torch.Tensor,
    bias_max: float | torch.Tensor,
    scale: float,
    dim: int,
    inputs_roundoff: float = 0.0,
    output_roundoff: float = 0.0,
) -> torch.Tensor:
    """E for each query (module docstring), float64: how far a partial distance computed by a
    float32 product (of inputs rounded to ``inputs_roundoff``, into a result rounded to
    ``output_roundoff``) can be from its exact value.

    >>> round(float(product_error(torch.tensor([1.0]), 1.0, 1.0, -2.0, 200)), 8)
    2.414e-05
    """
    q = query_norms.double()
    growth = (1 + inputs_roundoff) ** 2 * (1 + _gamma(dim)) * (1 + output_roundoff) - 1
    product = abs(scale) * q * gallery_norm
    return growth * product + FLOAT32_ROUNDOFF * (bias_max + 2 * product)


def float64_product_error(
    query_norms: torch.Tensor,
    gallery_norm: float | torch.Tensor,
    bias_max: float | torch.Tensor,
    scale: float,
    dim: int,
) -> torch.Tensor:
    """E for partial distances computed in float64 from the float32 rows (the band's
    refinement, :mod:`oahu.inference.matmul`): the product's dim terms, b's own sum of dim
    squares and the addition of the two, γ_(dim+2)·(max b + 2·|a|·|q|·max|g|) in float64.

    >>> float(float64_product_error(torch.tensor([1.0]), 1.0, 1.0, -2.0, 200)) < 1e-12
    True
    """
    product = abs(scale) * query_norms.double() * gallery_norm
    return _gamma(dim + 2, FLOAT64_ROUNDOFF) * (bias_max + 2 * product)


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
    error = product_error(
        query_norms, gallery_norm, bias_max, scale, dim, inputs_roundoff, output_roundoff
    )
    rescoring = 4 * _gamma(dim + 2) * (query_norms.double() + gallery_norm) ** 2
    return (2 * error + rescoring).float()


def band_gap(
    kth: torch.Tensor,
    error: torch.Tensor,
    query_norms: torch.Tensor,
    gallery_norm: float | torch.Tensor,
    scale: float,
    dim: int,
) -> torch.Tensor:
    """2E + R' for queries whose k-th smallest partial distance ``kth`` is known, float64: the
    band of a query no shortlist certified (module docstring, "The band"). ``error``: E per
    query (:func:`product_error` or :func:`float64_product_error`); the other arguments as
    :func:`certified_gap`'s.

    A unit query whose 5th nearest lies at squared distance 10⁻⁴ (kth = 10⁻⁴ − 1) needs far
    less room than :func:`certified_gap` gives every query:

    >>> norms = torch.tensor([1.0])
    >>> error = product_error(norms, 1.0, 1.0, -2.0, 200)
    >>> gap = band_gap(torch.tensor([1e-4 - 1.0]), error, norms, 1.0, -2.0, 200)
    >>> round(float(gap), 8), round(float(certified_gap(norms, 1.0, 1.0, -2.0, 200)), 8)
    (4.828e-05, 0.00024092)
    """
    q = query_norms.double()
    if scale == -2.0:  # Euclidean: the rescoring errs relative to the squared distance
        gamma = _gamma(dim + 2)
        u = FLOAT32_ROUNDOFF
        rho = (1 + gamma) * (1 + u) ** 2 / ((1 - u) ** 2 * (1 - gamma)) - 1
        rescoring = rho * (kth.double() + error + q * q).clamp(min=0.0)
    else:  # the inner product: its n products and their sum
        rescoring = 2 * _gamma(dim) * q * gallery_norm
    return 2 * error + rescoring


def at_most_float32(bound: torch.Tensor) -> torch.Tensor:
    """The largest float32 at most ``bound`` (float64), element-wise: a float32 value is at
    most ``bound`` exactly when it is at most this, so a comparison can stay in float32.

    >>> at_most_float32(torch.tensor([1.0 + 2.0**-30], dtype=torch.float64)).item()
    1.0
    >>> at_most_float32(torch.tensor([1.0 - 2.0**-30], dtype=torch.float64)).item() < 1.0
    True
    """
    rounded = bound.float()
    below = torch.nextafter(rounded, torch.full_like(rounded, -float("inf")))
    return torch.where(rounded.double() > bound, below, rounded)


def count_at_most(values: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """How many entries of each row of ``values`` (Q, n) are at most the row's bound (Q,), as
    int64 (a NaN bound: none). On the CPU through numpy, whose count of a boolean mask took a
    fifth of the time of torch's sum of one (1,024 rows of 35,000 on a 2-core AMD EPYC).

    >>> count_at_most(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]), torch.tensor([2.0, 0.0]))
    tensor([2, 2])
    """
    if values.device.type == "cpu":
        mask = values.numpy() <= bounds.numpy()[:, None]
        return torch.from_numpy(np.count_nonzero(mask, axis=1).astype(np.int64))
    return (values <= bounds[:, None]).sum(1)


def certified_shortlist(
    partial: torch.Tensor,
    found: int,
    gap: torch.Tensor,
    n_items: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's shortlist of columns of ``partial`` (Q, a multiple of :data:`BLOCK`
    columns; +inf past the ``n_items`` real ones) that holds its ``found`` nearest, and the
    queries no width certified.

    Shortlists ``found`` + each of :data:`SHORTLIST_MARGINS` in turn, each query at the
    narrowest width that certifies it (``gap``: :func:`certified_gap` per query). Returns
    ``(columns, uncertified)``: columns (Q, m), padded with −1 where a query's shortlist is
    narrower than the widest tried, and the rows of the queries that must be measured against
    their band.

    Over 512 columns, the first query's partial distances 0, 1, 2, ... (its 9-column shortlist
    ends at 8, more than 2 above its best: certified), the second's all equal (no width is):

    >>> partial = torch.stack([torch.arange(512.0), torch.zeros(512)])
    >>> columns, uncertified = certified_shortlist(partial, 1, torch.tensor([2.0, 2.0]), 512)
    >>> columns.shape, columns[0, :10].tolist(), uncertified.tolist()
    (torch.Size([2, 129]), [0, 1, 2, 3, 4, 5, 6, 7, 8, -1], [1])
    """
    widths = list(dict.fromkeys(min(found + margin, n_items) for margin in SHORTLIST_MARGINS))
    values, at = smallest_k(partial, widths[0])
    threshold = values[:, found - 1] + gap
    certified = values[:, -1] > threshold
    # the usual case (no copy, no padding), or the whole gallery shortlisted
    if widths[0] == n_items or bool(certified.all()):
        return at, torch.zeros(0, dtype=torch.int64, device=partial.device)
    columns = torch.full((len(partial), widths[-1]), -1, dtype=torch.int64, device=partial.device)
    columns[:, : widths[0]] = at
    pending = torch.nonzero(~certified).view(-1)
    # A width m certifies a query when its m-th smallest value exceeds the threshold, that is
    # when fewer than m values are at most it: counted once, that says which width (if any)
    # certifies each pending query, and only those are ranked again (a crowded query is not
    # ranked at every width to fail at each). A NaN threshold is exceeded by nothing: never
    # certified.
    if 2 * len(pending) > len(partial):  # most rows: count them all rather than copy them
        within = count_at_most(partial, threshold)[pending]
    else:
        within = count_at_most(partial[pending], threshold[pending])
    within[threshold[pending].isnan()] = partial.shape[1]
    for width in widths[1:]:
        fits = within < width if width < n_items else torch.ones_like(within, dtype=torch.bool)
        if bool(fits.any()):
            rows = pending[fits]
            columns[rows, :width] = smallest_k(partial[rows], width)[1]
        pending, within = pending[~fits], within[~fits]
        if len(pending) == 0:
            return columns[:, :width], pending
    return columns, pending
