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
    done_at = getattr(m.log, "event_offset", None)
    if done_at is not None:  # a resumed run skips what it wrote: a model may not embed a text the same twice
        live = [(ev, d) for ev, d in live
                if done_at(uuid.uuid5(ev.event_id, embedder.model_id), ev.stream, ev.tenant) is None]
    total = reembed_vectors(m.runtime, live, embedder, progress)  # through each stream's one writer
    with m.gate.lock:
        m.views.fresh(embedder)
        EmbedderRecord(m.log).switch(embedder.model_id, embedder.dim, m.embedder.model_id)
        m.embedder = embedder
        m.runtime = m.runtime.with_embedder(embedder)  # actors in this process embed with it from now on
    return total
