"""The HTTP API (FastAPI): queries, item management, model status, health and metrics.

Items in a query are either inline (``{"x": [floats]}``) or references (``{"id": "17"}``) to the
item store (then the gallery). Malformed input is answered 4xx naming the offending field in
FastAPI's validation format (``{"detail": [{"loc": ["body", "items", 3, "x"], "msg": ...}]}``),
never 5xx; what a body may hold is defined once, in :mod:`oahu.service.serving.inputs`. Request
bodies larger than ``max_request_bytes`` get 413, bodies not sent as JSON 415; write endpoints
require the bearer token when one is configured. A method a path does not accept gets 405 with
``Allow`` listing every method it does.

Answers are JSON built in the handler, except ``/v1/embed``'s: thousands of items at every depth
take ~200 ms to write as JSON, which is written in a worker thread, a slice of items at a time,
so that the event loop keeps answering other requests meanwhile (:func:`embed_json`).
"""

import asyncio
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import pydantic_core
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from oahu.connectors.constraint import MISSING_LABEL, DecodeError
from oahu.learner import MetricKind
from oahu.service.catalog import Catalog
from oahu.service.config import ServiceConfig
from oahu.service.console import add_console
from oahu.service.console.answer_sinks import AnswerSink
from oahu.service.console.history import LearningHistory
from oahu.service.metrics import ServiceMetrics
from oahu.service.modal_catalog import ModalCatalog
from oahu.service.serving.answering import ask, neighbour_lists
from oahu.service.serving.cross_modal import add_cross_modal_routes
from oahu.service.serving.http_limits import BodySizeLimit, RequestMetrics
from oahu.service.serving.inputs import (
    INT64_MAX,
    SuggestQuery,
    exact_integer_bounds,
    invalid,
    json_safe,
    request_models,
)
from oahu.service.serving.queries import NotReady, QueryEngine
from oahu.service.serving.snapshot import Snapshot, SnapshotPublisher
from oahu.service.serving.status_routes import add_status_routes
from oahu.service.serving.suggest import (
    Busy,
    PoolError,
    SuggestAnswer,
    Suggester,
    SuggestRequest,
)
from oahu.service.serving.suggestion_sink import suggestion_messages


# ---------------------------------------------------------------------- errors
class Detail(BaseModel):
    detail: str


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI descriptions of the error answers an endpoint gives besides 422."""
    return {code: {"model": Detail, "description": _ERRORS[code]} for code in codes}


_ERRORS = {
    401: "missing or wrong bearer token (only when the service has one)",
    403: "a serving replica (oahu serve) takes no writes: send them to the learner service",
    404: "none of the ids is known",
    413: "request body larger than --max-request-bytes",
    415: "the body was not sent as JSON (Content-Type: application/json)",
    503: "no model snapshot published yet, or the gallery is empty",
}


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
    its parts (``answers``: where the console's answers go) and a few callbacks."""

    config: ServiceConfig
    n_features: int
    engine: QueryEngine
    suggester: Suggester
    publisher: SnapshotPublisher
    catalog: Catalog
    metrics: ServiceMetrics
    status: Callable[[], dict[str, Any]]  # model and stream status (/v1/model)
    readiness: Callable[[], dict[str, str | None]]  # named checks: None if passing, else why
    healthy: Callable[[], bool]  # the answer path works
    learning: Callable[[], dict[str, Any]]  # the learner process: running, restarts, crash loop
    items_synced: Callable[[int], None]  # wait until the learner can resolve this item version
    history: LearningHistory  # the learner's reports, for the console's curves
    answers: AnswerSink
    read_only: str | None = None  # why writes are refused (a replica), None where they are not
    # a cross-modal model's items by modality (its queries name from/to), None for one modality
    modal_catalog: ModalCatalog | None = None


async def ask_suggester(view: ServiceView, request: SuggestRequest) -> SuggestAnswer:
    """The suggester's questions for ``request``: 503 without a snapshot or when too many
    requests wait, 422 naming what the pool cannot give."""
    try:
        return await asyncio.wrap_future(view.suggester.submit(request))
    except (NotReady, Busy) as exc:
        raise HTTPException(503, str(exc)) from None
    except PoolError as exc:
        raise RequestValidationError(
            [
                {"loc": ("body", *loc), "msg": msg, "type": "value_error"}
                | ({} if value is None else {"input": value})
                for loc, msg, value in exc.errors
            ]
        ) from None


def create_app(view: ServiceView) -> FastAPI:
    """The FastAPI application serving ``view``."""
    app = FastAPI(
        title="oahu",
        version="1",
        description="Online metric learning served while it learns: kNN classification, "
        "verification and retrieval with the latest published model.",
    )
    app.router.route_class = FastJSONRoute  # for the routes declared below
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(405, _method_not_allowed)
    openapi = app.openapi
    app.openapi = lambda: exact_integer_bounds(openapi())  # type: ignore[method-assign]
    config = view.config
    app.add_middleware(BodySizeLimit, max_bytes=config.max_request_bytes)
    app.add_middleware(RequestMetrics, metrics=view.metrics)
    if view.modal_catalog is None:
        _add_single_modality_routes(app, view)
    else:
        add_cross_modal_routes(app, view, view.modal_catalog)

    add_status_routes(app, view)
    if view.modal_catalog is None:  # the console draws one modality's items and questions
        add_console(app, view)
    return app


def _add_single_modality_routes(app: FastAPI, view: ServiceView) -> None:
    """The query, suggestion and item endpoints of a service whose model reads one modality."""
    config = view.config
    # What a body may hold (ids, finite numbers, n_features per vector, max_batch_items per
    # request) is checked by these models; the handlers check only what needs the service's
    # state (unknown ids, duplicates, labels for the gallery).
    models = request_models(view.n_features, config.max_batch_items)
    queries = {"responses": _responses(413, 415, 503)}
    writes = {"dependencies": write_guards(view)}

    def features(items: list[Any], loc: str, side: tuple[str, ...] = ()) -> np.ndarray:
        out = np.empty((len(items), view.n_features), dtype=np.float32)
        by_id = []
        for i, item in enumerate(items):
            if item.x is not None:
                out[i] = item.x  # finite and within float32's range: ``Feature``
            else:
                by_id.append(i)
        if by_id:
            x, found = view.catalog.lookup([items[i].id for i in by_id])
            if not found.all() or x.shape[1] != view.n_features:
                i = by_id[int(np.argmin(found))]
                what = "unknown item id" if not found.all() else "the model does not read item"
                raise invalid((loc, i, *side, "id"), f"{what} {items[i].id!r}")
            out[by_id] = x
        return out

    async def answer(op: str, x: np.ndarray, param: Any, loc: str = "items") -> tuple[Any, Any]:
        return await ask(view.engine, op, x, param, loc)

    # The query endpoints return a JSONResponse of plain values: that skips FastAPI's response
    # validation and jsonable_encoder, a recursive walk over every score that costs more than
    # encoding them.
    @app.post(
        "/v1/embed", summary="Embeddings of items at every depth, with the hedge weights", **queries
    )
    async def embed(body: models.ItemsQuery) -> Response:
        emb, snap = await answer("embed", features(body.items, "items"), None)
        return Response(await run_in_threadpool(embed_json, emb, snap), media_type=JSON)

    @app.post("/v1/classify", summary="kNN classification over all depths (Eq. 23-25)", **queries)
    async def classify(body: models.NeighbourQuery) -> JSONResponse:
        out, snap = await answer("classify", features(body.items, "items"), body.k or config.k)
        classes = [str(c) for c in out["classes"].tolist()]
        predictions = [
            {"label": int(label), "scores": dict(zip(classes, row, strict=True))}
            for label, row in zip(out["labels"].tolist(), out["scores"].tolist(), strict=True)
        ]
        return JSONResponse({"predictions": predictions, "model": snap.meta()})

    @app.post("/v1/retrieve", summary="The k most similar gallery items (Eq. 27)", **queries)
    async def retrieve(body: models.NeighbourQuery) -> JSONResponse:
        out, snap = await answer("retrieve", features(body.items, "items"), body.k or config.k)
        return JSONResponse({"results": neighbour_lists(out, snap), "model": snap.meta()})

    @app.post("/v1/verify", summary="Are the two items of each pair similar? (Eq. 26)", **queries)
    async def verify(body: models.VerifyQuery) -> JSONResponse:
        left = features([p.left for p in body.pairs], "pairs", ("left",))
        right = features([p.right for p in body.pairs], "pairs", ("right",))
        out, snap = await answer("verify", np.stack([left, right]), body.threshold, "pairs")
        results = [
            {"similar": bool(s), "vote": float(v), "score": float(c)}
            for s, v, c in zip(out["similar"], out["vote"], out["score"], strict=True)
        ]
        return JSONResponse({"results": results, "model": snap.meta()})

    @app.post(
        "/v1/suggest",
        summary="Triplet questions whose answers would teach the model most (active learning)",
        description="Is the anchor more similar to first or to second? The answer goes back to "
        "the input stream as an ordinary triplet message (anchor, the closer, the farther). "
        "Questions are chosen over the pool (ids, or the gallery) by the current snapshot's "
        "model; with --suggest-topic they are also published to that Kafka topic.",
        responses={
            **_responses(401, 413, 415),
            503: {
                "model": Detail,
                "description": "no model snapshot published yet, or too many suggestion "
                "requests waiting",
            },
        },
        **writes,
    )
    async def suggest(body: SuggestQuery) -> JSONResponse:
        started = time.perf_counter()
        seed = secrets.randbelow(INT64_MAX) if body.seed is None else body.seed
        request = SuggestRequest(
            None if body.pool == "gallery" else body.pool, body.batch, body.strategy, seed
        )
        out = await ask_suggester(view, request)
        request_id = secrets.token_hex(8)
        suggestions = [
            {"anchor": q.anchor, "first": q.first, "second": q.second, "score": q.score}
            | {"kind": "triplet"}
            for q in out.questions
        ]
        sink = view.suggester.sink
        if sink is not None:
            sink.publish(suggestion_messages(out, request_id, body.strategy))
        view.metrics.suggestions.labels(strategy=body.strategy).inc(len(suggestions))
        view.metrics.suggest_seconds.labels(strategy=body.strategy).observe(
            time.perf_counter() - started
        )
        return JSONResponse(
            {
                "suggestions": suggestions,
                "request": request_id,
                "strategy": body.strategy,
                "seed": seed,
                "pool_items": out.pool_items,
                "published_to": view.suggester.topic,
                "model": out.snapshot.meta(),
                "seconds": out.seconds,
            }
        )

    @app.post(
        "/v1/items",
        summary="Add items to the item store (and the gallery)",
        responses=_responses(401, 403, 413, 415),
        **writes,
    )
    def add_items(body: models.AddItems) -> dict[str, Any]:
        ids = [item.id for item in body.items]
        if len(set(ids)) != len(ids):
            raise invalid(("items",), "duplicate ids")
        for i, item in enumerate(body.items):
            if body.gallery and item.label is None:
                raise invalid(("items", i, "label"), "gallery items need a label")
        x = np.array([item.x for item in body.items], dtype=np.float32)
        labels = [MISSING_LABEL if item.label is None else item.label for item in body.items]
        try:
            version = view.catalog.add(
                ids, x, np.array(labels, dtype=np.int64), gallery=body.gallery
            )
        except (ValueError, DecodeError) as exc:  # e.g. a gallery file of another dimension
            raise invalid(("items",), str(exc)) from None
        view.publisher.gallery_changed()
        view.items_synced(version)  # constraints sent after this answer may name the new ids
        return {"added": len(ids), "items_version": version}

    @app.delete(
        "/v1/items",
        summary="Remove items from the item store and the gallery",
        responses=_responses(401, 403, 404, 413, 415),
        **writes,
    )
    def remove_items(body: models.RemoveItems) -> dict[str, Any]:
        try:
            removed, version = view.catalog.remove(body.ids)
        except DecodeError as exc:
            raise HTTPException(404, exc.detail) from None
        view.publisher.gallery_changed()
        view.items_synced(version)
        return {"removed": removed, "items_version": version}


def write_guards(view: ServiceView) -> list[Any]:
    """The dependencies of every endpoint that writes: the bearer token, and a 403 naming why
    where the service takes no writes (a serving replica)."""

    def writable() -> None:
        if view.read_only is not None:
            raise HTTPException(403, view.read_only)

    return [Depends(_bearer(view.config.auth_token)), Depends(writable)]


def _bearer(token: str | None) -> Callable[..., None]:
    """The dependency of the write endpoints: the bearer token, when the service has one.

    Tokens are compared as bytes (the header's own bytes, which Starlette reads as latin-1, and
    the configured token in UTF-8), in constant time: any header value is answered 200 or 401.
    """
    expected = None if token is None else token.encode("utf-8")
    scheme = HTTPBearer(auto_error=False, description="the service's --auth-token")

    def authorised(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(scheme)],
    ) -> None:
        if expected is None:
            return
        if credentials is None or not hmac.compare_digest(
            credentials.credentials.encode("latin-1"), expected
        ):
            raise HTTPException(
                401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )

    return authorised


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 in FastAPI's format, with the offending value echoed only as JSON can carry it (a NaN,
    a 10 MB string or a 4,000-digit integer in a body must not make the answer fail); 415 for a
    body that was not sent as JSON."""
    assert isinstance(exc, RequestValidationError)
    sent_as = request.headers.get("content-type", "")
    media = sent_as.split(";")[0].strip().lower()
    about_body = any(error["loc"][:1] == ("body",) for error in exc.errors())
    if about_body and media != JSON and not media.endswith("+json"):
        # FastAPI reads only a JSON content type as JSON (curl -d sends a form's type); the body
        # was then never parsed, and "input should be a valid dictionary" would not say why.
        return JSONResponse(
            {
                "detail": "send the body as JSON with Content-Type: application/json; this "
                f"request's Content-Type is {json_safe(sent_as) if sent_as else 'missing'!r}"
            },
            status_code=415,
        )
    detail = []
    for error in exc.errors():
        item = {"loc": list(error["loc"]), "msg": str(error["msg"]), "type": str(error["type"])}
        if "input" in error:
            item["input"] = json_safe(error["input"])
        detail.append(item)
    return JSONResponse({"detail": detail}, status_code=422)


async def _method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """405 whose ``Allow`` lists every method the path accepts: Starlette's names only those of
    the first route of the path it tried (``POST`` for ``/v1/items``, not ``DELETE``)."""
    assert isinstance(exc, StarletteHTTPException)
    allowed: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.methods:
            if route.matches(request.scope)[0] != Match.NONE:
                allowed |= route.methods
    headers = {"Allow": ", ".join(sorted(allowed))} if allowed else exc.headers
    return JSONResponse({"detail": exc.detail}, status_code=405, headers=headers)


JSON = "application/json"
# Values of /v1/embed's answer written as JSON per call: one call holds the GIL throughout, so
# the event loop waits at most that long (~4 ms), not for the whole answer.
EMBED_JSON_VALUES = 16_384


def _dumps(value: Any) -> bytes:
    """``value`` as JSONResponse writes it: compact, UTF-8, no NaN."""
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def embed_json(emb: np.ndarray, snap: Snapshot) -> bytes:
    """The body of ``/v1/embed``'s answer for the embeddings ``emb`` (n_depths, n_items, dim):
    the bytes ``JSONResponse`` makes of ``{"embeddings": (items, depths, dim) lists, "alpha",
    "metric", "model"}``, written ``EMBED_JSON_VALUES`` values at a time.

    >>> from types import SimpleNamespace
    >>> snap = SimpleNamespace(alpha=np.array([1.0]), learner=SimpleNamespace(metric="l2"),
    ...                        meta=lambda: {"snapshot": 1, "updates": 0})
    >>> embed_json(np.arange(4, dtype=np.float32).reshape(1, 2, 2), snap)
    b'{"embeddings":[[[0.0,1.0]],[[2.0,3.0]]],"alpha":[1.0],"metric":"l2","model":{"snapshot":1,"updates":0}}'
    """
    metric: MetricKind = snap.learner.metric
    per_item = emb.transpose(1, 0, 2)
    step = max(1, EMBED_JSON_VALUES // max(1, per_item[0].size if len(per_item) else 1))
    # each slice's list without its brackets: the items of that slice, joined by commas
    items = [
        _dumps(per_item[start : start + step].tolist())[1:-1]
        for start in range(0, len(per_item), step)
    ]
    rest = _dumps({"alpha": snap.alpha.tolist(), "metric": metric, "model": snap.meta()})
    return b'{"embeddings":[' + b",".join(items) + b"]," + rest[1:]
