"""Placeholder: filled in by its own change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

if TYPE_CHECKING:
    from oahu.service.serving.api import ServiceView


def answers_router(view: ServiceView) -> APIRouter:
    return APIRouter()
