"""``/v1/search``, ``/v1/context`` and a user's participants."""

from __future__ import annotations

from typing import Any

import msgspec
from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import Field, create_model

from ..._store.context import CONTEXT_TOKENS
from ..._store.options import OPTION_FIELDS, SEARCH_OPTIONS, SearchOptions
from ...memory import Memory
from .common import Api, _Body, _json, _set

__all__ = ["router"]


def _option_fields() -> dict[str, Any]:
    """``SearchOptions``' fields as model fields: its defaults, and its JSON schema for /docs.

    Typed ``Any``: the facade validates (``InvalidInput`` naming the field, 400), as embedded.
    """
    props = msgspec.json.schema(SearchOptions)["$defs"]["SearchOptions"]["properties"]
    out: dict[str, Any] = {}
    for name in OPTION_FIELDS:
        default = getattr(SEARCH_OPTIONS, name)
        extra = {k: v for k, v in props[name].items() if k != "default"}
        if name == "recency_half_life":  # seconds on this wire (older clients send them so)
            default, extra = None, {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]}
        if isinstance(default, tuple):
            default = list(default)
        out[name] = (Any, Field(default=default, json_schema_extra=extra))
    return out


SearchIn = create_model(  # a cross-session search of one user's conversations (options as ``Memory.search``)
    "SearchIn", __base__=_Body, __doc__="A cross-session search of one user's conversations (options as ``Memory.search``).",
    query=(Any, None), user=(Any, None), top_k=(Any, 10), exclude_session=(Any, None), session_id=(Any, None),
    now=(Any, None),  # checked by the facade (InvalidInput field now, ISO strings), as embedded
    min_offset=(Any, None), **_option_fields(),
)


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
    def search(body: SearchIn, m: Memory = M) -> Response:  # type: ignore[valid-type]
        """Search a user's conversations across sessions (hybrid vector + full text)."""
        kw = _set(body)  # the fields sent; the facade's defaults (SearchOptions') apply to the rest
        if kw.get("vector_weight", 0) is None:  # null: the default, as this route always took it
            kw.pop("vector_weight")
        return _json(m.search(kw.pop("query", None), user=kw.pop("user", None), **kw))

    @r.post("/v1/context", tags=["search"])
    def context(body: ContextIn, m: Memory = M) -> Response:
        """The agent's "## Relevant Memory" block for a system prompt (``as_data``: its content as JSON)."""
        kw = _set(body)
        return _json({"context": m.context(kw.pop("query", None), user=kw.pop("user", None), **kw)})
    return r
