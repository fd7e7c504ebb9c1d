"""Notes: free-form memories a user or agent stores explicitly."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Callable

from ..errors import NotFound
from ..events import ChunksEmbedded, EventLog, NewEvent, NoteDeleted, NoteStored, NoteUpdated, UserForgotten
from ..events.streams import notes_stream
from ..providers import Embedder
from ._text import check_text, vectors_to_bytes

__all__ = ["NotesActor"]


class NotesActor:
    """The single writer of one user's notes."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, embedder: Embedder, clock: Callable[[], dt.datetime]) -> None:
        self.log = log
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.clock = clock
        self.stream = notes_stream(tenant, user_id)
        self._lock = threading.Lock()
        self.notes: dict[str, tuple[str, dt.datetime]] = {}
        for rec in log.read_stream(self.stream):
            ev = rec.decode()
            if isinstance(ev, NoteStored):
                self.notes[ev.note_id] = (ev.text, rec.time)
            elif isinstance(ev, NoteUpdated) and ev.note_id in self.notes:
                self.notes[ev.note_id] = (ev.text, self.notes[ev.note_id][1])
            elif isinstance(ev, NoteDeleted):
                self.notes.pop(ev.note_id, None)
            elif isinstance(ev, UserForgotten):
                self.notes.clear()

    def store(self, text: str, time: dt.datetime | None = None, note_id: str | None = None) -> str:
        """Store a note; returns ``note-<uuid>`` (a retried call with the same ``note_id`` stores it once)."""
        text = check_text("text", text)
        time = time or self.clock()
        if note_id is not None and note_id in self.notes:
            return note_id
        note_id = note_id or f"note-{uuid.uuid4()}"
        events = [
            NewEvent.of(NoteStored(note_id=note_id, user_id=self.user_id, text=text), tenant=self.tenant, time=time),
            self._chunk(note_id, text, time),
        ]
        with self._lock:
            self.log.append(self.stream, events)
            self.notes[note_id] = (text, time or self.clock())
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
            self.log.append(self.stream, events)
            self.notes[note_id] = (text, self.notes[note_id][1])

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
            if note_id not in self.notes:
                raise NotFound("note", note_id)
            self.log.append(self.stream, [NewEvent.of(NoteDeleted(note_id=note_id), tenant=self.tenant)])
            del self.notes[note_id]

    def forget_user(self) -> None:
        """Append the user tombstone to the notes stream."""
        with self._lock:
            self.log.append(self.stream, [NewEvent.of(UserForgotten(user_id=self.user_id), tenant=self.tenant)])
            self.notes.clear()
