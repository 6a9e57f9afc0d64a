"""An approximate gallery index for large galleries: faiss IVF-flat, one per depth.

Exact search costs n_depths · n_items · dim multiply-adds per query (10.5 M for a 35,000-item
Fashion-MNIST gallery with OAHU's 6 × 50-d heads), which caps a 2-core box at a few hundred
queries per second. An inverted file visits only ``nprobe`` of ``nlist`` clusters per depth:
about nprobe/nlist of that work, at the price of occasionally missing a true neighbour. Scoring
(Eq. 23-27) is unchanged; only the candidate search is approximate. ``--index exact`` (the
default) keeps the paper's exact kNN.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

from oahu.checks import check_int
from oahu.inference.flat import FaissIndex, flat_index
from oahu.learner import MetricKind

_MIN_POINTS_PER_CENTROID = 39  # faiss warns (and clusters badly) below this


class IVFIndex(FaissIndex):
    """A gallery index whose per-depth search is an IVF-flat index (``nprobe`` lists).

    Galleries too small for ``nlist >= 2`` clusters are searched by exact flat indexes.

    >>> rng = np.random.default_rng(0)
    >>> emb = rng.normal(size=(2, 4000, 8)).astype(np.float32)
    >>> index = IVFIndex(emb, labels=np.arange(4000) % 3, nprobe=4)
    >>> index.nlist, index.search(emb[:, :2], k=1)[1][:, :, 0].tolist()  # items find themselves
    (63, [[0, 1], [0, 1]])
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        labels: np.ndarray | None = None,
        metric: MetricKind = "l2",
        ids: np.ndarray | None = None,
        nprobe: int = 16,
        seed: int = 0,
    ) -> None:
        check_int(nprobe, "nprobe")
        self.nprobe, self.seed = nprobe, seed
        super().__init__(embeddings, labels, metric, ids)

    def _build(self, embeddings: np.ndarray) -> None:
        n = self.n_items
        nlist = min(int(math.sqrt(n)), n // _MIN_POINTS_PER_CENTROID)
        self.nlist = nlist if nlist >= 2 else 0  # 0: too small to cluster, searched exactly
        faiss_metric = faiss.METRIC_INNER_PRODUCT if self.metric == "ip" else faiss.METRIC_L2
        # k-means on a sample, few iterations: the index is rebuilt every few seconds while
        # the model learns, and coarse centroids only cost a little recall
        sample = np.random.default_rng(self.seed).permutation(n)[: self.nlist * 40]
        self._faiss, self._quantizers = [], []  # an IVF index borrows its quantizer: keep it
        for depth in embeddings:
            quantizer = flat_index(self.dim, self.metric)
            if not self.nlist:  # the quantizer alone is the exact index
                quantizer.add(depth)
                self._faiss.append(quantizer)
                continue
            ivf = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, faiss_metric)
            ivf.cp.seed = self.seed
            ivf.cp.niter = 10
            ivf.train(depth[sample])
            ivf.add(depth)
            ivf.nprobe = min(self.nprobe, self.nlist)
            self._faiss.append(ivf)
            self._quantizers.append(quantizer)
