"""``/v1/users/{user}/sessions/{session_id}`` and ``/v1/sessions``: a session's messages, reads, summary, forgetting."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import Response

from ...errors import InvalidInput, NotFound
from ...memory import Memory
from .common import Api, _Body, _json, _session_info, _set, _wrote

__all__ = ["router", "MessageIn", "AppendIn"]


class MessageIn(_Body):
    """One message to append; ``event_id`` (a UUID) makes a retried append idempotent."""

    role: Any = None
    content: Any = None
    metadata: Any = None
    time: dt.datetime | None = None
    sequence: Any = None
    event_id: uuid.UUID | None = None


class AppendIn(_Body):
    """Messages appended in one atomic write."""

    messages: list[MessageIn]
    strategy: str | None = None


class SummarizeIn(_Body):
    """Roll old turns into the summary now."""

    force: Any = True


def router(api: Api) -> APIRouter:
    """A session's routes (the documented append; the lean one is ``append``)."""
    r = APIRouter()
    M = api.M

    S = "/v1/users/{user}/sessions/{session_id}"

    @r.get(S, tags=["sessions"])
    def session_info(user: str, session_id: str, strategy: str | None = None, m: Memory = M) -> Response:
        """Open a session handle: its owner is checked; returns the last sequence and message count."""
        return _json(_session_info(m.session(session_id, user=user, strategy=strategy)))

    @r.post(S + "/messages", tags=["sessions"], status_code=201)
    def append_messages(user: str, session_id: str, body: AppendIn, m: Memory = M) -> Response:
        """Append one or many messages atomically (idempotent by each message's ``event_id``)."""
        if not body.messages:
            raise InvalidInput("messages", "must be a non-empty list")
        h = m.session(session_id, user=user, strategy=body.strategy)
        items = [msg.model_dump() for msg in body.messages]
        return _wrote(m, {"offset": h.extend(items)}, 201)

    def existing(m: Memory, session_id: str, user: str) -> Any:
        """The handle of a session that holds messages; ``NotFound`` (404) for a missing one: a typo is not an empty session."""
        h = m.session(session_id, user=user)
        if not (h._actor.started or len(h)):
            raise NotFound("session", session_id)
        return h

    @r.get(S + "/messages", tags=["sessions"])
    def history(user: str, session_id: str, limit: int | None = Query(None), m: Memory = M) -> Response:
        """Stored messages, oldest first (the last ``limit``); 404 for a session with none."""
        return _json(existing(m, session_id, user).history(limit))

    @r.get(S + "/read", tags=["sessions"])
    def read(user: str, session_id: str, strategy: str | None = None, window: int | None = None,
             token_budget: int | None = None, m: Memory = M) -> Response:
        """Messages for the LLM: rolling summary first, then recent turns within the budget; 404 for a session with none."""
        h = m.session(session_id, user=user)
        out = h.read(strategy=strategy, window=window, token_budget=token_budget)  # checks the options first
        existing(m, session_id, user)
        return _json(out)

    @r.get(S + "/summary", tags=["sessions"])
    def summary(user: str, session_id: str, m: Memory = M) -> Response:
        """The latest rolling summary (null when none); 404 for a session with no messages."""
        return _json({"summary": existing(m, session_id, user).summary()})

    @r.post(S + "/summarize", tags=["sessions"])
    def summarize(user: str, session_id: str, body: SummarizeIn = Body(SummarizeIn()), m: Memory = M) -> Response:
        """Roll old turns into the summary now."""
        return _wrote(m, {"committed": m.session(session_id, user=user).summarize(**_set(body))})

    @r.get(S + "/restore", tags=["sessions"])
    def restore(user: str, session_id: str, token_budget: int | None = None, m: Memory = M) -> Response:
        """Resume: the last messages that fit ``token_budget``; 404 for a session with none."""
        h = m.session(session_id, user=user)
        out = h.restore(token_budget)  # checks the budget first
        existing(m, session_id, user)
        return _json(out)

    @r.delete(S, tags=["sessions"])
    def forget_user_session(user: str, session_id: str, m: Memory = M) -> Response:
        """Forget this session (messages, summaries, their chunks); 404, writing nothing, for a missing one."""
        m.session(session_id, user=user).forget()
        return _wrote(m, {"forgotten": session_id})

    @r.get("/v1/sessions", tags=["sessions"])
    def list_sessions(user: str | None = None, m: Memory = M) -> Response:
        """Sessions of the tenant (or one user), most recently updated first."""
        return _json(m.list_sessions(user=user))

    @r.delete("/v1/sessions/{session_id}", tags=["sessions"])
    def forget_session(session_id: str, m: Memory = M) -> Response:
        """Forget a session, whoever it belongs to in this tenant."""
        m.forget_session(session_id)
        return _wrote(m, {"forgotten": session_id})

    @r.delete("/v1/users/{user}/sessions/{session_id}/messages/{sequence}", tags=["sessions"])
    def forget_message(user: str, session_id: str, sequence: int, request: Request, m: Memory = M) -> Response:
        """Forget one message and what was derived from it alone (facts, its part of the summary)."""
        with api.asking(request):
            return _wrote(m, m.session(session_id, user=user).forget_message(sequence))

    @r.post("/v1/users/{user}/sessions/{session_id}/pop", tags=["sessions"])
    def pop_message(user: str, session_id: str, m: Memory = M) -> Response:
        """Take back the session's last message (``MessageRetracted``); returns it, null when empty."""
        return _wrote(m, m.session(session_id, user=user).pop())
    return r
