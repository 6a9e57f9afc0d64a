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
*shortlists* each query's ``k + RESCORE_MARGIN`` nearest columns; their distances are then
computed again from the gallery's rows, one query at a time in effect (an element-wise
difference and a sum over each row, whose order depends only on the dimension), and sorted by
(distance, position). A near-tie that rounding moves across the shortlist's edge is caught by the
margin, unless more than ``RESCORE_MARGIN`` items lie within rounding of the k-th (duplicates of
one item beyond that count). The distances are also more accurate for it: |q − g|² directly
instead of |q|² + |g|² − 2q·g, which loses digits when q is near g. Side by side with the
product's own distances, on a 35,000-item gallery of three depths of 200 on one thread, a search
took 1-4% longer for one to four queries, a tenth less for 16 (the old path squared each
depth's queries apart) and 9% longer for an evaluation's block of 1,024.

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

from oahu.checks import check_choice
from oahu.inference.index import GalleryIndex
from oahu.learner import MetricKind

__all__ = [
    "BLOCK",
    "CPU_PRODUCTS",
    "QUERY_BLOCK",
    "RESCORE_MARGIN",
    "SCORES_PER_BLOCK",
    "CpuProducts",
    "MatmulIndex",
    "cpu_products",
    "products_for",
    "smallest_k",
]

BLOCK = 512  # columns per block of smallest_k; the gallery is padded to a multiple of it
# Queries per matrix product: a (QUERY_BLOCK, n_items) float32 block, 140 MB for 35,000 items
# (an evaluation's 35,000 test queries at once would take 4.9 GB).
QUERY_BLOCK = 1024
# ... and at most this many scores per product (512 MB of float32), so that a 1,000,000-item
# gallery takes 134 queries at a time rather than 4 GB per block.
SCORES_PER_BLOCK = 1 << 27
# Columns shortlisted per query beyond its k, whose distances are computed again row by row
# (module docstring): near-ties within rounding of the k-th neighbour, up to this many.
RESCORE_MARGIN = 8


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


def smallest_k(
    values: torch.Tensor, k: int, block: int = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest entries of each row of ``values`` (Q, n·block), ascending, and their
    columns: exact, because a block holding one of them has its minimum at most the k-th
    smallest block minimum, so the k blocks with the smallest minima hold them all (exact ties
    aside) and ``torch.topk`` runs over k blocks instead of the whole row.

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


class MatmulIndex(GalleryIndex):
    """Exact nearest-neighbour search by matrix products, on ``device`` (a torch device; the
    CPU by default). ``products`` names the library that multiplies on the CPU, ``"torch"`` or
    ``"numpy"``; ``"auto"``, the default, takes :func:`cpu_products`'s choice for this CPU
    (the module docstring says why) and ``products`` then names the library chosen. A GPU always
    multiplies through torch.

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
    ) -> None:
        check_choice(products, "products", CPU_PRODUCTS)
        self.device = torch.device(device)
        self.products = cpu_products() if products == "auto" else products
        super().__init__(embeddings, labels, metric, ids)

    def _build(self, embeddings: np.ndarray) -> None:
        emb = torch.from_numpy(embeddings).to(self.device)
        n_padded = -(-self.n_items // BLOCK) * BLOCK
        # partial distance = bias + q·(alpha·g), smallest first: |g|² − 2q·g for l2 (ranks as
        # |q − g|² does), −q·g for ip; padding columns are +inf and never chosen. alpha (−1 or −2)
        # scales the gallery once, exactly (a sign and a power of two).
        alpha = -1.0 if self.metric == "ip" else -2.0
        # (D, dim, N padded), built where it is searched: a GPU's gallery never has a host copy
        self._gallery_t = torch.zeros(self.n_depths, self.dim, n_padded, device=self.device)
        # (D, N, dim), the rows the shortlist's distances are computed from: the caller's float32
        # array itself on the CPU (no copy), a second copy of the gallery on a GPU
        self._rows = emb
        self._gallery_t[:, :, : self.n_items] = alpha * emb.transpose(1, 2)
        self._bias = torch.full((self.n_depths, n_padded), float("inf"), device=self.device)
        self._bias[:, : self.n_items] = 0.0 if self.metric == "ip" else (emb * emb).sum(-1)
        # products through numpy (module docstring) over the same memory
        through_numpy = self.device.type == "cpu" and self.products == "numpy"
        self._gallery_np = self._gallery_t.numpy() if through_numpy else None
        self._query_block = max(1, min(QUERY_BLOCK, SCORES_PER_BLOCK // n_padded))

    def _partial_distances(self, block: torch.Tensor, depth: int) -> torch.Tensor:
        """bias + q·(alpha·g) of a block of queries against every gallery column of ``depth``."""
        if self._gallery_np is None:
            return torch.addmm(self._bias[depth][None, :], block, self._gallery_t[depth])
        partial = torch.from_numpy(block.numpy() @ self._gallery_np[depth])
        return partial.add_(self._bias[depth])

    def _nearest_of(
        self, queries: torch.Tensor, shortlist: torch.Tensor, k: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest of each query's ``shortlist`` (D, Q, m) of gallery positions, for
        ``queries`` (D, Q, dim): their dissimilarities (the distance for l2, −q·g for ip),
        computed from the rows so that a query's result does not depend on the other queries,
        ascending with exact ties in position order, and the positions. All depths at once: a
        search of one query is a handful of small operations, not a handful per depth."""
        n_depths, n_queries, m = shortlist.shape
        first_row = torch.arange(n_depths, device=self.device)[:, None, None] * self.n_items
        rows = self._rows.reshape(-1, self.dim).index_select(0, (shortlist + first_row).view(-1))
        rows = rows.view(n_depths, n_queries, m, self.dim)
        if self.metric == "l2":
            dissim = torch.linalg.vector_norm(rows.sub_(queries[:, :, None, :]), dim=-1)
        else:
            dissim = (rows * queries[:, :, None, :]).sum(-1).neg_()
        # by position first, then a stable sort by dissimilarity: ties keep position order
        positions, by_position = shortlist.sort(dim=-1)
        dissim, order = dissim.gather(-1, by_position).sort(dim=-1, stable=True)
        return dissim[..., :k], positions.gather(-1, order)[..., :k]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._check_queries(queries, k)
        n_queries, found = q.shape[1], min(k, self.n_items)
        dissim = np.full((self.n_depths, n_queries, k), np.inf, dtype=np.float32)
        pos = np.full((self.n_depths, n_queries, k), -1, dtype=np.int64)
        if found == 0 or n_queries == 0:
            return dissim, pos
        qt = torch.from_numpy(q).to(self.device)
        wide = min(found + RESCORE_MARGIN, self.n_items)
        # filled on the device and copied back once: one wait for a GPU, not one per block
        best_all = torch.empty((self.n_depths, n_queries, found), device=self.device)
        columns_all = torch.empty(best_all.shape, dtype=torch.int64, device=self.device)
        for start in range(0, n_queries, self._query_block):
            rows = slice(start, start + self._query_block)
            block = qt[:, rows]
            shortlist = torch.stack(
                [
                    smallest_k(self._partial_distances(block[depth], depth), wide)[1]
                    for depth in range(self.n_depths)
                ]
            )
            best_all[:, rows], columns_all[:, rows] = self._nearest_of(block, shortlist, found)
        dissim[:, :, :found] = best_all.cpu().numpy()
        pos[:, :, :found] = columns_all.cpu().numpy()
        return dissim, pos
