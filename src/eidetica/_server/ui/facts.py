"""/ui's facts: one fact, its audit trail, forgetting it."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from . import inspect as _inspect
from .pages import Pages, user_url

__all__ = ["router"]


def router(ui: Pages) -> APIRouter:
    """The facts' pages."""
    r = APIRouter()

    @r.get("/ui/users/{user}/facts/{fact_id}", include_in_schema=False)
    def fact_page(request: Request, user: str, fact_id: str) -> Response:
        """One fact: its fields, history and source messages."""
        return ui.page(lambda m, request: ("fact.html", _inspect.fact(m, user, fact_id)))(request)

    @r.get("/ui/users/{user}/facts/{fact_id}/audit", include_in_schema=False)
    def audit_page(request: Request, user: str, fact_id: str) -> Response:
        """A fact's audit trail from the log (``m.explain``): who, when, why, from which messages."""
        return ui.page(lambda m, request: ("fact.html", _inspect.audit(m, user, fact_id)))(request)

    ui.forget_routes(r, "/ui/users/{user}/facts/{fact_id}/forget", "fact",
                     lambda user, fact_id: fact_id, lambda m, user, fact_id: m.forget(fact_id, user=user),
                     lambda user, fact_id, cancel=False: user_url(user) + (f"/facts/{quote(fact_id, safe='')}" if cancel else ""))
    return r
