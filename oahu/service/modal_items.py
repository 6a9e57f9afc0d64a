"""The items of a cross-modal service: an item store and a gallery per modality.

A service learns a cross-modal model (``CrossModalOAHU``) when its items come from a cross-modal
stream file (:mod:`oahu.streams.cross_modal`): the stream file it reads, or (a Kafka source, or
a file of messages) the file given as ``--items``. Every object of that file is an item of each
modality, by the same id (its index) in each, or, for linked objects (each modality its own
objects, :mod:`oahu.streams.linked`), by its index in its modality; the development objects,
with their labels (none for linked objects), are each modality's gallery. Constraints name
items by id and modality, and queries name the modality they search from and the one they
search in, so an id means nothing without its modality.

Both processes of the service build the same :class:`ModalItems` from the same file: the learner
process resolves the ids constraints name, the serving process those queries name and indexes
the galleries.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from oahu.connectors.constraint import MISSING_LABEL
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.service.config import ServiceConfig
from oahu.service.item_store import ItemStore
from oahu.streams.cross_modal import CrossModalStream, load_cross_modal_stream
from oahu.streams.stream_families import CROSS_MODAL_FORMAT

__all__ = ["ModalItems", "announces_cross_modal", "cross_modal_stream", "new_cross_modal_model"]


def announces_cross_modal(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` is a cross-modal stream file by its own word (the ``format``
    an .npz holds, or its JSON Lines header's): any other file, a missing one included, is not.

    >>> announces_cross_modal("no-such-file.npz")
    False
    """
    file = Path(path)
    try:
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as npz:
                return "format" in npz.files and str(npz["format"][()]) == CROSS_MODAL_FORMAT
        with open(file, encoding="utf-8", errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
        header = json.loads(first) if first else None
    except (OSError, ValueError, zipfile.BadZipFile):
        return False
    return isinstance(header, dict) and header.get("format") == CROSS_MODAL_FORMAT


def cross_modal_stream(config: ServiceConfig) -> CrossModalStream | None:
    """The cross-modal stream file whose items the service holds: the first of the source's
    file, ``--items`` and ``--gallery`` that is one (a Kafka source, a file of messages or a
    serving replica name it as ``--items`` or ``--gallery``); None when none is.

    A cross-modal model cannot be given its items any other way: it needs each modality's
    dimension, and items to fit each modality's preprocessing on, before the first constraint.
    """
    source = [config.file_path()] if config.source and not config.is_kafka else []
    for path in [*source, config.items, config.gallery]:
        if path is not None and announces_cross_modal(path):
            return load_cross_modal_stream(path)
    return None


@dataclass(frozen=True)
class ModalItems:
    """Item stores and galleries by modality (one ``ItemStore`` each).

    >>> from oahu.streams.cross_modal import PAIR
    >>> stream = CrossModalStream(
    ...     ("img", "txt"), (np.eye(3, dtype=np.float32), np.ones((3, 2), np.float32)),
    ...     y=[0, 0, 1], dev_idx=[0, 1], test_idx=[2], constraints=[[0, 1, -1]],
    ...     modality=[[0, 1, -1]], kinds=[PAIR], similar=[True])
    >>> items = ModalItems.from_stream(stream)
    >>> items.dims, len(items.stores["txt"]), items.galleries["img"].snapshot()[0]
    ({'img': 3, 'txt': 2}, 3, ['0', '1'])
    >>> items.lookup("img", ["2", "7"])[1].tolist()
    [True, False]

    Linked objects (:mod:`oahu.streams.linked`): each modality has objects of its own, by their
    index in that modality, and its own development objects as its gallery, without labels.

    >>> linked = CrossModalStream(
    ...     ("drug", "target"), (np.eye(4, dtype=np.float32), np.ones((2, 2), np.float32)),
    ...     y=None, dev_idx=[0, 1], test_idx=[2, 3], constraints=[[0, 1, -1]],
    ...     modality=[[0, 1, -1]], kinds=[PAIR], similar=[True], links=[[0, 1], [2, 0]],
    ...     dev_idx_b=[1], test_idx_b=[0])
    >>> items = ModalItems.from_stream(linked)
    >>> items.dims, len(items.stores["drug"]), len(items.stores["target"])
    ({'drug': 4, 'target': 2}, 4, 2)
    >>> ids, _, labels = items.galleries["target"].snapshot()
    >>> ids, bool((labels == MISSING_LABEL).all())
    (['1'], True)
    """

    stores: dict[str, ItemStore]
    galleries: dict[str, ItemStore]

    @classmethod
    def from_stream(cls, stream: CrossModalStream) -> ModalItems:
        """Each modality's objects (ids: their indices in that modality) and development
        objects, with their labels (``MISSING_LABEL`` for linked objects, which have none)."""
        stores, galleries = {}, {}
        for m, (name, x) in enumerate(zip(stream.modalities, stream.X, strict=True)):
            labels = np.full(len(x), MISSING_LABEL, np.int64) if stream.y is None else stream.y
            dev = stream.dev_objects(m)
            stores[name] = ItemStore(dim=x.shape[1])
            stores[name].add(np.arange(len(x)), x, labels)
            galleries[name] = ItemStore(dim=x.shape[1])
            galleries[name].add(dev, x[dev], labels[dev])
        return cls(stores, galleries)

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(self.stores)

    @property
    def dims(self) -> dict[str, int]:
        """Each modality's feature dimension."""
        return {m: int(store.dim or 0) for m, store in self.stores.items()}

    def lookup(self, modality: str, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """Features of ``ids`` in ``modality`` and a bool mask of the ids found (the rows of the
        others are zero)."""
        return self.stores[modality].get_many(ids)


def new_cross_modal_model(items: ModalItems, seed: int = 0) -> CrossModalOAHU:
    """A new cross-modal model for ``items``' modalities, each modality's preprocessing fitted
    on its gallery's items (unlabelled), as ``oahu replay --cross-modal`` prepares one."""
    model = CrossModalOAHU(items.dims, seed=seed)
    for name, gallery in items.galleries.items():
        model.prepare(name, gallery.snapshot()[1])
    return model
