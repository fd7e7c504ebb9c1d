"""/ui's operator pages: every tenant (keyless loopback only) and what the LLM cost a tenant (``usage``).

Without keys on loopback the operator may look at any tenant: ``/ui/t/<tenant>/...`` is any page
of ``/ui`` for that tenant (``TenantPrefix`` takes the prefix off and names the tenant; ``Pages``
puts it back on the page's links). With keys, a key sees its own tenant only, as before.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import unquote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...actors._text import check_id
from ...errors import Unauthorized
from ...events.streams import parse_stream
from ...memory import Memory
from .pages import _TENANT_KEY as SCOPE_KEY
from .pages import Pages

__all__ = ["router", "TenantPrefix", "SCOPE_KEY"]


class TenantPrefix:
    """ASGI: ``/ui/t/<tenant>/rest`` is served as ``/ui/rest`` with the tenant in the scope (``SCOPE_KEY``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if path.startswith("/ui/t/"):
            tenant, _, rest = path[len("/ui/t/"):].partition("/")
            scope = dict(scope, path="/ui" + (f"/{rest}" if rest else ""), raw_path=None)
            scope[SCOPE_KEY] = unquote(tenant)
        await self.app(scope, receive, send)


def tenants(m: Memory) -> dict[str, Any]:
    """Every tenant of the store with its counts (users, sessions, messages, active facts, notes) and LLM calls."""
    m.gate.sync()
    names = sorted({parse_stream(s)[1] for s in m.log.streams() if not s.startswith("meta:")} | {m.tenant})
    rows = []
    for t in names:
        counts = {"users": 0, "sessions": 0, "messages": 0, "facts": 0, "notes": 0}
        for u in m.state.users(t):
            c = m.state.user_counts(t, u)
            counts["users"] += 1
            for k in ("sessions", "messages", "facts", "notes"):
                counts[k] += int(c.get(k, 0))
        rows.append({"tenant": t, **counts})
    return {"tenants": rows}


def router(ui: Pages) -> APIRouter:
    """The tenants' list and the usage page."""
    r = APIRouter()

    @r.get("/ui/tenants", include_in_schema=False)
    def tenants_page(request: Request) -> Response:
        """Every tenant with its counts: the operator's (keyless loopback) view of the store."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            if ui.credential(request):
                raise Unauthorized("a key sees its own tenant only: the tenants' list is the keyless operator's")
            return "tenants.html", tenants(m)
        return ui.page(build)(request)

    @r.get("/ui/usage", include_in_schema=False)
    def usage_page(request: Request) -> Response:
        """What the LLM cost the tenant (or one ``user``): calls and tokens by day, user, model and purpose."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            user = request.query_params.get("user") or None
            if user is not None:
                check_id("user", user)
            days = request.query_params.get("days")
            since = None
            if days and days.isdigit():
                since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=int(days))
            return "usage.html", {"user": user, **m.usage(user=user, since=since)}
        return ui.page(build)(request)

    return r
