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

import datetime as dt
import hashlib
import hmac
import secrets
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jinja2
import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from . import _inspect
from ..errors import EideticaError, InvalidInput, Unauthorized
from ..memory import Memory
from .._remote.wire import error_body, status_of

__all__ = ["mount_ui", "COOKIE"]

COOKIE = "eidetica_key"
HERE = Path(__file__).parent
SEARCH_KINDS = ("message", "summary", "fact", "note")


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


def mount_ui(app: FastAPI, memory: Memory, is_loopback: Callable[[str], bool]) -> None:
    """Add the ``/ui`` pages and ``/ui/static`` to the API's app (its ``authenticate`` and tenant views;
    ``is_loopback`` is the API's test of a host name, passed in: ``_app`` imports this module)."""
    env = _env()
    secret = secrets.token_bytes(32)
    authenticate: Callable[[Request], str] = app.state.authenticate
    tenant_view: Callable[[str], Memory] = app.state.tenant_view
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    def credential(request: Request) -> str:
        return request.headers.get("authorization") or request.cookies.get(COOKIE) or ""

    def tenant_of(request: Request) -> str:
        """The tenant of the request's bearer key, else of the login cookie's key (else loopback's)."""
        key = request.cookies.get(COOKIE)
        if "authorization" not in request.headers and key:
            headers = [*request.scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1", "replace"))]
            try:
                return authenticate(Request(dict(request.scope, headers=headers)))
            except Unauthorized:
                pass  # a stale cookie on a server that needs none still gets in on loopback
        tenant = authenticate(request)
        if not credential(request) and not is_loopback(request.url.hostname or ""):
            # keyless loopback access by another name: a DNS-rebinding page would read the store
            raise Unauthorized("without a key, /ui answers only to a loopback host name (127.0.0.1, localhost)")
        return tenant

    def csrf(request: Request) -> str:
        return hmac.new(secret, credential(request).encode(), hashlib.sha256).hexdigest()

    def check_csrf(request: Request, form: Any) -> None:
        sent = str(form.get("csrf", ""))
        if not hmac.compare_digest(sent, csrf(request)):
            raise InvalidInput("csrf", "the form's token does not match: reload the page and try again")

    def render(request: Request, template: str, data: dict[str, Any], tenant: str | None, status: int = 200) -> Response:
        if request.query_params.get("format") == "json":
            return _json_page(data, status)
        query = {k: v for k, v in request.query_params.multi_items() if k != "format"}
        json_url = request.url.path + "?" + urlencode([*query.items(), ("format", "json")])
        html = env.get_template(template).render(
            **data, tenant=tenant, csrf=csrf(request), json_url=json_url, done=request.query_params.get("done"),
            keyed=bool(request.cookies.get(COOKIE)), path=request.url.path, query=query)
        return HTMLResponse(html, status_code=status)

    def page(build: Callable[..., tuple[str, dict[str, Any]]]) -> Callable[..., Response]:
        """A GET page: its tenant's memory, its data, its template (or JSON); errors as pages."""

        def run(request: Request, **kw: Any) -> Response:
            try:
                tenant = tenant_of(request)
                template, data = build(tenant_view(tenant), request, **kw)
                return render(request, template, data, tenant)
            except Unauthorized as e:
                return denied(request, e)
            except EideticaError as e:
                return failed(request, e)

        return run

    def denied(request: Request, e: Unauthorized) -> Response:
        if request.query_params.get("format") == "json":
            return _json_page(error_body(e), 401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        r = RedirectResponse("/ui/login?" + urlencode({"next": target}), status_code=303)
        return r

    def failed(request: Request, e: EideticaError) -> Response:
        if request.query_params.get("format") == "json":
            return _json_page(error_body(e), status_of(e))  # the API's error body
        return render(request, "error.html", {"error": error_body(e)}, None, status_of(e))

    def args(request: Request, default_limit: int = 50) -> tuple[int, int]:
        q = request.query_params
        return _inspect.page_args(q.get("offset", 0), q.get("limit", default_limit))

    # -- pages -------------------------------------------------------------------------
    @app.get("/ui", include_in_schema=False)
    def users_page(request: Request) -> Response:
        """The tenant's users, with counts and last activity."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = args(request)
            return "users.html", _inspect.users(m, offset=off, limit=lim)
        return page(build)(request)

    @app.get("/ui/users/{user}", include_in_schema=False)
    def facts_page(request: Request, user: str) -> Response:
        """A user's facts (active ones unless ``status`` says another, or ``any``; by category), paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = args(request)
            q = request.query_params
            status = q.get("status") or "active"  # what the agent sees, unless asked for more
            return "facts.html", _inspect.facts(m, user, status=None if status == "any" else status,
                                                category=q.get("category") or None, offset=off, limit=lim)
        return page(build)(request)

    @app.get("/ui/users/{user}/facts/{fact_id}", include_in_schema=False)
    def fact_page(request: Request, user: str, fact_id: str) -> Response:
        """One fact: its fields, history and source messages."""
        return page(lambda m, request: ("fact.html", _inspect.fact(m, user, fact_id)))(request)

    @app.get("/ui/users/{user}/facts/{fact_id}/audit", include_in_schema=False)
    def audit_page(request: Request, user: str, fact_id: str) -> Response:
        """A fact's audit trail from the log (``m.explain``): who, when, why, from which messages."""
        return page(lambda m, request: ("fact.html", _inspect.audit(m, user, fact_id)))(request)

    @app.get("/ui/users/{user}/sessions", include_in_schema=False)
    def sessions_page(request: Request, user: str) -> Response:
        """A user's sessions, most recent first, paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = args(request)
            return "sessions.html", _inspect.sessions(m, user, offset=off, limit=lim)
        return page(build)(request)

    @app.get("/ui/users/{user}/sessions/{session_id}", include_in_schema=False)
    def session_page(request: Request, user: str, session_id: str) -> Response:
        """A session as the agent reads it, then its stored history, paged."""
        def build(m: Memory, request: Request) -> tuple[str, dict[str, Any]]:
            off, lim = args(request)
            return "session.html", _inspect.session(m, user, session_id, offset=off, limit=lim)
        return page(build)(request)

    @app.get("/ui/search", include_in_schema=False)
    def search_page(request: Request) -> Response:
        """The search playground: a question, the options of ``search`` (or ``recall``), the hits."""
        return page(lambda m, request: ("search.html", _search(m, request)))(request)

    @app.get("/ui/health", include_in_schema=False)
    def health_page(request: Request) -> Response:
        """Projection lag, index sizes, snapshots, replicas."""
        return page(lambda m, request: ("health.html", {"stats": _inspect.health(m)}))(request)

    # -- forget, with a confirmation page --------------------------------------------------
    def forget_routes(path: str, what: str, describe: Callable[..., str], act: Callable[..., None],
                      back: Callable[..., str]) -> None:
        async def confirm(request: Request) -> Response:
            kw = dict(request.path_params)
            data = {"what": what, "describe": describe(**kw), "action": request.url.path, "cancel": back(**kw, cancel=True)}
            return page(lambda m, request: ("confirm.html", data))(request)

        async def do(request: Request) -> Response:
            import anyio

            kw = dict(request.path_params)
            form = await request.form()
            try:
                tenant = tenant_of(request)
                check_csrf(request, form)
                await anyio.to_thread.run_sync(lambda: act(tenant_view(tenant), **kw))
            except Unauthorized as e:
                return denied(request, e)
            except EideticaError as e:
                return failed(request, e)
            sep = "&" if "?" in back(**kw) else "?"
            return RedirectResponse(back(**kw) + sep + urlencode({"done": f"forgot {what} {describe(**kw)}"}), 303)

        app.add_api_route(path, confirm, methods=["GET"], include_in_schema=False)
        app.add_api_route(path, do, methods=["POST"], include_in_schema=False)

    def user_url(user: str, **_: Any) -> str:
        return f"/ui/users/{quote(user, safe='')}"

    forget_routes("/ui/users/{user}/facts/{fact_id}/forget", "fact",
                  lambda user, fact_id: fact_id, lambda m, user, fact_id: m.forget(fact_id, user=user),
                  lambda user, fact_id, cancel=False: user_url(user) + (f"/facts/{quote(fact_id, safe='')}" if cancel else ""))
    forget_routes("/ui/users/{user}/sessions/{session_id}/forget", "session",
                  lambda user, session_id: session_id,
                  lambda m, user, session_id: m.session(session_id, user=user).forget(),
                  lambda user, session_id, cancel=False: user_url(user) + "/sessions"
                  + (f"/{quote(session_id, safe='')}" if cancel else ""))
    forget_routes("/ui/users/{user}/forget", "user", lambda user: user, lambda m, user: m.forget_user(user),
                  lambda user, cancel=False: user_url(user) if cancel else "/ui")

    # -- login -------------------------------------------------------------------------
    @app.get("/ui/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        """A form that takes an API key and keeps it in a cookie for /ui."""
        return render(request, "login.html", {"next": _local(request.query_params.get("next")), "error": None}, None)

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        """Check the key; on success set the cookie and go on."""
        form = await request.form()
        key, target = str(form.get("key", "")).strip(), _local(str(form.get("next", "")))
        try:
            check_csrf(request, form)
            headers = [*request.scope["headers"], (b"authorization", f"Bearer {key}".encode("latin-1", "replace"))]
            authenticate(Request(dict(request.scope, headers=headers)))
        except EideticaError as e:
            return render(request, "login.html", {"next": target, "error": error_body(e)}, None, status_of(e))
        r = RedirectResponse(target, status_code=303)
        r.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https")
        return r

    @app.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        """Drop the cookie."""
        r = RedirectResponse("/ui/login", status_code=303)
        r.delete_cookie(COOKIE, path="/ui")
        return r


def _local(target: str | None) -> str:
    """Only a path under /ui is a place to go after login (no open redirect)."""
    return target if target and target.startswith("/ui") and not target.startswith("//") else "/ui"


def _search(m: Memory, request: Request) -> dict[str, Any]:
    """The playground's form values and, when a question was asked, the hits."""
    q = request.query_params
    form = {
        "q": q.get("q", ""), "user": q.get("user", ""), "op": q.get("op", "search"),
        "top_k": q.get("top_k", "10"), "min_score": q.get("min_score", ""), "mode": q.get("mode", "hybrid"),
        "fusion": q.get("fusion", ""), "session_id": q.get("session_id", ""),
        "exclude_session": q.get("exclude_session", ""), "category": q.get("category", ""),
        "kinds": q.getlist("kinds") or ["message", "summary"],
    }
    users = m.state.users(m.tenant)[:1000]
    data: dict[str, Any] = {"form": form, "users": users, "kinds_all": SEARCH_KINDS, "hits": None, "error": None}
    if form["q"]:
        try:
            data["hits"] = _hits(m, form)
        except InvalidInput as e:  # a bad option is shown beside the form it came from
            data["error"] = error_body(e)
    return data


def _hits(m: Memory, form: dict[str, Any]) -> list[Any]:
    """Run the playground's call with its options."""
    top_k = _number("top_k", form["top_k"], int)
    if form["op"] == "recall":
        return m.recall(form["q"], top_k, user=form["user"], category=form["category"] or None)
    kw: dict[str, Any] = {"top_k": top_k, "kinds": tuple(form["kinds"]), "mode": form["mode"]}
    if form["min_score"] != "":
        kw["min_score"] = _number("min_score", form["min_score"], float)
    for name in ("fusion", "session_id", "exclude_session"):
        if form[name]:
            kw[name] = form[name]
    return m.search(form["q"], user=form["user"], **kw)


def _number(field: str, value: str, kind: type) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(field, f"must be a number, not {value!r}") from None
