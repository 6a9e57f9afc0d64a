"""Answering queries from the query worker, shared by the API's endpoints and the console: the
worker's errors as HTTP answers, and retrieval results as gallery ids, labels and scores.

The console's retrieval explorer answers with the same code as ``POST /v1/retrieve``, so that
the neighbours it shows are the ones the API gives for the same item and snapshot.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from fastapi import HTTPException

from oahu.connectors.constraint import MISSING_LABEL
from oahu.service.serving.inputs import invalid
from oahu.service.serving.queries import NotFinite, NotReady, QueryEngine
from oahu.service.serving.snapshot import Snapshot

__all__ = ["ask", "label_value", "neighbour_lists"]


async def ask(
    engine: QueryEngine, op: str, x: np.ndarray, param: Any, loc: str | tuple[Any, ...] = "items"
) -> tuple[Any, Snapshot]:
    """The query worker's answer to ``op`` on the rows ``x`` with ``param`` (``k``, a
    threshold) and the snapshot that gave it.

    Raises 503 when there is no snapshot yet (or the gallery the operation reads is empty), and
    a 422 when the model's embedding of a row is not finite, naming where that row came from:
    ``(loc, row)`` for a field ``loc`` that lists the rows, or ``loc`` itself for a tuple (the
    field of a body's one item).
    """
    try:
        return await asyncio.wrap_future(engine.submit(op, x, param))
    except NotReady as exc:
        raise HTTPException(503, str(exc)) from None
    except NotFinite as exc:  # finite features can still overflow the model's arithmetic
        msg = "the model's embedding of this item is not finite: its features are too large"
        where = (loc, exc.rows[0]) if isinstance(loc, str) else loc
        raise invalid(where, msg) from None


def neighbour_lists(out: dict[str, Any], snap: Snapshot) -> list[list[dict[str, Any]]]:
    """The ``"retrieve"`` answer ``out`` (gallery ``positions`` and ``scores`` per query, -1
    where the gallery has fewer items) as ``POST /v1/retrieve`` writes it: per query, its
    neighbours best first, each ``{"id", "label", "score"}``.

    >>> from types import SimpleNamespace
    >>> snap = SimpleNamespace(gallery_ids=np.array(["a", "b"], dtype=object),
    ...                        index=SimpleNamespace(labels=np.array([3, MISSING_LABEL])))
    >>> out = {"positions": [np.array([1, 0, -1])], "scores": [np.array([0.9, 0.5, 0.0])]}
    >>> neighbour_lists(out, snap)
    [[{'id': 'b', 'label': None, 'score': 0.9}, {'id': 'a', 'label': 3, 'score': 0.5}]]
    """
    ids = snap.gallery_ids
    labels = snap.index.labels  # type: ignore[union-attr]  # a retrieval had a gallery
    results = []
    for positions, scores in zip(out["positions"], out["scores"], strict=True):
        found = positions >= 0
        results.append(
            [
                {"id": str(ids[p]), "label": label_value(labels[p]), "score": float(s)}
                for p, s in zip(positions[found].tolist(), scores[found].tolist(), strict=True)
            ]
        )
    return results


def label_value(value: Any) -> int | None:
    """A stored label as the API writes it: an int, or None for an item without one.

    >>> label_value(np.int64(3)), label_value(MISSING_LABEL)
    (3, None)
    """
    return None if int(value) == MISSING_LABEL else int(value)
