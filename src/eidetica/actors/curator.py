"""The FactCurator: the single writer of one user's facts."""

from __future__ import annotations

import datetime as dt
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InvalidInput, NotFound, ProviderError, WrongExpectedVersion
from ..events import (
    ChunksEmbedded,
    EventLog,
    ExtractionCompleted,
    FactAsserted,
    FactDecayed,
    FactDeleted,
    FactPruned,
    FactReinforced,
    FactSuperseded,
    NewEvent,
    UserForgotten,
)
from ..events.streams import facts_stream
from ..events.types import Event
from ..providers import LLM, Embedder
from ._config import MemoryConfig
from ._text import check_text, sanitize_category, vectors_from_bytes, vectors_to_bytes

__all__ = ["FactCurator"]

_TRIVIAL = {
    "ok", "okay", "okk", "kk", "k", "thanks", "thank you", "thx", "ty", "tysm", "yes", "yeah", "yep", "yup", "no", "nope",
    "nah", "hi", "hey", "hello", "bye", "cya", "cool", "sure", "lol", "lmao", "rofl", "great", "nice", "wow", "oh", "ah",
    "hmm", "hm", "uh", "um", "mhm", "wkwk", "wkwkwk", "xd", "omg", "np", "gg", "brb", "ttyl", "idk", "same", "true", "fine",
    "alright", "right", "got it", "i see", "sounds good", "good night", "good morning", "see you",
}
# Laughter and filler in any length ("hahaha", "wkwkwk", "hehe", "lolol", "xDD", "kkkk", "555"): a message made
# only of these tokens states nothing durable.
_FILLER = re.compile(r"^(?:(?:ha|he|hi|ho|hu|wk|lo|ja|je|ke|ka|xd|ok)+h?|a?h+a*|k+|l+o+l+[lo]*|5{3,}|m+|h+m+|u+m+|e+r+m*|o+h+|a+w+)$")


def trivial(text: str) -> bool:
    """Whether a message is small talk that no extractor should see (acknowledgements, laughter, filler)."""
    t = text.lower().strip()
    words = re.findall(r"[^\W_]+", t)
    if not words:
        return True  # punctuation, emoji only
    if " ".join(words) in _TRIVIAL:
        return True
    if len(words) <= 4 and all(w in _TRIVIAL or _FILLER.match(w) for w in words):
        return True
    return len("".join(words)) < 4


@dataclass
class _FactState:
    """What the curator decides with (write side: vectors, decay clocks); readers use ``projections.FactInfo``."""

    fact_id: str
    content: str
    category: str
    confidence: float
    status: str  # active | superseded | deleted | pruned
    created: dt.datetime
    reinforced: dt.datetime
    decayed: dt.datetime
    vector: np.ndarray | None = None
    superseded_by: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)


class FactCurator:
    """Remembers, reinforces, supersedes, decays and prunes a user's facts."""

    def __init__(
        self,
        log: EventLog,
        tenant: str,
        user_id: str,
        embedder: Embedder,
        llm: LLM,
        config: MemoryConfig,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.log = log
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.llm = llm
        self.config = config
        self.clock = clock
        self.stream = facts_stream(tenant, user_id)
        self._lock = threading.RLock()
        self.reload()

    # -- state -----------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the fold from the log."""
        with self._lock:
            self.facts: dict[str, _FactState] = {}
            self.extracted: set[tuple[str, int]] = set()
            self.requests: dict[str, str] = {}  # request id -> fact id (retried calls are no-ops)
            self.version = self.log.stream_version(self.stream)
            for rec in self.log.read_stream(self.stream):
                self._fold(rec.decode(), rec.time)
            self._matrix: tuple[list[str], np.ndarray] | None = None

    def _fold(self, ev: Event, time: dt.datetime) -> None:
        f = self.facts.get(getattr(ev, "fact_id", ""))
        if getattr(ev, "request_id", ""):
            self.requests[ev.request_id] = ev.fact_id  # type: ignore[attr-defined]
        if isinstance(ev, FactAsserted):
            self.facts[ev.fact_id] = _FactState(
                ev.fact_id, ev.content, ev.category, ev.confidence, "active", time, time, time, sources=list(ev.sources)
            )
        elif isinstance(ev, ChunksEmbedded) and ev.kind == "fact":
            fs = self.facts.get(ev.source_id)
            if fs is not None and ev.model_id == self.embedder.model_id:
                fs.vector = vectors_from_bytes(ev.vectors, ev.dim)[0]
        elif isinstance(ev, FactReinforced) and f:
            f.confidence, f.reinforced, f.decayed = ev.confidence, time, time
            f.sources.extend(ev.sources)
        elif isinstance(ev, FactDecayed) and f:
            f.confidence, f.decayed = ev.confidence, time
        elif isinstance(ev, FactSuperseded) and f:
            f.status, f.superseded_by = "superseded", ev.by
        elif isinstance(ev, FactDeleted) and f:
            f.status = "deleted"
        elif isinstance(ev, FactPruned) and f:
            f.status = "pruned"
        elif isinstance(ev, ExtractionCompleted):
            self.extracted.update((ev.session_id, s) for s in ev.sequences)
        elif isinstance(ev, UserForgotten):
            self.facts.clear()
            self.extracted.clear()
        self._matrix = None

    def _commit(self, events: list[tuple[Event, dt.datetime | None]]) -> int:
        """Append events with the curator's version as the expectation, then fold them."""
        now = self.clock()
        news = [NewEvent.of(e, tenant=self.tenant, time=t or now) for e, t in events]
        try:
            _, last = self.log.append(self.stream, news, self.version)
        except WrongExpectedVersion:
            self.reload()  # another writer appeared (a restarted actor): refold, let the caller retry
            raise
        self.version += len(news)
        for e, t in events:
            self._fold(e, t or now)
        return last

    def active(self, category: str | None = None) -> list[_FactState]:
        """Active facts, strongest first."""
        with self._lock:
            facts = [f for f in self.facts.values() if f.status == "active"]
        if category is not None:
            facts = [f for f in facts if f.category == sanitize_category(category)]
        return sorted(facts, key=lambda f: (-f.confidence, -f.reinforced.timestamp()))

    def _nearest(self, vector: np.ndarray) -> tuple[_FactState | None, float]:
        if self._matrix is None:
            live = [f for f in self.facts.values() if f.status == "active" and f.vector is not None]
            self._matrix = ([f.fact_id for f in live], np.stack([f.vector for f in live]) if live else np.zeros((0, len(vector)), np.float32))
        ids, mat = self._matrix
        if not ids:
            return None, 0.0
        sims = mat @ vector
        i = int(np.argmax(sims))
        return self.facts[ids[i]], float(sims[i])

    # -- writing ---------------------------------------------------------------------
    def remember(
        self,
        content: str,
        category: str = "general",
        *,
        sources: Sequence[dict[str, Any]] = (),
        time: dt.datetime | None = None,
        vector: np.ndarray | None = None,
        request_id: str = "",
    ) -> str:
        """Store a fact, or reinforce / supersede a near-duplicate; returns the fact id that holds it.

        A ``request_id`` makes the call exactly-once: a retry (say, after an actor restart)
        returns the fact id the first attempt produced.
        """
        if request_id and request_id in self.requests:
            return self.requests[request_id]
        content = check_text("content", content).strip()
        category = sanitize_category(category)
        if vector is None:
            vector = self.embedder.embed([content])[0]
        with self._lock:
            for attempt in range(3):
                try:
                    if request_id and request_id in self.requests:
                        return self.requests[request_id]
                    return self._remember(content, category, list(sources), time, vector, request_id)
                except WrongExpectedVersion:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

    def _remember(
        self, content: str, category: str, sources: list[dict[str, Any]], time: dt.datetime | None, vector: np.ndarray,
        request_id: str = "",
    ) -> str:
        best, sim = self._nearest(vector)
        # A near-duplicate that states a different value ("booked for April" -> "for May")
        # is an update, not a restatement: embeddings score such pairs very high.
        conflict = best is not None and sim >= self.config.supersede_threshold and self.llm.contradicts(best.content, content)
        if best is not None and sim >= self.config.reinforce_threshold and not conflict:
            conf = min(1.0, round(best.confidence + self.config.reinforce_step, 6))
            self._commit([(FactReinforced(fact_id=best.fact_id, confidence=conf, sources=sources, request_id=request_id), time)])
            return best.fact_id
        fact_id = f"fact-{uuid.uuid4()}"
        events: list[tuple[Event, dt.datetime | None]] = [
            (
                FactAsserted(
                    fact_id=fact_id, user_id=self.user_id, content=content, category=category, sources=sources,
                    request_id=request_id,
                ),
                time,
            ),
            (
                ChunksEmbedded(
                    model_id=self.embedder.model_id,
                    dim=self.embedder.dim,
                    chunk_ids=[fact_id],
                    vectors=vectors_to_bytes(vector[None, :]),
                    texts=[content],
                    source_id=fact_id,
                    kind="fact",
                    user_id=self.user_id,
                    category=category,
                    time=time,
                    metadata={"sources": sources},
                ),
                time,
            ),
        ]
        if conflict:
            events.append((FactSuperseded(fact_id=best.fact_id, by=fact_id), time))  # type: ignore[union-attr]
        self._commit(events)
        self._enforce_cap()
        return fact_id

    def _enforce_cap(self) -> None:
        live = self.active()
        over = len(live) - self.config.max_memories
        if over > 0:
            weakest = sorted(live, key=lambda f: (f.confidence, f.reinforced.timestamp()))[:over]
            self._commit([(FactPruned(fact_id=f.fact_id, reason="max_memories"), None) for f in weakest])

    def forget(self, fact_id: str) -> None:
        """Delete one fact (it stays in the log until the user or store is compacted)."""
        with self._lock:
            f = self.facts.get(fact_id)
            if f is None or f.status in ("deleted", "pruned"):
                raise NotFound("fact", fact_id)
            self._commit([(FactDeleted(fact_id=fact_id), None)])

    def forget_matching(self, query: str, threshold: float = 0.85) -> list[str]:
        """Delete every active fact whose cosine to ``query`` is at least ``threshold``."""
        check_text("query", query)
        if not 0 < threshold <= 1:
            raise InvalidInput("threshold", "must be in (0, 1]", threshold)
        vec = self.embedder.embed([query])[0]
        with self._lock:
            gone = [f.fact_id for f in self.active() if f.vector is not None and float(f.vector @ vec) >= threshold]
            if gone:
                self._commit([(FactDeleted(fact_id=i), None) for i in gone])
            return gone

    def forget_user(self) -> int:
        """Append the user tombstone to the facts stream; returns its offset."""
        with self._lock:
            return self._commit([(UserForgotten(user_id=self.user_id), None)])

    def extract(self, messages: Sequence[dict[str, Any]]) -> list[str]:
        """Extract durable facts from user messages (dicts: session_id, sequence, content, metadata).

        Messages already extracted are skipped; a provider failure raises ``ProviderError``
        and leaves them pending (the messages themselves are already in the log).
        """
        todo = [
            m for m in messages
            if (m["session_id"], m["sequence"]) not in self.extracted
        ]
        if not todo:
            return []
        ids: list[str] = []
        with self._lock:
            for m in todo:
                text = m["content"].strip()
                if trivial(text):
                    found = []
                else:
                    found = self.llm.extract_facts(text)  # may raise ProviderError: stays pending
                source = dict(m.get("metadata") or {}, session_id=m["session_id"], sequence=m["sequence"])
                got = [self.remember(f.content, f.category, sources=[source], time=m.get("time")) for f in found]
                ids += got
                done = ExtractionCompleted(session_id=m["session_id"], sequences=[m["sequence"]], facts=got)
                self._commit([(done, None)])
        return ids

    def sweep(self, now: dt.datetime | None = None) -> dict[str, int]:
        """Decay facts not reinforced for a while, prune weak old ones; returns counts."""
        now = now or self.clock()
        decay_after = dt.timedelta(days=self.config.decay_after_days)
        prune_after = dt.timedelta(days=self.config.prune_after_days)
        with self._lock:
            events: list[tuple[Event, dt.datetime | None]] = []
            decayed = pruned = 0
            for f in self.active():
                if now - f.reinforced >= prune_after and f.confidence < self.config.prune_below:
                    events.append((FactPruned(fact_id=f.fact_id, reason="decayed"), None))
                    pruned += 1
                elif now - f.reinforced >= decay_after and now - f.decayed >= decay_after:
                    conf = round(f.confidence * self.config.decay_factor, 6)
                    events.append((FactDecayed(fact_id=f.fact_id, confidence=conf), now))
                    decayed += 1
            if events:
                self._commit(events)
            return {"decayed": decayed, "pruned": pruned}
