"""Learning decoded constraints with a cross-modal model: each item resolved in its modality.

A cross-modal model (``CrossModalOAHU``) has one input dimension per modality, so the learn loop
cannot stack a batch's items into one array as it does for a single-modality learner. Each item
is looked up by its id in its own modality's item store (:class:`~oahu.service.modal_items.
ModalItems`), or, inline, checked against its modality's dimension; then the rows are learned
one at a time, in order (the model learns in strict mode, one update per constraint).

A row is refused before anything is learned from it when its kind is not a pair or a triplet
(``unsupported_kind``), when an item is in a modality the model has no tower for, the default
one included (``unsupported_modality``), when an id is unknown in its modality
(``unknown_item``) or when an inline item has another dimension than its modality's
(``bad_dimension``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from oahu.connectors.constraint import (
    DEFAULT_MODALITY,
    ROLES,
    ConstraintBatch,
    DecodeError,
)
from oahu.connectors.dead_letter import UNSUPPORTED_KIND, UNSUPPORTED_MODALITY
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.service.learning.modalities import modality_detail
from oahu.service.modal_items import ModalItems

__all__ = ["CrossModalOutcome", "learn_cross_modal"]


@dataclass
class CrossModalOutcome:
    """What learning one decoded batch did: constraints ``learned`` and ``used`` (that changed
    the model), and the rows refused, by input index: ``errors`` (decode errors: unknown ids,
    wrong dimensions) and ``refused`` ((index, dead-letter reason, detail))."""

    learned: int = 0
    used: int = 0
    errors: list[tuple[int, DecodeError]] = field(default_factory=list)
    refused: list[tuple[int, str, str]] = field(default_factory=list)


def learn_cross_modal(
    model: CrossModalOAHU, batch: ConstraintBatch, items: ModalItems
) -> CrossModalOutcome:
    """Learn the rows of ``batch`` that resolve, in order; see the module docstring.

    >>> from oahu.streams.cross_modal import PAIR, CrossModalStream
    >>> rng = np.random.default_rng(0)
    >>> stream = CrossModalStream(
    ...     ("img", "txt"), (rng.normal(size=(4, 3)).astype(np.float32),
    ...                      rng.normal(size=(4, 2)).astype(np.float32)),
    ...     y=[0, 0, 1, 1], dev_idx=[0, 1, 2], test_idx=[3], constraints=[[0, 1, -1]],
    ...     modality=[[0, 1, -1]], kinds=[PAIR], similar=[True])
    >>> items = ModalItems.from_stream(stream)
    >>> model = CrossModalOAHU(items.dims, embedding_dim=2, hidden_width=4)
    >>> for m, g in items.galleries.items(): model.prepare(m, g.snapshot()[1])
    >>> batch = ConstraintBatch("pair", index=np.arange(3), ids=np.array([[0, 1], [0, 9], [2, 3]]),
    ...     similar=np.array([True, True, False]),
    ...     modalities=np.array([["img", "txt"], ["img", "txt"], ["img", "snd"]]))
    >>> out = learn_cross_modal(model, batch, items)
    >>> out.learned, [(i, e.reason) for i, e in out.errors], [r[:2] for r in out.refused]
    (1, [(1, 'unknown_item')], [(2, 'unsupported_modality')])
    """
    out = CrossModalOutcome()
    index = batch.index.tolist()
    if not model.capabilities.learns(batch.kind):
        detail = f"learner {model.name!r} does not learn from {batch.kind}s"
        out.refused = [(i, UNSUPPORTED_KIND, detail) for i in index]
        return out
    n, k = len(batch), batch.n_items
    names = (
        np.full((n, k), DEFAULT_MODALITY) if batch.modalities is None else batch.modalities
    ).astype(str)
    ok = np.ones(n, dtype=bool)
    roles = ROLES[batch.kind]
    for r in np.flatnonzero(~np.isin(names, model.modalities).all(axis=1)).tolist():
        ok[r] = False
        detail = modality_detail(model.name, roles, names[r].tolist(), model.modalities)
        out.refused.append((index[r], UNSUPPORTED_MODALITY, detail))
    features = _resolve(batch, names, items, ok, out)
    rows = np.flatnonzero(ok).tolist()
    changed = model.learn_many(
        batch.kind,
        [[f[r] for f in features] for r in rows],
        [names[r] for r in rows],
        None if batch.similar is None else [bool(batch.similar[r]) for r in rows],
    )
    out.learned, out.used = len(rows), int(changed.sum())
    return out


def _resolve(
    batch: ConstraintBatch,
    names: np.ndarray,
    items: ModalItems,
    ok: np.ndarray,
    out: CrossModalOutcome,
) -> list[list[np.ndarray | None]]:
    """Each role's item features, row by row (None where the row is not ``ok``); rows whose
    items do not resolve are marked not ``ok`` and their errors added to ``out``."""
    n, k = names.shape
    features: list[list[np.ndarray | None]] = [[None] * n for _ in range(k)]
    roles = ROLES[batch.kind]
    for j in range(k):
        for modality in np.unique(names[ok, j]).tolist():
            rows = np.flatnonzero(ok & (names[:, j] == modality))
            if batch.x is not None:
                dim = items.dims[modality]
                if batch.x.shape[2] != dim:
                    detail = (
                        f"{roles[j]}: items have dim {batch.x.shape[2]}, modality {modality!r} "
                        f"has {dim}"
                    )
                    _fail(rows, DecodeError("bad_dimension", detail), batch, ok, out)
                    continue
                x, found = batch.x[rows, j], np.ones(len(rows), dtype=bool)
            else:
                assert batch.ids is not None
                x, found = items.lookup(modality, batch.ids[rows, j])
            for r, row, hit in zip(rows.tolist(), x, found.tolist(), strict=True):
                if hit:
                    features[j][r] = row
            for r in rows[~found].tolist():
                unknown = str(batch.ids[r, j])  # type: ignore[index]  # only ids go unfound
                detail = f"{roles[j]}: unknown item id {unknown!r} in modality {modality!r}"
                _fail(np.array([r]), DecodeError("unknown_item", detail), batch, ok, out)
    return features


def _fail(
    rows: np.ndarray,
    error: DecodeError,
    batch: ConstraintBatch,
    ok: np.ndarray,
    out: CrossModalOutcome,
) -> None:
    for r in rows.tolist():
        if ok[r]:
            ok[r] = False
            out.errors.append((int(batch.index[r]), error))
