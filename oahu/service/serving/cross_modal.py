"""Serving a cross-modal model: its snapshot (a gallery per modality) and the API's endpoints.

A snapshot of a cross-modal model (``CrossModalOAHU``) holds a private copy of the model and a
:class:`~oahu.inference.cross_modal.CrossModalGallery`: each modality's gallery embedded into the
shared space (a faiss flat L2 index) and coded at the model's chosen code length (a faiss binary
index: Hamming ranking by XOR and popcount). It is built and published like a single-modality
snapshot (:class:`~oahu.service.serving.snapshot.SnapshotPublisher`, one reference swap), so a
query never sees a half-updated model.

Queries name the modality of their items and of the gallery they search: ``from`` and ``to``.
An item is given inline (``x``, as many features as its modality has) or by ``id`` (the item
store of its modality). The endpoints:

- ``POST /v1/retrieve``: the ``k`` nearest items of ``to``'s gallery to each item of ``from``,
  by the learned distance, or by Hamming distance of the binary codes with ``hamming``;
- ``POST /v1/verify``: whether each pair (left in ``from``, right in ``to``) is linked;
- ``POST /v1/classify``: the majority label of the ``k`` nearest items of ``to``'s gallery;
- ``POST /v1/embed``: points in the shared space and packed binary codes (hex);
- ``POST /v1/suggest``: cross-modal questions chosen by joint entropy over the galleries
  (CSLP's active sampling), pairs ("are they linked?") by default, or preferences ("is the
  anchor closer to first or to second?"), or both competing; an answer goes back to the stream
  as a pair or triplet message whose items name their modalities;
- ``POST/DELETE /v1/items`` with a ``modality``: add items to that modality's store (and
  gallery), or remove them (:class:`~oahu.service.modal_catalog.ModalCatalog`, durable, and
  applied by the learner process before the answer, as for one modality).

The model embeds in the calling thread under one lock per snapshot: one query at a time, as the
single-modality query worker answers them, without its batching across requests.

No ``from __future__ import annotations`` here: FastAPI reads the handlers' annotations, and
the request bodies are classes made per app.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from oahu.connectors.constraint import MISSING_LABEL, DecodeError
from oahu.inference.cross_modal import CrossModalGallery, Retrieved
from oahu.learners.cross_modal.learner import CrossModalOAHU
from oahu.persistence import learner_from_bytes
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.serving.answering import label_value
from oahu.service.serving.inputs import (
    INT64_MAX,
    MAX_SUGGEST_BATCH,
    Feature,
    ItemId,
    Label,
    Whole,
    invalid,
)
from oahu.service.serving.snapshot import GALLERY_SLICE

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView

__all__ = [
    "CrossModalSnapshot",
    "add_cross_modal_routes",
    "build_cross_modal_snapshot",
    "snapshot_builds",
]

_STRICT = ConfigDict(extra="forbid", strict=True)
Modality = Annotated[str, Field(min_length=1, max_length=64, description="a modality's name")]


@dataclass(frozen=True)
class CrossModalSnapshot:
    """An immutable view of a cross-modal model and its galleries, one per modality.

    The fields a single-modality snapshot has that the service reads for every model
    (``version``, ``updates``, ``created``, ``alpha``, ``gallery_ids``, ``meta``) mean the same.
    """

    learner: CrossModalOAHU
    gallery: CrossModalGallery
    gallery_ids: np.ndarray  # every modality's gallery ids, for the gallery's size
    version: int
    updates: int
    created: float
    gallery_version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    @property
    def alpha(self) -> np.ndarray:
        return self.learner.alpha

    def meta(self) -> dict[str, Any]:
        return {"snapshot": self.version, "updates": self.updates}


def build_cross_modal_snapshot(
    state: bytes | CrossModalOAHU,
    catalog: ModalCatalog,
    version: int,
    rest: Callable[[float], None] | None = None,
) -> CrossModalSnapshot:
    """Read the model from ``state`` (or reuse one at hand) and index every modality's gallery
    of ``catalog`` with it, ``GALLERY_SLICE`` items at a time, calling ``rest(seconds the
    slice took)`` after each (the builder's pacing, as for one modality)."""
    model = state if isinstance(state, CrossModalOAHU) else learner_from_bytes(state)[0]
    if not isinstance(model, CrossModalOAHU):
        raise ValueError(f"learner: a cross-modal model expected, got {model.name!r}")
    gallery_version = catalog.gallery_version  # read first: a change meanwhile looks stale
    gallery = CrossModalGallery(model)
    ids = []
    for modality, store in catalog.items.galleries.items():
        keys, x, y = store.snapshot()
        ids += keys
        # a slice at a time, resting between: a rebuild's bursts of CPU stay short
        for start in range(0, len(keys), GALLERY_SLICE):
            started = time.perf_counter()
            part = slice(start, start + GALLERY_SLICE)
            gallery.add(modality, keys[part], x[part], y[part])
            if rest is not None:
                rest(time.perf_counter() - started)
    id_array = np.empty(len(ids), dtype=object)
    id_array[:] = ids
    return CrossModalSnapshot(
        model, gallery, id_array, version, model.updates, time.time(), gallery_version
    )


def snapshot_builds(catalog: ModalCatalog | None) -> dict[str, Any]:
    """The :class:`~oahu.service.serving.snapshot.SnapshotPublisher` arguments that make it
    build cross-modal snapshots of ``catalog``'s galleries, and watch their version; none for a
    single-modality service (``catalog`` None)."""
    if catalog is None:
        return {}
    return {
        "build": lambda state, version, rest: build_cross_modal_snapshot(
            state, catalog, version, rest
        ),
        "gallery_version": lambda: catalog.gallery_version,
    }


# ---------------------------------------------------------------------- request bodies
class ItemRef(BaseModel):
    """An item given inline (``x``: its modality's features) or by ``id`` (its modality's item
    store): exactly one."""

    model_config = ConfigDict(
        **_STRICT, json_schema_extra={"oneOf": [{"required": ["id"]}, {"required": ["x"]}]}
    )
    id: ItemId | None = None
    x: list[Feature] | None = None


@dataclass(frozen=True)
class _Bodies:
    """The request bodies of one app, whose lists hold at most ``--max-batch-items``."""

    Retrieve: type[BaseModel]
    Classify: type[BaseModel]
    Verify: type[BaseModel]
    Embed: type[BaseModel]
    AddItems: type[BaseModel]
    RemoveItems: type[BaseModel]


def _bodies(max_items: int) -> _Bodies:
    def batch(what: str) -> Any:
        return Field(min_length=1, max_length=max_items, description=f"1 to {max_items} {what}")

    class FromTo(BaseModel):
        model_config = ConfigDict(**_STRICT, populate_by_name=True)
        from_: Modality = Field(alias="from", description="the modality of the query items")
        to: Modality = Field(description="the modality of the gallery searched")

    class RetrieveQuery(FromTo):
        items: list[ItemRef] = batch("items")
        k: Annotated[int, Field(ge=1, le=1000), Whole] | None = None
        hamming: bool = Field(False, description="rank by Hamming distance of the binary codes")

    class ClassifyQuery(FromTo):
        items: list[ItemRef] = batch("items")
        k: Annotated[int, Field(ge=1, le=1000), Whole] | None = None

    class Pair(BaseModel):
        model_config = _STRICT
        left: ItemRef
        right: ItemRef

    class VerifyQuery(FromTo):
        pairs: list[Pair] = batch("pairs")

    class EmbedQuery(BaseModel):
        model_config = _STRICT
        modality: Modality
        items: list[ItemRef] = batch("items")

    class NewItem(BaseModel):
        model_config = _STRICT
        id: ItemId
        x: list[Feature]
        label: Label | None = Field(None, description="class label (int64, not -2^63)")

    class AddItems(BaseModel):
        model_config = _STRICT
        modality: Modality
        items: list[NewItem] = batch("items")
        gallery: bool = Field(True, description="also add the items to the gallery (needs labels)")

    class RemoveItems(BaseModel):
        model_config = _STRICT
        modality: Modality
        ids: list[ItemId] = batch("ids")

    return _Bodies(RetrieveQuery, ClassifyQuery, VerifyQuery, EmbedQuery, AddItems, RemoveItems)


class SuggestQuery(BaseModel):
    model_config = _STRICT
    batch: Annotated[int, Field(ge=1, le=MAX_SUGGEST_BATCH), Whole]
    kinds: Literal["pairs", "triplets", "both"] = Field(
        "pairs",
        description="pairs (are the two linked?), triplets (is the anchor closer to first or "
        "to second?) or both, competing: pairs by default, which taught more per answer on "
        "development data (docs/cross-modal.md)",
    )
    seed: Annotated[int, Field(ge=0, lt=INT64_MAX + 1), Whole] | None = None


# ---------------------------------------------------------------------- the endpoints
def add_cross_modal_routes(app: FastAPI, view: "ServiceView", catalog: ModalCatalog) -> None:
    """The query and item endpoints of the cross-modal service ``view`` on ``app``, over the
    items of ``catalog``: ``k`` and ``max_batch_items`` come from its settings, the snapshot
    from its publisher."""
    # here: the API module mounts these routes, and must not be imported while it loads
    from oahu.service.serving.api import _responses, write_guards

    config = view.config
    bodies = _bodies(config.max_batch_items)
    queries = {"responses": _responses(413, 415, 503)}
    writes = {"dependencies": write_guards(view)}
    items = catalog.items
    k_default = config.k

    def snapshot() -> CrossModalSnapshot:
        snap = view.publisher.current
        if not isinstance(snap, CrossModalSnapshot):
            raise HTTPException(503, "no model snapshot published yet")
        return snap

    def modality(name: str, loc: str) -> str:
        if name not in items.stores:
            raise invalid((loc,), f"unknown modality {name!r}; this model has {items.modalities}")
        return name

    def features(refs: list[ItemRef], name: str, loc: tuple[Any, ...]) -> np.ndarray:
        """The features of ``refs`` in modality ``name``; 422 naming the item at ``loc``."""
        dim = items.dims[name]
        out = np.empty((len(refs), dim), dtype=np.float32)
        for i, ref in enumerate(refs):
            where = (*loc[:1], i, *loc[1:])
            if (ref.id is None) == (ref.x is None):
                raise invalid(where, "give exactly one of 'id' and 'x'")
            if ref.x is not None:
                if len(ref.x) != dim:
                    raise invalid(
                        (*where, "x"), f"modality {name!r} has {dim} features, got {len(ref.x)}"
                    )
                out[i] = ref.x
            else:
                x, found = items.lookup(name, [ref.id])
                if not found[0]:
                    raise invalid((*where, "id"), f"unknown item id {ref.id!r} in {name!r}")
                out[i] = x[0]
        return out

    def model_meta(snap: CrossModalSnapshot) -> dict[str, Any]:
        return {**snap.meta(), "code_bits": snap.gallery.bits}

    def points(
        snap: CrossModalSnapshot, x: np.ndarray, name: str, loc: tuple[Any, ...]
    ) -> np.ndarray:
        """``x``'s points in the shared space (under the snapshot's lock); 422 naming the
        first item whose point is not finite (finite features near float32's limits can
        overflow the model's arithmetic, and NaN is not JSON)."""
        with snap.lock:
            out = snap.learner.embed(x, name)
        bad = ~np.isfinite(out).all(axis=1)
        if bad.any():
            where = (*loc[:1], int(np.argmax(bad)), *loc[1:])
            raise invalid(where, "the model's embedding of this item is not finite: its "
                          "features are too large")  # fmt: skip
        return out

    def nearest(body: Any, hamming: bool = False) -> tuple[Retrieved, CrossModalSnapshot]:
        """The ``k`` nearest items of ``body.to``'s gallery to each of ``body.items``."""
        from_, to = modality(body.from_, "from"), modality(body.to, "to")
        x = features(body.items, from_, ("items",))
        snap = snapshot()
        if not snap.gallery.size(to):
            raise HTTPException(503, f"the gallery of modality {to!r} is empty")
        queries = points(snap, x, from_, ("items",))
        with snap.lock:
            return snap.gallery.search(queries, to, body.k or k_default, hamming), snap

    @app.post("/v1/retrieve", summary="The k nearest items of one modality's gallery", **queries)
    def retrieve(body: bodies.Retrieve) -> JSONResponse:
        found, snap = nearest(body, body.hamming)
        results = [
            [
                {"id": str(i), "label": label_value(y), "distance": float(d)}
                for i, y, d in zip(ids, labels, distances, strict=True)
            ]
            for ids, labels, distances in zip(
                found.ids.tolist(), found.labels.tolist(), found.distances.tolist(), strict=True
            )
        ]
        ranking = "hamming" if body.hamming else "learned"
        return JSONResponse({"results": results, "ranking": ranking, "model": model_meta(snap)})

    @app.post(
        "/v1/classify", summary="Majority label of the k nearest items of a gallery", **queries
    )
    def classify(body: bodies.Classify) -> JSONResponse:
        found, snap = nearest(body)
        predictions = []
        for labels in found.labels:
            classes, votes = np.unique(labels[labels >= 0], return_counts=True)
            shares = votes / max(1, votes.sum())
            predictions.append(
                {
                    "label": int(classes[np.argmax(votes)]) if len(classes) else None,
                    "scores": {str(c): float(s) for c, s in zip(classes, shares, strict=True)},
                }
            )
        return JSONResponse({"predictions": predictions, "model": model_meta(snap)})

    @app.post("/v1/verify", summary="Are the items of each pair (from, to) linked?", **queries)
    def verify(body: bodies.Verify) -> JSONResponse:
        from_, to = modality(body.from_, "from"), modality(body.to, "to")
        left = features([p.left for p in body.pairs], from_, ("pairs", "left"))
        right = features([p.right for p in body.pairs], to, ("pairs", "right"))
        snap = snapshot()
        distance, linked = CrossModalGallery.compare(
            points(snap, left, from_, ("pairs", "left")),
            points(snap, right, to, ("pairs", "right")),
        )
        results = [
            {"similar": bool(s), "distance": float(d)}
            for s, d in zip(linked.tolist(), distance.tolist(), strict=True)
        ]
        return JSONResponse({"results": results, "model": model_meta(snap)})

    @app.post(
        "/v1/embed", summary="Points in the shared space and binary codes of items", **queries
    )
    def embed(body: bodies.Embed) -> JSONResponse:
        name = modality(body.modality, "modality")
        x = features(body.items, name, ("items",))
        snap = snapshot()
        embedded = points(snap, x, name, ("items",))
        codes = snap.learner.binary_codes.encode(embedded, snap.gallery.bits)
        return JSONResponse(
            {
                "embeddings": embedded.tolist(),
                "codes": [row.tobytes().hex() for row in codes],
                "code_bits": snap.gallery.bits,
                "alpha": snap.alpha.tolist(),
                "model": model_meta(snap),
            }
        )

    @app.post(
        "/v1/suggest",
        summary="Cross-modal questions whose answers would teach the model most",
        description="Are the two items linked (pairs)? Is the anchor closer to first or to "
        "second (triplets)? Each answer goes back to the input stream as a pair or triplet "
        "message whose items name their modalities. Questions are chosen by joint entropy "
        "over the two galleries (CSLP's active sampling).",
        responses=_responses(401, 413, 415, 503),
        **writes,
    )
    def suggest(body: SuggestQuery) -> JSONResponse:
        seed = int(np.random.default_rng().integers(INT64_MAX)) if body.seed is None else body.seed
        snap = snapshot()
        started = time.perf_counter()
        try:
            with snap.lock:
                questions = snap.gallery.suggest(body.batch, seed=seed, kinds=body.kinds)
        except ValueError as exc:  # fewer than two galleries with items
            raise HTTPException(503, str(exc)) from None
        suggestions = [
            {
                "kind": "pair",
                "left": {"id": str(anchor), "modality": src},
                "right": {"id": str(first), "modality": dst},
            }
            if second is None
            else {
                "kind": "triplet",
                "anchor": {"id": str(anchor), "modality": src},
                "first": {"id": str(first), "modality": dst},
                "second": {"id": str(second), "modality": dst},
            }
            for src, anchor, dst, first, second in questions
        ]
        view.metrics.suggestions.labels(strategy="joint-entropy").inc(len(suggestions))
        return JSONResponse(
            {
                "suggestions": suggestions,
                "seed": seed,
                "model": model_meta(snap),
                "seconds": time.perf_counter() - started,
            }
        )

    @app.post(
        "/v1/items",
        summary="Add items of one modality to its store (and gallery)",
        responses=_responses(401, 403, 413, 415),
        **writes,
    )
    def add_items(body: bodies.AddItems) -> dict[str, Any]:
        name = modality(body.modality, "modality")
        ids = [item.id for item in body.items]
        if len(set(ids)) != len(ids):
            raise invalid(("items",), "duplicate ids")
        dim = items.dims[name]
        for i, item in enumerate(body.items):
            if body.gallery and item.label is None:
                raise invalid(("items", i, "label"), "gallery items need a label")
            if len(item.x) != dim:
                raise invalid(
                    ("items", i, "x"), f"modality {name!r} has {dim} features, got {len(item.x)}"
                )
        x = np.array([item.x for item in body.items], dtype=np.float32)
        labels = [MISSING_LABEL if item.label is None else item.label for item in body.items]
        try:
            version = catalog.add(name, ids, x, np.array(labels, np.int64), gallery=body.gallery)
        except (ValueError, DecodeError) as exc:
            raise invalid(("items",), str(exc)) from None
        view.publisher.gallery_changed()
        view.items_synced(version)  # constraints sent after this answer may name the new ids
        return {"added": len(ids), "modality": name, "items_version": version}

    @app.delete(
        "/v1/items",
        summary="Remove items of one modality from its store and gallery",
        responses=_responses(401, 403, 404, 413, 415),
        **writes,
    )
    def remove_items(body: bodies.RemoveItems) -> dict[str, Any]:
        name = modality(body.modality, "modality")
        try:
            removed, version = catalog.remove(name, body.ids)
        except DecodeError as exc:
            raise HTTPException(404, exc.detail) from None
        view.publisher.gallery_changed()
        view.items_synced(version)
        return {"removed": removed, "modality": name, "items_version": version}
