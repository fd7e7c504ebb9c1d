"""``/v1/search``, ``/v1/context`` and a user's participants."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ..._store.context import CONTEXT_TOKENS
from ...memory import Memory
from ...projections._ranking import MIN_SCORE, SEARCH_KINDS
from .common import Api, _Body, _json, _set

__all__ = ["router"]


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
    recency_half_life: float | None = None
    now: Any = None  # checked by the facade (InvalidInput field now, ISO strings), as embedded
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
    now: Any = None


def router(api: Api) -> APIRouter:
    """Search and context."""
    r = APIRouter()
    M = api.M

    U = "/v1/users/{user}"

    @r.get(U + "/participants", tags=["search"])
    def participants(user: str, m: Memory = M) -> Response:
        """Names of the participants of the user's conversations."""
        return _json(sorted(m.participant_names(user)))

    @r.post("/v1/search", tags=["search"])
    def search(body: SearchIn, m: Memory = M) -> Response:
        """Search a user's conversations across sessions (hybrid vector + full text)."""
        kw = _set(body)
        for pair in ("kinds", "neighbors"):  # JSON arrays: the facade's tuples
            if isinstance(kw.get(pair), list):
                kw[pair] = tuple(kw[pair])
        if kw.get("vector_weight", 0) is None:
            kw.pop("vector_weight")
        return _json(m.search(kw.pop("query", None), user=kw.pop("user", None), **kw))

    @r.post("/v1/context", tags=["search"])
    def context(body: ContextIn, m: Memory = M) -> Response:
        """The agent's "## Relevant Memory" block for a system prompt (``as_data``: its content as JSON)."""
        kw = _set(body)
        return _json({"context": m.context(kw.pop("query", None), user=kw.pop("user", None), **kw)})
    return r
