"""The handles a ``RemoteMemory`` gives out: a conversation (``RemoteSession``), ``schedules``
(``RemoteSchedules``) and ``items`` (``RemoteItems``), each the embedded object's API over HTTP
through its memory's ``_send`` (retries, errors, the ``written`` floor live there, in ``client``)."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Protocol

import msgspec

from ..actors import Message
from ..actors.schedules import ScheduleInfo
from ..errors import InvalidInput, NotFound
from ..projections._state import ItemInfo
from .wire import q as _q

__all__ = ["RemoteSession", "RemoteSchedules", "RemoteItems"]

_MESSAGES = msgspec.json.Decoder(list[Message])


class RemoteMemory(Protocol):
    """What a handle asks of its ``client.RemoteMemory`` (named so, not imported: the client imports this module)."""

    def _send(self, method: str, path: str, **kw: Any) -> Any: ...

    def _call(self, method: str, path: str, **kw: Any) -> Any: ...


class _Run(msgspec.Struct):
    """The typed fields of a schedule run as JSON carries them (the rest of the run stays as sent)."""

    run_at: dt.datetime | None = None
    run_at_local: dt.datetime | None = None


def _typed_runs(s: ScheduleInfo) -> ScheduleInfo:
    """A schedule whose runs carry datetimes, as ``Memory.schedules`` gives them (JSON made them strings)."""
    runs = []
    for r in s.runs:
        times = msgspec.convert({k: r[k] for k in ("run_at", "run_at_local") if k in r}, _Run)
        runs.append(dict(r, **{k: getattr(times, k) for k in ("run_at", "run_at_local") if k in r}))
    return msgspec.structs.replace(s, runs=runs)


class _ScheduleDecoder:
    """Schedules from JSON with typed run times."""

    def __init__(self, kind: Any) -> None:
        self._dec = msgspec.json.Decoder(kind)

    def decode(self, content: bytes) -> Any:
        """Decode one schedule or a list of them."""
        out = self._dec.decode(content)
        return [_typed_runs(s) for s in out] if isinstance(out, list) else _typed_runs(out)


_SCHEDULE = _ScheduleDecoder(ScheduleInfo)
_SCHEDULES = _ScheduleDecoder(list[ScheduleInfo])
_ITEM = msgspec.json.Decoder(Optional[ItemInfo])  # noqa: UP045 (a runtime type expression)
_FOUND = msgspec.json.Decoder(list[tuple[ItemInfo, float | None]])
_POPPED = msgspec.json.Decoder(Optional[Message])  # noqa: UP045 (a runtime type expression)

class RemoteSession:
    """One conversation over HTTP: append messages, read history for the LLM."""

    def __init__(self, memory: RemoteMemory, session_id: str, user: str, strategy: str | None,
                 run_start: int, buffer: int = 0) -> None:
        self._m = memory
        self.session_id = session_id
        self.user = user
        self.strategy = strategy
        self.system_prompt: str | None = None
        self._run_start = run_start
        self.buffer_size = buffer
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._path = f"/v1/users/{_q(user)}/sessions/{_q(session_id)}"

    def append(self, role: str, content: str, metadata: dict[str, Any] | None = None, *,
               time: dt.datetime | None = None, sequence: int | None = None, event_id: uuid.UUID | None = None) -> int:
        """Append a message; returns its log offset (-1 while buffered). System prompts stay on the handle."""
        if role == "system":
            if not isinstance(content, str) or not content.strip():
                raise InvalidInput("content", "must be a non-empty string", content)
            self.system_prompt = content
            return -1
        item = {"role": role, "content": content, "metadata": metadata, "time": time, "sequence": sequence,
                "event_id": event_id}
        if not self.buffer_size:
            return self.extend([item])
        with self._lock:
            self._buffer.append(item)
            full = len(self._buffer) >= self.buffer_size
        return self.flush() if full else -1

    def flush(self) -> int:
        """Write buffered messages now (one request); returns the last offset, -1 when nothing was buffered."""
        with self._lock:
            items, self._buffer = self._buffer, []
        return self.extend(items) if items else -1

    def extend(self, messages: Sequence[dict[str, Any]]) -> int:
        """Append many messages in one atomic write; returns the last offset (retried safely by event id)."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
            raise InvalidInput("messages", "must be a non-empty list of dicts")
        items = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise InvalidInput(f"messages[{i}]", "must be a dict")
            item = {k: v for k, v in m.items() if v is not None}
            item["event_id"] = str(m.get("event_id") or uuid.uuid4())  # chosen here: a retry is idempotent
            items.append(item)
        body = {"messages": items, "strategy": self.strategy}
        return self._m._call("POST", self._path + "/messages", json=body)["offset"]

    def read(self, *, strategy: str | None = None, window: int | None = None, token_budget: int | None = None) -> list[Message]:
        """Messages for the LLM: system prompt, rolling summary, then recent turns within the budget."""
        self.flush()
        params = {"strategy": strategy or self.strategy, "window": window, "token_budget": token_budget}
        msgs = self._messages("/read", params)
        if self.system_prompt:
            now = dt.datetime.now(dt.timezone.utc)
            msgs = [Message(role="system", content=self.system_prompt, time=now, sequence=-1)] + msgs
        return msgs

    def appended(self) -> list[Message]:
        """Only the messages this handle (this run) appended."""
        return [m for m in self.history() if m.sequence > self._run_start]

    def history(self, limit: int | None = None) -> list[Message]:
        """Stored messages, oldest first (the last ``limit``)."""
        self.flush()
        return self._messages("/messages", {"limit": limit})

    def _messages(self, route: str, params: dict[str, Any]) -> list[Message]:
        """A session's messages from ``route``; none for a session not created yet (the server answers 404)."""
        try:
            return _MESSAGES.decode(self._m._send("GET", self._path + route, params=params).content)
        except NotFound as e:
            if e.what != "session":
                raise
            return []  # as a handle on a new embedded session: nothing yet

    def summary(self) -> str | None:
        """The latest rolling summary's text, if any."""
        try:
            return self._m._call("GET", self._path + "/summary")["summary"]
        except NotFound as e:
            if e.what != "session":
                raise
            return None

    def summarize(self, *, force: bool = True) -> bool:
        """Roll old turns into the summary now; True when a summary was committed."""
        return self._m._call("POST", self._path + "/summarize", json={"force": force})["committed"]

    def restore(self, token_budget: int | None = None) -> list[Message]:
        """Resume: the last messages that fit ``token_budget``."""
        self.flush()
        return self._messages("/restore", {"token_budget": token_budget})

    def forget(self) -> None:
        """Forget this session."""
        self._m._send("DELETE", self._path)

    def forget_message(self, sequence: int) -> dict[str, Any]:
        """Forget one message and what was derived from it alone (facts, its part of the summary)."""
        if isinstance(sequence, bool) or not isinstance(sequence, int):
            raise InvalidInput("sequence", "must be an int", sequence)
        self.flush()
        return msgspec.json.decode(self._m._send("DELETE", f"{self._path}/messages/{sequence}", retry="connect").content)

    def pop(self) -> Message | None:
        """Take back the last message (an event: ``MessageRetracted``); returns it, None when empty."""
        self.flush()
        return _POPPED.decode(self._m._send("POST", self._path + "/pop", retry="connect").content)

    def __len__(self) -> int:
        self.flush()
        return int(self._m._call("GET", self._path)["messages"])


class RemoteSchedules:
    """``Memory.schedules`` over HTTP."""

    def __init__(self, memory: RemoteMemory) -> None:
        self._m = memory

    def create(self, name: str, cadence: str, expression: str | int, *, user: str, timezone: str = "UTC",
               payload: dict[str, Any] | None = None) -> ScheduleInfo:
        """Create a schedule."""
        body = {"name": name, "cadence": cadence, "expression": expression, "user": user, "timezone": timezone,
                "payload": payload}
        return _SCHEDULE.decode(self._m._send("POST", "/v1/schedules", json=body, retry="connect").content)

    def get(self, schedule_id: str, *, user: str | None = None, history: int | None = None) -> ScheduleInfo:
        """One schedule with its last ``history`` runs, each with its full ``output``."""
        params = {"user": user, "history": history}
        return _SCHEDULE.decode(self._m._send("GET", f"/v1/schedules/{_q(schedule_id)}", params=params).content)

    def search(self, query: str, *, user: str | None = None, limit: int = 20, offset: int = 0,
               status: str | None = None) -> list[ScheduleInfo]:
        """Schedules whose name or payload contains the query, oldest first; ``count`` gives the total."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", "must be a non-empty string", query)
        return self._list(query=query, user=user, limit=limit, offset=offset, status=status)

    def list_all(self, *, user: str | None = None, limit: int = 20, offset: int = 0,
                 status: str | None = None) -> list[ScheduleInfo]:
        """Every schedule (of a user, or the tenant), oldest first."""
        return self._list(user=user, limit=limit, offset=offset, status=status)

    def _list(self, **params: Any) -> list[ScheduleInfo]:
        return _SCHEDULES.decode(self._m._send("GET", "/v1/schedules", params=params).content)

    def count(self, *, user: str | None = None, query: str | None = None, status: str | None = None) -> int:
        """How many schedules (of a user, or the tenant; matching ``query`` and ``status``): a search's total."""
        params = {"user": user, "query": query, "status": status}
        return int(self._m._call("GET", "/v1/schedules/count", params=params)["count"])

    def update(self, schedule_id: str, *, user: str | None = None, **changes: Any) -> ScheduleInfo:
        """Change name, cadence, expression, timezone, payload or enabled."""
        body = dict(changes, user=user)
        return _SCHEDULE.decode(self._m._send("PATCH", f"/v1/schedules/{_q(schedule_id)}", json=body).content)

    def delete(self, schedule_id: str, *, user: str | None = None) -> None:
        """Delete a schedule."""
        self._m._send("DELETE", f"/v1/schedules/{_q(schedule_id)}", params={"user": user}, retry="delete")

    def due(self, now: dt.datetime | None = None, limit: int = 100) -> list[ScheduleInfo]:
        """Enabled schedules due at ``now``, soonest first."""
        if now is not None and (not isinstance(now, dt.datetime) or now.tzinfo is None):
            raise InvalidInput("now", "must be timezone-aware", now)
        return _SCHEDULES.decode(self._m._send("GET", "/v1/schedules/due", params={"now": now, "limit": limit}).content)

    def record_run(self, schedule_id: str, run: dict[str, Any] | str | None = None,
                   next_run_at: dt.datetime | None = None, *, user: str | None = None) -> ScheduleInfo:
        """Record that a schedule ran."""
        body = {"run": run, "next_run_at": next_run_at, "user": user}
        return _SCHEDULE.decode(self._m._send("POST", f"/v1/schedules/{_q(schedule_id)}/runs", json=body,
                                              retry="connect").content)


class RemoteItems:
    """``Memory.items`` over HTTP: the key-value items under the LangGraph store, same API."""

    def __init__(self, memory: RemoteMemory) -> None:
        self._m = memory

    @staticmethod
    def _ns(field: str, namespace: Any) -> list[Any]:
        if isinstance(namespace, (str, bytes)) or not isinstance(namespace, Sequence):
            raise InvalidInput(field, "must be a tuple of strings", namespace)
        return list(namespace)

    def put(self, ops: Sequence[Mapping[str, Any]]) -> int:
        """Write items (see ``Memory.items.put``); returns the last log offset (-1 when nothing was written)."""
        if isinstance(ops, (str, bytes, Mapping)) or not isinstance(ops, Sequence):
            raise InvalidInput("ops", "must be a list of dicts")
        return int(self._m._call("POST", "/v1/items", json={"ops": list(ops)}, retry="connect")["offset"])

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False,
            omit_expired: bool = False) -> ItemInfo | None:
        """The item at (namespace, key), or None."""
        body = {"namespace": self._ns("namespace", namespace), "key": key, "refresh_ttl": refresh_ttl,
                "omit_expired": omit_expired}
        return _ITEM.decode(self._m._send("POST", "/v1/items/get", json=body).content)

    def search(self, prefix: Sequence[str] = (), *, query: str | None = None, filter: Mapping[str, Any] | None = None,  # noqa: A002
               limit: int = 10, offset: int = 0, refresh_ttl: bool = False,
               omit_expired: bool = False) -> list[tuple[ItemInfo, float | None]]:
        """Items under ``prefix`` passing ``filter``, ranked by hybrid search when ``query`` is given."""
        body = {"prefix": self._ns("prefix", prefix), "query": query, "filter": filter, "limit": limit, "offset": offset,
                "refresh_ttl": refresh_ttl, "omit_expired": omit_expired}
        return _FOUND.decode(self._m._send("POST", "/v1/items/search", json=body).content)

    def touch(self, items: Sequence[ItemInfo]) -> None:
        """Refresh the TTL of these items (a write: ``ItemTouched``)."""
        refs = [{"namespace": list(it.namespace), "key": it.key} for it in items if it.ttl_minutes is not None]
        if refs:
            self._m._send("POST", "/v1/items/touch", json={"items": refs}, retry="connect")

    def namespaces(self, *, omit_expired: bool = False) -> list[tuple[str, ...]]:
        """Namespaces holding at least one item (with ``omit_expired``, one not expired), sorted."""
        params = {"omit_expired": "true"} if omit_expired else None
        return [tuple(ns) for ns in self._m._call("GET", "/v1/items/namespaces", params=params)]

    def adopt_embedder(self, embedder: Any) -> bool:
        """False: a served store's model is the server's (chosen when it started)."""
        return False

    def embedder(self) -> tuple[str, int]:
        """The served store's embedding model id and dimension."""
        info = self._m._call("GET", "/v1/items/embedder")
        return info["model_id"], int(info["dim"])

    def sweep(self, now: dt.datetime | None = None) -> int:
        """Delete every expired item of the tenant; returns how many."""
        return int(self._m._call("POST", "/v1/items/sweep", json={"now": now}, retry="connect")["deleted"])
