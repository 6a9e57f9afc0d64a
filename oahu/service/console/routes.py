"""Mounting the console on the service's FastAPI app: pages, static files and JSON endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from oahu.service.console.answers import answers_router
from oahu.service.console.explore import explore_router
from oahu.service.console.live import live_router
from oahu.service.console.pages import add_pages

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView


def add_console(app: FastAPI, view: ServiceView) -> None:
    """Add the console's pages and endpoints to ``app`` (the API stays under ``/v1``)."""
    app.include_router(live_router(view))
    app.include_router(explore_router(view))
    app.include_router(answers_router(view))
    add_pages(app)
