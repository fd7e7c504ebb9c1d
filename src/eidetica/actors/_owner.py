"""Writes that are decided elsewhere but belong to a stream's one writer.

``reembed`` records new vectors (``ChunksEmbedded``) for every stream that holds text, and an
import replays a tenant's events; both go through the owner of each stream, which appends
them at its own version (a race refolds and retries; derived or exported event ids keep a
repeat harmless) and then refolds, so its next decision sees them. ``meta:embedder`` has its
own writer here, ``EmbedderRecord``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import DimensionMismatch, EmbeddingModelChanged, WrongExpectedVersion
from ..events import EmbedderChanged, EventLog, NewEvent
from ..events.streams import meta_stream
from ._writer import append_expecting

__all__ = ["StreamOwner", "EmbedderRecord", "EMBEDDER_STREAM"]

EMBEDDER_STREAM = meta_stream("embedder")


class StreamOwner:
    """Mixin of an actor that is its stream's one writer (``log``, ``stream``, ``version``, ``_lock``, ``reload``)."""

    log: EventLog
    stream: str
    version: int
    _lock: Any

    def reload(self) -> None:  # pragma: no cover - every owner defines it
        """Rebuild the fold from the log (each actor's own)."""
        raise NotImplementedError

    def record(self, events: Sequence[NewEvent]) -> int:
        """Append events decided elsewhere (reembed's vectors, an import) at this actor's version; returns the last offset."""
        with self._lock:
            _, _, last = append_expecting(self, lambda: list(events))  # a race: refold, then append after it
            self.reload()  # the fold takes in what was recorded (an imported message, a note)
            return last


class EmbedderRecord:
    """The one writer of ``meta:embedder``: the model and dimension the store's vectors come from."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def current(self) -> EmbedderChanged | None:
        """The store's recorded embedder, None for a new store."""
        recs = self.log.read_stream(EMBEDDER_STREAM)
        return recs[-1].decode() if recs else None  # type: ignore[return-value]

    def check(self, model_id: str, dim: int, path: str | None = None) -> None:
        """Record the embedder of a new store; refuse another one (``DimensionMismatch`` when its dimension differs)."""
        current = self.current()
        if current is None:
            self.log.append(EMBEDDER_STREAM, [NewEvent.of(EmbedderChanged(model_id=model_id, dim=dim), tenant="")], -1)
            return
        if current.model_id == model_id and current.dim == dim:
            return
        if current.dim != dim:
            raise DimensionMismatch(current.dim, dim, EmbeddingModelChanged(current.model_id, model_id, path).hint)
        raise EmbeddingModelChanged(current.model_id, model_id, path)

    def switch(self, model_id: str, dim: int, previous_model_id: str) -> None:
        """Record that the store moved to another embedder (after ``reembed`` wrote its vectors)."""
        ev = EmbedderChanged(model_id=model_id, dim=dim, previous_model_id=previous_model_id)
        for attempt in range(3):
            try:
                self.log.append(EMBEDDER_STREAM, [NewEvent.of(ev, tenant="")], self.log.stream_version(EMBEDDER_STREAM))
                return
            except WrongExpectedVersion:
                if attempt == 2:
                    raise

