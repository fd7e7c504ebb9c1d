"""/ui's users: the tenant's users, a user's facts, forgetting a user."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...memory import Memory
from . import inspect as _inspect
from .pages import Pages, user_url

__all__ = ["router"]


def router(ui: Pages) -> APIRouter:
    """The users' pages."""
    r = APIRouter()

    @r.get("/ui", include_in_schema=False)
    def users_page(request: Request) -> Response:
        """The tenant's users, with counts and last activity."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = ui.args(request)
            return "users.html", _inspect.users(m, offset=off, limit=lim)
        return ui.page(build)(request)

    @r.get("/ui/users/{user}", include_in_schema=False)
    def facts_page(request: Request, user: str) -> Response:
        """A user's facts (active ones unless ``status`` says another, or ``any``; by category), paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = ui.args(request)
            q = request.query_params
            status = q.get("status") or "active"  # what the agent sees, unless asked for more
            return "facts.html", _inspect.facts(m, user, status=None if status == "any" else status,
                                                category=q.get("category") or None, offset=off, limit=lim)
        return ui.page(build)(request)

    ui.forget_routes(r, "/ui/users/{user}/forget", "user", lambda user: user, lambda m, user: m.forget_user(user),
                     lambda user, cancel=False: user_url(user) if cancel else "/ui")
    return r
