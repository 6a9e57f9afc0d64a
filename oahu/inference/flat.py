"""Exhaustive gallery search by faiss: one flat index per depth (and the base of the other faiss
index, :mod:`oahu.inference.ivf`).

faiss's flat index scans the gallery once per query below 20 queries and calls its bundled BLAS
above; :class:`~oahu.inference.matmul.MatmulIndex` answers the same search 2-5x cheaper for
batches of 2-50 queries, so this one serves as the reference it is tested against and as
``--index flat``.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from oahu.inference.index import GalleryIndex
from oahu.learner import MetricKind


def flat_index(dim: int, metric: MetricKind) -> Any:
    """An empty faiss flat index ranking by ``metric``."""
    return faiss.IndexFlatIP(dim) if metric == "ip" else faiss.IndexFlatL2(dim)


class FaissIndex(GalleryIndex):
    """A gallery index searched by one faiss index per depth (``self._faiss``, set by the
    subclass)."""

    _faiss: list[Any]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = self._check_queries(queries, k)
        dissim = np.empty((self.n_depths, q.shape[1], k), dtype=np.float32)
        pos = np.empty((self.n_depths, q.shape[1], k), dtype=np.int64)
        for depth, (index, depth_q) in enumerate(zip(self._faiss, q, strict=True)):
            scores, found = index.search(depth_q, k)
            if self.metric == "ip":
                dissim[depth] = -scores
            else:  # faiss returns squared L2 distances
                dissim[depth] = np.sqrt(np.maximum(scores, 0.0))
            pos[depth] = found
        missing = pos < 0
        dissim[missing] = np.inf
        return dissim, pos


class FlatIndex(FaissIndex):
    """Exact nearest-neighbour search with one faiss flat index per depth.

    >>> emb = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]], dtype=np.float32)
    >>> index = FlatIndex(emb, labels=np.array([0, 1, 1]))
    >>> dissim, pos = index.search(np.array([[[1.0, 0.0]]], dtype=np.float32), k=4)
    >>> pos.tolist(), [round(float(v), 4) for v in dissim.ravel()]
    ([[[0, 2, 1, -1]]], [0.0, 0.8944, 1.4142, inf])
    """

    def _build(self, embeddings: np.ndarray) -> None:
        self._faiss = []
        for depth in embeddings:
            index = flat_index(self.dim, self.metric)
            index.add(depth)
            self._faiss.append(index)
