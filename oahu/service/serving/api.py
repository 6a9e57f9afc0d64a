"""The HTTP API (FastAPI): queries, item management, model status, health and metrics.

Items in a query are either inline (``{"x": [floats]}``) or references (``{"id": "17"}``) to the
item store (then the gallery). Malformed input is answered 4xx naming the offending field in
FastAPI's validation format (``{"detail": [{"loc": ["body", "items", 3, "x"], "msg": ...}]}``),
never 5xx. Request bodies larger than ``max_request_bytes`` get 413; write endpoints require the
bearer token when one is configured.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pydantic_core
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field, model_validator

from oahu.connectors.constraint import MISSING_LABEL, DecodeError
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.metrics import ServiceMetrics
from oahu.service.serving.http_limits import BodySizeLimit, RequestMetrics
from oahu.service.serving.queries import NotReady, QueryEngine
from oahu.service.serving.snapshot import SnapshotPublisher


# ---------------------------------------------------------------------- request bodies
class ItemRef(BaseModel):
    """An item given inline (``x``) or by ``id`` (item store, then gallery)."""

    model_config = ConfigDict(extra="forbid")
    id: str | int | None = Field(None, description="id of a stored item")
    x: list[float] | None = Field(None, description="feature vector", min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> ItemRef:
        if (self.id is None) == (self.x is None):
            raise ValueError("give exactly one of 'id' and 'x'")
        return self


class ItemsQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ItemRef] = Field(min_length=1)


class NeighbourQuery(ItemsQuery):
    k: int | None = Field(None, ge=1, le=1000, description="neighbours per depth")


class Pair(BaseModel):
    model_config = ConfigDict(extra="forbid")
    left: ItemRef
    right: ItemRef


class VerifyQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pairs: list[Pair] = Field(min_length=1)
    threshold: float = Field(0.5, description="T of Eq. 26")


class NewItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | int
    x: list[float] = Field(min_length=1)
    label: int | None = None


class AddItems(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[NewItem] = Field(min_length=1)
    gallery: bool = Field(True, description="also add the items to the gallery (needs labels)")


class RemoveItems(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str | int] = Field(min_length=1)


def invalid(loc: tuple[Any, ...], msg: str) -> RequestValidationError:
    """A 422 naming the offending field, in FastAPI's own format."""
    return RequestValidationError([{"loc": ("body", *loc), "msg": msg, "type": "value_error"}])


# ---------------------------------------------------------------------- JSON bodies
class _FastJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = pydantic_core.from_json(body)  # NaN and Infinity allowed, as json
            except ValueError as exc:  # FastAPI answers JSONDecodeError with its own 422
                raise json.JSONDecodeError(str(exc), body.decode(errors="replace"), 0) from None
        return self._json


class FastJSONRoute(APIRoute):
    """A route that parses JSON bodies with pydantic-core's parser: a query item is 784 floats
    for Fashion-MNIST (~16 kB), which ``json.loads`` takes 180 µs to read and pydantic-core
    30 µs (the same values)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(_FastJSONRequest(request.scope, request.receive))

        return handle


# ---------------------------------------------------------------------- the app
@dataclass
class ServiceView:
    """What the API needs from the running service: its settings (``config``: ``k``,
    ``max_batch_items``, ``max_request_bytes``, ``auth_token``), the model's input dimension,
    its parts and a few callbacks."""

    config: ServiceConfig
    n_features: int
    engine: QueryEngine
    publisher: SnapshotPublisher
    catalog: Catalog
    metrics: ServiceMetrics
    status: Callable[[], dict[str, Any]]  # model and stream status (/v1/model)
    readiness: Callable[[], dict[str, bool]]  # named checks, all True when ready
    healthy: Callable[[], bool]
    items_synced: Callable[[int], None]  # wait until the learner can resolve this item version


def create_app(view: ServiceView) -> FastAPI:
    """The FastAPI application serving ``view``."""
    app = FastAPI(
        title="oahu",
        version="1",
        description="Online metric learning served while it learns: kNN classification, "
        "verification and retrieval with the latest published model.",
    )
    app.router.route_class = FastJSONRoute  # for the routes declared below
    config = view.config
    app.add_middleware(BodySizeLimit, max_bytes=config.max_request_bytes)
    app.add_middleware(RequestMetrics, metrics=view.metrics)

    def features(items: list[ItemRef], loc: tuple[Any, ...]) -> np.ndarray:
        if len(items) > config.max_batch_items:
            raise invalid(loc, f"at most {config.max_batch_items} items per request")
        out = np.empty((len(items), view.n_features), dtype=np.float32)
        for i, item in enumerate(items):
            if item.x is not None:
                if len(item.x) != view.n_features:
                    msg = f"expected {view.n_features} features, got {len(item.x)}"
                    raise invalid((*loc, i, "x"), msg)
                out[i] = item.x
            else:
                out[i] = _lookup(view.catalog, str(item.id), (*loc, i, "id"))
        bad = ~np.isfinite(out).all(axis=1)
        if bad.any():
            raise invalid((*loc, int(np.argmax(bad)), "x"), "NaN or infinite value")
        return out

    async def answer(op: str, x: np.ndarray, param: Any) -> tuple[Any, Any]:
        try:
            return await asyncio.wrap_future(view.engine.submit(op, x, param))
        except NotReady as exc:
            raise HTTPException(503, str(exc)) from None

    def authorised(request: Request) -> None:
        if config.auth_token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token, config.auth_token):
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )

    # The query endpoints return a JSONResponse of plain values: that skips FastAPI's response
    # validation and jsonable_encoder, a recursive walk over every score that costs more than
    # encoding them.
    @app.post("/v1/embed", summary="Embeddings of items at every depth, with the hedge weights")
    async def embed(body: ItemsQuery) -> JSONResponse:
        emb, snap = await answer("embed", features(body.items, ("items",)), None)
        return JSONResponse(
            {
                "embeddings": emb.transpose(1, 0, 2).tolist(),  # (items, depths, dim)
                "alpha": snap.alpha.tolist(),
                "metric": snap.learner.metric,
                "model": snap.meta(),
            }
        )

    @app.post("/v1/classify", summary="kNN classification over all depths (Eq. 23-25)")
    async def classify(body: NeighbourQuery) -> JSONResponse:
        out, snap = await answer("classify", features(body.items, ("items",)), body.k or config.k)
        classes = [str(c) for c in out["classes"].tolist()]
        predictions = [
            {"label": int(label), "scores": dict(zip(classes, row, strict=True))}
            for label, row in zip(out["labels"].tolist(), out["scores"].tolist(), strict=True)
        ]
        return JSONResponse({"predictions": predictions, "model": snap.meta()})

    @app.post("/v1/retrieve", summary="The k most similar gallery items (Eq. 27)")
    async def retrieve(body: NeighbourQuery) -> JSONResponse:
        out, snap = await answer("retrieve", features(body.items, ("items",)), body.k or config.k)
        ids = snap.gallery_ids
        labels = snap.index.labels
        results = []
        for positions, scores in zip(out["positions"], out["scores"], strict=True):
            found = positions >= 0
            results.append(
                [
                    {"id": str(ids[p]), "label": _label(labels[p]), "score": float(s)}
                    for p, s in zip(positions[found].tolist(), scores[found].tolist(), strict=True)
                ]
            )
        return JSONResponse({"results": results, "model": snap.meta()})

    @app.post("/v1/verify", summary="Are the two items of each pair similar? (Eq. 26)")
    async def verify(body: VerifyQuery) -> JSONResponse:
        if len(body.pairs) > config.max_batch_items:
            raise invalid(("pairs",), f"at most {config.max_batch_items} pairs per request")
        left = features([p.left for p in body.pairs], ("pairs", "left"))
        right = features([p.right for p in body.pairs], ("pairs", "right"))
        out, snap = await answer("verify", np.stack([left, right]), float(body.threshold))
        results = [
            {"similar": bool(s), "vote": float(v), "score": float(c)}
            for s, v, c in zip(out["similar"], out["vote"], out["score"], strict=True)
        ]
        return JSONResponse({"results": results, "model": snap.meta()})

    @app.post(
        "/v1/items",
        summary="Add items to the item store (and the gallery)",
        dependencies=[Depends(authorised)],
    )
    def add_items(body: AddItems) -> dict[str, Any]:
        if len(body.items) > config.max_batch_items:
            raise invalid(("items",), f"at most {config.max_batch_items} items per request")
        ids = [str(item.id) for item in body.items]
        if len(set(ids)) != len(ids):
            raise invalid(("items",), "duplicate ids")
        for i, item in enumerate(body.items):
            if len(item.x) != view.n_features:
                msg = f"expected {view.n_features} features, got {len(item.x)}"
                raise invalid(("items", i, "x"), msg)
            if body.gallery and item.label is None:
                raise invalid(("items", i, "label"), "gallery items need a label")
        x = np.array([item.x for item in body.items], dtype=np.float32)
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise invalid(("items", int(np.argmax(bad)), "x"), "NaN or infinite value")
        labels = [MISSING_LABEL if item.label is None else item.label for item in body.items]
        version = view.catalog.add(ids, x, np.array(labels, dtype=np.int64), gallery=body.gallery)
        view.publisher.gallery_changed()
        view.items_synced(version)  # constraints sent after this answer may name the new ids
        return {"added": len(ids), "items_version": version}

    @app.delete(
        "/v1/items",
        summary="Remove items from the item store and the gallery",
        dependencies=[Depends(authorised)],
    )
    def remove_items(body: RemoveItems) -> dict[str, Any]:
        try:
            removed, version = view.catalog.remove([str(i) for i in body.ids])
        except DecodeError as exc:
            raise HTTPException(404, exc.detail) from None
        view.publisher.gallery_changed()
        view.items_synced(version)
        return {"removed": removed, "items_version": version}

    @app.get("/v1/model", summary="Learner, hedge weights, counters, stream and checkpoint")
    def model() -> dict[str, Any]:
        status = dict(view.status())
        written = status.get("checkpoint", {}).get("written_at")
        status["checkpoint"] = {
            **status.get("checkpoint", {}),
            "age_seconds": time.time() - written if written else None,
        }
        snap = view.publisher.current
        status["snapshot"] = (
            None
            if snap is None
            else {
                **snap.meta(),
                "created": snap.created,
                "gallery_items": len(snap.gallery_ids),
            }
        )
        status["items"] = {
            "store": len(view.catalog.items),
            "gallery": len(view.catalog.gallery),
            "version": view.catalog.version,
        }
        return status

    @app.get("/healthz", summary="Liveness: the learner thread is alive")
    def healthz() -> JSONResponse:
        ok = view.healthy()
        return JSONResponse({"status": "ok" if ok else "failed"}, status_code=200 if ok else 500)

    @app.get("/readyz", summary="Readiness: source connected and a model snapshot published")
    def readyz() -> JSONResponse:
        checks = view.readiness()
        ok = all(checks.values())
        view.metrics.ready.set(1 if ok else 0)
        return JSONResponse({"ready": ok, "checks": checks}, status_code=200 if ok else 503)

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=False)
    def metrics() -> Response:
        view.metrics.ready.set(1 if all(view.readiness().values()) else 0)
        view.metrics.store_items.set(len(view.catalog.items))
        return Response(view.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app


def _lookup(catalog: Catalog, item_id: str, loc: tuple[Any, ...]) -> np.ndarray:
    for store in (catalog.items, catalog.gallery):
        if item_id in store:
            try:
                return store.get([item_id])[0]
            except DecodeError:  # removed meanwhile
                break
    raise invalid(loc, f"unknown item id {item_id!r}")


def _label(value: Any) -> int | None:
    return None if int(value) == MISSING_LABEL else int(value)
