"""The band of a query no shortlist certified: every gallery column that can be among its k
nearest, drawn from the product's partial distances with a gap its own k-th bounds, again from
float64 partial distances where it is wide, and measured with the certified shortlists where it
fits in them (:mod:`oahu.inference.shortlist`, "The band"). The half of
:class:`~oahu.inference.matmul.MatmulIndex` that measures crowded queries, which it inherits.
"""

from __future__ import annotations

import torch

from oahu.inference.shortlist import (
    at_most_float32,
    band_gap,
    count_at_most,
    float64_product_error,
    product_error,
    smallest_k,
)
from oahu.learner import MetricKind

__all__ = [
    "BAND_ROWS",
    "FLOAT64_SCORES",
    "REFINE_BAND",
    "REFINE_QUERIES",
    "ROWS_PER_CHUNK",
    "CertifiedBands",
]

# Rows measured at once of a query's band (a query no shortlist certified; a collapsed head's
# band can be the whole gallery): 52 MB of float32 rows of 200 dimensions, not 800 MB for
# 1,000,000 items.
ROWS_PER_CHUNK = 1 << 16
# Uncertified queries whose bands are drawn at once: a (BAND_ROWS, n_items) slice of the
# partial distances and its mask.
BAND_ROWS = 64
# A band of more items than this is drawn again from float64 partial distances
# (MatmulIndex._float64_bands): one float64 product with the whole gallery per block of such
# queries, instead of measuring thousands of rows per query. It leaves bands of tens of items
# where float32 left thousands; what it saves in time is small on a 35,000-item gallery (the
# paper preset's collapsed heads, 8,192 Fashion-MNIST test queries, 2-core AMD EPYC: 20.1 s
# against 21.2 s after 100,000 constraints, 14.0 against 13.0 s after 10,000;
# benchmarks/crowded_search.py); larger galleries, with larger bands, were not measured.
REFINE_BAND = 1024
# ... when at least this many queries of a block and depth have such bands: the float64 pass
# converts the whole gallery once for all of them, and for a few queries costs more than it
# saves (one query on the same heads: 67 ms against 6 ms measuring its band).
REFINE_QUERIES = 64
# ... at most this many float64 scores at once (128 MB).
FLOAT64_SCORES = 1 << 24


class CertifiedBands:
    """The band half of :class:`~oahu.inference.matmul.MatmulIndex`, which inherits it; its
    methods read the index's gallery (rows, norms, bias, scale) and measure through its
    :meth:`_dissimilarities`.

    600 equal items: no shortlist certifies a query's 3 nearest, its band is all of them, and
    the nearest are the first three (ties in position order):

    >>> import numpy as np
    >>> from oahu.inference.matmul import MatmulIndex
    >>> index = MatmulIndex(np.full((1, 600, 2), 0.6, dtype=np.float32))
    >>> query = np.array([[[0.6, 0.6]]], dtype=np.float32)
    >>> _, bands, _ = index._shortlists(torch.from_numpy(query), 3)
    >>> [(i, len(band)) for i, band in bands[0]]
    [(0, 600)]
    >>> index.search(query, 3)[1].tolist()
    [[[0, 1, 2]]]
    """

    # What the index keeps and the bands read.
    n_items: int
    dim: int
    metric: MetricKind
    device: torch.device
    _rows: torch.Tensor  # (D, N, dim) float32, the rows distances are computed from
    _bias: torch.Tensor  # (D, N padded), +inf past the real columns
    _gallery_norm: torch.Tensor  # (D, 1) float64, the largest |g|
    _bias_max: torch.Tensor  # (D, 1) float64, the largest b
    _scale: float

    def _dissimilarities(
        self, queries: torch.Tensor, shortlist: torch.Tensor, depths: torch.Tensor, padded: bool
    ) -> torch.Tensor:
        raise NotImplementedError

    def _bands(
        self,
        queries: torch.Tensor,
        partial: torch.Tensor,
        uncertified: torch.Tensor,
        found: int,
        depth: int,
        query_norms: torch.Tensor,
        roundoff: float,
    ) -> list[tuple[int, torch.Tensor]]:
        """Each query of ``uncertified`` (rows of ``partial``, of ``queries`` (Q, dim) at
        ``depth``) with its band: the gallery positions (ascending) whose partial distance is
        within :func:`~oahu.inference.shortlist.band_gap` of its ``found``-th smallest. By the
        certificate's own argument (:mod:`oahu.inference.shortlist`) a column further out cannot
        be among the nearest, so the band holds them, ties included, whatever the product's
        rounding. Bands wider than :data:`REFINE_BAND` (a collapsed head's can be half the
        gallery), when at least :data:`REFINE_QUERIES` queries have one, are drawn again from
        partial distances computed in float64 (:meth:`_float64_bands`), whose far smaller
        error leaves only the items the float32 rescoring itself cannot tell apart."""
        bands: list[tuple[int, torch.Tensor]] = []
        wide: list[tuple[int, torch.Tensor]] = []  # to draw again in float64, if enough
        for start in range(0, len(uncertified), BAND_ROWS):
            rows = uncertified[start : start + BAND_ROWS]
            # smallest_k over the padded rows: torch.kthvalue took 5x as long
            kth = smallest_k(partial[rows], found)[0][:, -1]
            real = partial[rows, : self.n_items]
            norms = query_norms[rows]
            error = product_error(
                norms,
                self._gallery_norm[depth],
                self._bias_max[depth],
                self._scale,
                self.dim,
                roundoff,
                roundoff,
            )
            bound = at_most_float32(kth.double() + self._gap(kth, error, norms, depth))
            sizes = count_at_most(real, bound).tolist()
            for i, row, size in zip(rows.tolist(), range(len(rows)), sizes, strict=True):
                if size < found:
                    # a query with NaN features has a NaN gap (its partial distances were
                    # clamped by _bound_non_finite) and bounds nothing: every item is measured
                    bands.append((i, self._every_item(partial.device)))
                else:
                    band = torch.nonzero(real[row] <= bound[row]).view(-1)
                    refinable = size > REFINE_BAND and bool(norms[row].isfinite())
                    (wide if refinable else bands).append((i, band))
        if len(wide) < REFINE_QUERIES:  # too few to share a float64 pass over the gallery
            return bands + wide
        at = torch.tensor([i for i, _ in wide], device=partial.device)
        refined = self._float64_bands(queries[at], query_norms[at], found, depth)
        return bands + list(zip(at.tolist(), refined, strict=True))

    def _float64_bands(
        self, queries: torch.Tensor, query_norms: torch.Tensor, found: int, depth: int
    ) -> list[torch.Tensor]:
        """The bands of ``queries`` (R, dim) at ``depth`` from partial distances computed in
        float64 from the float32 rows: their error (:func:`~oahu.inference.shortlist.
        float64_product_error`, ~10⁻¹⁴ for unit rows) is far below the float32 product's, so
        the band keeps only what the float32 rescoring's own rounding may reorder. The gallery
        is converted a chunk of rows at a time, never copied whole."""
        q = queries.double()
        n_padded = self._bias.shape[1]
        bias = torch.zeros(1, dtype=torch.float64, device=q.device)
        at_once = max(1, FLOAT64_SCORES // n_padded)
        bands = []
        for first in range(0, len(q), at_once):
            rows = slice(first, first + at_once)
            partial = torch.full(
                (len(q[rows]), n_padded), float("inf"), dtype=torch.float64, device=q.device
            )
            for start in range(0, self.n_items, ROWS_PER_CHUNK):
                g = self._rows[depth, start : start + ROWS_PER_CHUNK].double()
                if self.metric == "l2":
                    bias = (g * g).sum(1)
                torch.addmm(
                    bias, q[rows], g.T, alpha=self._scale, out=partial[:, start : start + len(g)]
                )
            kth = smallest_k(partial, found)[0][:, -1]
            norms = query_norms[rows]
            error = float64_product_error(
                norms, self._gallery_norm[depth], self._bias_max[depth], self._scale, self.dim
            )
            bound = kth + self._gap(kth, error, norms, depth)
            for row in range(len(partial)):
                band = torch.nonzero(partial[row, : self.n_items] <= bound[row]).view(-1)
                # an overflowing product (a query of huge finite features) bounds nothing
                bands.append(band if len(band) >= found else self._every_item(q.device))
        return bands

    def _gap(
        self, kth: torch.Tensor, error: torch.Tensor, query_norms: torch.Tensor, depth: int
    ) -> torch.Tensor:
        """The band's gap (:func:`~oahu.inference.shortlist.band_gap`) of queries at ``depth``
        whose k-th partial distance and its error are ``kth`` and ``error``."""
        return band_gap(kth, error, query_norms, self._gallery_norm[depth], self._scale, self.dim)

    def _every_item(self, device: torch.device) -> torch.Tensor:
        """The band of a query that bounds nothing (NaN features, an overflowing product)."""
        return torch.arange(self.n_items, device=device)

    @staticmethod
    def _shortlist_bands(
        shortlist: torch.Tensor, bands: list[list[tuple[int, torch.Tensor]]]
    ) -> list[list[tuple[int, torch.Tensor]]]:
        """Write each band no wider than ``shortlist`` (D, Q, m) into its query's row (−1 after
        it), in place, so that it is measured with the certified shortlists in one batch, and
        return the wider ones, per depth, to be measured a query at a time."""
        width = shortlist.shape[-1]
        wide: list[list[tuple[int, torch.Tensor]]] = []
        for depth, banded in enumerate(bands):
            wide.append([])
            for i, band in banded:
                if len(band) > width:
                    wide[-1].append((i, band))
                    continue
                shortlist[depth, i, : len(band)] = band
                shortlist[depth, i, len(band) :] = -1
        return wide

    def _nearest_in_band(
        self, query: torch.Tensor, band: torch.Tensor, depth: int, k: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest of ``band`` (:meth:`_bands`) at ``depth`` for one ``query`` (dim,)
        that no shortlist certified, as :meth:`_nearest_of` measures them: a crowded gallery's
        band (a collapsed head's, a cluster of near-duplicates) can be thousands of items, so it
        is measured a chunk of rows at a time and not copied whole: each chunk's k nearest, then
        the k nearest of those."""
        at_depth = torch.tensor([depth], device=self.device)
        found_d, found_p = [], []
        for start in range(0, len(band), ROWS_PER_CHUNK):
            chunk = band[start : start + ROWS_PER_CHUNK]
            dissim = self._dissimilarities(
                query[None, None, :], chunk[None, None, :], at_depth, False
            )
            dissim = dissim.view(-1)
            if len(chunk) > k:
                # only what ties or beats the k-th smallest needs sorting, not the whole chunk
                # (a collapsed head's band is thousands); a NaN k-th keeps all of it
                kth = torch.topk(dissim, k, largest=False).values[-1]
                keep = torch.nonzero(dissim <= kth).view(-1)
                if len(keep) >= k:
                    dissim, chunk = dissim[keep], chunk[keep]
            # the band ascends by position, so a stable sort leaves ties in position order
            dissim, order = dissim.sort(stable=True)
            found_d.append(dissim[:k])
            found_p.append(chunk[order[:k]])
        # the chunks' candidates, in position order, ranked again by (dissimilarity, position)
        dissim, order = torch.cat(found_d).sort(stable=True)
        positions = torch.cat(found_p)[order]
        return dissim[:k], positions[:k]
