"""Revert: take back what one session wrote (``Memory.revert``), as events.

A prompt-injected conversation can plant facts and notes; reverting its session retracts
every fact whose every source message is in it (since a time), with
``FactDeleted(reason="revert")`` written by the user's curator (the facts stream's one
writer), so ``explain`` shows it, and deletes every live note stored during it (a note's
``NoteStored.session_id``; stored since that time), with ``NoteDeleted(reason="revert")``
written by the user's notes actor. The messages stay unless asked (``messages=True``: the
session is forgotten, or the messages since ``since`` are taken back). A fact that another
session also stated keeps that source and stays. Reverting twice changes nothing: the second
finds no live fact or note to retract.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..actors._text import check_id
from ..errors import InvalidInput, NotFound
from ..events import FactAsserted, FactDeleted, FactSuperseded
from ..events.streams import facts_stream, notes_stream, session_stream
from .audit import who
from .session_handle import open_session
from .store import Store

__all__ = ["check_link", "revert"]


def check_link(m: Store, user: str, session_id: str | None) -> None:
    """Check a note's session link: a well-formed id, not another user's session (one not started yet may start later)."""
    if session_id is None:
        return
    check_id("session_id", session_id)
    info = m.state.session(m.tenant, session_id)
    if info is None:  # perhaps started but not folded yet
        m.gate.sync()
        info = m.state.session(m.tenant, session_id)
    if info is not None and info.user_id != user:
        raise InvalidInput("session_id", f"session {session_id!r} belongs to another user", session_id)


def revert(m: Store, user: str, session_id: str, since: dt.datetime | None = None, messages: bool = False,
           request_id: str | None = None) -> dict[str, Any]:
    """Retract the facts and notes ``session_id`` wrote (since ``since``); returns what it retracted."""
    check_id("user", user)
    check_id("session_id", session_id)
    if since is not None and (not isinstance(since, dt.datetime) or since.utcoffset() is None):
        raise InvalidInput("since", "must be a timezone-aware datetime", since)
    if not isinstance(messages, bool):
        raise InvalidInput("messages", "must be True or False", messages)
    # every message the session ever had (retracted or forgotten ones too: what they wrote is still to go)
    said = [(rec.decode(), rec.time) for rec in m.log.read_stream(session_stream(m.tenant, session_id))
            if rec.type in ("SessionStarted", "MessageAppended")]
    if said and getattr(said[0][0], "user_id", user) != user:
        raise NotFound("session", session_id)  # another user's session is not this user's to revert
    linked = _linked_notes(m, user, session_id, since)
    if not said and not linked:
        raise NotFound("session", session_id)
    chosen = [(session_id, ev.sequence) for ev, t in said[1:] if since is None or t >= since]  # type: ignore[attr-defined]
    by, rid = who(request_id)
    cur = m.runtime.curator(m.tenant, user)
    facts = cur.retract_sourced(chosen, "revert", session_id, rid or "", by)
    restored = _restore(m, cur, user, session_id)
    notes = m.runtime.notes(m.tenant, user).retract(linked, "revert", session_id, rid or "", by) if linked else []
    removed = 0
    if messages:
        h = open_session(m, session_id, user, None, 0, 0.05)
        if since is None:
            removed = len(h.history())
            if removed:
                h.forget()
        else:
            while (last := h.history(1)) and last[0].time >= since:
                h.pop()
                removed += 1
    m.gate.sync()
    return {"session_id": session_id, "facts": facts, "notes": notes, "restored": restored, "messages_removed": removed}


def _linked_notes(m: Store, user: str, session_id: str, since: dt.datetime | None) -> list[str]:
    """The user's notes stored during ``session_id`` (from ``since`` on), live or not: the notes actor decides which still are."""
    out = []
    for rec in m.log.read_stream(notes_stream(m.tenant, user)):
        if rec.type == "NoteStored" and (since is None or rec.time >= since):
            ev = rec.decode()
            if ev.session_id == session_id:  # type: ignore[attr-defined]
                out.append(ev.note_id)  # type: ignore[attr-defined]
    return out


def _restore(m: Store, cur: Any, user: str, session_id: str) -> list[str]:
    """Facts that facts reverted from this session had superseded hold again: asserted anew with their text and sources.

    Exactly once per superseded fact (a request id derived from it), so a revert run again,
    or resumed after a crash, restores nothing twice; a fact deleted or pruned since stays gone.
    """
    asserted: dict[str, tuple[Any, Any]] = {}
    reverted: set[str] = set()
    superseded: list[tuple[str, str]] = []  # (old fact, the fact that superseded it)
    ended: set[str] = set()
    for rec in m.log.read_stream(facts_stream(m.tenant, user)):
        if rec.type not in ("FactAsserted", "FactSuperseded", "FactDeleted", "FactPruned"):
            continue
        ev = rec.decode()
        if isinstance(ev, FactAsserted):
            asserted[ev.fact_id] = (ev, rec.time)
        elif isinstance(ev, FactSuperseded):
            superseded.append((ev.fact_id, ev.by))
        elif isinstance(ev, FactDeleted) and ev.reason == "revert" and ev.session_id == session_id:
            reverted.add(ev.fact_id)
        else:
            ended.add(ev.fact_id)  # type: ignore[attr-defined]
    out = []
    for old, by in superseded:
        if by in reverted and old in asserted and old not in ended:
            ev, time = asserted[old]
            out.append(cur.remember(ev.content, ev.category, sources=list(ev.sources), time=time,
                                    request_id=f"restore:{old}"))
    return out
