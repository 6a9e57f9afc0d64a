"""The gallery as the starting metric sees it: raw features, ids and labels, with an exact
Euclidean nearest-neighbour search, kept per gallery version.

The retrieval explorer shows an item's neighbours under the served model beside those under the
metric a learner starts from, the Euclidean distance between feature vectors, so that one sees
what learning changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import faiss
import numpy as np

from oahu.service.catalog import Catalog
from oahu.service.serving.snapshot import gallery_arrays

__all__ = ["EuclideanGallery", "GalleryVersion"]

# Candidates beyond k that faiss's float32 search hands to the exact float64 ranking: items whose
# float32 distances tie or swap with the k-th by rounding are then ranked exactly too.
RERANK_MARGIN = 16


@dataclass(frozen=True)
class GalleryVersion:
    """One version of the gallery: ``ids``, features ``X`` (float32), labels ``y`` and a flat
    L2 index over ``X``; ``row`` maps an id to its position."""

    version: int
    ids: list[str]
    X: np.ndarray
    y: np.ndarray
    row: dict[str, int]
    index: faiss.IndexFlatL2

    def __len__(self) -> int:
        return len(self.ids)

    def neighbours(
        self, x: np.ndarray, k: int, exclude: str | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` gallery items nearest to ``x`` (features, float32 range) by Euclidean
        distance, nearest first, as (position, distance); the item ``exclude`` (an id) is left
        out. Distances are exact (float64 over the float32 features); equal distances go to the
        item earlier in the gallery.

        >>> gallery = GalleryVersion.of(0, ["a", "b", "c"], [[0, 0], [3, 4], [1, 0]], [0, 1, 0])
        >>> gallery.neighbours(np.array([0, 0], np.float32), 2)
        [(0, 0.0), (2, 1.0)]
        >>> gallery.neighbours(np.array([0, 0], np.float32), 2, exclude="a")
        [(2, 1.0), (1, 5.0)]
        """
        n = len(self.ids)
        skip = self.row.get(exclude, -1) if exclude is not None else -1
        want = min(n, k + (skip >= 0) + RERANK_MARGIN)
        if want == 0:
            return []
        query = np.ascontiguousarray(x, dtype=np.float32).reshape(1, -1)
        _, found = self.index.search(query, want)
        candidates = found[0][(found[0] >= 0) & (found[0] != skip)]
        diff = self.X[candidates].astype(np.float64) - query.astype(np.float64)
        distance = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        order = np.lexsort((candidates, distance))[:k]
        return list(zip(candidates[order].tolist(), distance[order].tolist(), strict=True))

    @classmethod
    def of(cls, version: int, ids: list[str], X: object, y: object) -> GalleryVersion:
        """The gallery version of these arrays, with its index built."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        index = faiss.IndexFlatL2(X.shape[1])
        if len(X):
            index.add(X)
        row = {item_id: i for i, item_id in enumerate(ids)}
        return cls(version, list(ids), X, np.asarray(y, dtype=np.int64), row, index)


class EuclideanGallery:
    """The catalog's gallery as a :class:`GalleryVersion`, rebuilt on first use after the
    gallery changes (its ``version``), once however many requests ask at the same time.

    >>> import pathlib, tempfile
    >>> from oahu.service.item_store import ItemStore
    >>> gallery = ItemStore(dim=2)
    >>> gallery.add(["a", "b"], [[0, 0], [3, 4]], y=[0, 1])
    >>> cat = Catalog(ItemStore(dim=2), gallery, pathlib.Path(tempfile.mkdtemp()) / "o.npz")
    >>> euclidean = EuclideanGallery(cat)
    >>> euclidean.current().neighbours(np.array([3, 3], np.float32), 1)
    [(1, 1.0)]
    >>> euclidean.current() is euclidean.current()  # kept while the gallery is unchanged
    True
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._current: GalleryVersion | None = None
        self._lock = threading.Lock()

    def current(self) -> GalleryVersion:
        """The gallery as of its current version."""
        with self._lock:
            cached = self._current
            arrays = None if cached is None else (cached.version, cached.ids, cached.X, cached.y)
            version, ids, X, y = gallery_arrays(self.catalog, arrays)
            if cached is None or cached.version != version:
                self._current = GalleryVersion.of(version, ids, X, y)
            return self._current
