"""What every /ui page shares: who the caller is (key, cookie, loopback), the CSRF token, rendering a
template or its JSON, errors as pages, paging arguments, and the forget-with-confirmation routes."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..._remote.wire import error_body, status_of
from ...actors._text import check_id
from ...errors import EideticaError, InvalidInput, Unauthorized
from ...memory import Memory
from . import inspect as _inspect

__all__ = ["Pages", "COOKIE", "HERE"]

COOKIE = "eidetica_key"
_TENANT_KEY = "eidetica.ui_tenant"  # set by ui.tenants.TenantPrefix for /ui/t/<tenant>/ URLs


def with_prefix(html: str, tenant: str) -> str:
    """``html`` whose /ui links and forms (not its static files) stay in ``/ui/t/<tenant>``."""
    return _LINK.sub(lambda m: f"{m.group(1)}/ui/t/{quote(tenant, safe='')}", html)


_LINK = re.compile(r'((?:href|action)=")/ui(?=[/"?#])(?!/static)')
HERE = Path(__file__).resolve().parents[1]  # _server/: its templates/ and static/


def _when(t: Any) -> str:
    if isinstance(t, str):  # the audit's ISO times
        try:
            t = dt.datetime.fromisoformat(t)
        except ValueError:
            return t
    return t.strftime("%Y-%m-%d %H:%M:%S") if isinstance(t, dt.datetime) else ("" if t is None else str(t))


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    env.filters["q"] = lambda s: quote(str(s), safe="")
    return env


def _json_page(data: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status_code=status, media_type="application/json")


class Pages:
    """The /ui's shared parts, on the API's ``authenticate`` and tenant views (one per app: its own CSRF secret)."""

    def __init__(self, authenticate: Callable[[Request], str], tenant_view: Callable[[str], Memory],
                 is_loopback: Callable[[str], bool]) -> None:
        self.env = _env()
        self.secret = secrets.token_bytes(32)
        self.authenticate = authenticate
        self.tenant_view = tenant_view
        self.is_loopback = is_loopback

    def credential(self, request: Request) -> str:
        """The caller's credential: its Authorization header, else its login cookie, else none."""
        return request.headers.get("authorization") or request.cookies.get(COOKIE) or ""

    def tenant_of(self, request: Request) -> str:
        """The tenant of the request's bearer key, else of the login cookie's key (else loopback's)."""
        key = request.cookies.get(COOKIE)
        if "authorization" not in request.headers and key:
            headers = [*request.scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1", "replace"))]
            try:
                return self.authenticate(Request(dict(request.scope, headers=headers)))
            except Unauthorized:
                pass  # a stale cookie on a server that needs none still gets in on loopback
        tenant = self.authenticate(request)
        if not self.credential(request) and not self.is_loopback(request.url.hostname or ""):
            # keyless loopback access by another name: a DNS-rebinding page would read the store
            raise Unauthorized("without a key, /ui answers only to a loopback host name (127.0.0.1, localhost)")
        chosen = request.scope.get(_TENANT_KEY)
        if chosen is not None and chosen != tenant:
            if self.credential(request):  # a key sees its own tenant only
                raise Unauthorized(f"this key's tenant is {tenant!r}, not {chosen!r}")
            return check_id("tenant", chosen)  # keyless loopback: the operator looks at any tenant
        return tenant

    def csrf(self, request: Request) -> str:
        """The form token of this caller: an HMAC of its credential under the process's secret."""
        return hmac.new(self.secret, self.credential(request).encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, request: Request, form: Any) -> None:
        """Refuse a form whose token is not this caller's."""
        sent = str(form.get("csrf", ""))
        if not hmac.compare_digest(sent, self.csrf(request)):
            raise InvalidInput("csrf", "the form's token does not match: reload the page and try again")

    def render(self, request: Request, template: str, data: dict[str, Any], tenant: str | None,
               status: int = 200) -> Response:
        """The page (or its data as JSON with ``?format=json``)."""
        if request.query_params.get("format") == "json":
            return _json_page(data, status)
        query = {k: v for k, v in request.query_params.multi_items() if k != "format"}
        json_url = request.url.path + "?" + urlencode([*query.items(), ("format", "json")])
        html = self.env.get_template(template).render(
            **data, tenant=tenant, csrf=self.csrf(request), json_url=json_url, done=request.query_params.get("done"),
            keyed=bool(request.cookies.get(COOKIE)), path=request.url.path, query=query)
        chosen = request.scope.get(_TENANT_KEY)
        return HTMLResponse(with_prefix(html, chosen) if chosen is not None else html, status_code=status)

    def page(self, build: Callable[..., tuple[str, dict[str, Any]]]) -> Callable[..., Response]:
        """A GET page: its tenant's memory, its data, its template (or JSON); errors as pages."""

        def run(request: Request, **kw: Any) -> Response:
            try:
                tenant = self.tenant_of(request)
                template, data = build(self.tenant_view(tenant), request, **kw)
                return self.render(request, template, data, tenant)
            except Unauthorized as e:
                return self.denied(request, e)
            except EideticaError as e:
                return self.failed(request, e)

        return run

    def denied(self, request: Request, e: Unauthorized) -> Response:
        """No key (or a bad one): to the login form, or a 401 body for JSON."""
        if request.query_params.get("format") == "json":
            return _json_page(error_body(e), 401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        r = RedirectResponse("/ui/login?" + urlencode({"next": target}), status_code=303)
        return r

    def failed(self, request: Request, e: EideticaError) -> Response:
        """An error as a page (or the API's error body for JSON)."""
        if request.query_params.get("format") == "json":
            return _json_page(error_body(e), status_of(e))  # the API's error body
        return self.render(request, "error.html", {"error": error_body(e)}, None, status_of(e))

    def args(self, request: Request, default_limit: int = 50) -> tuple[int, int]:
        """The page's ``offset`` and ``limit``."""
        q = request.query_params
        return _inspect.page_args(q.get("offset", 0), q.get("limit", default_limit))

    def forget_routes(self, router: APIRouter, path: str, what: str, describe: Callable[..., str],
                      act: Callable[..., None], back: Callable[..., str]) -> None:
        """GET ``path``: a confirmation page; POST: forget (CSRF-checked), then back with what was done."""
        async def confirm(request: Request) -> Response:
            kw = dict(request.path_params)
            data = {"what": what, "describe": describe(**kw), "action": request.url.path, "cancel": back(**kw, cancel=True)}
            return self.page(lambda m, request: ("confirm.html", data))(request)

        async def do(request: Request) -> Response:
            import anyio

            kw = dict(request.path_params)
            form = await request.form()
            try:
                tenant = self.tenant_of(request)
                self.check_csrf(request, form)
                await anyio.to_thread.run_sync(lambda: act(self.tenant_view(tenant), **kw))
            except Unauthorized as e:
                return self.denied(request, e)
            except EideticaError as e:
                return self.failed(request, e)
            sep = "&" if "?" in back(**kw) else "?"
            to = back(**kw) + sep + urlencode({"done": f"forgot {what} {describe(**kw)}"})
            chosen = request.scope.get(_TENANT_KEY)
            if chosen is not None:  # back to the same tenant's page
                to = f"/ui/t/{quote(chosen, safe='')}" + to[len("/ui"):]
            return RedirectResponse(to, 303)

        router.add_api_route(path, confirm, methods=["GET"], include_in_schema=False)
        router.add_api_route(path, do, methods=["POST"], include_in_schema=False)


def user_url(user: str, **_: Any) -> str:
    """A user's facts page."""
    return f"/ui/users/{quote(user, safe='')}"
