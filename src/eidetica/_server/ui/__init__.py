"""``/ui``: a server-rendered inspector of one tenant (users, facts and their history, sessions,
a search playground, forget with confirmation, store health), in the API's process.

Same auth as the API: a key unlocks its tenant, sent as ``Authorization: Bearer`` or set by the
login form as a cookie (HttpOnly, SameSite=Strict, path /ui); without keys, loopback only.
Plain HTML forms and Jinja2 templates, no JavaScript: every page's data is also JSON
(``?format=json``, as datasette does). Writes are POST forms carrying a CSRF token (an HMAC of
the caller's credential under a per-process secret): without keys on loopback there is no
credential a browser would withhold from another site's form, so the token is the guard.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from ...memory import Memory
from . import facts, health, login, search, sessions, tenants, users
from .pages import COOKIE, HERE, Pages

__all__ = ["mount_ui", "COOKIE"]

PAGES = (users, facts, sessions, search, health, login, tenants)  # one module per resource, each with its router


def mount_ui(app: FastAPI, memory: Memory, is_loopback: Callable[[str], bool]) -> None:
    """Add the ``/ui`` pages and ``/ui/static`` to the API's app (its ``authenticate`` and tenant views;
    ``is_loopback`` is the API's test of a host name, passed in: ``_app`` imports this package)."""
    ui = Pages(app.state.authenticate, app.state.tenant_view, is_loopback)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    app.add_middleware(tenants.TenantPrefix)  # /ui/t/<tenant>/...: the operator's view of another tenant
    for resource in PAGES:
        app.include_router(resource.router(ui))
