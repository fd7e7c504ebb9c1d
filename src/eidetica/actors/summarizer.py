"""The Summarizer: rolls a session's old turns into a summary, committed by epoch CAS."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import WrongExpectedVersion
from ..events import ChunksEmbedded, EventLog, LlmCalled, NewEvent, SummaryCommitted
from ..providers import LLM, Embedder, _ledger, count_tokens
from ._config import MemoryConfig
from ._text import chunk_text, vectors_to_bytes
from .session import SessionActor

__all__ = ["Summarizer", "SummaryResult"]


@dataclass(frozen=True)
class SummaryResult:
    """What one summarisation attempt did."""

    committed: bool
    epoch: int
    upto_sequence: int = -1
    text: str = ""
    stale: bool = False


class Summarizer:
    """Reads a session at summary epoch e, asks the LLM, commits with ``expected_version=e``."""

    def __init__(self, log: EventLog, llm: LLM, embedder: Embedder, config: MemoryConfig) -> None:
        self.log = log
        self.llm = llm
        self.embedder = embedder
        self.config = config
        self.stale = 0  # summaries discarded because a newer epoch won the race
        self.committed = 0
        self._lock = threading.Lock()

    def record(self, stream: str, events: Sequence[NewEvent]) -> int:
        """Append events decided elsewhere (reembed's vectors, an import) to a summary stream, at its version.

        The version is the summary epoch: a summary committing meanwhile wins, and this appends after it.
        """
        for attempt in range(3):
            try:
                return self.log.append(stream, list(events), self.log.stream_version(stream))[1]
            except WrongExpectedVersion:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def summarize(self, session: SessionActor, *, force: bool = False) -> SummaryResult:
        """Summarise the turns older than the retained window; a stale result is discarded and counted."""
        epoch, previous, upto = session.summary()
        pending = [m for m in session.history() if m.sequence > upto]
        tokens = sum(count_tokens(m.content) for m in pending)
        keep = self.config.retain_recent
        if tokens > self.config.emergency_factor * self.config.token_budget:
            keep = max(1, keep // 2)  # emergency compaction: the budget is critically exceeded
        old = pending[:-keep] if len(pending) > keep else []
        if not old or (not force and not session.needs_summary()):
            return SummaryResult(committed=False, epoch=epoch, upto_sequence=upto)
        return self._commit(session, epoch, old, previous or "")

    def rewrite(self, session: SessionActor) -> SummaryResult:
        """Summarise again, from nothing, the session's messages the latest summary covered (some were forgotten).

        The commit says ``rewritten``: ``compact`` then redacts every earlier summary of the
        session, which may still quote the forgotten messages. None left: an empty summary.
        """
        epoch, previous, upto = session.summary()
        if previous is None:
            return SummaryResult(committed=False, epoch=epoch, upto_sequence=upto)
        return self._commit(session, epoch, [m for m in session.history() if m.sequence <= upto], "", upto)

    def _commit(self, session: SessionActor, epoch: int, old: list, previous: str, upto: int | None = None) -> SummaryResult:
        """Summarise ``old`` (extending ``previous``) and commit it as epoch ``epoch + 1``; stale when another won."""
        target = max(16, int(self.config.summary_target * self.config.token_budget))
        with _ledger.scope():  # the summary call is written in the summary's own append
            text = self.llm.summarize(
                [(m.role, m.content) for m in old], target_tokens=target, previous_summary=previous
            ) if old else ""
            calls = _ledger.take()
        new_upto = old[-1].sequence if upto is None else upto
        sources = [dict(m.metadata, sequence=m.sequence) for m in old]
        commit = SummaryCommitted(
            session_id=session.session_id, epoch=epoch + 1, text=text, upto_sequence=new_upto, sources=sources,
            rewritten=upto is not None,
        )
        chunks = (chunk_text(text, self.config.chunk_chars, self.config.chunk_overlap) or [text]) if text else []
        vectors = vectors_to_bytes(self.embedder.embed(chunks)) if chunks else b""  # none: the old summary's rows just go
        source_id = f"summary:{session.tenant}:{session.session_id}"
        eid = uuid.uuid4()
        embedded = ChunksEmbedded(
            model_id=self.embedder.model_id,
            dim=self.embedder.dim,
            chunk_ids=[f"{source_id}:{k}" for k in range(len(chunks))],
            vectors=vectors,
            texts=chunks,
            source_id=source_id,
            kind="summary",
            user_id=session.user_id,
            session_id=session.session_id,
            metadata={"sources": sources, "epoch": epoch + 1},
        )
        try:
            ledger = [LlmCalled(**c, user_id=session.user_id, session_id=session.session_id) for c in calls]
            self.log.append(
                session.summary_stream,
                [NewEvent.of(commit, tenant=session.tenant, event_id=eid), NewEvent.of(embedded, tenant=session.tenant),
                 *(NewEvent.of(e, tenant=session.tenant) for e in ledger)],
                epoch,  # -1 (NO_STREAM) for the first summary: exactly one writer wins each epoch
            )
        except WrongExpectedVersion:
            with self._lock:
                self.stale += 1
            return SummaryResult(committed=False, epoch=epoch, stale=True)
        with self._lock:
            self.committed += 1
        return SummaryResult(committed=True, epoch=epoch + 1, upto_sequence=new_upto, text=text)
