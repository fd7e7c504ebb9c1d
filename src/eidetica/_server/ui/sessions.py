"""/ui's sessions: a user's sessions, one session as the agent reads it, forgetting one."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...memory import Memory
from . import inspect as _inspect
from .pages import Pages, user_url

__all__ = ["router"]


def router(ui: Pages) -> APIRouter:
    """The sessions' pages."""
    r = APIRouter()

    @r.get("/ui/users/{user}/sessions", include_in_schema=False)
    def sessions_page(request: Request, user: str) -> Response:
        """A user's sessions, most recent first, paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = ui.args(request)
            return "sessions.html", _inspect.sessions(m, user, offset=off, limit=lim)
        return ui.page(build)(request)

    @r.get("/ui/users/{user}/sessions/{session_id}", include_in_schema=False)
    def session_page(request: Request, user: str, session_id: str) -> Response:
        """A session as the agent reads it, then its stored history, paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = ui.args(request)
            return "session.html", _inspect.session(m, user, session_id, offset=off, limit=lim)
        return ui.page(build)(request)

    ui.forget_routes(r, "/ui/users/{user}/sessions/{session_id}/forget", "session",
                     lambda user, session_id: session_id,
                     lambda m, user, session_id: m.session(session_id, user=user).forget(),
                     lambda user, session_id, cancel=False: user_url(user) + "/sessions"
                     + (f"/{quote(session_id, safe='')}" if cancel else ""))
    return r
