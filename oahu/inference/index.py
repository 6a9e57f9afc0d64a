"""Gallery indexes: the k nearest gallery items of each query, at every depth.

:class:`GalleryIndex` validates a gallery's embeddings, holds its labels and ids, and defines
``search``; its subclasses differ only in how they search:

* ``"exact"``, :class:`~oahu.inference.matmul.MatmulIndex`: the paper's exhaustive kNN as one
  matrix product and a blocked top-k per depth; evaluation and serving both use it, so
  ``oahu replay`` measures the kNN that ``/v1/classify`` answers with. It alone searches on a
  GPU (``device``), where a service whose learner runs on one keeps its gallery;
* ``"flat"``, :class:`~oahu.inference.flat.FlatIndex`: the same exhaustive search by faiss's
  flat index (a reference; the same neighbours up to float rounding, which can swap exact ties);
* ``"ivf"``, :class:`~oahu.inference.ivf.IVFIndex`: faiss's inverted file, approximate, for
  galleries far larger than 35,000 items.

:func:`make_index` builds one by name; faiss is imported only by the kinds that use it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from oahu.checks import check_int
from oahu.learner import Learner, MetricKind

INDEX_KINDS: tuple[str, ...] = ("exact", "flat", "ivf")


class GalleryIndex(ABC):
    """Embeddings of a gallery (n_depths, n_items, dim), its labels and ids; ``search`` finds
    the k nearest items of queries at every depth.

    ``metric`` is ``"l2"`` (Euclidean distance) or ``"ip"`` (inner product, larger is closer).
    Subclasses build their search structure in ``_build`` from the validated float32
    embeddings and implement ``search``.
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        labels: np.ndarray | None = None,
        metric: MetricKind = "l2",
        ids: np.ndarray | None = None,
    ) -> None:
        emb = np.asarray(embeddings)
        if emb.ndim != 3:
            raise ValueError(f"embeddings: expected (n_depths, n_items, dim), got {emb.shape}")
        if metric not in ("l2", "ip"):
            raise ValueError(f"metric: must be 'l2' or 'ip', got {metric!r}")
        n_items = emb.shape[1]
        for name, arr in (("labels", labels), ("ids", ids)):
            if arr is not None and len(arr) != n_items:
                raise ValueError(f"{name}: expected {n_items} entries, got {len(arr)}")
        self.metric = metric
        self.labels = None if labels is None else np.asarray(labels)
        # Fixed per index, so classification need not recompute them per query batch.
        self.classes, self.class_of_item = (
            (None, None) if labels is None else np.unique(self.labels, return_inverse=True)
        )
        self.ids = None if ids is None else np.asarray(ids)
        self.n_depths, self.n_items, self.dim = emb.shape
        self._build(np.ascontiguousarray(emb, dtype=np.float32))

    @abstractmethod
    def _build(self, embeddings: np.ndarray) -> None:
        """Index the float32 (n_depths, n_items, dim) ``embeddings``."""

    def _check_queries(self, queries: np.ndarray, k: int) -> np.ndarray:
        """``queries`` as float32 (D, n, dim), or ``ValueError`` naming what is wrong."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 3 or q.shape[0] != self.n_depths or q.shape[2] != self.dim:
            raise ValueError(
                f"queries: expected ({self.n_depths}, n, {self.dim}), got {tuple(q.shape)}"
            )
        check_int(k, "k")
        return q

    @abstractmethod
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest gallery items per depth: ``(dissimilarity, position)``, each (D, Q, k).

        Dissimilarity is the Euclidean distance for ``"l2"`` and the negated inner product for
        ``"ip"``; positions are rows of the gallery, nearest first (−1, at dissimilarity inf,
        where the gallery has fewer than k items).
        """


def make_index(
    kind: str,
    embeddings: np.ndarray,
    labels: np.ndarray | None = None,
    metric: MetricKind = "l2",
    ids: np.ndarray | None = None,
    nprobe: int = 16,
    device: str = "cpu",
) -> GalleryIndex:
    """The ``kind`` of index (one of :data:`INDEX_KINDS`) over ``embeddings``; ``nprobe`` is the
    number of clusters an ``"ivf"`` index visits per depth and query; ``device`` the torch device
    an ``"exact"`` index searches on (the faiss kinds search on the CPU only).

    >>> emb = np.array([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]], dtype=np.float32)
    >>> index = make_index("exact", emb, labels=np.array([0, 1, 1]))
    >>> dissim, pos = index.search(np.array([[[1.0, 0.0]]], dtype=np.float32), k=2)
    >>> pos.tolist(), [round(float(v), 4) for v in dissim.ravel()]
    ([[[0, 2]]], [0.0, 0.8944])
    """
    if kind == "exact":
        from oahu.inference.matmul import MatmulIndex

        return MatmulIndex(embeddings, labels, metric, ids, device)
    if device != "cpu" and kind in INDEX_KINDS:
        raise ValueError(f"device: the {kind!r} index searches on the CPU only, got {device!r}")
    if kind == "flat":
        from oahu.inference.flat import FlatIndex

        return FlatIndex(embeddings, labels, metric, ids)
    if kind == "ivf":
        from oahu.inference.ivf import IVFIndex

        return IVFIndex(embeddings, labels, metric, ids, nprobe=nprobe)
    raise ValueError(f"index: must be one of {', '.join(INDEX_KINDS)}, got {kind!r}")


class IndexedGallery(NamedTuple):
    """A gallery embedded by a learner, and the index over those embeddings."""

    embeddings: np.ndarray  # (n_depths, n_items, dim), as the learner embedded them
    index: GalleryIndex


def index_gallery(
    learner: Learner,
    x: np.ndarray,
    labels: np.ndarray | None = None,
    ids: np.ndarray | None = None,
    kind: str = "exact",
    nprobe: int = 16,
    embed: Callable[[np.ndarray], np.ndarray] | None = None,
    device: str = "cpu",
) -> IndexedGallery:
    """Embed ``x`` with ``learner`` (gallery role) and index it with :func:`make_index` (on
    ``device``);
    ``embed(x)`` embeds instead when given (the service paces a large gallery's embedding in
    slices). The embeddings come back with the index: evaluation reports their spread, and the
    service's questions are chosen from them.

    >>> from oahu.registry import make_learner
    >>> x = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    >>> gallery = index_gallery(make_learner("euclidean", 2), x, labels=np.array([3, 4]))
    >>> gallery.index.n_items, gallery.index.search(x[None, :1], k=1)[1].tolist()
    (2, [[[0]]])
    >>> gallery.embeddings.shape
    (1, 2, 2)
    """
    emb = learner.embed(x, role="gallery") if embed is None else embed(x)
    return IndexedGallery(emb, make_index(kind, emb, labels, learner.metric, ids, nprobe, device))
