"""The HTTP server of a serving process (``oahu run`` and ``oahu serve``): uvicorn on a thread
of its own, with the stall watch told of its event loop."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from typing import Any

from oahu.service.config import ServiceConfig
from oahu.service.serving.collector import freeze_startup_heap
from oahu.service.serving.stalls import StallWatch

__all__ = ["HttpServer", "start_http"]

log = logging.getLogger("oahu.service")


class HttpServer:
    """Serves ``app`` on ``host``:``port`` from ``start()`` until ``stop()``; ``port`` is the
    one bound (useful with port 0)."""

    def __init__(self, app: Any, host: str, port: int, log_level: str, stalls: StallWatch) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                stalls.attach_loop(asyncio.get_running_loop())  # its beat, from now on

        # http and loop stay "auto": httptools and uvloop (dependencies) where they install,
        # h11 and asyncio otherwise.
        self._server = Server(
            uvicorn.Config(
                app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off"
            )
        )
        self._thread = threading.Thread(target=self._server.run, name="oahu-http", daemon=True)

    def start(self) -> bool:
        """Start serving; False if the server could not (e.g. the port is taken)."""
        self._thread.start()
        while not self._server.started and self._thread.is_alive():
            time.sleep(0.05)
        return self._thread.is_alive()

    @property
    def port(self) -> int:
        servers = self._server.servers
        return servers[0].sockets[0].getsockname()[1] if servers else 0

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def start_http(
    app: Any,
    config: ServiceConfig,
    stalls: StallWatch,
    stop: threading.Event,
    install_signals: bool = True,
) -> HttpServer | None:
    """Serve ``app`` on ``config.http`` (SIGTERM and SIGINT set ``stop``, with
    ``install_signals``); None, said in the log, when the server cannot start."""
    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    host, port = config.http_host_port()
    http = HttpServer(app, host, port, config.log_level, stalls)
    # What start-up built lives as long as the process: out of the collector's walks.
    freeze_startup_heap()
    if not http.start():
        log.error("the HTTP server did not start on %s", config.http)
        return None
    return http


def base_url(config: ServiceConfig, http: HttpServer) -> str:
    """The address clients reach the server at, with the port it bound."""
    host, _ = config.http_host_port()
    return f"http://{f'[{host}]' if ':' in host else host}:{http.port}"
