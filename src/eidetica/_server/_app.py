"""The HTTP API: the facade's methods as JSON resources (FastAPI), one tenant per API key.

Blocking work (fsync, embedding, index queries) runs in FastAPI's thread pool, so
concurrent requests still meet in the log's group commit. No request names a tenant:
it comes from the key alone (models forbid unknown fields, so a ``tenant`` field is a 400).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import ipaddress
import json
import logging
import re
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import msgspec
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import EideticaError, InvalidInput, NotFound, ReadOnly, Unauthorized
from .._asof import PastViews
from .._audit import acting
from .._context import CONTEXT_TOKENS
from ..events.streams import parse_stream
from ..memory import Memory
from ..projections._ranking import MIN_SCORE, SEARCH_KINDS
from .._transfer import event_row
from .._wire import MAX_BODY_BYTES, MAX_IMPORT_BYTES, WRITTEN_HEADER, error_body, floor_from_json, status_of
from ._keys import KeyStore

__all__ = ["create_app", "is_loopback"]

log = logging.getLogger("eidetica.server")


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


def _wrote(m: Memory, obj: Any, status: int = 200, written: dict[int, int] | None = None) -> Response:
    """A write's answer, with the offsets the serving handle's writes reached right after it (``Eidetica-Written``).

    ``m.written`` covers this write (its offsets are noted before the write returns) and holds
    committed offsets only; a client folds it into its ``written`` (another handle's ``min_offset``).
    """
    r = _json(obj, status)
    r.headers[WRITTEN_HEADER] = msgspec.json.encode(m.written if written is None else written).decode()
    return r


def _err(e: BaseException) -> Response:
    return _json(error_body(e), status_of(e))


class _Body(BaseModel):
    """Request bodies: unknown fields are refused (a typo, or an attempt to name a tenant)."""

    model_config = ConfigDict(extra="forbid")


class MessageIn(_Body):
    """One message to append; ``event_id`` (a UUID) makes a retried append idempotent."""

    role: Any = None
    content: Any = None
    metadata: Any = None
    time: Optional[dt.datetime] = None
    sequence: Any = None
    event_id: Optional[uuid.UUID] = None


class AppendIn(_Body):
    """Messages appended in one atomic write."""

    messages: list[MessageIn]
    strategy: Optional[str] = None


class _MessageWire(msgspec.Struct, forbid_unknown_fields=True):
    """``MessageIn`` for the lean append path (msgspec decodes; the facade validates values)."""

    role: Any = None
    content: Any = None
    metadata: Any = None
    time: Optional[dt.datetime] = None
    sequence: Any = None
    event_id: Optional[uuid.UUID] = None


class _AppendWire(msgspec.Struct, forbid_unknown_fields=True):
    """``AppendIn`` for the lean append path."""

    messages: list[_MessageWire]
    strategy: Optional[str] = None


_APPEND_BODY = msgspec.json.Decoder(_AppendWire)
_APPEND_PATH = re.compile(r"/v1/users/([^/]+)/sessions/([^/]+)/messages")  # the route's path, {param} = [^/]+
_WIRE_FIELD = re.compile(r"Object (?:contains unknown|missing required) field `([^`]*)`")


def _wire_error(e: msgspec.ValidationError) -> InvalidInput:
    """The InvalidInput a schema error of the lean path is: the top-level field, the rest as "(at ...)"."""
    problem, _, at = str(e).partition(" - at `")
    loc = re.findall(r"[^.\[\]$`]+", at)
    named = _WIRE_FIELD.match(problem)
    if named:
        loc.append(named.group(1))
    field = loc[0] if loc and not loc[0].isdigit() else "body"
    rest = ".".join(loc[1:])
    return InvalidInput(field, problem + (f" (at {rest})" if rest else ""))


def _is_json(content_type: bytes | None) -> bool:
    """As FastAPI (strict content type) decides: application/json or application/*+json."""
    if not content_type:
        return False
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


class RememberIn(_Body):
    """A fact; ``request_id`` makes a retried call return the first call's fact id."""

    content: Any = None
    category: Any = "general"
    request_id: Optional[str] = None
    metadata: Any = None


class RememberManyIn(_Body):
    """Many facts in one embedding batch and one commit; ``request_id`` makes a retry return the first ids."""

    items: Any = None
    request_id: Optional[str] = None


class RecallIn(_Body):
    """A recall query and its re-ranking options (``recency_half_life`` in seconds)."""

    query: Any = None
    top_k: Any = 5
    category: Any = None
    mmr: Any = None
    recency_half_life: Optional[float] = None
    now: Optional[dt.datetime] = None
    confidence_weight: Any = 0.0
    min_offset: Any = None
    metadata: Any = None


class SearchIn(_Body):
    """A cross-session search of one user's conversations (options as ``Memory.search``)."""

    query: Any = None
    user: Any = None
    top_k: Any = 10
    exclude_session: Any = None
    session_id: Any = None
    min_score: Any = MIN_SCORE
    kinds: Any = SEARCH_KINDS
    mode: Any = "hybrid"
    names: Any = True
    candidates: Any = 50
    vector_weight: Any = None
    neighbors: Any = 0.0
    session_weight: Any = 0.0
    mmr: Any = None
    recency_half_life: Optional[float] = None
    now: Optional[dt.datetime] = None
    confidence_weight: Any = 0.0
    speaker_weight: Any = 0.0
    time_weight: Any = None
    fusion: Any = None
    min_offset: Any = None


class ContextIn(_Body):
    """A "## Relevant Memory" block request."""

    query: Any = None
    user: Any = None
    max_facts: Any = 10
    max_tokens: Any = CONTEXT_TOKENS
    as_data: Any = False


class ForgetMatchingIn(_Body):
    """Forget every fact close to ``query``."""

    query: Any = None
    threshold: Any = 0.85


class NoteIn(_Body):
    """A note's text."""

    text: Any = None


class NewNoteIn(NoteIn):
    """A new note: its text and the session it is written during (a revert of that session deletes it)."""

    session_id: Any = None


class SummarizeIn(_Body):
    """Roll old turns into the summary now."""

    force: Any = True


class ReextractIn(_Body):
    """Run the server's extractor again over the stored user messages (of one user, or all)."""

    user: Optional[str] = None


class RevertIn(_Body):
    """Retract what a session's messages wrote (since a time); ``messages`` takes them back too."""

    since: Optional[dt.datetime] = None
    messages: Any = False


class ScheduleIn(_Body):
    """A new schedule."""

    name: Any = None
    cadence: Any = None
    expression: Any = None
    user: Any = None
    timezone: Any = "UTC"
    payload: Any = None


class ScheduleChangeIn(_Body):
    """Changes to a schedule."""

    user: Any = None
    name: Any = None
    cadence: Any = None
    expression: Any = None
    timezone: Any = None
    payload: Any = None
    enabled: Any = None


class RunIn(_Body):
    """A recorded run of a schedule."""

    run: Any = None
    next_run_at: Optional[dt.datetime] = None
    user: Any = None


class SweepIn(_Body):
    """Decay/prune facts as of ``now``."""

    now: Optional[dt.datetime] = None


class ClearIn(_Body):
    """What ``clear`` forgets."""

    sessions: bool = True
    memories: bool = True


def _set(model: BaseModel) -> dict[str, Any]:
    """The fields the caller sent (the facade's defaults apply to the rest)."""
    out = model.model_dump(exclude_unset=True)
    if out.get("recency_half_life") is not None:
        out["recency_half_life"] = dt.timedelta(seconds=out["recency_half_life"])
    if "min_offset" in out:
        out["min_offset"] = floor_from_json(out["min_offset"])
    return out


def _session_info(h: Any) -> dict[str, Any]:
    return {"session_id": h.session_id, "user": h.user, "last_sequence": h._run_start, "messages": len(h)}


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

    pasts = PastViews()

    async def mem(request: Request) -> Memory:
        m = tenant_view(authenticate(request))
        at = request.query_params.get("as_of")  # a read as of a past moment: a read-only view (writes: ReadOnly)
        return m if at is None else await asyncio.to_thread(pasts.get, m, at)

    M = Depends(mem)

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

    # -- health ------------------------------------------------------------------------
    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz() -> Response:
        """The store is open and its indices have applied every committed event."""
        try:
            memory._sync()
            lag = memory.projector.lag() if hasattr(memory.projector, "lag") else {}
        except Exception as e:  # noqa: BLE001 - not ready is an answer, not a crash
            return _json({"status": "not ready", "problem": type(e).__name__}, 503)
        behind = sum(lag.values()) if isinstance(lag, dict) else 0
        return _json({"status": "ready" if not behind else "catching up", "lag": lag}, 200 if not behind else 503)

    # -- sessions ----------------------------------------------------------------------
    S = "/v1/users/{user}/sessions/{session_id}"

    @app.get(S, tags=["sessions"])
    def session_info(user: str, session_id: str, strategy: Optional[str] = None, m: Memory = M) -> Response:
        """Open a session handle: its owner is checked; returns the last sequence and message count."""
        return _json(_session_info(m.session(session_id, user=user, strategy=strategy)))

    @app.post(S + "/messages", tags=["sessions"], status_code=201)
    def append_messages(user: str, session_id: str, body: AppendIn, m: Memory = M) -> Response:
        """Append one or many messages atomically (idempotent by each message's ``event_id``)."""
        if not body.messages:
            raise InvalidInput("messages", "must be a non-empty list")
        h = m.session(session_id, user=user, strategy=body.strategy)
        items = [msg.model_dump() for msg in body.messages]
        return _wrote(m, {"offset": h.extend(items)}, 201)

    async def append_lean(scope: dict[str, Any], receive: Any, send: Any, user: str, session_id: str) -> None:
        """``append_messages`` without FastAPI's per-request machinery (the hot path of every agent).

        Same contract as the documented route above (which stays for the OpenAPI document):
        the key decides the tenant, unknown fields are refused, a bad field is named, and the
        write runs in the append pool with one hop.
        """
        try:
            tenant = authenticate(Request(scope))
            if b"as_of=" in scope.get("query_string", b""):
                raise ReadOnly("the store as of a past moment")
            chunks = []
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            if not _is_json(dict(scope["headers"]).get(b"content-type")):
                raise InvalidInput("body", "must be JSON (Content-Type: application/json)")
            try:
                body = _APPEND_BODY.decode(b"".join(chunks))
            except msgspec.ValidationError as e:
                raise _wire_error(e) from None
            except msgspec.DecodeError as e:
                raise InvalidInput("body", f"JSON decode error: {e}") from None
            if not body.messages:
                raise InvalidInput("messages", "must be a non-empty list")
            items = [msgspec.structs.asdict(msg) for msg in body.messages]
            m = tenant_view(tenant)
            def write() -> tuple[int, dict[int, int]]:
                offset = m.session(session_id, user=user, strategy=body.strategy).extend(items)
                return offset, m.written  # taken right after the write, on its thread

            offset, written = await asyncio.get_running_loop().run_in_executor(writers, write)
            response = _wrote(m, {"offset": offset}, 201, written)
        except EideticaError as e:
            response = _err(e)
        except _TooLarge:
            raise
        except Exception as e:  # noqa: BLE001 - a client never sees a traceback
            log.exception("eidetica: unexpected error on POST %s", scope["path"])
            response = _err(e)
        await response(scope, receive, send)

    # Appends get their own pool: a plain executor hop costs a third of anyio's (measured: 15 vs
    # 45 us of CPU with 16 in flight), and concurrent appends still meet in the log's group commit.
    writers = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="eidetica-append")
    app.state.append_lean = append_lean

    def existing(m: Memory, session_id: str, user: str) -> Any:
        """The handle of a session that holds messages; ``NotFound`` (404) for a missing one: a typo is not an empty session."""
        h = m.session(session_id, user=user)
        if not (h._actor.started or len(h)):
            raise NotFound("session", session_id)
        return h

    @app.get(S + "/messages", tags=["sessions"])
    def history(user: str, session_id: str, limit: Optional[int] = Query(None), m: Memory = M) -> Response:
        """Stored messages, oldest first (the last ``limit``); 404 for a session with none."""
        return _json(existing(m, session_id, user).history(limit))

    @app.get(S + "/read", tags=["sessions"])
    def read(user: str, session_id: str, strategy: Optional[str] = None, window: Optional[int] = None,
             token_budget: Optional[int] = None, m: Memory = M) -> Response:
        """Messages for the LLM: rolling summary first, then recent turns within the budget; 404 for a session with none."""
        h = m.session(session_id, user=user)
        out = h.read(strategy=strategy, window=window, token_budget=token_budget)  # checks the options first
        existing(m, session_id, user)
        return _json(out)

    @app.get(S + "/summary", tags=["sessions"])
    def summary(user: str, session_id: str, m: Memory = M) -> Response:
        """The latest rolling summary (null when none); 404 for a session with no messages."""
        return _json({"summary": existing(m, session_id, user).summary()})

    @app.post(S + "/summarize", tags=["sessions"])
    def summarize(user: str, session_id: str, body: SummarizeIn = Body(SummarizeIn()), m: Memory = M) -> Response:
        """Roll old turns into the summary now."""
        return _wrote(m, {"committed": m.session(session_id, user=user).summarize(**_set(body))})

    @app.get(S + "/restore", tags=["sessions"])
    def restore(user: str, session_id: str, token_budget: Optional[int] = None, m: Memory = M) -> Response:
        """Resume: the last messages that fit ``token_budget``; 404 for a session with none."""
        h = m.session(session_id, user=user)
        out = h.restore(token_budget)  # checks the budget first
        existing(m, session_id, user)
        return _json(out)

    @app.delete(S, tags=["sessions"])
    def forget_user_session(user: str, session_id: str, m: Memory = M) -> Response:
        """Forget this session (messages, summaries, their chunks); 404, writing nothing, for a missing one."""
        m.session(session_id, user=user).forget()
        return _wrote(m, {"forgotten": session_id})

    @app.get("/v1/sessions", tags=["sessions"])
    def list_sessions(user: Optional[str] = None, m: Memory = M) -> Response:
        """Sessions of the tenant (or one user), most recently updated first."""
        return _json(m.list_sessions(user=user))

    @app.delete("/v1/sessions/{session_id}", tags=["sessions"])
    def forget_session(session_id: str, m: Memory = M) -> Response:
        """Forget a session, whoever it belongs to in this tenant."""
        m.forget_session(session_id)
        return _wrote(m, {"forgotten": session_id})

    # -- memories ----------------------------------------------------------------------
    U = "/v1/users/{user}"

    @app.post(U + "/memories", tags=["memories"], status_code=201)
    def remember(user: str, body: RememberIn, m: Memory = M) -> Response:
        """Store a fact (a restatement reinforces the existing one and returns its id)."""
        fid = m.remember(body.content, body.category, user=user, request_id=body.request_id, metadata=body.metadata)
        return _wrote(m, {"id": fid}, 201)

    @app.post(U + "/memories/batch", tags=["memories"], status_code=201)
    def remember_many(user: str, body: RememberManyIn, m: Memory = M) -> Response:
        """Store many facts at once (strings, [content, category] pairs or {content, category} objects)."""
        return _wrote(m, {"ids": m.remember_many(body.items, user=user, request_id=body.request_id)}, 201)

    @app.get(U + "/memories", tags=["memories"])
    def list_memories(user: str, category: Optional[str] = None, limit: int = 20, metadata: Optional[str] = None,
                      m: Memory = M) -> Response:
        """The user's active facts, strongest first (``metadata``: a JSON object every listed fact's metadata holds)."""
        try:
            want = None if metadata is None else json.loads(metadata)
        except ValueError:
            raise InvalidInput("metadata", "must be a JSON object", metadata) from None
        return _json(m.list_memories(user=user, category=category, limit=limit, metadata=want))

    @app.post(U + "/memories/recall", tags=["memories"])
    def recall(user: str, body: RecallIn, m: Memory = M) -> Response:
        """The user's facts most relevant to the query."""
        kw = _set(body)
        return _json(m.recall(kw.pop("query", None), user=user, **kw))

    def asking(request: Request) -> Any:
        """Record who asks (the API key's name) and the request id on the deletions this request makes."""
        auth = request.headers.get("authorization", "")
        name = keys.name_of(auth[7:].strip()) if keys is not None and auth[:7].lower() == "bearer " else ""
        return acting(name, request.headers.get("x-request-id") or uuid.uuid4().hex)

    @app.delete(U + "/memories/{fact_id}", tags=["memories"])
    def forget(user: str, fact_id: str, request: Request, m: Memory = M) -> Response:
        """Forget one fact (the key's name and the request id are recorded: its history shows them)."""
        with asking(request):
            m.forget(fact_id, user=user)
        return _wrote(m, {"forgotten": fact_id})

    @app.post(U + "/sessions/{session_id}/revert", tags=["memories"])
    def revert(user: str, session_id: str, request: Request, body: RevertIn = Body(RevertIn()), m: Memory = M) -> Response:
        """Retract every fact and note the session wrote (since ``since``); reverting twice changes nothing."""
        with asking(request):
            return _wrote(m, m.revert(user=user, session_id=session_id, since=body.since, messages=body.messages))

    @app.delete("/v1/users/{user}/sessions/{session_id}/messages/{sequence}", tags=["sessions"])
    def forget_message(user: str, session_id: str, sequence: int, request: Request, m: Memory = M) -> Response:
        """Forget one message and what was derived from it alone (facts, its part of the summary)."""
        with asking(request):
            return _wrote(m, m.session(session_id, user=user).forget_message(sequence))

    @app.post("/v1/reextract", tags=["memories"])
    def reextract(body: ReextractIn = Body(ReextractIn()), m: Memory = M) -> Response:
        """Bring the facts in line with the server's extractor run over the stored user messages (resumable)."""
        return _wrote(m, m.reextract(user=body.user))

    @app.get(U + "/memories/{fact_id}/history", tags=["memories"])
    def fact_history(user: str, fact_id: str, m: Memory = M) -> Response:
        """A fact's life: source messages, extractor, reinforcements, supersession, decay, pruning, deletion."""
        return _json(m.explain(fact_id, user=user))

    @app.post(U + "/memories/forget-matching", tags=["memories"])
    def forget_matching(user: str, body: ForgetMatchingIn, m: Memory = M) -> Response:
        """Forget every fact of the user close to the query; returns their ids."""
        return _wrote(m, m.forget_matching(body.query, body.threshold, user=user))

    @app.delete(U, tags=["memories"])
    def forget_user(user: str, m: Memory = M) -> Response:
        """Forget everything about a user: facts, notes, schedules, sessions."""
        m.forget_user(user)
        return _wrote(m, {"forgotten": user})

    @app.get(U + "/participants", tags=["search"])
    def participants(user: str, m: Memory = M) -> Response:
        """Names of the participants of the user's conversations."""
        return _json(sorted(m.participant_names(user)))

    # -- notes -------------------------------------------------------------------------
    @app.post(U + "/notes", tags=["notes"], status_code=201)
    def store_note(user: str, body: NewNoteIn, m: Memory = M) -> Response:
        """Store a note (linked to ``session_id`` when given); returns its id."""
        return _wrote(m, {"id": m.store_note(body.text, user=user, session_id=body.session_id)}, 201)

    @app.get(U + "/notes", tags=["notes"])
    def list_notes(user: str, limit: int = 20, m: Memory = M) -> Response:
        """The user's notes, newest first."""
        return _json(m.list_notes(user=user, limit=limit))

    @app.patch(U + "/notes/{note_id}", tags=["notes"])
    def update_note(user: str, note_id: str, body: NoteIn, m: Memory = M) -> Response:
        """Replace a note's text, keeping its id."""
        m.update_note(note_id, body.text, user=user)
        return _wrote(m, {"updated": note_id})

    @app.delete(U + "/notes/{note_id}", tags=["notes"])
    def delete_note(user: str, note_id: str, m: Memory = M) -> Response:
        """Delete a note."""
        m.delete_note(note_id, user=user)
        return _wrote(m, {"deleted": note_id})

    # -- search ------------------------------------------------------------------------
    @app.post("/v1/search", tags=["search"])
    def search(body: SearchIn, m: Memory = M) -> Response:
        """Search a user's conversations across sessions (hybrid vector + full text)."""
        kw = _set(body)
        for pair in ("kinds", "neighbors"):  # JSON arrays: the facade's tuples
            if isinstance(kw.get(pair), list):
                kw[pair] = tuple(kw[pair])
        if kw.get("vector_weight", 0) is None:
            kw.pop("vector_weight")
        return _json(m.search(kw.pop("query", None), user=kw.pop("user", None), **kw))

    @app.post("/v1/context", tags=["search"])
    def context(body: ContextIn, m: Memory = M) -> Response:
        """The agent's "## Relevant Memory" block for a system prompt (``as_data``: its content as JSON)."""
        kw = _set(body)
        return _json({"context": m.context(kw.pop("query", None), user=kw.pop("user", None), **kw)})

    # -- schedules ---------------------------------------------------------------------
    @app.post("/v1/schedules", tags=["schedules"], status_code=201)
    def create_schedule(body: ScheduleIn, m: Memory = M) -> Response:
        """Create a schedule."""
        kw = _set(body)
        args = [kw.pop(k, None) for k in ("name", "cadence", "expression")]
        return _wrote(m, m.schedules.create(*args, user=kw.pop("user", None), **kw), 201)

    @app.get("/v1/schedules", tags=["schedules"])
    def search_schedules(query: str = "", user: Optional[str] = None, limit: int = 20, offset: int = 0,
                         status: Optional[str] = None, m: Memory = M) -> Response:
        """Schedules whose name or payload contains ``query`` (all when empty), oldest first; ``/count`` gives the total."""
        if not query:
            return _json(m.schedules.list_all(user=user, limit=limit, offset=offset, status=status))
        return _json(m.schedules.search(query, user=user, limit=limit, offset=offset, status=status))

    @app.get("/v1/schedules/count", tags=["schedules"])
    def count_schedules(user: Optional[str] = None, query: Optional[str] = None, status: Optional[str] = None,
                        m: Memory = M) -> Response:
        """How many schedules (of a user, or the tenant; matching ``query`` and ``status``)."""
        return _json({"count": m.schedules.count(user=user, query=query, status=status)})

    @app.get("/v1/schedules/due", tags=["schedules"])
    def due(now: Optional[dt.datetime] = None, limit: int = 100, m: Memory = M) -> Response:
        """Enabled schedules due at ``now``, soonest first."""
        return _json(m.schedules.due(now, limit))

    @app.get("/v1/schedules/{schedule_id}", tags=["schedules"])
    def get_schedule(schedule_id: str, user: Optional[str] = None, history: Optional[int] = None,
                     m: Memory = M) -> Response:
        """One schedule with its last ``history`` runs (each with its full output)."""
        return _json(m.schedules.get(schedule_id, user=user, history=history))

    @app.patch("/v1/schedules/{schedule_id}", tags=["schedules"])
    def update_schedule(schedule_id: str, body: ScheduleChangeIn, m: Memory = M) -> Response:
        """Change a schedule; its next run is recomputed."""
        kw = _set(body)
        return _wrote(m, m.schedules.update(schedule_id, user=kw.pop("user", None), **kw))

    @app.delete("/v1/schedules/{schedule_id}", tags=["schedules"])
    def delete_schedule(schedule_id: str, user: Optional[str] = None, m: Memory = M) -> Response:
        """Delete a schedule."""
        m.schedules.delete(schedule_id, user=user)
        return _wrote(m, {"deleted": schedule_id})

    @app.post("/v1/schedules/{schedule_id}/runs", tags=["schedules"])
    def record_run(schedule_id: str, body: RunIn, m: Memory = M) -> Response:
        """Record that a schedule ran."""
        return _wrote(m, m.schedules.record_run(schedule_id, body.run, body.next_run_at, user=body.user))

    # -- maintenance -------------------------------------------------------------------
    @app.post("/v1/sweep", tags=["maintenance"])
    def sweep(body: SweepIn = Body(SweepIn()), m: Memory = M) -> Response:
        """Decay and prune facts, retry pending extractions."""
        return _wrote(m, m.sweep(body.now))

    @app.get("/v1/usage", tags=["maintenance"])
    def usage(user: Optional[str] = None, since: Optional[dt.datetime] = None, until: Optional[dt.datetime] = None,
              m: Memory = M) -> Response:
        """What the LLM cost this tenant: calls and tokens by model, purpose, user and day (``until`` exclusive)."""
        return _json(m.usage(user=user, since=since, until=until))

    @app.get("/v1/stats", tags=["maintenance"])
    def stats(m: Memory = M) -> Response:
        """This tenant's counts (events, streams, sessions, facts); the whole store's only without keys (loopback)."""
        if keys is not None and keys.active():
            return _json(_tenant_stats(m))
        return _json(m.stats())

    @app.post("/v1/clear", tags=["maintenance"])
    def clear(body: ClearIn = Body(ClearIn()), m: Memory = M) -> Response:
        """Forget every session and/or every fact and note of this tenant."""
        m.clear(sessions=body.sessions, memories=body.memories)
        return _wrote(m, {"cleared": True})

    @app.post("/v1/compact", tags=["maintenance"])
    def compact(m: Memory = M) -> Response:
        """Erase forgotten content from disk (the whole store's: redacted log, fresh indices); returns the report."""
        return _wrote(m, m.compact())

    @app.post("/v1/rebuild", tags=["maintenance"])
    def rebuild(m: Memory = M) -> Response:
        """Drop the projections and replay the log into them; returns how many events were replayed."""
        return _json({"replayed": m.rebuild()})

    @app.post("/v1/snapshot", tags=["maintenance"])
    def snapshot(m: Memory = M) -> Response:
        """Write a snapshot of the in-memory state now; returns its directory (null when the store is empty)."""
        return _json({"path": m.snapshot()})

    @app.post("/v1/housekeep", tags=["maintenance"])
    def housekeep(m: Memory = M) -> Response:
        """Write what is due now: the log's recovery checkpoints and the state snapshot."""
        return _json(m.housekeep())

    @app.get("/v1/export", tags=["maintenance"])
    def export(m: Memory = M) -> StreamingResponse:
        """This tenant's events as a JSONL stream (the format ``POST /v1/import`` reads)."""

        def rows() -> Iterator[bytes]:
            for e in m._tenant_events():
                yield (json.dumps(event_row(e), ensure_ascii=False) + "\n").encode()

        return StreamingResponse(rows(), media_type="application/x-ndjson")

    @app.post("/v1/import", tags=["maintenance"])
    async def import_(request: Request, m: Memory = M) -> Response:
        """Append exported events (JSONL body, or Parquet with ``Content-Type: application/vnd.apache.parquet``)."""
        import anyio

        parquet = "parquet" in request.headers.get("content-type", "")
        with tempfile.TemporaryDirectory() as d:
            target = Path(d) / ("import.parquet" if parquet else "import.jsonl")
            with target.open("wb") as f:
                try:
                    async for chunk in request.stream():
                        f.write(chunk)
                except _TooLarge:  # a chunked body past the limit: stop reading, refuse
                    return _too_large(request.scope[TOO_LARGE])
            try:
                n = await anyio.to_thread.run_sync(m.import_, target)
            except InvalidInput as e:
                if e.field != "path":
                    raise
                raise InvalidInput("body", e.problem) from None  # the temporary file is no concern of the client's
        return _wrote(m, n)  # {"written": ..., "skipped": ..., "conflicts": [...]}

    _item_routes(app, M)
    from ._ui import mount_ui  # the inspector pages (/ui), same keys and tenant views

    mount_ui(app, memory, is_loopback)
    return app


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


_TENANT_STATS = ("tenant", "sessions", "facts", "embedder")  # of Memory.stats(): the figures that are the tenant's own


def _tenant_stats(m: Memory) -> dict[str, Any]:
    """What a tenant's key may see of ``stats``: its own events and streams, sessions and facts.

    The store-wide figures (every tenant's events, log bytes, index rows, lag, snapshots,
    process counters) are the operator's: they tell one tenant how much the others write.
    """
    full = m.stats()
    streams = [s for s in m.log.streams() if parse_stream(s)[1] == m.tenant]  # type: ignore[attr-defined]
    return {**{k: full[k] for k in _TENANT_STATS}, "events": sum(m.log.stream_version(s) + 1 for s in streams),
            "streams": len(streams)}


# -- items: the key-value store under framework adapters (LangGraph BaseStore) -------------------
class ItemsPutIn(_Body):
    """Item writes (``Memory.items.put``): namespace, key, value (null deletes), user, texts, ttl."""

    ops: Any = None


class ItemGetIn(_Body):
    """One item by namespace and key."""

    namespace: Any = None
    key: Any = None
    refresh_ttl: Any = False
    omit_expired: Any = False


class ItemSearchIn(_Body):
    """Items under a namespace prefix, filtered (LangGraph's operators, as data), ranked by a query."""

    prefix: Any = ()
    query: Any = None
    filter: Any = None
    limit: Any = 10
    offset: Any = 0
    refresh_ttl: Any = False
    omit_expired: Any = False


class ItemRefIn(_Body):
    """An item named by namespace and key."""

    namespace: Any = None
    key: Any = None


class ItemTouchIn(_Body):
    """Items whose TTL to refresh."""

    items: list[ItemRefIn]


def _item_routes(app: FastAPI, M: Any) -> None:
    """``/v1/items``: ``Memory.items`` over HTTP, in the key's tenant; plus a session's ``pop``
    (what the Agents SDK session's ``pop_item`` calls)."""

    @app.post("/v1/items", tags=["items"], status_code=201)
    def put_items(body: ItemsPutIn, m: Memory = M) -> Response:
        """Put or delete many items in one call per owning user; returns the last offset."""
        return _wrote(m, {"offset": m.items.put(body.ops)}, 201)

    @app.post("/v1/items/get", tags=["items"])
    def get_item(body: ItemGetIn, m: Memory = M) -> Response:
        """The item at (namespace, key), or null."""
        found = m.items.get(body.namespace, body.key, refresh_ttl=body.refresh_ttl, omit_expired=body.omit_expired)
        return _wrote(m, found) if body.refresh_ttl else _json(found)  # refreshing a TTL writes

    @app.post("/v1/items/search", tags=["items"])
    def search_items(body: ItemSearchIn, m: Memory = M) -> Response:
        """``[item, score]`` pairs: hybrid search with a query, else newest update first."""
        kw = _set(body)
        found = m.items.search(kw.pop("prefix", ()), **kw)
        return _wrote(m, found) if body.refresh_ttl else _json(found)  # refreshing a TTL writes

    @app.get("/v1/items/namespaces", tags=["items"])
    def item_namespaces(omit_expired: bool = False, m: Memory = M) -> Response:
        """Namespaces holding at least one item (with ``omit_expired``, one not expired), sorted."""
        return _json(m.items.namespaces(omit_expired=omit_expired))

    @app.get("/v1/items/embedder", tags=["items"])
    def item_embedder(m: Memory = M) -> Response:
        """The model id and dimension item texts are embedded with."""
        model_id, dim = m.items.embedder()
        return _json({"model_id": model_id, "dim": dim})

    @app.post("/v1/items/touch", tags=["items"])
    def touch_items(body: ItemTouchIn, m: Memory = M) -> Response:
        """Refresh the TTL of these items (those that exist); returns how many were found."""
        found = [it for it in (m.items.get(r.namespace, r.key) for r in body.items) if it is not None]
        m.items.touch(found)
        return _wrote(m, {"touched": len(found)})

    @app.post("/v1/items/sweep", tags=["items"])
    def sweep_items(body: SweepIn = Body(SweepIn()), m: Memory = M) -> Response:
        """Delete every expired item of the tenant; returns how many."""
        return _wrote(m, {"deleted": m.items.sweep(body.now)})

    @app.post("/v1/users/{user}/sessions/{session_id}/pop", tags=["sessions"])
    def pop_message(user: str, session_id: str, m: Memory = M) -> Response:
        """Take back the session's last message (``MessageRetracted``); returns it, null when empty."""
        return _wrote(m, m.session(session_id, user=user).pop())


class Guard:
    """ASGI wrapper: body-size limits, the MCP mount at /mcp (same keys), and both lifespans."""

    def __init__(self, app: FastAPI, mcp_app: Any = None, mcp_server: Any = None, *,
                 max_body_bytes: int = MAX_BODY_BYTES, max_import_bytes: int = MAX_IMPORT_BYTES) -> None:
        self.app = app
        self.mcp_app = mcp_app
        self.mcp_server = mcp_server
        self.append_lean = getattr(app.state, "append_lean", None)
        self.max_body_bytes = max_body_bytes
        self.max_import_bytes = max_import_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Route a request (or the lifespan) to the API or the MCP app."""
        if scope["type"] == "lifespan":
            return await self._lifespan(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_import_bytes if scope["path"] == "/v1/import" else self.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await _send(send, _too_large(limit))
        receive = _limited(receive, limit, scope)
        if self.mcp_app is not None and (scope["path"] == "/mcp" or scope["path"].startswith("/mcp/")):
            from starlette.requests import Request as _Req

            try:
                tenant = self.app.state.authenticate(_Req(scope))
            except EideticaError as e:
                return await _send(send, _err(e))
            scope = dict(scope, eidetica_tenant=tenant)
            return await self.mcp_app(scope, receive, send)
        try:
            lean = _APPEND_PATH.fullmatch(scope["path"]) if scope["method"] == "POST" and self.append_lean else None
            if lean is not None:
                await self.append_lean(scope, receive, send, lean.group(1), lean.group(2))
            else:
                await self.app(scope, receive, send)
        except _TooLarge:
            await _send(send, _too_large(limit))

    async def _lifespan(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        if self.mcp_server is not None:
            async with self.mcp_server.session_manager.run():
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
        else:
            await send({"type": "lifespan.startup.complete"})
            await receive()
        await send({"type": "lifespan.shutdown.complete"})


def _too_large(limit: int) -> Response:
    return _json(error_body(InvalidInput("body", f"is larger than the limit of {limit} bytes")), 413)


TOO_LARGE = "eidetica.too_large"  # set in a request's scope (to the limit) once its body passed it


class _TooLarge(Exception):
    pass


def _limited(receive: Any, limit: int, scope: dict[str, Any]) -> Any:
    """A receive that stops a chunked body once it passes ``limit`` bytes (and marks the scope: FastAPI
    turns an error while it reads a body into a 400, which the handlers turn back into this 413)."""
    seen = 0

    async def inner() -> dict[str, Any]:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                scope[TOO_LARGE] = limit
                raise _TooLarge()
        return message

    return inner


async def _send(send: Any, response: Response) -> None:
    await response({"type": "http"}, None, send)  # type: ignore[arg-type]
