"""The state's notes: one text per note id (a part of ``StateProjection``, issue 41).

Folds of the ``notes`` events, and the queries on them; the tombstones, the lock and the log are
``StateBase``'s. ``StateProjection`` composes the five aggregates and routes each event to its fold.
"""

from __future__ import annotations

import msgspec

from ..events import RecordedEvent
from ..events import types as ev
from ._records import NoteInfo
from ._state_base import StateBase


class NoteFolds(StateBase):
    """The notes aggregate of the state: its maps, folds and queries."""

    _notes: dict[tuple[str, str], dict[str, NoteInfo]]  # (tenant, user) -> notes
    _note_owner: dict[tuple[str, str], str]  # (tenant, note_id) -> user

    def _reset_notes(self) -> None:
        """Empty this aggregate."""
        self._notes = {}
        self._note_owner = {}

    def _on_note_stored(self, rec: RecordedEvent, e: ev.NoteStored) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "notes"):
            return
        if (rec.tenant, e.note_id) in self._note_owner:
            return
        self._notes.setdefault((rec.tenant, e.user_id), {})[e.note_id] = NoteInfo(
            note_id=e.note_id, text=e.text, time=rec.time, user_id=e.user_id
        )
        self._note_owner[(rec.tenant, e.note_id)] = e.user_id

    def _on_note_updated(self, rec: RecordedEvent, e: ev.NoteUpdated) -> None:
        u = self._note_owner.get((rec.tenant, e.note_id))
        notes = self._notes.get((rec.tenant, u), {}) if u is not None else {}
        n = notes.get(e.note_id)
        if n is not None:
            notes[e.note_id] = msgspec.structs.replace(n, text=e.text)  # one stream: updates arrive in order

    def _on_note_deleted(self, rec: RecordedEvent, e: ev.NoteDeleted) -> None:
        u = self._note_owner.pop((rec.tenant, e.note_id), None)
        if u is not None:
            self._notes.get((rec.tenant, u), {}).pop(e.note_id, None)

    def notes(self, tenant: str, user_id: str) -> list[NoteInfo]:
        """A user's notes, newest first."""
        with self._lock:
            out = list(self._notes.get((tenant, user_id), {}).values())
        out.sort(key=lambda n: (n.time, n.note_id), reverse=True)
        return out

    def note(self, tenant: str, note_id: str) -> NoteInfo | None:
        """One note or None."""
        with self._lock:
            u = self._note_owner.get((tenant, note_id))
            return None if u is None else self._notes.get((tenant, u), {}).get(note_id)

    def _forget_user_notes(self, rec: RecordedEvent, t: str, u: str) -> None:
        """Drop the user's notes written no later than the forget."""
        notes = self._notes.get((t, u), {})
        for nid in [n for n, x in notes.items() if x.time <= rec.time]:
            del notes[nid]
            self._note_owner.pop((t, nid), None)
