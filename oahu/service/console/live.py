"""``GET /v1/console/live``: what the console's live view draws, in one small JSON answer.

The page polls it about once a second. The curve (at most :data:`~.history.DEFAULT_CAPACITY`
points) is encoded once per change of the history and reused by every poll in between, so an
open console costs the event loop a dictionary lookup and a few dozen values per second, not a
re-encoding of the curve.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import Response

if TYPE_CHECKING:
    from oahu.service.console.history import LearningHistory
    from oahu.service.serving.api import ServiceView


class CurveCache:
    """The history's curve as JSON bytes, encoded again only when the history changed."""

    def __init__(self, history: LearningHistory) -> None:
        self.history = history
        self._version = -1
        self._bytes = b"{}"
        self._lock = threading.Lock()

    def get(self) -> bytes:
        with self._lock:
            version = self.history.version
            if version != self._version:
                self._bytes = _dumps(self.history.curve())
                self._version = version
            return self._bytes


def live_state(view: ServiceView) -> dict[str, Any]:
    """The live view's figures as they stand now (all but the curve)."""
    status = view.status()
    history = view.history
    written = (status.get("checkpoint") or {}).get("written_at")
    snap = view.publisher.current
    now = time.time()
    causes = view.readiness()
    return {
        "learner": status.get("learner"),
        "source": status.get("source"),
        "n_depths": status.get("n_depths"),
        "constraints_seen": status.get("constraints_seen", 0),
        "constraints_learned": status.get("constraints_learned", 0),
        "constraints_consumed": status.get("constraints_consumed", 0),
        "prequential_accuracy": status.get("prequential_accuracy"),
        "alpha": status.get("alpha") or [],
        "rate": history.recent_rate(),
        "lag": status.get("lag") or {},
        "checkpoint_age_s": now - written if written else None,
        "dead_letters": status.get("dead_letters") or {},
        "drift_events": [
            {"constraint": int(e["constraint"]), "signal": str(e["signal"])}
            for e in status.get("drift_events") or ()
        ],
        "snapshot": None
        if snap is None
        else {**snap.meta(), "age_s": now - snap.created, "gallery_items": len(snap.gallery_ids)},
        "ready": all(cause is None for cause in causes.values()),
        "not_ready": {name: cause for name, cause in causes.items() if cause is not None},
    }


def live_router(view: ServiceView) -> APIRouter:
    router = APIRouter()
    curve = CurveCache(view.history)

    @router.get(
        "/v1/console/live",
        summary="The console's live view: the learning curve (bounded, downsampled) and the "
        "model's figures now",
        tags=["console"],
    )
    def live() -> Response:
        state = _dumps(live_state(view))
        body = b'{"curve":' + curve.get() + b',"now":' + state + b"}"
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    return router


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("utf-8")
