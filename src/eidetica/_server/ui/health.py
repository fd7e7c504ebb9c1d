"""/ui's health page: projection lag, index sizes, snapshots, replicas."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import inspect as _inspect
from .pages import Pages

__all__ = ["router"]


def router(ui: Pages) -> APIRouter:
    """The health page."""
    r = APIRouter()

    @r.get("/ui/health", include_in_schema=False)
    def health_page(request: Request) -> Response:
        """Projection lag, index sizes, snapshots, replicas."""
        return ui.page(lambda m, request: ("health.html", {"stats": _inspect.health(m)}))(request)

    return r
