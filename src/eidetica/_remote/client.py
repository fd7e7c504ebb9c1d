"""``eidetica.connect(url, api_key=None)``: the ``eidetica.open()`` API against ``eidetica serve``.

Same method names and arguments, the same ``Hit`` / ``Message`` types, and the same
exception classes (rebuilt from the server's error body). One ``httpx.Client`` per handle
reuses connections. Retries are safe: appends carry caller-chosen event ids and
``remember`` a request id, so a request whose answer was lost is replayed without a
duplicate; a retried delete that finds nothing counts as done; other writes are retried
only when the connection was never made.

A server that cannot be reached (refused, timed out; after the retries) raises
``eidetica.Unavailable`` (``sent``: whether the request may have arrived), never an httpx error.

Read floor: every write's answer names the log offsets it reached (``_wire.WRITTEN_HEADER``);
``written`` gathers them, to pass as another handle's ``min_offset`` (another server of the same
Ray fleet, or an embedded / Ray handle) and so read this client's writes there.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import msgspec

from .._store.context import CONTEXT_TOKENS
from .._store.options import SEARCH_OPTIONS, SearchKw, SearchOptions, takes_options, wire_options
from .._store.transfer import write_export
from ..actors import STRATEGIES, Hit
from ..errors import InvalidInput, Unavailable
from ..projections._state import NoteInfo, SessionInfo
from .handles import RemoteItems, RemoteSchedules, RemoteSession
from .wire import WRITTEN_HEADER, error_from_body
from .wire import q as _q

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

__all__ = ["connect", "RemoteMemory", "RemoteSession", "RemoteSchedules", "RemoteItems"]  # handles: ``handles``

_HITS = msgspec.json.Decoder(list[Hit])
_SESSIONS = msgspec.json.Decoder(list[SessionInfo])
_NOTES = msgspec.json.Decoder(list[NoteInfo])
_WRITTEN = msgspec.json.Decoder(dict[int, int])


def _seconds(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
        raise InvalidInput(field, "must be a positive datetime.timedelta", value)
    return value.total_seconds()


def _floor(min_offset: Any) -> Any:
    """``min_offset`` for the wire: ``{partition: offset}`` with int or header-form ("0") keys, as JSON's strings.

    Offsets and partition ranges are the server's to check, exactly as ``Memory`` checks them.
    """
    if isinstance(min_offset, Mapping):
        for p in min_offset:
            if isinstance(p, bool) or not isinstance(p, (int, str)):
                raise InvalidInput("min_offset", f"partition {p!r} is not an int", dict(min_offset))
        return {str(p): o for p, o in min_offset.items()}
    return min_offset


def _unavailable(url: str, request: str, e: httpx.TransportError) -> Unavailable:
    """``Unavailable`` for a transport failure (never the raw httpx error): whether the request left decides what to retry."""
    sent = not isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
    return Unavailable(url, request, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, sent)


# TCP_NODELAY: a request's headers and body leave at once (no Nagle wait on small writes)
POOL: dict[str, Any] = {"socket_options": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                        "limits": httpx.Limits(max_keepalive_connections=32, max_connections=64)}


def connect(url: str, api_key: str | None = None, *, timeout: float = 60.0, retries: int = 3) -> RemoteMemory:
    """A client for the store served at ``url`` (``eidetica serve``), acting in ``api_key``'s tenant."""
    return RemoteMemory(url, api_key=api_key, timeout=timeout, retries=retries)


class RemoteMemory:
    """Long-term memory over HTTP: the ``Memory`` API, served by ``eidetica serve``."""

    _as_of: str | None = None  # set on a past moment's handle (``as_of``): every request carries it
    read_only = False  # as Memory's: a client writes through its server (a past moment's handle refuses writes)

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 60.0, retries: int = 3) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput("url", "must be an http:// or https:// URL", url)
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.retries = retries
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout, connect=5.0)
        self._transport, self._http = self._connection(headers)
        # Calls go straight to the transport (the same connection pool): the Client's per-request
        # cookie, auth, redirect and URL-merging work was about half of a small call's client CPU,
        # and this API uses none of it (no cookies, no redirects, the key is one fixed header).
        self._headers = list(headers.items())
        self._json_headers = self._headers + [("Content-Type", "application/json")]
        self._extensions = {"timeout": self._timeout.as_dict()}
        self._urls: dict[str, httpx.URL] = {}
        self.schedules = RemoteSchedules(self)
        self.items = RemoteItems(self)
        self._closed = False
        self._written: dict[int, int] = {}
        self._written_lock = threading.Lock()
        info = self._call("GET", "/v1/stats")
        self.tenant: str = info["tenant"]

    # -- transport ---------------------------------------------------------------------
    # The I/O is three hooks (connection, exchange, pause); ``_aclient`` overrides them to run
    # every method below on httpx's async transport, so request building, retries and error
    # mapping are written once, here.
    def _connection(self, headers: dict[str, str]) -> tuple[Any, Any]:
        """The transport (connection pool) and the client (for streamed exports)."""
        transport = httpx.HTTPTransport(**POOL)
        return transport, httpx.Client(base_url=self.url, headers=headers, timeout=self._timeout, transport=transport)

    def _exchange(self, request: httpx.Request) -> httpx.Response:
        """Send one request on the pool and read its whole answer."""
        r = self._transport.handle_request(request)
        try:
            r.read()
        finally:
            r.close()
        return r

    def _pause(self, seconds: float) -> None:
        """Wait before a retry."""
        time.sleep(seconds)

    def _send(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
              retry: str = "always", content: bytes | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        """One request with retries; ``retry``: always (idempotent), delete (NotFound after a retry is done), connect."""
        if self._closed:
            raise InvalidInput("memory", "is closed")
        if json is not None:
            try:
                content = msgspec.json.encode(json)
            except (TypeError, ValueError, OverflowError) as e:
                raise InvalidInput("body", f"cannot be sent as JSON: {e}") from None
            headers = self._json_headers
        else:
            headers = self._headers + list((headers or {}).items())
        url = self._urls.get(path)
        if url is None:
            url = httpx.URL(self.url + path)
            if len(self._urls) < 1024:  # a session's path is asked again and again; ids vary without bound
                self._urls[path] = url
        if self._as_of is not None:
            params = {**(params or {}), "as_of": self._as_of}
        if params:
            params = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in params.items() if v is not None}
            url = url.copy_merge_params(params)
        attempt = 0
        while True:
            try:
                r = self._exchange(httpx.Request(method, url, headers=headers, content=content,
                                                 extensions=self._extensions))
            except httpx.TransportError as e:
                never_sent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
                if attempt >= self.retries or (retry == "connect" and not never_sent):
                    raise _unavailable(self.url, f"{method} {path}", e) from None
                attempt += 1
                self._pause(min(2.0, 0.1 * 2**attempt))
                continue
            if r.status_code >= 400:
                if r.status_code == 404 and retry == "delete" and attempt > 0:
                    return r  # the lost first attempt did it
                try:
                    body = msgspec.json.decode(r.content)
                except (msgspec.DecodeError, ValueError):
                    body = None
                # ReplicaBehind: the server already waited its replica_timeout; the caller decides (as embedded)
                behind = isinstance(body, dict) and body.get("error") == "ReplicaBehind"
                if r.status_code in (502, 503) and attempt < self.retries and retry != "connect" and not behind:
                    attempt += 1
                    self._pause(min(2.0, 0.1 * 2**attempt))
                    continue
                raise error_from_body(r.status_code, body)
            reached = r.headers.get(WRITTEN_HEADER)
            if reached:
                self._note(reached)
            return r

    def _note(self, header: str) -> None:
        """Raise ``written`` to the offsets a write's answer reports (max per partition; threads share the handle)."""
        try:
            offsets = _WRITTEN.decode(header)
        except msgspec.DecodeError:
            return  # not ours to fail a write that succeeded over a header we cannot read
        with self._written_lock:
            for p, o in offsets.items():
                if o > self._written.get(p, -1):
                    self._written[p] = o

    @property
    def written(self) -> dict[int, int]:
        """The last log offset per partition this client's writes reached: pass it as another handle's ``min_offset``."""
        with self._written_lock:
            return dict(self._written)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        return msgspec.json.decode(self._send(method, path, **kw).content)

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Close the connections (the served store stays open)."""
        if not self._closed:
            self._closed = True
            self._http.close()

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- sessions ----------------------------------------------------------------------
    def session(self, session_id: str, *, user: str, strategy: str | None = None, buffer: int = 0,
                flush_seconds: float = 0.05) -> RemoteSession:
        """A handle on one conversation of a user (created on first append)."""
        if strategy is not None and strategy not in STRATEGIES:
            raise InvalidInput("strategy", f"must be one of {', '.join(STRATEGIES)}", strategy)
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0:
            raise InvalidInput("buffer", "must be an int >= 0", buffer)
        info = self._call("GET", f"/v1/users/{_q(user)}/sessions/{_q(session_id)}", params={"strategy": strategy})
        return RemoteSession(self, session_id, user, strategy, info["last_sequence"], buffer)

    def list_sessions(self, *, user: str | None = None) -> list[SessionInfo]:
        """Sessions of the tenant (or a user), most recently updated first."""
        return _SESSIONS.decode(self._send("GET", "/v1/sessions", params={"user": user}).content)

    def forget_session(self, session_id: str) -> None:
        """Forget a session: messages, summaries and their chunks."""
        self._send("DELETE", f"/v1/sessions/{_q(session_id)}", retry="delete")

    # -- facts -------------------------------------------------------------------------
    def remember(self, content: str, category: str = "general", *, user: str, request_id: str | None = None,
                 metadata: dict[str, Any] | None = None) -> str:
        """Store a fact about a user; returns its id (retried safely: one request id per call)."""
        body = {"content": content, "category": category, "request_id": request_id or uuid.uuid4().hex,
                "metadata": metadata}
        return self._call("POST", f"/v1/users/{_q(user)}/memories", json=body)["id"]

    def remember_many(self, items: Sequence[Any], *, user: str, request_id: str | None = None) -> list[str]:
        """Store many facts about a user in one call; returns their ids (retried safely: one request id per call)."""
        if isinstance(items, (list, tuple)):
            items = [list(x) if isinstance(x, tuple) else x for x in items]  # pairs travel as JSON arrays
        body = {"items": items, "request_id": request_id or uuid.uuid4().hex}
        return self._call("POST", f"/v1/users/{_q(user)}/memories/batch", json=body)["ids"]

    def recall(self, query: str, top_k: int = 5, *, user: str, category: str | None = None, mmr: float | None = None,
               recency_half_life: dt.timedelta | None = None, now: dt.datetime | str | None = None,
               confidence_weight: float = 0.0, min_offset: int | Mapping[int, int] | None = None,
               metadata: dict[str, Any] | None = None) -> list[Hit]:
        """The user's facts most relevant to ``query`` (``min_offset``: read at least up to another handle's ``written``)."""
        body = {"query": query, "top_k": top_k, "category": category, "mmr": mmr, "now": now,
                "recency_half_life": _seconds("recency_half_life", recency_half_life),
                "confidence_weight": confidence_weight, "min_offset": _floor(min_offset), "metadata": metadata}
        return _HITS.decode(self._send("POST", f"/v1/users/{_q(user)}/memories/recall", json=body).content)

    def list_memories(self, *, user: str, category: str | None = None, limit: int = 20,
                      metadata: dict[str, Any] | None = None) -> list[Hit]:
        """The user's active facts, strongest first (``metadata``: those holding every given key and value)."""
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidInput("metadata", f"must be a dict, not {type(metadata).__name__}")
        params = {"category": category, "limit": limit, "metadata": None if metadata is None else json.dumps(metadata)}
        r = self._send("GET", f"/v1/users/{_q(user)}/memories", params=params)
        return _HITS.decode(r.content)

    def forget(self, fact_id: str, *, user: str, request_id: str | None = None) -> None:
        """Forget one fact (the request id and the key's name are recorded)."""
        self._send("DELETE", f"/v1/users/{_q(user)}/memories/{_q(fact_id)}", retry="delete",
                   headers={"X-Request-Id": request_id} if request_id else None)

    def revert(self, *, user: str, session_id: str, since: dt.datetime | None = None, messages: bool = False) -> dict[str, Any]:
        """Retract, as events, the facts and notes a session wrote (since ``since``); idempotent."""
        body = {"since": since.isoformat() if isinstance(since, dt.datetime) else since, "messages": messages}
        return self._call("POST", f"/v1/users/{_q(user)}/sessions/{_q(session_id)}/revert", json=body)

    def as_of(self, when: Any) -> RemoteMemory:
        """The served store as it was at ``when`` (aware datetime or log offset), read-only: writes raise ``ReadOnly``."""
        if isinstance(when, dt.datetime) and when.utcoffset() is not None:
            at = when.isoformat()
        elif isinstance(when, int) and not isinstance(when, bool) and when >= 0:
            at = str(when)
        else:
            raise InvalidInput("when", "must be a timezone-aware datetime or a log offset", when)
        past = copy.copy(self)
        past._as_of = at
        past.schedules, past.items = RemoteSchedules(past), RemoteItems(past)
        past.close = lambda: None  # type: ignore[method-assign]  # it shares this handle's connections
        return past

    def reextract(self, user: str | None = None, llm: Any = None) -> dict[str, int]:
        """Run the server's extractor over the stored user messages and bring the facts in line (resumable)."""
        if llm is not None:
            raise InvalidInput("llm", "cannot cross the wire: the server's extractor runs", type(llm).__name__)
        return self._call("POST", "/v1/reextract", json={"user": user})

    def explain(self, fact_id: str, *, user: str) -> dict[str, Any]:
        """A fact's life: source messages, extractor, reinforcements, supersession, decay, pruning, deletion."""
        return self._call("GET", f"/v1/users/{_q(user)}/memories/{_q(fact_id)}/history")

    def forget_matching(self, query: str, threshold: float = 0.85, *, user: str) -> list[str]:
        """Forget every fact of a user close to ``query``; returns their ids."""
        return self._call("POST", f"/v1/users/{_q(user)}/memories/forget-matching",
                          json={"query": query, "threshold": threshold})

    def forget_user(self, user: str) -> None:
        """Forget everything about a user: facts, notes, schedules, sessions."""
        self._send("DELETE", f"/v1/users/{_q(user)}")

    # -- notes -------------------------------------------------------------------------
    def store_note(self, text: str, *, user: str, session_id: str | None = None) -> str:
        """Store a note (``session_id``: the session it is written during, whose revert deletes it); returns its id."""
        body = {"text": text} if session_id is None else {"text": text, "session_id": session_id}
        return self._call("POST", f"/v1/users/{_q(user)}/notes", json=body, retry="connect")["id"]

    def list_notes(self, *, user: str, limit: int = 20) -> list[NoteInfo]:
        """The user's notes, newest first."""
        return _NOTES.decode(self._send("GET", f"/v1/users/{_q(user)}/notes", params={"limit": limit}).content)

    def update_note(self, note_id: str, text: str, *, user: str) -> None:
        """Replace a note's text, keeping its id (a repeat writes the same text again: harmless)."""
        self._send("PATCH", f"/v1/users/{_q(user)}/notes/{_q(note_id)}", json={"text": text})

    def delete_note(self, note_id: str, *, user: str) -> None:
        """Delete a note."""
        self._send("DELETE", f"/v1/users/{_q(user)}/notes/{_q(note_id)}", retry="delete")

    # -- search ------------------------------------------------------------------------
    def participant_names(self, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations."""
        return frozenset(self._call("GET", f"/v1/users/{_q(user)}/participants"))

    @takes_options
    def search(self, query: str, *, user: str, top_k: int = 10, exclude_session: str | None = None,
               session_id: str | None = None, min_offset: int | Mapping[int, int] | None = None,
               now: dt.datetime | str | None = None, options: SearchOptions | None = None, **ranking: Unpack[SearchKw],
               ) -> list[Hit]:
        """Search a user's conversations across sessions (every option of ``Memory.search``, ``min_offset`` included)."""
        body = {"query": query, "user": user, "top_k": top_k, "exclude_session": exclude_session,
                "session_id": session_id, "now": now, "min_offset": _floor(min_offset),
                **wire_options(options or SEARCH_OPTIONS)}  # validated here: a bad value never travels
        return _HITS.decode(self._send("POST", "/v1/search", json=body).content)

    def context(self, query: str, *, user: str, max_facts: int = 10, max_tokens: int = CONTEXT_TOKENS,
                as_data: bool = False, now: dt.datetime | str | None = None) -> Any:
        """The agent's "## Relevant Memory" block for a system prompt (``as_data``: its content as a dict; ``now``: the question's time)."""
        body = {"query": query, "user": user, "max_facts": max_facts, "max_tokens": max_tokens, "as_data": as_data}
        if now is not None:  # absent: the server's wall clock, and an older server still answers
            body["now"] = now
        return self._call("POST", "/v1/context", json=body)["context"]

    # -- maintenance -------------------------------------------------------------------
    def sweep(self, now: dt.datetime | None = None) -> dict[str, int]:
        """Decay and prune facts of every user, and retry pending extractions."""
        return self._call("POST", "/v1/sweep", json={"now": now})

    def usage(self, user: str | None = None, since: dt.datetime | None = None,
              until: dt.datetime | None = None) -> dict[str, Any]:
        """What the LLM cost this tenant (the served store's ledger), by model, purpose, user and day."""
        return self._call("GET", "/v1/usage", params={"user": user, "since": since, "until": until})

    def stats(self) -> dict[str, Any]:
        """Counts and sizes of the served store, seen from this tenant."""
        return self._call("GET", "/v1/stats")

    def clear(self, sessions: bool = True, memories: bool = True) -> None:
        """Forget every session and/or every fact and note of this tenant."""
        self._send("POST", "/v1/clear", json={"sessions": sessions, "memories": memories})

    def export(self, path: str | os.PathLike[str]) -> int:
        """Write this tenant's events (JSONL, or Parquet for ``.parquet``) from the served store; returns how many."""
        try:
            with self._http.stream("GET", "/v1/export") as r:
                if r.status_code >= 400:
                    r.read()
                    raise error_from_body(r.status_code, r.json())
                return write_export((json.loads(line) for line in r.iter_lines() if line.strip()), path)
        except httpx.TransportError as e:
            raise _unavailable(self.url, "GET /v1/export", e) from None

    def import_(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Append events exported by ``export`` into this tenant; returns ``{"written", "skipped", "conflicts": [ids]}``."""
        source = Path(path)
        if not source.exists():
            raise InvalidInput("path", f"{source} does not exist")
        kind = "application/vnd.apache.parquet" if source.suffix == ".parquet" else "application/x-ndjson"
        out = self._call("POST", "/v1/import", content=source.read_bytes(), headers={"Content-Type": kind})
        return {"written": out["written"], "skipped": out["skipped"], "conflicts": list(out.get("conflicts", []))}

    def compact(self) -> dict[str, int]:
        """Erase forgotten content from the served store's disk (redacted log, fresh indices); returns the report."""
        return self._call("POST", "/v1/compact", json={})

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Have the server replay its log into fresh projections; returns events replayed (``progress`` once, at the end)."""
        n = int(self._call("POST", "/v1/rebuild", json={})["replayed"])
        if progress is not None:
            progress(n, n)
        return n

    def snapshot(self) -> str | None:
        """Have the server write a state snapshot now; returns its directory there (None when the store is empty)."""
        return self._call("POST", "/v1/snapshot", json={})["path"]

    def housekeep(self) -> dict[str, Any]:
        """Have the server write what is due now: log recovery checkpoints and the state snapshot."""
        return self._call("POST", "/v1/housekeep", json={})

    def reembed(self, embedder: Any, progress: Callable[[int, int], None] | None = None) -> int:
        """Refused over HTTP: an embedder is an object of the process that holds the store (raises ``InvalidInput``)."""
        raise InvalidInput("embedder", "reembed runs where the store is: stop the server and run "
                           "`eidetica reembed --path <store> --from <current model> --model <new model>`")

    def for_tenant(self, tenant: str) -> RemoteMemory:
        """This client for its own tenant; another tenant is refused: over HTTP the tenant comes from the API key."""
        if tenant != self.tenant:
            raise InvalidInput("tenant", f"this client acts in its key's tenant {self.tenant!r}: "
                               "connect with an API key of that tenant")
        return self

    def retry_pending(self) -> int:
        """Nothing is queued in a client (its writes are retried per call, see ``connect``): always 0."""
        return 0

    @property
    def pending_writes(self) -> int:
        """Writes waiting in this client: always 0 (a failed write raises; the server keeps no queue of the client's)."""
        return 0
