"""Provenance: a fact's life read back from the log (``Memory.explain``, ``eidetica why``).

Nothing here is stored twice: the facts stream holds every change of a fact (asserted with
its sources, reinforced with the message that said it again, superseded by a newer fact,
decayed, pruned, deleted or retracted with who asked), ``ExtractionCompleted`` names the
extractor and when the store learned it, and the session streams hold the source messages.
Two clocks: ``valid_from`` is when the fact held (its source message's time, or the
``remember`` call's), ``valid_until`` when a later statement superseded it; ``recorded_at``
is when the store learned it. Times are ISO strings, so the embedded store, ``connect()``
and the CLI return the same dict.

Who asked (a server request's API key name and request id) is set around a request by
``acting`` and read by the writes that record it (deletions and retractions).
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..actors._text import check_id
from ..errors import InvalidInput, NotFound
from ..events import (
    ExtractionCompleted,
    FactAsserted,
    FactDecayed,
    FactDeleted,
    FactPruned,
    FactReinforced,
    FactSuperseded,
    MessageAppended,
    UserForgotten,
)
from ..events.streams import facts_stream, session_stream
from .store import Store

__all__ = ["acting", "who", "explain"]

_ACTING: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("eidetica_acting", default=("", ""))


@contextmanager
def acting(by: str = "", request_id: str = "") -> Iterator[None]:
    """Record ``by`` (an API key's name) and ``request_id`` on the deletions made in this context."""
    token = _ACTING.set((by, request_id))
    try:
        yield
    finally:
        _ACTING.reset(token)


def who(request_id: str | None = None) -> tuple[str, str]:
    """(by, request_id) of the current request; the caller's own request id wins."""
    by, rid = _ACTING.get()
    return by, request_id or rid


def _iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.isoformat()


class _Messages:
    """Source messages by (session, sequence), each session's stream read once."""

    def __init__(self, log: Any, tenant: str) -> None:
        self.log = log
        self.tenant = tenant
        self._by: dict[str, dict[int, dict[str, Any]]] = {}

    def get(self, source: dict[str, Any]) -> dict[str, Any] | None:
        sid, seq = source.get("session_id"), source.get("sequence")
        if not isinstance(sid, str) or not isinstance(seq, int):
            return None
        if sid not in self._by:
            msgs: dict[int, dict[str, Any]] = {}
            for rec in self.log.read_stream(session_stream(self.tenant, sid)):
                if rec.type == "MessageAppended":
                    ev = rec.decode()
                    assert isinstance(ev, MessageAppended)
                    msgs[ev.sequence] = {"session_id": sid, "sequence": ev.sequence, "time": _iso(rec.time),
                                         "role": ev.role, "text": ev.content, "offset": rec.offset}
            self._by[sid] = msgs
        # a forgotten (or compacted) message is still named, without its text
        return self._by[sid].get(seq) or {"session_id": sid, "sequence": seq, "time": None, "role": None, "text": None,
                                          "offset": None, "forgotten": True}


def explain(m: Store, fact_id: str, user: str) -> dict[str, Any]:
    """The life of one fact of ``user``: sources, extractor, reinforcements, supersession, decay, pruning, deletion."""
    check_id("user", user)
    if not isinstance(fact_id, str) or not fact_id:
        raise InvalidInput("fact_id", "must be a non-empty string", fact_id)
    m.gate.sync()
    log, tenant = m.log, m.tenant
    messages = _Messages(log, tenant)
    out: dict[str, Any] | None = None
    history: list[dict[str, Any]] = []
    asserts: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}  # fact id -> (its assert entry, sources)
    for rec in log.read_stream(facts_stream(tenant, user)):
        if rec.type in ("ChunksEmbedded", "Redacted"):
            continue
        ev = rec.decode()
        base = {"time": _iso(rec.time), "offset": rec.offset}
        if isinstance(ev, FactAsserted):
            entry = {"event": "asserted", **base, "request_id": ev.request_id,
                     "sources": [messages.get(s) for s in ev.sources]}
            asserts[ev.fact_id] = (entry, ev.sources)
            if ev.fact_id == fact_id:
                history.append(entry)
                out = {"fact_id": fact_id, "user": user, "content": ev.content, "category": ev.category,
                       "status": "active", "confidence": ev.confidence, "valid_from": _iso(rec.time),
                       "valid_until": None, "recorded_at": _iso(rec.time), "extractor": "remember",
                       "sources": entry["sources"]}
        elif isinstance(ev, ExtractionCompleted):
            if out is not None and fact_id in ev.facts:
                out["extractor"] = ev.extractor or "unrecorded"  # facts written before extractors were recorded
                if not out.get("_learned"):
                    out["recorded_at"], out["_learned"] = _iso(rec.time), True
        elif out is None or not (getattr(ev, "fact_id", None) == fact_id or isinstance(ev, UserForgotten)
                                 or (isinstance(ev, FactSuperseded) and ev.by == fact_id)):
            continue  # another fact's change
        elif isinstance(ev, FactReinforced):
            history.append({"event": "reinforced", **base, "confidence": ev.confidence, "request_id": ev.request_id,
                            "sources": [messages.get(s) for s in ev.sources]})
            out["confidence"] = ev.confidence
            out["sources"] = out["sources"] + history[-1]["sources"]
        elif isinstance(ev, FactSuperseded):
            if ev.fact_id == fact_id:
                by = asserts.get(ev.by, ({}, []))[0]
                history.append({"event": "superseded", **base, "by": ev.by, "sources": by.get("sources", [])})
                out["status"], out["valid_until"] = "superseded", _iso(rec.time)
            else:
                history.append({"event": "supersedes", **base, "fact_id": ev.fact_id})
        elif isinstance(ev, FactDecayed):
            history.append({"event": "decayed", **base, "confidence": ev.confidence})
            out["confidence"] = ev.confidence
        elif isinstance(ev, FactPruned):
            history.append({"event": "pruned", **base, "reason": ev.reason})
            out["status"] = "pruned"
        elif isinstance(ev, FactDeleted):
            history.append({"event": ev.reason or "deleted", **base, "request_id": ev.request, "by": ev.by,
                            "session_id": ev.session_id})
            out["status"] = "deleted"
        elif isinstance(ev, UserForgotten):
            history.append({"event": "user_forgotten", **base})
            out["status"] = "deleted"
    if out is None:
        raise NotFound("fact", fact_id)
    out.pop("_learned", None)
    out["history"] = history
    return out
