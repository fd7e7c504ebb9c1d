"""Read-only views of one tenant for people (the ``/ui`` inspector): users with counts, a user's
facts of any status with their history and source messages, sessions, store health.

Everything is paged: a page builds rows only for what it shows, so a user with 10,000 facts
or 1,000 sessions costs one pass over in-memory state (no log read, no index query) plus the
page's rows. Reads go through the facade where it has a call (``list_sessions``, ``session``,
``stats``) and through the state fold (``m.state``, local or a Ray proxy) where it has none:
fact history and the users list are not part of the agent-facing API.
"""

from __future__ import annotations

from typing import Any

from ...actors._text import check_id
from ...errors import InvalidInput, NotFound
from ...memory import Memory

__all__ = ["FACT_STATUSES", "audit", "fact", "facts", "health", "page_args", "session", "sessions", "users"]

FACT_STATUSES = ("active", "superseded", "pruned", "deleted")
MAX_PAGE = 500


def page_args(offset: Any, limit: Any) -> tuple[int, int]:
    """``offset`` and ``limit`` checked (``InvalidInput`` names the field)."""
    try:
        off, lim = int(offset), int(limit)
    except (TypeError, ValueError):
        raise InvalidInput("offset" if not str(offset).lstrip("-").isdigit() else "limit", "must be an int") from None
    if off < 0:
        raise InvalidInput("offset", "must be >= 0", off)
    if not 1 <= lim <= MAX_PAGE:
        raise InvalidInput("limit", f"must be in [1, {MAX_PAGE}]", lim)
    return off, lim


def _page(total: int, offset: int, limit: int) -> dict[str, Any]:
    return {"total": total, "offset": offset, "limit": limit,
            "next": offset + limit if offset + limit < total else None,
            "prev": max(0, offset - limit) if offset > 0 else None}


def users(m: Memory, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A page of the tenant's users, each with counts (sessions, messages, active facts, notes, schedules) and last activity."""
    m.gate.sync()
    st, t = m.state, m.tenant
    names = st.users(t)
    rows = [{"user": u, **st.user_counts(t, u)} for u in names[offset:offset + limit]]
    return {"users": rows, "page": _page(len(names), offset, limit)}


def facts(m: Memory, user: str, *, status: str | None = None, category: str | None = None,
          offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A page of a user's facts of any status (newest first), with counts by status and category."""
    check_id("user", user)
    if status is not None and status not in FACT_STATUSES:
        raise InvalidInput("status", f"must be one of {', '.join(FACT_STATUSES)}", status)
    m.gate.sync()
    got = m.state.facts_page(m.tenant, user, status=status, category=category, offset=offset, limit=limit)
    counts = {s: got["statuses"].get(s, 0) for s in FACT_STATUSES}
    return {"user": user, "status": status, "category": category, "counts": counts,
            "categories": dict(sorted(got["categories"].items())), "facts": got["facts"],
            "page": _page(got["total"], offset, limit)}


def fact(m: Memory, user: str, fact_id: str) -> dict[str, Any]:
    """One fact of ``user`` (any status) with its history (events, oldest first) and its source
    messages, from memory (the audit trail, ``audit``, reads the log); shaped as ``m.explain``'s."""
    info = _owned_fact(m, user, fact_id)
    history = [{"time": t, "event": kind, **detail} for t, kind, detail in m.state.fact_history(m.tenant, fact_id)]
    by_session: dict[str, dict[int, Any]] = {}
    sources = []
    for src in info.sources:
        sid, seq = src.get("session_id"), src.get("sequence")
        if not isinstance(sid, str) or not isinstance(seq, int):
            continue
        if sid not in by_session:  # one log read per source session, not per source
            owner = m.state.session(m.tenant, sid)
            by_session[sid] = ({x.sequence: x for x in m.state.messages(m.tenant, sid)}
                               if owner is not None and owner.user_id == user else {})
        msg = by_session[sid].get(seq)
        sources.append({"session_id": sid, "sequence": seq, "role": msg.role if msg else None,
                        "text": msg.content if msg else None, "time": msg.time if msg else None})
    return {"user": user, "fact": info, "life": None, "history": history, "sources": sources,
            "superseded_by": _superseded_by(m, info)}


def _owned_fact(m: Memory, user: str, fact_id: str) -> Any:
    """The fact's record, if it is ``user``'s in this tenant; else ``NotFound``."""
    check_id("user", user)
    m.gate.sync()
    info = m.state.fact(m.tenant, fact_id) if isinstance(fact_id, str) else None
    if info is None or info.user_id != user:
        raise NotFound("fact", fact_id)
    return info


def _superseded_by(m: Memory, info: Any) -> Any:
    return m.state.fact(m.tenant, info.superseded_by) if info.superseded_by else None


def audit(m: Memory, user: str, fact_id: str) -> dict[str, Any]:
    """One fact's audit trail as ``m.explain`` tells it from the log (events oldest first, each with its
    source messages, the extractor, who deleted it and why), beside its current record. It reads the
    user's whole facts stream, so it is its own page: the fact page answers from memory."""
    info = _owned_fact(m, user, fact_id)
    life = m.explain(fact_id, user=user)
    return {"user": user, "fact": info, "life": life, "history": life["history"], "sources": life["sources"],
            "superseded_by": _superseded_by(m, info)}


def sessions(m: Memory, user: str, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A page of a user's sessions, most recently updated first."""
    check_id("user", user)
    every = m.list_sessions(user=user)
    return {"user": user, "sessions": every[offset:offset + limit], "page": _page(len(every), offset, limit)}


def session(m: Memory, user: str, session_id: str, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    """A session as the agent reads it (summary first, then turns), and a page of its stored history."""
    check_id("user", user)
    check_id("session_id", session_id)
    m.gate.sync()
    info = m.state.session(m.tenant, session_id)
    if info is None or info.forgotten or info.user_id != user:
        raise NotFound("session", session_id)
    h = m.session(session_id, user=user)
    history = h.history()
    return {"user": user, "session": info, "summary": h.summary(), "read": h.read(),
            "history": history[offset:offset + limit], "page": _page(len(history), offset, limit)}


def health(m: Memory) -> dict[str, Any]:
    """Store health: projection lag, index sizes, snapshots, replicas (Ray), as ``stats()`` reports them."""
    return m.stats()
