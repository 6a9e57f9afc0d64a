"""The endpoints every service has, whatever its model: ``/v1/model`` (the model, the stream,
the checkpoint, the snapshot and the items), ``/healthz`` (liveness), ``/readyz`` (readiness,
with its causes) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView

__all__ = ["add_status_routes"]


def add_status_routes(app: FastAPI, view: ServiceView) -> None:
    """``/v1/model``, ``/healthz``, ``/readyz`` and ``/metrics`` of ``view`` on ``app``."""

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
        status["snapshot_error"] = view.publisher.error  # why the latest build failed, if it did
        status["learning"] = view.learning()
        status["items"] = {
            "store": len(view.catalog.items),
            "gallery": len(view.catalog.gallery),
            "version": view.catalog.version,
        }
        if view.modal_catalog is not None:
            items = view.modal_catalog.items
            status["items"]["version"] = view.modal_catalog.version
            status["items"]["modalities"] = {
                m: {"store": len(store), "gallery": len(items.galleries[m])}
                for m, store in items.stores.items()
            }
        return status

    @app.get(
        "/healthz",
        summary="Liveness: the query worker answers (a failed learner process is restarted and "
        "said in /readyz)",
        responses={500: {"description": "the query worker is gone"}},
    )
    def healthz() -> JSONResponse:
        ok = view.healthy()
        return JSONResponse({"status": "ok" if ok else "failed"}, status_code=200 if ok else 500)

    @app.get(
        "/readyz",
        summary="Readiness: a model snapshot published and, while a learner process runs, its "
        "source connected and its reports coming",
        responses={503: {"description": "not ready: see causes, checks and snapshot_error"}},
    )
    def readyz() -> JSONResponse:
        ok, causes = _readiness(view)
        body = {
            "ready": ok,
            "checks": {name: cause is None for name, cause in causes.items()},
            "causes": {name: cause for name, cause in causes.items() if cause is not None},
            "snapshot_error": view.publisher.error,
            "learning": view.learning(),
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=False)
    def metrics() -> Response:
        _readiness(view)
        view.metrics.store_items.set(len(view.catalog.items))
        return Response(view.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _readiness(view: ServiceView) -> tuple[bool, dict[str, Any]]:
    """Whether the service is ready, and each check's cause of not being so (None: passed),
    with the ready gauge set to say the same."""
    causes = view.readiness()
    ok = all(cause is None for cause in causes.values())
    view.metrics.ready.set(1 if ok else 0)
    return ok, causes
