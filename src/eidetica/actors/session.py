"""The Session actor: the single writer of one session's messages."""

from __future__ import annotations

import bisect
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pyarrow as pa

from ..errors import EventIdConflict, InvalidInput, NotFound
from ..events import (
    ChunksEmbedded,
    EventLog,
    MessageAppended,
    MessageRetracted,
    NewEvent,
    RecordedEvent,
    SessionForgotten,
    SessionStarted,
    SummaryCommitted,
)
from ..events.streams import session_stream, summary_stream
from ..providers import Embedder, count_tokens
from ._config import STRATEGIES, MemoryConfig
from ._owner import StreamOwner
from ._records import Message
from ._snapshots import ActorSnapshot, ActorSnapshots, column, save_actor, start_actor, times
from ._text import check_metadata, check_text, chunk_text, content_hash, indexed_text, vectors_to_bytes
from ._writer import append_expecting

__all__ = ["SessionActor", "ROLES", "SUMMARY_PREFIX"]

ROLES = ("system", "user", "assistant", "tool")
SUMMARY_PREFIX = "Rolling session summary: "
SNAPSHOT_SCHEMA = 1  # of the actor's snapshot tables; bump on any change (older ones are then refused)
_TS = pa.timestamp("us", tz="UTC")
_ENC = msgspec.msgpack.Encoder()
_DEC = msgspec.msgpack.Decoder(list[dict[str, Any]])


class SessionActor(StreamOwner):
    """Orders, chunks and embeds a session's messages; its state is a fold of the log."""

    def __init__(
        self,
        log: EventLog,
        tenant: str,
        session_id: str,
        user_id: str,
        embedder: Embedder,
        config: MemoryConfig,
        clock: Callable[[], dt.datetime],
        snapshots: ActorSnapshots | None = None,
    ) -> None:
        self.log = log
        self.snapshots = snapshots
        self.tenant = tenant
        self.session_id = session_id
        self.user_id = user_id
        self.embedder = embedder
        self.config = config
        self.clock = clock
        self.stream = session_stream(tenant, session_id)
        self.summary_stream = summary_stream(tenant, session_id)
        self._lock = threading.RLock()
        self.reload()

    # -- state -----------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the fold: from the actor's snapshot and the stream's tail after it, or the whole stream."""
        with self._lock:
            start_actor(self, "session", SNAPSHOT_SCHEMA, self._fold_records)
            self._load_summary()
            self.save_snapshot()  # a long replay is paid once, not on every start

    def _reset(self) -> None:
        self.messages: list[Message] = []
        self.hashes: dict[str, tuple[str, int, int]] = {}  # content hash -> (chunk id, stream version, index)
        self.last_sequence = -1
        self.owner: str | None = None
        self.started = False
        self.message_ids: dict[uuid.UUID, int] = {}
        self.message_eids: dict[int, uuid.UUID] = {}  # sequence -> its MessageAppended's event id
        # _cum[i]: tokens of messages[: i + 1], extended lazily, dropped when a message goes:
        # needs_summary runs after every append, and recounting the unsummarised tail each
        # time made a plain append cost O(session length)
        self._cum: list[int] = []
        self._summary_seen = 0
        self.summary_text = None
        self.summary_upto = -1
        self._summary_tokens: tuple[str | None, int] = (None, 0)
        self._covered = -1  # the stream version the snapshot on disk covers

    # -- snapshots -------------------------------------------------------------------
    def _fold_records(self, recs: Sequence[RecordedEvent]) -> None:
        for rec in recs:
            self._fold(rec.decode(), rec.time, rec.event_id, rec.offset, rec.version)

    def _restore(self, snap: ActorSnapshot) -> None:
        t, meta = snap.tables, snap.meta
        m = t["messages"]
        # every message's metadata in one msgpack document: one decode call rather than one per message
        metas = _DEC.decode(t["metadata"].column("all")[0].as_py())
        cols = [column(m, "role"), column(m, "content"), times(m, "time"), column(m, "sequence"), metas]
        self.messages = [Message(role=r, content=c, time=tm, sequence=q, metadata=md) for r, c, tm, q, md in zip(*cols)]
        h = t["hashes"]
        self.hashes = dict(zip(column(h, "hash"), zip(column(h, "chunk_id"), column(h, "version"), column(h, "index"))))
        ids = t["ids"]
        self.message_ids = {uuid.UUID(bytes=b): o for b, o in zip(column(ids, "event_id"), column(ids, "offset"))}
        e = t["eids"]
        self.message_eids = {q: uuid.UUID(bytes=b) for q, b in zip(column(e, "sequence"), column(e, "event_id"))}
        self.last_sequence, self.owner, self.started = int(meta["last_sequence"]), meta["owner"], bool(meta["started"])
        self.version = max(self.version, snap.version)
        self._covered = snap.version

    def _tables(self) -> dict[str, pa.Table]:
        """The fold as Arrow tables (lock held): what the actor's snapshot holds."""
        ms = self.messages
        hs = list(self.hashes.items())
        return {
            "messages": pa.table({
                "role": pa.array([m.role for m in ms], pa.string()),
                "content": pa.array([m.content for m in ms], pa.string()),
                "time": pa.array([m.time for m in ms], _TS),
                "sequence": pa.array([m.sequence for m in ms], pa.int64()),
            }),
            "metadata": pa.table({"all": pa.array([_ENC.encode([m.metadata for m in ms])], pa.binary())}),
            "hashes": pa.table({
                "hash": pa.array([k for k, _ in hs], pa.string()),
                "chunk_id": pa.array([v[0] for _, v in hs], pa.string()),
                "version": pa.array([v[1] for _, v in hs], pa.int64()),
                "index": pa.array([v[2] for _, v in hs], pa.int64()),
            }),
            "ids": pa.table({
                "event_id": pa.array([k.bytes for k in self.message_ids], pa.binary(16)),
                "offset": pa.array(list(self.message_ids.values()), pa.int64()),
            }),
            "eids": pa.table({
                "sequence": pa.array(list(self.message_eids), pa.int64()),
                "event_id": pa.array([v.bytes for v in self.message_eids.values()], pa.binary(16)),
            }),
        }

    def save_snapshot(self, force: bool = False) -> bool:
        """Write the actor's snapshot when ``snapshots.every`` events are not covered by it (any, when forced)."""
        def contents() -> tuple[dict, dict]:
            return self._tables(), {"last_sequence": self.last_sequence, "owner": self.owner, "started": self.started}

        return save_actor(self, "session", SNAPSHOT_SCHEMA, contents, force)

    def _fold(self, ev: Any, time: dt.datetime, event_id: uuid.UUID | None = None, offset: int = -1, version: int = -1) -> None:
        if isinstance(ev, SessionStarted):
            self.started = True
            self.owner = ev.user_id
        elif isinstance(ev, MessageAppended):
            self.messages.append(
                Message(role=ev.role, content=ev.content, time=time, sequence=ev.sequence, metadata=ev.metadata)
            )
            self.last_sequence = max(self.last_sequence, ev.sequence)
            if event_id is not None:
                self.message_ids[event_id] = offset
                self.message_eids[ev.sequence] = event_id
        elif isinstance(ev, MessageRetracted):
            gone = [m for m in self.messages if m.sequence == ev.sequence]
            self.messages = [m for m in self.messages if m.sequence != ev.sequence]
            self._cum.clear()
            for m in gone:  # its text may be appended again: it must be embedded again then
                for c in chunk_text(indexed_text(m.content, m.metadata), self.config.chunk_chars, self.config.chunk_overlap):
                    self.hashes.pop(content_hash(c), None)
        elif isinstance(ev, ChunksEmbedded):
            for i, (cid, t) in enumerate(zip(ev.chunk_ids, ev.texts)):
                self.hashes[content_hash(t)] = (cid, version, i)
        elif isinstance(ev, SessionForgotten):
            self.messages.clear()
            self.hashes.clear()
            self._cum.clear()
            self.started = False

    def _load_summary(self) -> None:
        """Catch up on the summary stream (other writers, the Summarizer, append to it)."""
        if not hasattr(self, "_summary_seen"):
            self._summary_seen = 0
            self.summary_text: str | None = None
            self.summary_upto = -1
        self.summary_epoch = self.log.stream_version(self.summary_stream)  # -1: none yet
        if self.summary_epoch < self._summary_seen:  # the stream was rewritten (never, but be safe)
            self._summary_seen, self.summary_text, self.summary_upto = 0, None, -1
        for rec in self.log.read_stream(self.summary_stream, self._summary_seen):
            ev = rec.decode()
            if isinstance(ev, SummaryCommitted):
                self.summary_text, self.summary_upto = ev.text, ev.upto_sequence
            elif isinstance(ev, SessionForgotten):
                self.summary_text, self.summary_upto = None, -1
            self._summary_seen = rec.version + 1

    # -- writing ---------------------------------------------------------------------
    def append_many(self, items: Sequence[dict[str, Any]]) -> int:
        """Append messages (dicts of role, content, metadata, time, sequence, event_id) atomically; returns the last offset."""
        with self._lock:
            known: list[int] = []

            def build() -> list[NewEvent]:
                known[:] = [self.message_ids[i["event_id"]] for i in items if i.get("event_id") in self.message_ids]
                return [] if known else self._events(items)

            events, first, last = append_expecting(self, build)
            if known:  # a retried call whose first attempt was committed
                self._check_retry(items, len(known))
                return self._commit_end(items, max(known))
            now = self.clock()
            base = self.version - len(events)
            for k, ne in enumerate(events):  # fold what we wrote rather than re-reading it
                self._fold(_decode(ne), ne.time or now, ne.event_id, first + k, base + 1 + k)
            return last

    def _events(self, items: Sequence[dict[str, Any]]) -> list[NewEvent]:
        """The events that append these messages (checked, chunked, embedded), decided on the current fold."""
        if self.owner is not None and self.owner != self.user_id and self.started:
            raise InvalidInput("user", f"session {self.session_id!r} belongs to another user")
        events: list[NewEvent] = []
        if not self.started:
            first_time = (items[0].get("time") if items else None) or self.clock()
            events.append(
                NewEvent.of(SessionStarted(session_id=self.session_id, user_id=self.user_id), tenant=self.tenant, time=first_time)
            )
        seq = self.last_sequence
        pending_chunks: list[tuple[int, str, str, dict[str, Any], dt.datetime | None, uuid.UUID]] = []
        inputs: list[str] = []  # what the embedder sees for each pending chunk
        before = [m.content for m in self.messages[-self.config.embed_context :]] if self.config.embed_context else []
        new_hashes: dict[str, int] = {}  # hash -> index in pending_chunks
        moved: dict[str, tuple[int, str, dict[str, Any], dt.datetime, uuid.UUID]] = {}  # stored chunk seen again
        for _k, item in enumerate(items):
            role = item.get("role")
            if role not in ROLES or role == "system":
                raise InvalidInput("role", "must be one of user, assistant, tool (system prompts are not stored)", role)
            content = check_text("content", item.get("content"))
            metadata = check_metadata("metadata", item.get("metadata"))
            want = item.get("sequence")
            if want is None:
                want = seq + 1
            elif isinstance(want, bool) or not isinstance(want, int) or want <= seq:
                raise InvalidInput(
                    "sequence", f"must be an int greater than the last sequence {seq} (repeated or out of order)", want
                )
            seq = want
            time = item.get("time")
            if time is not None and (not isinstance(time, dt.datetime) or time.utcoffset() is None):
                raise InvalidInput("time", "must be a timezone-aware datetime", time)
            time = time or self.clock()
            event_id = item.get("event_id") or uuid.uuid4()
            ev = MessageAppended(
                session_id=self.session_id, user_id=self.user_id, role=role, content=content, sequence=seq, metadata=metadata,
                extract=role == "user" and self.config.auto_extract,
            )
            events.append(NewEvent.of(ev, tenant=self.tenant, event_id=event_id, time=time))
            text = indexed_text(content, metadata)  # tool-call arguments are searchable with their message
            for j, chunk in enumerate(chunk_text(text, self.config.chunk_chars, self.config.chunk_overlap)):
                h = content_hash(chunk)
                meta = dict(metadata, sequence=seq, role=role)
                # Same text already searchable in this session: one row, not two, but it moves to
                # the latest occurrence so recency and neighbours see where it was last said.
                if h in new_hashes:
                    k0 = new_hashes[h]
                    _, cid0, chunk0, _, _, eid0 = pending_chunks[k0]
                    pending_chunks[k0] = (seq, cid0, chunk0, meta, time, eid0)
                    continue
                if h in self.hashes:
                    moved[h] = (seq, chunk, meta, time, event_id)
                    continue
                new_hashes[h] = len(pending_chunks)
                pending_chunks.append((seq, f"{event_id.hex}:{j}", chunk, meta, time, event_id))
                inputs.append("\n".join([*before, chunk]))
            if self.config.embed_context:
                before = [*before, content][-self.config.embed_context :]
        if pending_chunks:
            vectors = self.embedder.embed(inputs)
            for (_s, cid, chunk, meta, time, eid), vec in zip(pending_chunks, vectors):
                events.append(
                    NewEvent.of(
                        ChunksEmbedded(
                            model_id=self.embedder.model_id,
                            dim=self.embedder.dim,
                            chunk_ids=[cid],
                            vectors=vectors_to_bytes(vec[None, :]),
                            texts=[chunk],
                            source_id=eid.hex,
                            kind="message",
                            user_id=self.user_id,
                            session_id=self.session_id,
                            time=time,
                            metadata=meta,
                        ),
                        tenant=self.tenant,
                        event_id=uuid.uuid5(eid, cid),
                        time=time,
                    )
                )
        return events + self._moved_chunks(moved)

    def _commit_end(self, items: Sequence[dict[str, Any]], last_message: int) -> int:
        """The offset a retried append's first commit ended at, as that call returned it: one request's
        events are contiguous, and its chunk events follow its messages (a reader waiting for this
        offset, ``min_offset``, then sees the message's vectors too, not only the message)."""
        sources = {i["event_id"].hex for i in items}
        p = self.log.partition_of(self.stream)
        end, head = last_message, self.log.head(p)
        while end + 1 < head:
            for rec in self.log.read_offsets(range(end + 1, min(end + 33, head)), partition=p):
                if (rec.offset != end + 1 or rec.stream != self.stream or rec.type != "ChunksEmbedded"
                        or rec.decode().source_id not in sources):
                    return end
                end = rec.offset
        return end

    def _check_retry(self, items: Sequence[dict[str, Any]], known: int) -> None:
        """A retry must carry the messages its ids were logged with; anything else is ``EventIdConflict``."""
        if known != len(items):
            eid = next(i["event_id"] for i in items if i.get("event_id") in self.message_ids)
            raise EventIdConflict(str(eid), "was already appended, but not the other messages of this append")
        seq_of = {e: q for q, e in self.message_eids.items()}
        sequences = [m.sequence for m in self.messages]
        for item in items:
            q = seq_of.get(item["event_id"])
            k = bisect.bisect_left(sequences, q) if q is not None else len(sequences)
            if k == len(sequences) or sequences[k] != q:
                continue  # taken back since (retracted): the retry still names that message
            m = self.messages[k]
            try:
                same = (item.get("role") == m.role and check_text("content", item.get("content")) == m.content
                        and check_metadata("metadata", item.get("metadata")) == m.metadata
                        and item.get("sequence") in (None, m.sequence) and item.get("time") in (None, m.time))
            except InvalidInput:
                same = False
            if not same:
                raise EventIdConflict(str(item["event_id"]), "already names another message of this session")

    def _moved_chunks(self, moved: dict[str, tuple[int, str, dict[str, Any], dt.datetime, uuid.UUID]]) -> list[NewEvent]:
        """Re-record stored chunks at their latest occurrence: same chunk id (one row), stored vector, new position."""
        if not moved:
            return []
        first_version = min(self.hashes[h][1] for h in moved)
        stored = {rec.version: rec for rec in self.log.read_stream(self.stream, max(first_version, 0))}
        out: list[NewEvent] = []
        for h, (_seq, chunk, meta, time, eid) in moved.items():
            cid, version, i = self.hashes[h]
            rec = stored.get(version)
            old = rec.decode() if rec is not None else None
            if not isinstance(old, ChunksEmbedded):
                continue  # not found (redacted): the first occurrence stays
            vec = old.vectors[i * old.dim * 4 : (i + 1) * old.dim * 4]
            ev = ChunksEmbedded(
                model_id=old.model_id, dim=old.dim, chunk_ids=[cid], vectors=vec, texts=[chunk], source_id=eid.hex,
                kind="message", user_id=self.user_id, session_id=self.session_id, time=time, metadata=meta,
            )
            out.append(NewEvent.of(ev, tenant=self.tenant, event_id=uuid.uuid5(eid, f"moved:{cid}"), time=time))
        return out

    def retract_last(self) -> Message | None:
        """Take back the last message (a ``MessageRetracted`` event); returns it, None when there is none."""
        return self.retract()

    def retract(self, sequence: int | None = None) -> Message | None:
        """Take back the message at ``sequence`` (the last one when None); returns it, None when there is none."""
        with self._lock:
            taken: list[Message] = []

            def build() -> list[NewEvent]:
                taken[:] = self.messages[-1:] if sequence is None else [m for m in self.messages if m.sequence == sequence]
                if not taken:
                    return []
                eid = self.message_eids.get(taken[0].sequence)
                ev = MessageRetracted(session_id=self.session_id, sequence=taken[0].sequence, message_id=eid.hex if eid else "")
                return [NewEvent.of(ev, tenant=self.tenant)]

            news, first, _ = append_expecting(self, build)
            if not news:
                return None
            self._fold(_decode(news[0]), self.clock(), None, first)
            return taken[0]

    def forget(self) -> int:
        """Append the tombstone for this session (its summaries too); returns the last offset.

        ``NotFound`` when the session has no messages to forget (never started, or forgotten
        already): nothing is written.
        """
        with self._lock:
            if not self.started and not self.messages:
                raise NotFound("session", self.session_id)
            tomb = SessionForgotten(session_id=self.session_id, user_id=self.user_id)
            self.log.append(self.summary_stream, [NewEvent.of(tomb, tenant=self.tenant)])
            _, last = self.log.append(self.stream, [NewEvent.of(tomb, tenant=self.tenant)])
            if self.snapshots is not None:
                self.snapshots.drop("session", self.stream)  # it holds the forgotten messages
            self.reload()
            return last

    # -- reading ---------------------------------------------------------------------
    def history(self, limit: int | None = None) -> list[Message]:
        """The stored messages, oldest first (the last ``limit`` when given)."""
        with self._lock:
            msgs = list(self.messages)
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                raise InvalidInput("limit", "must be an int >= 0", limit)
            msgs = msgs[-limit:] if limit else []
        return msgs

    def since(self, sequence: int) -> list[Message]:
        """The stored messages after ``sequence``, oldest first (walks back from the end: appends ask for the last few)."""
        with self._lock:
            k = len(self.messages)
            while k and self.messages[k - 1].sequence > sequence:
                k -= 1
            return self.messages[k:]

    def summary(self) -> tuple[int, str | None, int]:
        """(epoch, text, upto_sequence) of the latest rolling summary; epoch -1 when none."""
        with self._lock:
            self._load_summary()
            return self.summary_epoch, self.summary_text, self.summary_upto

    def read(self, *, strategy: str | None = None, window: int | None = None, token_budget: int | None = None) -> list[Message]:
        """Messages for the LLM: rolling summary first (summarizing), then recent turns within the budget.

        ``window`` messages (the last ones) when there are that many and they fit the budget. After
        a summary the default window reaches back to it: every message is in the summary or here.
        Only when the token budget cut the list (and no summary precedes it) does it start from a
        user turn: a leading answer whose question did not fit is dropped.
        """
        strategy = strategy or self.config.strategy
        if strategy not in STRATEGIES:
            raise InvalidInput("strategy", f"must be one of {', '.join(STRATEGIES)}", strategy)
        _positive("window", window)  # None: the configured window, reaching back to a summary (below)
        budget = _positive("token_budget", token_budget) or self.config.token_budget
        with self._lock:
            self._load_summary()
            msgs = list(self.messages)
            summary, upto = self.summary_text, self.summary_upto
        if strategy == "simple":
            return msgs
        out: list[Message] = []
        if strategy == "summarizing" and summary:
            msgs = [m for m in msgs if m.sequence > upto]
            out.append(
                Message(role="system", content=SUMMARY_PREFIX + summary, time=self.clock(), sequence=upto, metadata={"summary": True})
            )
            budget -= count_tokens(out[0].content)
            window = window or max(self.config.window, len(msgs))
        window = window or self.config.window
        recent: list[Message] = []
        used = 0
        for m in reversed(msgs[-window:]):
            t = count_tokens(m.content)
            if recent and used + t > budget:
                break
            recent.append(m)
            used += t
        recent.reverse()
        cut_by_budget = len(recent) < min(window, len(msgs))
        return out + (_from_a_question(recent) if cut_by_budget and not out else recent)

    def restore(self, token_budget: int | None = None, limit: int | None = None) -> list[Message]:
        """Resume a conversation: the last messages (``restore_messages``) that fit the budget."""
        budget = _positive("token_budget", token_budget) or self.config.token_budget
        limit = _positive("limit", limit) or self.config.restore_messages
        with self._lock:
            msgs = list(self.messages[-limit:])
        out: list[Message] = []
        used = 0
        for m in reversed(msgs):
            t = count_tokens(m.content)
            if out and used + t > budget:
                break
            out.append(m)
            used += t
        return _from_a_question(out[::-1])

    def needs_summary(self) -> bool:
        """Whether the history outgrew the budget with enough turns outside the window."""
        with self._lock:
            msgs, cum = self.messages, self._cum
            for m in msgs[len(cum):]:
                cum.append((cum[-1] if cum else 0) + count_tokens(m.content))
            k = bisect.bisect_right(msgs, self.summary_upto, key=_sequence)  # sequences increase along the list
            pending = len(msgs) - k
            tokens = (cum[-1] if cum else 0) - (cum[k - 1] if k else 0)
        outside = pending - self.config.window
        if tokens > self.config.summary_trigger * self.config.token_budget and outside >= self.config.min_turns_outside:
            return True
        # what read() shows after the summary no longer fits the budget left beside it: summarise
        # rather than let turns fall between the summary and the window
        if self.summary_text is None:
            return False
        if self._summary_tokens[0] is not self.summary_text:  # counted once per summary, not per append
            self._summary_tokens = (self.summary_text, count_tokens(SUMMARY_PREFIX + self.summary_text))
        return tokens > self.config.token_budget - self._summary_tokens[1] and pending > self.config.retain_recent

    def __len__(self) -> int:
        return len(self.messages)


def _positive(field: str, value: Any) -> int | None:
    """None (the configured default), or an int >= 1; anything else names the field."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidInput(field, "must be an int >= 1 (or null for the default)", value)
    return value


def _from_a_question(msgs: list[Message]) -> list[Message]:
    """Drop leading assistant/tool messages: a resumed history must not open with an answer whose question was cut off."""
    for i, m in enumerate(msgs):
        if m.role == "user":
            return msgs[i:]
    return msgs  # no user turn at all (an agent-only session): keep what there is


def _sequence(m: Message) -> int:
    return m.sequence


def _decode(ne: NewEvent) -> Any:
    from ..events.types import decode

    return decode(ne.payload)
