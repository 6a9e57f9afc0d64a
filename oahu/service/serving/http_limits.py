"""Two small ASGI middlewares: a request body size limit and per-endpoint request metrics.

Plain ASGI (no ``BaseHTTPMiddleware``) so they add microseconds, not a task per request.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.exceptions import HTTPException

from oahu.service.metrics import ServiceMetrics

Scope = dict[str, Any]


class _TooLarge(HTTPException):
    """Raised while reading the body; FastAPI passes HTTPExceptions through, so it becomes 413."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body larger than {max_bytes} bytes")


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """Answers 413 when a request body exceeds ``max_bytes`` (by its Content-Length, or while
    reading a body sent without one)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _reply(send, 413, f"request body larger than {self.max_bytes} bytes")
            return
        received = 0
        started = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await _reply(send, 413, f"request body larger than {self.max_bytes} bytes")


class RequestMetrics:
    """Observes every request's latency into ``oahu_http_request_duration_seconds`` labelled
    by route template (``other`` for unknown paths, to bound cardinality), method and status."""

    def __init__(self, app: Any, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def capture(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "other"
            self.metrics.request_seconds.labels(
                endpoint=endpoint, method=scope["method"], status=str(status)
            ).observe(time.perf_counter() - started)
