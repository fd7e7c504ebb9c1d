"""``/v1/users/{user}/notes``: a user's notes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ...memory import Memory
from .common import Api, _Body, _json, _wrote

__all__ = ["router"]


class NoteIn(_Body):
    """A note's text."""

    text: Any = None


class NewNoteIn(NoteIn):
    """A new note: its text and the session it is written during (a revert of that session deletes it)."""

    session_id: Any = None


def router(api: Api) -> APIRouter:
    """The notes' routes."""
    r = APIRouter()
    M = api.M

    U = "/v1/users/{user}"

    @r.post(U + "/notes", tags=["notes"], status_code=201)
    def store_note(user: str, body: NewNoteIn, m: Memory = M) -> Response:
        """Store a note (linked to ``session_id`` when given); returns its id."""
        return _wrote(m, {"id": m.store_note(body.text, user=user, session_id=body.session_id)}, 201)

    @r.get(U + "/notes", tags=["notes"])
    def list_notes(user: str, limit: int = 20, m: Memory = M) -> Response:
        """The user's notes, newest first."""
        return _json(m.list_notes(user=user, limit=limit))

    @r.patch(U + "/notes/{note_id}", tags=["notes"])
    def update_note(user: str, note_id: str, body: NoteIn, m: Memory = M) -> Response:
        """Replace a note's text, keeping its id."""
        m.update_note(note_id, body.text, user=user)
        return _wrote(m, {"updated": note_id})

    @r.delete(U + "/notes/{note_id}", tags=["notes"])
    def delete_note(user: str, note_id: str, m: Memory = M) -> Response:
        """Delete a note."""
        m.delete_note(note_id, user=user)
        return _wrote(m, {"deleted": note_id})
    return r
