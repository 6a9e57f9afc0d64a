"""Exact gallery search as one matrix product and a top-k per depth: the ``"exact"`` index of
evaluation and serving, on the CPU or on a GPU.

faiss's flat index (:mod:`oahu.inference.flat`) scans the gallery once per query below 20
queries (and calls its bundled BLAS above): a batch of concurrent queries then costs as much as
answering them one by one, ~3 ms each for a 35,000-item, 6-depth gallery on the 2-core test
box. Here a batch is one GEMM per depth into a block of queries that stays small (at most
``QUERY_BLOCK`` rows and ``SCORES_PER_BLOCK`` scores), then a blocked top-k (``smallest_k``, 4-5x
faster than ``torch.topk`` over 35,000 columns); measured 2-5x cheaper than faiss for batches of
2-50 and ~1.5x for one query. The search is exhaustive and exact (the paper's kNN); only float
rounding of the distance differs from faiss, which can swap exact ties.

A query's answer does not depend on the queries searched beside it. BLAS libraries pick their
kernels by the shape of a product, and a kernel for a few rows adds a row's terms in another order
than one for many: on a 2-core AMD EPYC, a query's products through MKL had other bits when it
was searched alone or with one or two others than in a batch of four or more, and through OpenBLAS
for almost every batch size from 1 to 15. The service batches whatever requests are waiting, so
the same item on the same snapshot got other scores under other load. The product therefore only
*shortlists* each query's nearest columns; their distances are then computed again from the
gallery's rows, one query at a time in effect (an element-wise difference and a sum over each
row, whose order depends only on the dimension), and sorted by (distance, position). The
shortlist is *certified* (:mod:`oahu.inference.shortlist`): from a bound on the product's
rounding, it is widened until it provably holds every column that can be among the k nearest,
and a query no width certifies (many items within rounding of its k-th) is measured against
its band, every column whose partial distance is within a gap of its k-th that the k-th itself
bounds; where that band is wide (a collapsed metric's can be half the gallery) it is drawn
again from partial distances computed in float64, which leave only the items the rescoring
cannot order. So a query gets the answer of measuring every row, whatever the kernel,
library, precision or batch of the product. The distances are also more accurate for it:
|q − g|² directly instead of |q|² + |g|² − 2q·g, which loses digits when q is near g. Side by
side with the product's own distances, on a 35,000-item gallery of three depths of 200 on one
thread, a search took 1-4% longer for one to four queries, a tenth less for 16 (the old path
squared each depth's queries apart) and 9% longer for an evaluation's block of 1,024.

Since the product only ranks, it may be rounded: with ``bfloat16=True``, blocks of a few
queries multiply a bfloat16 copy of the gallery (torch's oneDNN, in hardware on CPUs with
AVX-512 BF16 or AMX), half the bytes to stream from memory. Its 8-bit mantissas move a unit
vector's partial distance by up to ~0.024, so the shortlist grows from k + 8 to k + 32 or
k + 128 columns for most searches. It is off by default, by measurement on a 2-core AVX-512
AMD EPYC. On a Fashion-MNIST gallery (35,000 items x 3 depths x 200, a one-off script) one
query's search took 2.7 ms against 1.6 ms in float32 alone (oneDNN multiplies one row by a
bfloat16 matrix at ~26 GB/s, slower than numpy streams the float32 one) and 3-5.5 ms against
8-10 ms beside a second process searching; on random unit rows (``benchmarks/gallery_scan.py``,
``results/gallery-scan-epyc-avx512.json``) 2.7 against 2.6 ms alone and 2.9 against 3.6 ms
beside another, but 15.8 against 11.7 ms for 16 queries, whose near-orthogonal items crowd
within the wider bound. And two replicas with it held 700 requests/s at p99 <= 50 ms, one
600/s, what float32 replicas held (benchmarks/README.md, "Serving replicas").

On the CPU the GEMM goes through torch's MKL on Intel CPUs and through numpy's OpenBLAS on the
others (``products="auto"``, :func:`cpu_products`): MKL picks its fast kernels only for Intel's
own CPUs. On a 2-core AMD EPYC a search of 4 or 16 queries took 1.6x longer through torch, one
query about the same (``benchmarks/gallery_scan.py``, benchmarks/README.md "Serving replicas");
on Intel CPUs MKL multiplied a few rows by a matrix several times faster than OpenBLAS. Since
the shortlist's distances are computed without either library, both give the same answers; the
choice is only one of speed. The top-k stays in torch, over the same memory.

The same code searches on any torch device (``device="cuda"``): the gallery lives there as
float32 tensors (the product's layout and the rows the shortlist is measured from, twice the
gallery's size), a batch of queries is copied over and only its k neighbours per depth come back.
The service searches where its learner embeds (``--learner-param device=cuda``). faiss's GPU
index would do the same search, but faiss-gpu has no wheel to install here and would be one more
dependency; torch is already the learner's, the search stays exact (the CPU's neighbours, up to
float rounding) and is one GEMM and one top-k per depth on the GPU, then the shortlist's
distances. On the CPU, the default, nothing changes.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

from oahu.checks import check_bool, check_choice
from oahu.inference.band import CertifiedBands
from oahu.inference.index import GalleryIndex
from oahu.inference.shortlist import (
    BFLOAT16_ROUNDOFF,
    BLOCK,
    SHORTLIST_MARGINS,
    certified_gap,
    certified_shortlist,
)
from oahu.learner import MetricKind
from oahu.threads import torch_threads

__all__ = [
    "BFLOAT16_QUERIES",
    "CPU_PRODUCTS",
    "QUERY_BLOCK",
    "SCORES_PER_BLOCK",
    "SMALL_SEARCH",
    "CpuProducts",
    "MatmulIndex",
    "cpu_products",
    "products_for",
]

# Queries per matrix product: a (QUERY_BLOCK, n_items) float32 block, 140 MB for 35,000 items
# (an evaluation's 35,000 test queries at once would take 4.9 GB).
QUERY_BLOCK = 1024
# ... and at most this many scores per product (512 MB of float32), so that a 1,000,000-item
# gallery takes 134 queries at a time rather than 4 GB per block.
SCORES_PER_BLOCK = 1 << 27
# Blocks of at most this many queries multiply the bfloat16 copy of the gallery (where there is
# one); larger ones the float32 gallery. A bfloat16 product writes bfloat16 scores that must be
# widened, which costs more than the halved gallery saves past ~100 queries (on a 2-core AMD
# EPYC with AVX-512: 4.0 against 6.0 ms for 64 queries, 24 against 22 ms for 256, 123 against
# 68 ms for 1,024, one depth of 35,000 x 200).
BFLOAT16_QUERIES = 64
# Searches of at most this many queries run torch on one thread where numpy multiplies
# (MatmulIndex.search says why).
SMALL_SEARCH = 256


CpuProducts = Literal["auto", "torch", "numpy"]
CPU_PRODUCTS: tuple[str, ...] = get_args(CpuProducts)


@cache
def cpu_products() -> Literal["torch", "numpy"]:
    """The library that multiplies for ``products="auto"`` on this machine's CPU (the module
    docstring says why): ``"torch"`` where torch has MKL and the CPU is Intel's, ``"numpy"``
    elsewhere, including where /proc/cpuinfo cannot be read. Declared by the vendor, not timed at
    start-up, so every process of one machine multiplies the same way.

    >>> cpu_products() in ("torch", "numpy")
    True
    """
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        cpuinfo = ""
    return products_for(cpuinfo, torch.backends.mkl.is_available())


def products_for(cpuinfo: str, mkl: bool) -> Literal["torch", "numpy"]:
    """:func:`cpu_products` for the text of /proc/cpuinfo and whether torch has MKL.

    >>> products_for("vendor_id : GenuineIntel", mkl=True)
    'torch'
    >>> products_for("vendor_id : AuthenticAMD", mkl=True)
    'numpy'
    """
    vendors = {
        line.partition(":")[2].strip()
        for line in cpuinfo.splitlines()
        if line.startswith("vendor_id")
    }
    return "torch" if mkl and vendors == {"GenuineIntel"} else "numpy"


class MatmulIndex(CertifiedBands, GalleryIndex):
    """Exact nearest-neighbour search by matrix products, on ``device`` (a torch device; the
    CPU by default). ``products`` names the library that multiplies float32 on the CPU,
    ``"torch"`` or ``"numpy"``; ``"auto"``, the default, takes :func:`cpu_products`'s choice
    for this CPU (the module docstring says why) and ``products`` then names the library
    chosen. ``bfloat16``: whether blocks of at most :data:`BFLOAT16_QUERIES` queries multiply
    a bfloat16 copy of the gallery instead (CPU only; off by default, the module docstring says
    why). A GPU always multiplies float32 through torch. Which product ranks the gallery changes
    only the time a search takes, never its answer (:mod:`oahu.inference.shortlist`).

    >>> emb = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]], dtype=np.float32)
    >>> index = MatmulIndex(emb, labels=np.array([0, 1, 1]))
    >>> dissim, pos = index.search(np.array([[[1.0, 0.0]]], dtype=np.float32), k=4)
    >>> pos.tolist(), [round(float(v), 4) for v in dissim.ravel()]
    ([[[0, 2, 1, -1]]], [0.0, 0.8944, 1.4142, inf])
    >>> str(index.device)
    'cpu'
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        labels: np.ndarray | None = None,
        metric: MetricKind = "l2",
        ids: np.ndarray | None = None,
        device: str | torch.device = "cpu",
        products: CpuProducts = "auto",
        bfloat16: bool = False,
    ) -> None:
        check_choice(products, "products", CPU_PRODUCTS)
        self.device = torch.device(device)
        self.products = cpu_products() if products == "auto" else products
        self.bfloat16 = check_bool(bfloat16, "bfloat16") and self.device.type == "cpu"
        super().__init__(embeddings, labels, metric, ids)

    def _build(self, embeddings: np.ndarray) -> None:
        emb = torch.from_numpy(embeddings).to(self.device)
        n_padded = -(-self.n_items // BLOCK) * BLOCK
        # partial distance = bias + q·(scale·g), smallest first: |g|² − 2q·g for l2 (ranks as
        # |q − g|² does), −q·g for ip; padding columns are +inf and never chosen. The scale (−1
        # or −2) multiplies the gallery once, exactly (a sign and a power of two).
        self._scale = -1.0 if self.metric == "ip" else -2.0
        # (D, N, dim), the rows the shortlist's distances are computed from: the caller's float32
        # array itself on the CPU (no copy), a second copy of the gallery on a GPU
        self._rows = emb
        self._bias = torch.full((self.n_depths, n_padded), float("inf"), device=self.device)
        self._bias[:, : self.n_items] = 0.0 if self.metric == "ip" else (emb * emb).sum(-1)
        # what the certificate of a shortlist needs: the largest |g| and b per depth, (D, 1),
        # rounded up
        norms = torch.linalg.vector_norm(emb.double(), dim=-1)  # (D, N)
        biases = self._bias[:, : self.n_items].double()
        if self.n_items == 0:
            norms = biases = torch.zeros((self.n_depths, 1), dtype=torch.float64)
        self._gallery_norm = norms.amax(1, keepdim=True) * (1 + 1e-6)
        self._bias_max = biases.amax(1, keepdim=True) * (1 + 1e-6)
        # (D, dim, N padded), built where it is searched: a GPU's gallery never has a host copy
        gallery_t = torch.zeros(self.n_depths, self.dim, n_padded, device=self.device)
        gallery_t[:, :, : self.n_items] = self._scale * emb.transpose(1, 2)
        # products through numpy (module docstring) over the same memory
        through_numpy = self.device.type == "cpu" and self.products == "numpy"
        self._gallery_np = gallery_t.numpy() if through_numpy else None
        self._gallery_t = gallery_t
        # half the bytes a search of a few queries streams from memory (the module docstring
        # gives what that saved and cost)
        self._gallery_bf16 = gallery_t.to(torch.bfloat16) if self.bfloat16 else None
        self._query_block = max(1, min(QUERY_BLOCK, SCORES_PER_BLOCK // n_padded))

    def _partial_distances(self, block: torch.Tensor, depth: int, bfloat16: bool) -> torch.Tensor:
        """bias + q·(scale·g) of a block of queries against every gallery column of ``depth``,
        float32, from the bfloat16 copy or the float32 gallery."""
        if bfloat16:
            assert self._gallery_bf16 is not None
            product = torch.mm(block.to(torch.bfloat16), self._gallery_bf16[depth])
            return torch.add(self._bias[depth], product)
        if self._gallery_np is None:
            return torch.addmm(self._bias[depth][None, :], block, self._gallery_t[depth])
        partial = torch.from_numpy(block.numpy() @ self._gallery_np[depth])
        return partial.add_(self._bias[depth])

    def _shortlists(
        self, block: torch.Tensor, found: int
    ) -> tuple[torch.Tensor, list[list[tuple[int, torch.Tensor]]], bool]:
        """Certified shortlists of each query of ``block`` (D, Q, dim) at every depth
        (:func:`~oahu.inference.shortlist.certified_shortlist`): the columns (D, Q, m), −1 where
        a query's shortlist is narrower than the widest; per depth, each query no shortlist
        certified with its band (:meth:`_bands`), to measure whole; and whether any shortlist is
        padded with −1."""
        bfloat16 = self.bfloat16 and block.shape[1] <= BFLOAT16_QUERIES
        roundoff = BFLOAT16_ROUNDOFF if bfloat16 else 0.0
        query_norms = torch.linalg.vector_norm(block.double(), dim=-1) * (1 + 1e-6)  # (D, Q)
        # |partial| ≤ max b + |a|·|q|·max|g|: where that bound is finite in float32 so is every
        # partial distance of the query, and nothing needs checking (the usual case)
        bound = self._bias_max + abs(self._scale) * query_norms * self._gallery_norm
        unbounded = ~(bound <= torch.finfo(torch.float32).max)  # NaN included
        gaps = certified_gap(  # (D, Q), every depth at once
            query_norms,
            self._gallery_norm,
            self._bias_max,
            self._scale,
            self.dim,
            inputs_roundoff=roundoff,
            output_roundoff=roundoff,
        )
        shortlists, bands = [], []
        for depth in range(self.n_depths):
            partial = self._partial_distances(block[depth], depth, bfloat16)
            if bool(unbounded[depth].any()):
                self._bound_non_finite(partial, torch.nonzero(unbounded[depth]).view(-1))
            columns, uncertified = certified_shortlist(partial, found, gaps[depth], self.n_items)
            shortlists.append(columns)
            bands.append(
                self._bands(
                    block[depth], partial, uncertified, found, depth, query_norms[depth], roundoff
                )
            )
        width = max(s.shape[1] for s in shortlists)
        # rows certified by a narrower shortlist than the widest tried carry −1s
        padded = width > min(found + SHORTLIST_MARGINS[0], self.n_items)
        stacked = torch.stack(
            [
                s if s.shape[1] == width else F.pad(s, (0, width - s.shape[1]), value=-1)
                for s in shortlists
            ]
        )
        return stacked, bands, padded

    def _bound_non_finite(self, partial: torch.Tensor, rows: torch.Tensor) -> None:
        """Make every real column of ``partial`` (Q, padded columns) rank before the padding
        in ``rows``, in place: a query with infinite or NaN features, or one whose product
        overflows, has non-finite partial distances, NaN ranks after +inf and +inf ties with
        the padding, and a shortlist reaching into the padding would name items that do not
        exist. Those rows' real columns are clamped to ±(largest float32) and their padding
        set back to +inf; the certificate then fails for them and they are measured against
        their band (every item where nothing bounds the band)."""
        largest = torch.finfo(partial.dtype).max
        partial[rows, : self.n_items] = torch.nan_to_num(
            partial[rows, : self.n_items], nan=largest, posinf=largest, neginf=-largest
        )
        partial[rows, self.n_items :] = float("inf")

    def _nearest_of(
        self,
        queries: torch.Tensor,
        shortlist: torch.Tensor,
        k: int,
        depths: torch.Tensor,
        padded: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest of each query's ``shortlist`` (D', Q, m) of gallery positions (−1:
        none, only where ``padded``), for ``queries`` (D', Q, dim) at ``depths`` (D'): their
        dissimilarities (the distance for l2, −q·g for ip), computed from the rows so that a
        query's result does not depend on the other queries, ascending with exact ties in
        position order, and the positions. All depths at once: a search of one query is a
        handful of small operations, not a handful per depth."""
        dissim = self._dissimilarities(queries, shortlist, depths, padded)
        # by position first, then a stable sort by dissimilarity: ties keep position order
        positions, by_position = shortlist.sort(dim=-1)
        dissim, order = dissim.gather(-1, by_position).sort(dim=-1, stable=True)
        return dissim[..., :k], positions.gather(-1, order)[..., :k]

    def _dissimilarities(
        self, queries: torch.Tensor, shortlist: torch.Tensor, depths: torch.Tensor, padded: bool
    ) -> torch.Tensor:
        """The dissimilarity (D', Q, m) of each query of ``queries`` (D', Q, dim) to each
        column of its ``shortlist`` (D', Q, m; −1: none, +inf, only where ``padded``) at
        ``depths``: an element-wise difference and a sum over each row, whose order depends only
        on the dimension, so that it is the same whatever is measured beside it."""
        n_depths, n_queries, m = shortlist.shape
        first_row = depths[:, None, None] * self.n_items
        at = ((shortlist.clamp(min=0) if padded else shortlist) + first_row).view(-1)
        rows = self._rows.reshape(-1, self.dim).index_select(0, at)
        rows = rows.view(n_depths, n_queries, m, self.dim)
        if self.metric == "l2":
            dissim = torch.linalg.vector_norm(rows.sub_(queries[:, :, None, :]), dim=-1)
        else:
            dissim = (rows * queries[:, :, None, :]).sum(-1).neg_()
        if padded:
            dissim.masked_fill_(shortlist < 0, float("inf"))
        return dissim

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        # Where numpy's BLAS multiplies, torch runs only the small element-wise steps and top-k
        # of a search, and for a few queries its OpenMP team, spinning between them, fights
        # BLAS's threads for the cores: on a 2-core AMD EPYC (35,000 items, three depths of 200)
        # one query took 33.6 ms against 1.5 ms with torch on one thread, 16 queries 40.8
        # against 9.5 ms, 256 176 against 95 ms. Larger searches keep torch's team, whose top-k
        # over 1,024 rows a block gains from it (a collapsed gallery's 4,096 queries: 6.2 s
        # against 7.0-7.5 s on one thread).
        shape = np.shape(queries)  # (D, Q, dim); checked in _search
        small = self._gallery_np is not None and (len(shape) < 2 or shape[1] <= SMALL_SEARCH)
        with torch_threads(1 if small else None):
            return self._search(queries, k)

    def _search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._check_queries(queries, k)
        n_queries, found = q.shape[1], min(k, self.n_items)
        dissim = np.full((self.n_depths, n_queries, k), np.inf, dtype=np.float32)
        pos = np.full((self.n_depths, n_queries, k), -1, dtype=np.int64)
        if found == 0 or n_queries == 0:
            return dissim, pos
        qt = torch.from_numpy(q).to(self.device)
        every_depth = torch.arange(self.n_depths, device=self.device)
        # filled on the device and copied back once: one wait for a GPU, not one per block
        best_all = torch.empty((self.n_depths, n_queries, found), device=self.device)
        columns_all = torch.empty(best_all.shape, dtype=torch.int64, device=self.device)
        for start in range(0, n_queries, self._query_block):
            rows = slice(start, start + self._query_block)
            block = qt[:, rows]
            shortlist, bands, padded = self._shortlists(block, found)
            # a query no shortlist certified (many items within the product's rounding of its
            # k-th nearest: a crowded region, a collapsed head) is measured against its band:
            # with the shortlists where it fits in one, alone where it does not
            wide = self._shortlist_bands(shortlist, bands)
            padded = padded or any(bands)
            best, columns = self._nearest_of(block, shortlist, found, every_depth, padded)
            for depth, banded in enumerate(wide):
                for i, band in banded:
                    near = self._nearest_in_band(block[depth, i], band, depth, found)
                    best[depth, i], columns[depth, i] = near
            best_all[:, rows], columns_all[:, rows] = best, columns
        dissim[:, :, :found] = best_all.cpu().numpy()
        pos[:, :, :found] = columns_all.cpu().numpy()
        return dissim, pos
