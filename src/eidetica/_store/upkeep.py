"""The store's upkeep behind the facade: what follows an append (extraction, summaries, the session cap),
extraction resumed after a crash, sweeps, housekeeping, stats, clearing and forgetting a user."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

from ..actors import Hit, Schedules, SessionActor, _usage
from ..actors._text import check_id
from ..errors import InvalidInput, ProviderError
from ..events.streams import parse_stream
from .searching import holds, shown
from .store import Store

__all__ = [
    "after_append", "clear", "forget_user", "housekeep", "housekeeping_loop", "list_memories", "resume_extraction", "schedules_face",
    "stats", "sweep", "usage",
]


def schedules_face(m: Store) -> Schedules:
    """Schedules of the tenant: writes through the users' actors, reads from the caught-up state."""
    def state() -> Any:
        m.gate.sync()
        return m.state

    return Schedules(m.tenant, m.config, m.clock, lambda u: m.runtime.schedules(m.tenant, u), state)


def after_append(m: Store, actor: SessionActor, items: list[dict[str, Any]], strategy: str) -> None:
    """What an append sets off: extraction of the user's messages, a summary when due, the session cap."""
    if m.config.auto_extract:
        users = [dict(i, session_id=actor.session_id) for i in items if i["role"] == "user"]
        if users:
            try:
                m.runtime.curator(m.tenant, actor.user_id).extract(users)
            except ProviderError:
                m.extraction_failures += 1  # the messages are logged; sweep() retries them
    if strategy == "summarizing" and actor.needs_summary():
        try:
            m.runtime.summarizer().summarize(actor)
        except ProviderError:
            pass  # the history is intact; the next append tries again
    if m.config.max_sessions is not None and actor.version <= len(items) + 1:
        prune_sessions(m)


def prune_sessions(m: Store) -> None:
    """Forget the tenant's sessions beyond ``max_sessions`` (least recently updated first)."""
    m.gate.sync()
    for s in list(m.state.sessions(m.tenant))[m.config.max_sessions :]:
        m.runtime.session(m.tenant, s.session_id, s.user_id).forget()


def resume_extraction(m: Store, tenant: str | None = None) -> int:
    """Extract the user messages (of ``tenant``, else every tenant) committed without an ``ExtractionCompleted``
    (a crash between the append and its extraction, a provider failure); at open and in sweep(); returns the facts written."""
    m.gate.sync()
    found = 0
    pending: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t, msg in m.state.pending_extractions():
        if tenant is not None and t != tenant:
            continue
        pending.setdefault((t, msg.user_id), []).append(
            {"session_id": msg.session_id, "sequence": msg.sequence, "content": msg.content, "metadata": msg.metadata,
             "time": msg.time})
    for (t, user), msgs in pending.items():
        try:
            found += len(m.runtime.curator(t, user).extract(msgs))
        except ProviderError:
            m.extraction_failures += 1  # still pending: sweep() or the next open retries
    return found


def list_memories(m: Store, user: str, category: str | None, limit: int, want: dict[str, Any]) -> list[Hit]:
    """The user's active facts (checked arguments), strongest first, as ``Hit``s."""
    m.gate.sync()
    facts = [f for f in m.state.facts(m.tenant, user) if holds(f.metadata, want)]
    if category is not None:
        facts = [f for f in facts if f.category == category]
    facts = sorted(facts, key=lambda f: (-f.confidence, -f.updated.timestamp(), f.fact_id))[:limit]
    return [
        Hit(id=f.fact_id, kind="fact", text=f.content, score=shown(f.confidence), time=f.created,
            category=f.category, user_id=user, confidence=f.confidence, source_id=f.fact_id,
            metadata={**f.metadata, "sources": f.sources})
        for f in facts
    ]


def forget_user(m: Store, user: str) -> None:
    """Forget everything about a user: facts, notes, items, schedules, sessions."""
    m.gate.sync()
    for s in m.state.sessions(m.tenant, user):
        m.runtime.session(m.tenant, s.session_id, user).forget()
    m.runtime.curator(m.tenant, user).forget_user()
    m.runtime.notes(m.tenant, user).forget_user()
    m.runtime.items(m.tenant, user).forget_user()
    m.runtime.schedules(m.tenant, user).forget_user()
    m.gate.sync()


def clear(m: Store, sessions: bool, memories: bool) -> None:
    """Forget every session and/or every fact, note and item of the tenant."""
    m.gate.sync()
    if sessions:
        for s in m.state.sessions(m.tenant):
            m.runtime.session(m.tenant, s.session_id, s.user_id).forget()
    if memories:
        users = {parse_stream(s)[2] for s in m.log.streams() if s.split(":")[0] in ("facts", "notes", "items")
                 and parse_stream(s)[1] == m.tenant}
        for u in sorted(users):
            m.runtime.curator(m.tenant, u).forget_user()
            m.runtime.notes(m.tenant, u).forget_user()
            m.runtime.items(m.tenant, u).forget_user()
    m.gate.sync()


def sweep(m: Store, now: dt.datetime | None) -> dict[str, int]:
    """Decay and prune the facts of every user of the tenant, and retry pending extractions."""
    m.gate.sync()
    users = {s.user_id for s in m.state.sessions(m.tenant)}
    users |= {parse_stream(s)[2] for s in m.log.streams() if s.startswith("facts:")}
    totals = {"decayed": 0, "pruned": 0, "extracted": 0}
    for user in sorted(users):
        r = m.runtime.curator(m.tenant, user).sweep(now or m.clock())
        totals["decayed"] += r["decayed"]
        totals["pruned"] += r["pruned"]
    if m.config.auto_extract:
        totals["extracted"] = resume_extraction(m, m.tenant)
    return totals


def usage(m: Store, user: str | None, since: dt.datetime | None, until: dt.datetime | None) -> dict[str, Any]:
    """The tenant's LLM ledger (``Memory.usage``), arguments checked, after the writes done behind their calls."""
    if user is not None:
        check_id("user", user)
    for name, v in (("since", since), ("until", until)):
        if v is not None and (not isinstance(v, dt.datetime) or v.tzinfo is None):
            raise InvalidInput(name, "must be a timezone-aware datetime", v)
    m.gate.drain()
    return _usage.usage(m.log, m.tenant, user, since, until)


def housekeep(m: Store) -> dict[str, Any]:
    """Write what is due now: the log's recovery checkpoints and the state snapshot."""
    out: dict[str, Any] = {"log_checkpoints": m.log.maintain(), "state_snapshot": None}
    if m.views.local() is not None:
        with m.gate.lock:
            if not m.gate.closed:
                out["state_snapshot"] = m.views.housekeep()
    return out


def housekeeping_loop(m: Store, stop: threading.Event) -> None:
    """Off the appends' path: checkpoints and snapshots of a long-running process (a server) while it writes."""
    while not stop.wait(m.config.housekeeping_seconds):
        try:
            housekeep(m)
        except Exception:  # noqa: BLE001 - an optimisation only: the next open replays more
            logging.getLogger("eidetica").warning("housekeeping failed", exc_info=True)


def stats(m: Store) -> dict[str, Any]:
    """Counts and sizes: events, streams, log bytes, index rows, projection lag, snapshot, replicas."""
    m.gate.sync()
    out = {
        "tenant": m.tenant,
        "events": sum(m.log.head(p) for p in range(m.log.partitions)),
        "streams": len(m.log.streams()),
        "log_bytes": m.log.disk_bytes(),
        "index": m.views.index.stats(),
        "lag": m.views.projector.lag(),
        "sessions": len(m.state.sessions(m.tenant)),
        "summaries_committed": m.runtime.summarizer().committed,
        "summaries_stale": m.runtime.summarizer().stale,
        "extraction_failures": m.extraction_failures,
        "embedder": m.embedder.model_id,
        "snapshot": _snapshot_stats(m),
        # beyond max_memories a user's weakest facts are pruned on every remember: say so
        "facts": {**m.state.fact_counts(m.tenant, m.config.max_memories), "max_memories": m.config.max_memories},
    }
    if m.views.replicated:  # view replicas (Ray): applied offsets and lag of each
        out["replicas"] = m.views.status()
    return out


def _snapshot_stats(m: Store) -> dict[str, Any]:
    """The state snapshot's age and the tail a start would replay after it."""
    info = m.state.snapshot_info()
    ck, created = info["checkpoint"], info["created"]
    heads = {p: m.log.head(p) for p in range(m.log.partitions)}
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "age_s": None if created is None else round((now - created).total_seconds(), 1),
        "tail_events": sum(h - ck.get(p, 0) for p, h in heads.items()),
        "path": info["path"],
    }
