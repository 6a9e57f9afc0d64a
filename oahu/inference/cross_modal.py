"""Queries across modalities: a gallery per modality, searched from items of any modality by
the learned distance or by Hamming distance of the binary codes.

:class:`CrossModalGallery` holds, for every modality, the gallery's ids, labels, points in the
shared space (``CrossModalOAHU.embed``: squared Euclidean distance is the learned distance) and
packed codes at one length. ``retrieve`` takes query items of one modality (``from_``) and
ranks the gallery of another (``to``): by the learned distance through a faiss flat index, or by
Hamming distance through a faiss binary flat index (XOR and popcount). ``verify`` scores pairs
of items of two modalities. What one item is (features of its modality) and how it is embedded
stay the model's business; the gallery only searches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.learners.cross_modal.loss import PAIR_THRESHOLD

__all__ = ["CrossModalGallery", "Retrieved"]


@dataclass(frozen=True)
class Retrieved:
    """The ``k`` nearest gallery items of each query: ``ids`` (m, k), ``labels`` (m, k) and
    ``distances`` (m, k), squared learned distances or Hamming distances (int)."""

    ids: np.ndarray
    labels: np.ndarray
    distances: np.ndarray


@dataclass
class _Part:
    ids: np.ndarray
    labels: np.ndarray
    points: Any  # faiss.IndexFlatL2
    codes: Any  # faiss.IndexBinaryFlat


class CrossModalGallery:
    """The galleries of a cross-modal model, one per modality.

    Parameters
    ----------
    model : the cross-modal model whose space and codes are searched.
    bits : the code length of Hamming search (default: the model's chosen length).

    >>> rng = np.random.default_rng(0)
    >>> model = CrossModalOAHU({"img": 6, "txt": 4}, embedding_dim=4, hidden_width=8)
    >>> model.prepare("img", rng.normal(size=(30, 6)))
    >>> model.prepare("txt", rng.normal(size=(30, 4)))
    >>> gallery = CrossModalGallery(model, bits=16)
    >>> gallery.add("txt", ["t0", "t1", "t2"], rng.normal(size=(3, 4)), labels=[0, 1, 1])
    >>> found = gallery.retrieve(rng.normal(size=(2, 6)), from_="img", to="txt", k=2)
    >>> found.ids.shape, found.distances.dtype.kind
    ((2, 2), 'f')
    >>> gallery.retrieve(rng.normal(size=(1, 6)), "img", "txt", k=3, hamming=True).ids.shape
    (1, 3)
    """

    def __init__(self, model: CrossModalOAHU, bits: int | None = None) -> None:
        self.model = model
        self.bits = model.chosen_bits if bits is None else int(bits)
        if self.bits not in model.binary_codes.lengths:
            raise ValueError(f"bits: one of {model.binary_codes.lengths}, got {bits!r}")
        dim = model.n_depths * model.embedding_dim
        self._parts = {
            m: _Part(
                np.empty(0, dtype=object),
                np.empty(0, dtype=np.int64),
                faiss.IndexFlatL2(dim),
                faiss.IndexBinaryFlat(self.bits),
            )
            for m in model.modalities
        }

    def __len__(self) -> int:
        return sum(len(part.ids) for part in self._parts.values())

    def size(self, modality: str) -> int:
        """Items in ``modality``'s gallery."""
        return len(self._part(modality, "modality").ids)

    def _part(self, modality: str, field: str) -> _Part:
        if modality not in self._parts:
            raise ValueError(f"{field}: one of {tuple(self._parts)}, got {modality!r}")
        return self._parts[modality]

    def add(
        self,
        modality: str,
        ids: Sequence[Any],
        x: np.ndarray,
        labels: Sequence[int] | None = None,
    ) -> None:
        """Add items of ``modality`` (their features, one row each) to its gallery. An item the
        model cannot embed (a point that is not finite: features near float32's limits overflow
        its arithmetic) is left out, since no distance to it is defined."""
        part = self._part(modality, "modality")
        points = self.model.embed(x, modality)
        if len(ids) != len(points):
            raise ValueError(f"ids: one per item, got {len(ids)} for {len(points)} items")
        finite = np.isfinite(points).all(axis=1)
        points = points[finite]
        codes = self.model.binary_codes.encode(points, self.bits)
        part.points.add(np.ascontiguousarray(points, dtype=np.float32))
        part.codes.add(codes)
        part.ids = np.concatenate([part.ids, np.asarray(list(ids), dtype=object)[finite]])
        missing = np.full(len(finite), -1) if labels is None else np.asarray(labels)
        part.labels = np.concatenate([part.labels, missing.astype(np.int64)[finite]])

    def retrieve(
        self, x: np.ndarray, from_: str, to: str, k: int = 10, hamming: bool = False
    ) -> Retrieved:
        """The ``k`` nearest items of ``to``'s gallery to each query item of ``from_``."""
        self._part(from_, "from")
        return self.search(self.model.embed(x, from_), to, k, hamming)

    def search(self, points: np.ndarray, to: str, k: int = 10, hamming: bool = False) -> Retrieved:
        """The ``k`` nearest items of ``to``'s gallery to each of ``points`` (items already
        embedded by the model, of any modality)."""
        if int(k) < 1:
            raise ValueError(f"k: a positive integer, got {k!r}")
        part = self._part(to, "to")
        points = np.ascontiguousarray(points, dtype=np.float32)
        k = min(int(k), len(part.ids))
        if not k:
            empty = np.empty((len(points), 0))
            return Retrieved(empty.astype(object), empty.astype(np.int64), empty)
        if hamming:
            codes = self.model.binary_codes.encode(points, self.bits)
            distances, found = part.codes.search(codes, k)
        else:
            distances, found = part.points.search(points, k)
        return Retrieved(part.ids[found], part.labels[found], distances)

    def suggest(
        self, batch: int, seed: int = 0, kinds: str = "pairs"
    ) -> list[tuple[str, Any, str, Any, Any | None]]:
        """``batch`` questions to label across the two galleries, chosen by joint entropy
        (:func:`oahu.experiments.cross_modal_active.cross_modal_questions`): each is
        ``(from, anchor id, to, first id, second id)``, a pair question "are the anchor and
        ``first`` linked?" when ``second`` is None, else "is the anchor closer to ``first`` or to
        ``second``?". Needs two modalities with items."""
        from oahu.experiments.cross_modal_active import cross_modal_questions

        filled = [m for m, part in self._parts.items() if len(part.ids)]
        if len(filled) < 2:
            raise ValueError(
                f"gallery: questions across modalities need items in two of them, got items in "
                f"{filled or 'none'}"
            )
        a, b = (self._parts[m] for m in filled[:2])
        points = tuple(p.points.reconstruct_n(0, p.points.ntotal) for p in (a, b))
        questions = cross_modal_questions(points, batch, np.random.default_rng(seed), kinds=kinds)
        n_a = len(a.ids)

        def item(position: int) -> tuple[str, Any]:
            return (
                (filled[0], a.ids[position])
                if position < n_a
                else (filled[1], b.ids[position - n_a])
            )

        out = []
        for anchor, first, second in questions:
            (src, anchor_id), (dst, first_id) = item(anchor), item(first)
            out.append((src, anchor_id, dst, first_id, None if second < 0 else item(second)[1]))
        return out

    def verify(
        self, x: np.ndarray, y: np.ndarray, from_: str, to: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """For pairs (x[i] of ``from_``, y[i] of ``to``): the squared learned distance and
        whether the model deems them linked (below its pair threshold)."""
        return self.compare(self.model.embed(x, from_), self.model.embed(y, to))

    @staticmethod
    def compare(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For pairs of points (a[i], b[i]) already embedded: the squared learned distance and
        whether the model deems them linked (below its pair threshold)."""
        if len(a) != len(b):
            raise ValueError(f"y: one item per item of x, got {len(b)} for {len(a)}")
        distance = ((a - b) ** 2).sum(axis=1)
        return distance, distance < PAIR_THRESHOLD
