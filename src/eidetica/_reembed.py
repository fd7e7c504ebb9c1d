"""Switching the embedding model: every live text embedded again, the switch recorded (``Memory.reembed``)."""

from __future__ import annotations

import uuid
from typing import Any, Callable

import msgspec

from ._compaction import plan_compaction
from .actors import LocalRuntime
from .errors import InvalidInput
from .events import EmbedderChanged, NewEvent
from .events.streams import meta_stream
from .providers import Embedder

__all__ = ["reembed"]


def reembed(m: Any, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed every live text of ``m`` again with ``embedder``, record the switch, and move to it.

    Old vectors stay in the log; queries use the old index until the new one is built.
    Re-running after a crash resumes: event ids are derived, so appends are idempotent.
    """
    if embedder.model_id == m.embedder.model_id and embedder.dim == m.embedder.dim:
        raise InvalidInput("embedder", f"the store already uses {embedder.model_id}")
    m._sync()
    _, live = plan_compaction(m.log)
    live = [(ev, d) for ev, d in live if d.model_id == m.embedder.model_id]
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
            m.log.append(stream, evs)
        done += len(texts)
        if progress:
            progress(done, total)
    with m._qlock:
        m.views.fresh(embedder)
        m.log.append(
            meta_stream("embedder"),
            [NewEvent.of(EmbedderChanged(model_id=embedder.model_id, dim=embedder.dim, previous_model_id=m.embedder.model_id), tenant="")],
        )
        m.embedder = embedder
        if isinstance(m.runtime, LocalRuntime):
            m.runtime = LocalRuntime(m.log, embedder, m.llm, m.config, m.clock, m.actor_snapshots)
    return total
