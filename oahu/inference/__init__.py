"""Serving a learned metric: gallery indexes and the scoring of their neighbours over all depths.

* :mod:`~oahu.inference.index`: :class:`GalleryIndex` and :func:`make_index`, used by evaluation
  and serving alike; :mod:`~oahu.inference.matmul`, :mod:`~oahu.inference.flat` and
  :mod:`~oahu.inference.ivf` search it three ways;
* :mod:`~oahu.inference.scoring`: classification, verification and retrieval (Eq. 23-27).

>>> import numpy as np
>>> gallery = np.array([[[0.0], [1.0], [3.0]]], dtype=np.float32)  # one depth, 1-d embeddings
>>> index = make_index("exact", gallery, labels=np.array([7, 8, 8]))
>>> classify(index, np.array([[[0.9]]], dtype=np.float32), alpha=np.ones(1), k=2).labels
array([8])
"""

from oahu.inference.index import (
    INDEX_KINDS,
    GalleryIndex,
    IndexedGallery,
    index_gallery,
    make_index,
)
from oahu.inference.scoring import (
    Classification,
    Retrieval,
    Verification,
    classify,
    neighbour_scores,
    recall_at,
    retrieve,
    verify,
)

__all__ = [
    "INDEX_KINDS",
    "Classification",
    "GalleryIndex",
    "IndexedGallery",
    "Retrieval",
    "Verification",
    "classify",
    "index_gallery",
    "make_index",
    "neighbour_scores",
    "recall_at",
    "retrieve",
    "verify",
]
