"""``/v1/users/{user}/memories``: facts (remember, recall, list, forget, history), a session's revert, re-extraction."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response

from ...errors import InvalidInput
from ...memory import Memory
from .common import Api, _Body, _json, _set, _wrote

__all__ = ["router"]


class RememberIn(_Body):
    """A fact; ``request_id`` makes a retried call return the first call's fact id."""

    content: Any = None
    category: Any = "general"
    request_id: str | None = None
    metadata: Any = None


class RememberManyIn(_Body):
    """Many facts in one embedding batch and one commit; ``request_id`` makes a retry return the first ids."""

    items: Any = None
    request_id: str | None = None


class RecallIn(_Body):
    """A recall query and its re-ranking options (``recency_half_life`` in seconds)."""

    query: Any = None
    top_k: Any = 5
    category: Any = None
    mmr: Any = None
    recency_half_life: float | None = None
    now: Any = None  # checked by the facade (InvalidInput field now, ISO strings), as embedded
    confidence_weight: Any = 0.0
    min_offset: Any = None
    metadata: Any = None


class ForgetMatchingIn(_Body):
    """Forget every fact close to ``query``."""

    query: Any = None
    threshold: Any = 0.85


class ReextractIn(_Body):
    """Run the server's extractor again over the stored user messages (of one user, or all)."""

    user: str | None = None


class RevertIn(_Body):
    """Retract what a session's messages wrote (since a time); ``messages`` takes them back too."""

    since: dt.datetime | None = None
    messages: Any = False


def router(api: Api) -> APIRouter:
    """The facts' routes."""
    r = APIRouter()
    M = api.M

    U = "/v1/users/{user}"

    @r.post(U + "/memories", tags=["memories"], status_code=201)
    def remember(user: str, body: RememberIn, m: Memory = M) -> Response:
        """Store a fact (a restatement reinforces the existing one and returns its id)."""
        fid = m.remember(body.content, body.category, user=user, request_id=body.request_id, metadata=body.metadata)
        return _wrote(m, {"id": fid}, 201)

    @r.post(U + "/memories/batch", tags=["memories"], status_code=201)
    def remember_many(user: str, body: RememberManyIn, m: Memory = M) -> Response:
        """Store many facts at once (strings, [content, category] pairs or {content, category} objects)."""
        return _wrote(m, {"ids": m.remember_many(body.items, user=user, request_id=body.request_id)}, 201)

    @r.get(U + "/memories", tags=["memories"])
    def list_memories(user: str, category: str | None = None, limit: int = 20, metadata: str | None = None,
                      m: Memory = M) -> Response:
        """The user's active facts, strongest first (``metadata``: a JSON object every listed fact's metadata holds)."""
        try:
            want = None if metadata is None else json.loads(metadata)
        except ValueError:
            raise InvalidInput("metadata", "must be a JSON object", metadata) from None
        return _json(m.list_memories(user=user, category=category, limit=limit, metadata=want))

    @r.post(U + "/memories/recall", tags=["memories"])
    def recall(user: str, body: RecallIn, m: Memory = M) -> Response:
        """The user's facts most relevant to the query."""
        kw = _set(body)
        return _json(m.recall(kw.pop("query", None), user=user, **kw))

    @r.delete(U + "/memories/{fact_id}", tags=["memories"])
    def forget(user: str, fact_id: str, request: Request, m: Memory = M) -> Response:
        """Forget one fact (the key's name and the request id are recorded: its history shows them)."""
        with api.asking(request):
            m.forget(fact_id, user=user)
        return _wrote(m, {"forgotten": fact_id})

    @r.post(U + "/sessions/{session_id}/revert", tags=["memories"])
    def revert(user: str, session_id: str, request: Request, body: RevertIn = Body(RevertIn()), m: Memory = M) -> Response:
        """Retract every fact and note the session wrote (since ``since``); reverting twice changes nothing."""
        with api.asking(request):
            return _wrote(m, m.revert(user=user, session_id=session_id, since=body.since, messages=body.messages))

    @r.post("/v1/reextract", tags=["memories"])
    def reextract(body: ReextractIn = Body(ReextractIn()), m: Memory = M) -> Response:
        """Bring the facts in line with the server's extractor run over the stored user messages (resumable)."""
        return _wrote(m, m.reextract(user=body.user))

    @r.get(U + "/memories/{fact_id}/history", tags=["memories"])
    def fact_history(user: str, fact_id: str, m: Memory = M) -> Response:
        """A fact's life: source messages, extractor, reinforcements, supersession, decay, pruning, deletion."""
        return _json(m.explain(fact_id, user=user))

    @r.post(U + "/memories/forget-matching", tags=["memories"])
    def forget_matching(user: str, body: ForgetMatchingIn, m: Memory = M) -> Response:
        """Forget every fact of the user close to the query; returns their ids."""
        return _wrote(m, m.forget_matching(body.query, body.threshold, user=user))

    @r.delete(U, tags=["memories"])
    def forget_user(user: str, m: Memory = M) -> Response:
        """Forget everything about a user: facts, notes, schedules, sessions."""
        m.forget_user(user)
        return _wrote(m, {"forgotten": user})
    return r
