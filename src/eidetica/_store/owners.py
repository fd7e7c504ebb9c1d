"""Writes decided by the facade (reembed, import) handed to each stream's one writer.

Every stream has one writer (the events package's map): a session's stream its
``SessionActor``, a summary stream the ``Summarizer``, a user's facts, notes, items and
schedules their actors. ``reembed`` and ``import_`` decide what to append, never append it
themselves: ``append_through_owner`` finds the owner and has it record the events.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from ..actors import Runtime
from ..errors import InvalidInput
from ..events import NewEvent
from ..events.streams import parse_stream
from ..events.types import decode
from ..providers import Embedder

__all__ = ["append_through_owner", "reembed_vectors"]


def _session_user(events: Sequence[NewEvent]) -> str:
    """The user a session stream's events name (its ``SessionStarted``, a chunk's ``user_id``)."""
    for e in events:
        user = getattr(decode(e.payload), "user_id", "")
        if user:
            return user
    return ""


def append_through_owner(runtime: Runtime, stream: str, events: Sequence[NewEvent]) -> int:
    """Have the one writer of ``stream`` append ``events``; returns the last offset."""
    kind, tenant, ident = parse_stream(stream)
    if kind == "session":
        return runtime.session(tenant, ident, _session_user(events)).record(events)
    if kind == "summary":
        return runtime.summarizer().record(stream, events)
    owners: dict[str, Callable[[str, str], Any]] = {
        "facts": runtime.curator, "notes": runtime.notes, "items": runtime.items, "schedules": runtime.schedules,
    }
    if kind not in owners:
        raise InvalidInput("stream", f"{stream!r} has no owner that records events from outside", stream)
    return owners[kind](tenant, ident).record(events)


def reembed_vectors(runtime: Runtime, live: Sequence[tuple[Any, Any]], embedder: Embedder,
                    progress: Callable[[int, int], None] | None = None) -> int:
    """Embed the texts of ``live`` (``(recorded event, ChunksEmbedded)`` pairs) with ``embedder`` and have each stream's
    owner record them; event ids derive from the originals', so a rerun after a crash appends nothing twice."""
    total = sum(len(d.texts) for _, d in live)
    done = 0
    for k in range(0, len(live), 64):
        group = live[k : k + 64]
        texts = [t for _, d in group for t in d.texts]
        vectors = embedder.embed(texts) if texts else None
        pos = 0
        by_stream: dict[str, list[NewEvent]] = {}
        for ev, d in group:
            n = len(d.texts)
            new = msgspec.structs.replace(
                d, model_id=embedder.model_id, dim=embedder.dim,
                vectors=vectors[pos : pos + n].astype("<f4").tobytes() if n else b"",  # type: ignore[index]
            )
            pos += n
            by_stream.setdefault(ev.stream, []).append(
                NewEvent.of(new, tenant=ev.tenant, event_id=uuid.uuid5(ev.event_id, embedder.model_id), time=ev.time)
            )
        for stream, evs in by_stream.items():
            append_through_owner(runtime, stream, evs)
        done += len(texts)
        if progress:
            progress(done, total)
    return total
