"""The retrieval explorer's endpoints: an item's nearest gallery neighbours under the served model
beside those under the starting metric, random pages of the gallery, and thumbnails of items
that are images.

* ``GET /v1/console/items/{id}.png?size=96``: the item drawn as a greyscale PNG of its image
  shape (:mod:`oahu.service.console.thumbnails`), ``size`` (16 to 256) pixels on the longer
  side; cached per (id, items version, size). The answer's ``X-Cache`` header says ``hit`` or
  ``miss``. 404 for an unknown id, or when the items have no image shape.
* ``GET /v1/console/gallery?n=24&seed=S``: ``n`` (1 to 200) gallery items drawn at random
  without replacement, the same ones for the same seed and gallery version (a random seed when
  none is given)::

    {"items": [{"id": "17", "label": 3, "image": "/v1/console/items/17.png",
                "summary": "64 features, mean 0.31, range [0, 1]"}, ...],
     "gallery_items": 899, "image_shape": [8, 8]}

* ``POST /v1/console/neighbours`` with ``{"id": "17"}`` or ``{"x": [...]}`` (exactly one) and
  an optional ``"k"`` (1 to 100, by default the service's ``--k``, at most 100)::

    {"query": {"id": "17", "label": 3, "image": "/v1/console/items/17.png", "summary": null},
     "model": [{"id": "5", "label": 3, "score": 0.98, "image": "/v1/console/items/5.png",
                "summary": null}, ...],
     "euclidean": [{"id": "9", "label": 3, "score": 1.21, "image": ..., "summary": ...}, ...],
     "snapshot": {"snapshot": 12, "updates": 400}}

  ``model`` is what ``POST /v1/retrieve`` answers for the item with the served snapshot (same
  code, :mod:`oahu.service.serving.answering`): its ``score`` is the Eq. 27 similarity, higher
  is closer. ``euclidean`` are the nearest gallery items by Euclidean distance between raw
  features, the metric learning starts from, exact (:mod:`oahu.service.console.euclidean`): its
  ``score`` is that distance, lower is closer. A query by id leaves the item itself out of both
  lists, which then hold its ``k`` nearest *other* items: the model's list is
  ``/v1/retrieve``'s answer for ``k + 1`` without the item. ``snapshot`` is the served model's,
  as ``/v1/retrieve``'s ``model`` field. ``image`` is null for items that are not images and
  for a pasted vector; ``summary`` (a short feature summary, as in gallery pages) is given for
  every item the page cannot draw, and null for pictures. 404 for an unknown id, 422 naming
  ``id``, ``x`` or ``k`` for a bad body, 503 before the first snapshot.

Read-only: no bearer token needed.
"""

from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import numpy as np
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from oahu.connectors.constraint import DecodeError
from oahu.service.console.euclidean import EuclideanGallery, GalleryVersion
from oahu.service.console.thumbnails import MAX_SIZE, MIN_SIZE, ThumbnailCache, render_thumbnail
from oahu.service.serving.answering import ask, label_value, neighbour_lists
from oahu.service.serving.inputs import INT64_MAX, Whole, invalid, request_models

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView

__all__ = ["MAX_K", "MAX_PAGE", "explore_router", "feature_summary", "image_url"]

MAX_K = 100  # neighbours per list: a page of pictures, not a bulk export
MAX_PAGE = 200  # gallery items per page
# An item's features can be replaced through POST /v1/items under the same id (and URL): a
# browser keeps its thumbnail for a minute, not for good.
THUMBNAIL_MAX_AGE = 60


def image_url(item_id: str) -> str:
    """The thumbnail URL of an item (its id escaped as one path segment).

    >>> image_url("17"), image_url("a b/c")
    ('/v1/console/items/17.png', '/v1/console/items/a%20b%2Fc.png')
    """
    return f"/v1/console/items/{quote(item_id, safe='')}.png"


def feature_summary(x: np.ndarray) -> str:
    """A short description of a feature vector, for items shown without a picture.

    >>> feature_summary(np.array([0.0, 0.25, 0.6875, 1.0]))
    '4 features, mean 0.48, range [0, 1]'
    """
    v = np.asarray(x, dtype=np.float64)
    return f"{len(v)} features, mean {v.mean():.2g}, range [{v.min():.3g}, {v.max():.3g}]"


def explore_router(view: "ServiceView") -> APIRouter:
    """The explorer's endpoints over ``view``'s catalog, query worker and snapshots."""
    # imported here: the API module mounts the console, so it is loaded by the time this runs
    from oahu.service.serving.api import Detail, FastJSONRoute

    def answers(why: dict[int, str]) -> dict[int | str, dict[str, Any]]:
        """OpenAPI descriptions of the error answers besides 422: status -> when."""
        return {code: {"model": Detail, "description": text} for code, text in why.items()}

    # the API's JSON bodies: NaN read as a number (then refused as not finite, naming x), and a
    # body that is not UTF-8 JSON a 422 like any other malformed body
    router = APIRouter(prefix="/v1/console", tags=["console"], route_class=FastJSONRoute)
    catalog = view.catalog
    thumbnails = ThumbnailCache()
    euclidean = EuclideanGallery(catalog)
    ItemRef: Any = request_models(view.n_features, view.config.max_batch_items).ItemRef

    class ExploreQuery(ItemRef):  # type: ignore[misc, valid-type]
        """An item by ``id`` or a feature vector ``x`` (exactly one), and how many neighbours."""

        k: Annotated[int, Field(ge=1, le=MAX_K), Whole] | None = Field(
            None, description=f"neighbours per list, 1 to {MAX_K} (default: the service's --k)"
        )

    def image_of(item_id: str | None) -> str | None:
        return None if item_id is None or catalog.image_shape is None else image_url(item_id)

    def summaries(ids: list[str]) -> list[str | None]:
        """A short feature summary per item, for items that are not drawn as pictures (None
        for pictures, and for an item removed since the snapshot)."""
        if catalog.image_shape is not None or not ids:
            return [None] * len(ids)
        x, found = catalog.lookup(ids)
        return [feature_summary(row) if ok else None for row, ok in zip(x, found, strict=True)]

    def label_of(item_id: str) -> int | None:
        # the store a query's id resolves in (Catalog.lookup): the item store, then the gallery
        for store in (catalog.items, catalog.gallery):
            if item_id in store and store.dim == catalog.dim:
                try:
                    return label_value(store.get_labels([item_id])[0])
                except DecodeError:  # removed since the lookup
                    continue
        return None

    def euclidean_neighbours(
        x: np.ndarray, k: int, exclude: str | None
    ) -> tuple[GalleryVersion, list[tuple[int, float]]]:
        gallery = euclidean.current()
        if gallery.X.shape[1] != len(x):  # an empty gallery, or one the model cannot read
            return gallery, []
        return gallery, gallery.neighbours(x, k, exclude)

    def unknown(item_id: str) -> HTTPException:
        return HTTPException(404, f"unknown item id {item_id!r}")

    @router.get(
        "/items/{item_id:path}.png",
        summary="An item that is an image, as a greyscale PNG thumbnail",
        response_class=Response,
        responses={
            200: {"content": {"image/png": {}}, "description": "the PNG"},
            **answers({404: "unknown item id, or items that are not images"}),
        },
    )
    def thumbnail(
        item_id: str,
        size: Annotated[
            int, Query(ge=MIN_SIZE, le=MAX_SIZE, description="pixels on the longer side")
        ] = 96,
    ) -> Response:
        key = (item_id, catalog.version, size)  # the version read first: a change makes it stale
        png = thumbnails.get(key)
        hit = png is not None
        if png is None:
            x, found = catalog.lookup([item_id])
            if not found[0]:
                raise unknown(item_id)
            shape = catalog.image_shape
            if shape is None:
                raise HTTPException(
                    404,
                    f"the items have no image shape: this service's stream file and gallery "
                    f"record none for their {catalog.dim} features, so item {item_id!r} cannot "
                    "be drawn",
                )
            png = render_thumbnail(x[0], shape, size)
            thumbnails.put(key, png)
        headers = {
            "Cache-Control": f"public, max-age={THUMBNAIL_MAX_AGE}",
            "X-Cache": "hit" if hit else "miss",
        }
        return Response(png, media_type="image/png", headers=headers)

    @router.get("/gallery", summary="A random page of the gallery")
    def gallery_page(
        n: Annotated[int, Query(ge=1, le=MAX_PAGE, description="items on the page")] = 24,
        seed: Annotated[
            int | None, Query(ge=0, le=INT64_MAX, description="the page's seed (random if absent)")
        ] = None,
    ) -> JSONResponse:
        gallery = euclidean.current()
        size = min(n, len(gallery))
        chosen = np.random.default_rng(seed).choice(len(gallery), size=size, replace=False)
        items = [
            {
                "id": gallery.ids[p],
                "label": label_value(gallery.y[p]),
                "image": image_of(gallery.ids[p]),
                "summary": feature_summary(gallery.X[p]),
            }
            for p in chosen.tolist()
        ]
        shape = catalog.image_shape
        return JSONResponse(
            {
                "items": items,
                "gallery_items": len(gallery),
                "image_shape": None if shape is None else list(shape),
            }
        )

    @router.post(
        "/neighbours",
        summary="An item's nearest gallery items under the served model and under Euclidean "
        "distance",
        responses=answers(
            {
                404: "unknown item id",
                413: "request body larger than --max-request-bytes",
                503: "no model snapshot published yet, or the gallery is empty",
            }
        ),
    )
    async def neighbours(body: ExploreQuery) -> JSONResponse:
        k = body.k or min(view.config.k, MAX_K)
        item_id = body.id
        if item_id is None:
            x = np.asarray(body.x, dtype=np.float32)  # finite, float32's range: ``Feature``
            query: dict[str, Any] = {"id": None, "label": None, "image": None}
            query["summary"] = feature_summary(x)
        else:
            found_x, found = catalog.lookup([item_id])
            if not found[0]:
                raise unknown(item_id)
            if found_x.shape[1] != view.n_features:
                raise invalid(("id",), f"the model does not read item {item_id!r}")
            x = found_x[0]
            query = {"id": item_id, "label": label_of(item_id), "image": image_of(item_id)}
            query["summary"] = summaries([item_id])[0]
        # a query by id asks for one more: the item itself, left out of both lists
        extra, field = (0, "x") if item_id is None else (1, "id")
        out, snap = await ask(view.engine, "retrieve", x[None], k + extra, (field,))
        model = [n for n in neighbour_lists(out, snap)[0] if n["id"] != item_id][:k]
        gallery, nearest = await run_in_threadpool(euclidean_neighbours, x, k, item_id)
        model_summaries = summaries([n["id"] for n in model])
        return JSONResponse(
            {
                "query": query,
                "model": [
                    n | {"image": image_of(n["id"]), "summary": summary}
                    for n, summary in zip(model, model_summaries, strict=True)
                ],
                "euclidean": [
                    {
                        "id": gallery.ids[p],
                        "label": label_value(gallery.y[p]),
                        "score": distance,
                        "image": image_of(gallery.ids[p]),
                        "summary": None
                        if catalog.image_shape is not None
                        else feature_summary(gallery.X[p]),
                    }
                    for p, distance in nearest
                ],
                "snapshot": snap.meta(),
            }
        )

    return router
