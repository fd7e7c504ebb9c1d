"""Switching the embedding model: every live text embedded again, the switch recorded (``Memory.reembed``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ..actors import EmbedderRecord
from ..errors import InvalidInput
from ..providers import Embedder
from .compaction import plan_compaction
from .owners import reembed_vectors
from .store import Store

__all__ = ["reembed"]


def reembed(m: Store, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed every live text of ``m`` again with ``embedder``, record the switch, and move to it.

    Old vectors stay in the log; queries use the old index until the new one is built.
    Re-running after a crash resumes: event ids are derived, so appends are idempotent.
    """
    if embedder.model_id == m.embedder.model_id and embedder.dim == m.embedder.dim:
        raise InvalidInput("embedder", f"the store already uses {embedder.model_id}")
    m.gate.sync()
    _, live = plan_compaction(m.log)
    live = [(ev, d) for ev, d in live if d.model_id == m.embedder.model_id]
    # a resumed run skips what it wrote: a model may not embed a text the same twice (one log call per stream)
    by_stream: dict[tuple[str, str], list[uuid.UUID]] = {}
    for ev, _ in live:
        by_stream.setdefault((ev.stream, ev.tenant), []).append(ev.event_id)
    written = {eid for (stream, tenant), ids in by_stream.items()
               for eid, at in zip(ids, m.log.event_offsets([uuid.uuid5(i, embedder.model_id) for i in ids], stream, tenant))
               if at is not None}
    live = [(ev, d) for ev, d in live if ev.event_id not in written]
    total = reembed_vectors(m.runtime, live, embedder, progress)  # through each stream's one writer
    with m.gate.lock:
        m.views.fresh(embedder)
        EmbedderRecord(m.log).switch(embedder.model_id, embedder.dim, m.embedder.model_id)
        m.embedder = embedder
        m.runtime = m.runtime.with_embedder(embedder)  # actors in this process embed with it from now on
    return total
