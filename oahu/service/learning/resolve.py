"""Turn decoded constraints into feature vectors a learner can consume.

Items by id are looked up in an ``ItemStore``; inline items are checked against the expected
feature dimension. Finiteness of inline vectors is checked when decoding, and the store only
holds finite features, so a resolved constraint is always finite. Every kind resolves the same
way, item by item in role order (2 items for a pair, 3 for a triplet, 4 for a quadruplet);
whether the learner learns the kind is the learn loop's question, not the resolver's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oahu.connectors.constraint import ConstraintBatch, DecodeError
from oahu.service.item_store import ItemStore

__all__ = ["ResolvedBatch", "resolve_batch"]


@dataclass(frozen=True, eq=False)
class ResolvedBatch:
    """Constraints of one kind with their features: ``x`` float32 (n, n_items, dim), items in
    the order of ``ROLES[kind]``, so ``x[:, 0], x[:, 1], x[:, 2]`` are anchors, positives,
    negatives (``x[:, 0], x[:, 1]`` left, right for pairs; ``x[:, 0]`` to ``x[:, 3]`` a, b, c,
    d for quadruplets, D(a, b) < D(c, d)). Other fields as in ``ConstraintBatch`` (``ids`` None
    for inline items); ``index`` maps rows back to the decoded input."""

    kind: str
    index: np.ndarray
    x: np.ndarray
    ids: np.ndarray | None = None
    labels: np.ndarray | None = None
    similar: np.ndarray | None = None
    ts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.index)


def _expected_dim(store: ItemStore | None, dim: int | None) -> int | None:
    if dim is not None and store is not None and store.dim not in (None, dim):
        raise ValueError(f"dim: {dim} differs from the item store's dimension {store.dim}")
    return dim if dim is not None else (store.dim if store is not None else None)


def resolve_batch(
    batch: ConstraintBatch, store: ItemStore | None = None, dim: int | None = None
) -> tuple[ResolvedBatch | None, list[tuple[int, DecodeError]]]:
    """Resolve a batch; rows that fail become (input index, error) pairs instead of raising.

    Returns None for the batch when no row survives.

    >>> store = ItemStore(dim=1)
    >>> store.add(["1", "2", "3"], [[1], [2], [3]])
    >>> quads = ConstraintBatch("quadruplet", index=np.array([5, 6]),
    ...                         ids=np.array([[1, 2, 1, 3], [1, 2, 9, 3]]))
    >>> resolved, errors = resolve_batch(quads, store)
    >>> resolved.index.tolist(), resolved.x[..., 0].tolist(), [(i, e.reason) for i, e in errors]
    ([5], [[1.0, 2.0, 1.0, 3.0]], [(6, 'unknown_item')])
    """
    expected = _expected_dim(store, dim)
    n, k = len(batch), batch.n_items
    if batch.x is not None:
        if expected is not None and batch.x.shape[2] != expected:
            error = DecodeError(
                "bad_dimension", f"items have dim {batch.x.shape[2]}, expected {expected}"
            )
            return None, [(int(i), error) for i in batch.index]
        x, ok = batch.x, np.ones(n, dtype=bool)
    elif store is None:
        error = DecodeError("unknown_item", "items by id, but no item store to resolve them")
        return None, [(int(i), error) for i in batch.index]
    else:
        assert batch.ids is not None
        flat, found = store.get_many(batch.ids.reshape(-1))
        x = flat.reshape(n, k, -1)
        ok = found.reshape(n, k).all(axis=1)
    errors = [
        (int(i), DecodeError("unknown_item", f"unknown item id(s) {batch.ids[r].tolist()}"))
        for r, i in zip(np.flatnonzero(~ok), batch.index[~ok], strict=True)
    ]  # only id batches can have rows that are not ok
    if not ok.any():
        return None, errors

    if ok.all():
        kept = batch
    else:
        kept, x = batch.take(ok), x[ok]
    resolved = ResolvedBatch(kept.kind, kept.index, x, kept.ids, kept.labels, kept.similar, kept.ts)
    return resolved, errors
