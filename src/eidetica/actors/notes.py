"""Notes: free-form memories a user or agent stores explicitly.

``NotesActor`` is the single writer of one user's notes stream (appends carry its expected
version). Its fold is what its decisions need, the ids of the user's live notes (texts are
served by the read model), and starts from its snapshot plus the stream's tail
(``_snapshots``), like the session actor's and the curator's.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ..errors import NotFound
from ..events import (
    ChunksEmbedded,
    EventLog,
    NewEvent,
    NoteDeleted,
    NoteStored,
    NoteUpdated,
    RecordedEvent,
    UserForgotten,
    decode,
)
from ..events.streams import notes_stream
from ..providers import Embedder
from ._owner import StreamOwner
from ._snapshots import ActorSnapshot, ActorSnapshots, IdSet, save_actor, start_actor
from ._text import check_text, vectors_to_bytes
from ._writer import append_expecting

__all__ = ["NotesActor"]

SNAPSHOT_SCHEMA = 1  # of the notes actor's snapshot table; bump on any change (older ones are then refused)
_FOLDED = frozenset(t.__struct_config__.tag for t in (NoteStored, NoteDeleted, UserForgotten))  # the tags decoded


class NotesActor(StreamOwner):
    """The single writer of one user's notes."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, embedder: Embedder, clock: Callable[[], dt.datetime],
                 snapshots: ActorSnapshots | None = None) -> None:
        self.log = log
        self.snapshots = snapshots
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.clock = clock
        self.stream = notes_stream(tenant, user_id)
        self._lock = threading.RLock()
        self.reload()

    # -- state -----------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the fold: from the actor's snapshot and the stream's tail after it, or the whole stream."""
        with self._lock:
            start_actor(self, "notes", SNAPSHOT_SCHEMA, self._fold)
            self.save_snapshot()  # a long replay is paid once, not on every start

    def _reset(self) -> None:
        self.notes = IdSet()  # the user's live note ids: what store/update/delete decide on
        self._covered = -1  # the stream version the snapshot on disk covers

    def _fold(self, recs: Sequence[RecordedEvent]) -> None:
        for rec in recs:
            if rec.type not in _FOLDED:
                continue  # vectors, updates: nothing this fold keeps (and vectors are the costly part of decoding)
            ev = rec.decode()
            if isinstance(ev, NoteStored):
                self.notes.add(ev.note_id)
            elif isinstance(ev, NoteDeleted):
                self.notes.discard(ev.note_id)
            elif isinstance(ev, UserForgotten):
                self.notes.clear()

    def _restore(self, snap: ActorSnapshot) -> None:
        self.notes = IdSet(snap.tables["notes"].column("note_id").combine_chunks())
        self.version = max(self.version, snap.version)
        self._covered = snap.version

    def _tables(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The fold as an Arrow table (lock held): what the actor's snapshot holds."""
        return {"notes": pa.table({"note_id": IdSet.sorted_ids(self.notes)})}, {}

    def save_snapshot(self, force: bool = False) -> bool:
        """Write the actor's snapshot when ``snapshots.every`` events are not covered by it (any, when forced)."""
        return save_actor(self, "notes", SNAPSHOT_SCHEMA, self._tables, force)

    def _append(self, events: list[NewEvent], still: Callable[[], bool] = lambda: True) -> bool:
        """Append with the fold's version expected (lock held); on a race refold and append only if ``still()``."""
        news, _, _ = append_expecting(self, lambda: events if still() else [])
        return bool(news)

    def store(self, text: str, time: dt.datetime | None = None, note_id: str | None = None,
              session_id: str | None = None) -> str:
        """Store a note (linked to the session it was written during, if any); returns ``note-<uuid>``.

        A retried call with the same ``note_id`` stores it once.
        """
        text = check_text("text", text)
        time = time or self.clock()
        if note_id is not None and note_id in self.notes:
            return note_id
        note_id = note_id or f"note-{uuid.uuid4()}"
        events = [
            NewEvent.of(NoteStored(note_id=note_id, user_id=self.user_id, text=text, session_id=session_id),
                        tenant=self.tenant, time=time),
            self._chunk(note_id, text, time),
        ]
        with self._lock:
            if self._append(events, lambda: note_id not in self.notes):  # a retried call may have stored it meanwhile
                self.notes.add(note_id)
        return note_id

    def update(self, note_id: str, text: str) -> None:
        """Replace a note's text (same id, re-embedded); ``NotFound`` when this user has no such note."""
        text = check_text("text", text)
        time = self.clock()
        with self._lock:
            if note_id not in self.notes:
                raise NotFound("note", note_id)
            events = [NewEvent.of(NoteUpdated(note_id=note_id, text=text), tenant=self.tenant, time=time),
                      self._chunk(note_id, text, time)]
            if not self._append(events, lambda: note_id in self.notes):
                raise NotFound("note", note_id)

    def _chunk(self, note_id: str, text: str, time: dt.datetime) -> NewEvent:
        """The note's one searchable row (keyed by the note id, so an update replaces it)."""
        vec = self.embedder.embed([text])
        return NewEvent.of(
            ChunksEmbedded(
                model_id=self.embedder.model_id,
                dim=self.embedder.dim,
                chunk_ids=[note_id],
                vectors=vectors_to_bytes(vec),
                texts=[text],
                source_id=note_id,
                kind="note",
                user_id=self.user_id,
                category="note",
                time=time,
            ),
            tenant=self.tenant,
            time=time,
        )

    def delete(self, note_id: str) -> None:
        """Delete a note; ``NotFound`` when this user has no such note."""
        with self._lock:
            if note_id not in self.notes:  # before building the event: a malformed id is just not found
                raise NotFound("note", note_id)
            if not self._append([NewEvent.of(NoteDeleted(note_id=note_id), tenant=self.tenant)],
                                lambda: note_id in self.notes):
                raise NotFound("note", note_id)
            self.notes.discard(note_id)

    def retract(self, note_ids: Sequence[str], reason: str, session_id: str = "", request_id: str = "",
                by: str = "") -> list[str]:
        """Delete (``NoteDeleted`` with ``reason``) those of these notes still live; returns them (none on a repeat)."""
        time = self.clock()

        def build() -> list[NewEvent]:  # decided on the fold: a refold after a race decides again
            return [NewEvent.of(NoteDeleted(note_id=i, reason=reason, request=request_id, by=by, session_id=session_id),
                                tenant=self.tenant, time=time) for i in dict.fromkeys(note_ids) if i in self.notes]

        with self._lock:
            news, _, _ = append_expecting(self, build)
            gone = [decode(n.payload).note_id for n in news]  # type: ignore[attr-defined]
            for i in gone:
                self.notes.discard(i)
        return gone

    def forget_user(self) -> None:
        """Append the user tombstone to the notes stream."""
        with self._lock:
            self._append([NewEvent.of(UserForgotten(user_id=self.user_id), tenant=self.tenant)])
            self.notes.clear()
            if self.snapshots is not None:
                self.snapshots.drop("notes", self.stream)  # it holds the forgotten notes
                self._covered = -1
