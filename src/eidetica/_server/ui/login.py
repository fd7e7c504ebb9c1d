"""/ui's login: a form that keeps an API key in a cookie for /ui, and logout."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ..._remote.wire import error_body, status_of
from ...errors import EideticaError
from .pages import COOKIE, Pages

__all__ = ["router"]


def router(ui: Pages) -> APIRouter:
    """The login and logout routes."""
    routes = APIRouter()

    @routes.get("/ui/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        """A form that takes an API key and keeps it in a cookie for /ui."""
        return ui.render(request, "login.html", {"next": _local(request.query_params.get("next")), "error": None}, None)

    @routes.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        """Check the key; on success set the cookie and go on."""
        form = await request.form()
        key, target = str(form.get("key", "")).strip(), _local(str(form.get("next", "")))
        try:
            ui.check_csrf(request, form)
            headers = [*request.scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1", "replace"))]
            ui.authenticate(Request(dict(request.scope, headers=headers)))
        except EideticaError as e:
            return ui.render(request, "login.html", {"next": target, "error": error_body(e)}, None, status_of(e))
        r = RedirectResponse(target, status_code=303)
        r.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https")
        return r

    @routes.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        """Drop the cookie."""
        r = RedirectResponse("/ui/login", status_code=303)
        r.delete_cookie(COOKIE, path="/ui")
        return r

    return routes


def _local(target: str | None) -> str:
    """Only a path under /ui is a place to go after login (no open redirect)."""
    return target if target and target.startswith("/ui") and not target.startswith("//") else "/ui"

