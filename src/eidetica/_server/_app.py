"""The HTTP API: the facade's methods as JSON resources (FastAPI), one tenant per API key.

Blocking work (fsync, embedding, index queries) runs in FastAPI's thread pool, so
concurrent requests still meet in the log's group commit. No request names a tenant:
it comes from the key alone (models forbid unknown fields, so a ``tenant`` field is a 400).
"""

from __future__ import annotations

import ipaddress
import logging
import threading

import msgspec
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._remote.wire import error_body
from ..errors import EideticaError, InvalidInput, NotFound, Unauthorized
from ..memory import Memory
from ._keys import KeyStore
from ._limits import TOO_LARGE, _too_large
from .routes import admin, health, items, memories, notes, schedules, search, sessions
from .routes.append import _is_json, lean_append
from .routes.common import Api, _err, _json

__all__ = ["create_app", "is_loopback"]

log = logging.getLogger("eidetica.server")

# in this order: the first route whose path matches a request with another method names the Allow header
ROUTERS = (health, sessions, memories, notes, search, schedules, admin, items)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(memory: Memory, *, keys: KeyStore | None = None, host: str = "127.0.0.1") -> FastAPI:
    """The FastAPI application serving ``memory`` (the store's single writer)."""
    app = FastAPI(
        title="eidetica",
        version="0.1.0",
        description="Long-term memory for LLM agents. Every request acts in its API key's tenant.",
        redirect_slashes=False,  # a trailing slash is a 404 naming the route, not a redirect a client may not follow
        docs_url=None,  # /docs below, from packaged assets: FastAPI's loads Swagger UI from a CDN (blank offline)
    )
    _docs_routes(app)
    views: dict[str, Memory] = {memory.tenant: memory}
    views_lock = threading.Lock()
    loopback = is_loopback(host)

    def tenant_view(tenant: str) -> Memory:
        with views_lock:
            if tenant not in views:
                views[tenant] = memory.for_tenant(tenant)
            return views[tenant]

    def authenticate(request: Request) -> str:
        """The tenant of the request's key; the default tenant on loopback when no key exists."""
        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if keys is not None and keys.active():
            return keys.tenant_of(bearer)
        if not loopback:
            raise Unauthorized("no API key is configured; this server only serves loopback without keys")
        if bearer:
            raise Unauthorized("this server has no API keys; create one with `eidetica keys create --path STORE "
                               "--tenant NAME` (STORE: the --path this server serves)")
        return memory.tenant

    app.state.authenticate = authenticate
    app.state.tenant_view = tenant_view

    api = Api(memory, keys, authenticate, tenant_view)
    api.M = Depends(api.mem)
    _handlers(app)
    for resource in ROUTERS:
        app.include_router(resource.router(api))
    app.state.append_lean = lean_append(api)
    from .ui import mount_ui  # the inspector pages (/ui), same keys and tenant views

    mount_ui(app, memory, is_loopback)
    return app


def _handlers(app: FastAPI) -> None:
    """Every error as the API's error body (``_remote.wire``): ours, FastAPI's validation, Starlette's HTTP, the unexpected."""

    @app.exception_handler(EideticaError)
    async def _eidetica_error(request: Request, e: EideticaError) -> Response:
        return _err(e)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError) -> Response:
        first = (e.errors() or [{}])[0]
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
        field = loc[0] if loc and not loc[0].isdigit() else "body"
        if first.get("type") == "json_invalid":
            field = "body"
        rest = ".".join(loc[1:])
        problem = str(first.get("msg", "is invalid")) + (f" (at {rest})" if rest else "")
        kind = request.headers.get("content-type")
        if field == "body" and not _is_json(kind.encode() if kind else None):
            problem = (f"must be a JSON object sent with 'Content-Type: application/json' (this request had "
                       f"{repr(kind) if kind else 'no Content-Type'})")
        return _err(InvalidInput(field, problem))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> Response:
        if request.scope.get(TOO_LARGE):  # the body passed the limit while FastAPI read it
            return _too_large(request.scope[TOO_LARGE])
        if e.status_code == 404:
            return _err(NotFound("route", f"{request.method} {request.url.path}"))
        if e.status_code == 405:
            allow = (e.headers or {}).get("Allow", "")
            body = {"error": "MethodNotAllowed", "field": None, "args": [],
                    "message": f"{request.method} is not allowed on {request.url.path}" + (f"; use {allow}" if allow else "")}
            return Response(msgspec.json.encode(body), 405, headers={"Allow": allow} if allow else None,
                            media_type="application/json")
        return _json(error_body(InvalidInput("body", str(e.detail))), e.status_code if 400 <= e.status_code < 500 else 400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception) -> Response:
        log.exception("eidetica: unexpected error on %s %s", request.method, request.url.path)
        return _err(e)


def _docs_routes(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the package's own copy (``data/swagger-ui``), no request leaves the server."""
    from importlib.resources import files

    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    assets = files("eidetica") / "data" / "swagger-ui"
    app.mount("/docs/assets", StaticFiles(directory=str(assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        """The API's interactive documentation."""
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="eidetica API", swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css", swagger_favicon_url="/docs/assets/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},  # else the page asks validator.swagger.io about the spec
        )

