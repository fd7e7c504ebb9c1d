"""Event types: round trips, schema evolution, unknown tags."""

from __future__ import annotations

import datetime as dt
import typing

import msgspec
import pytest

from eidetica.errors import UnknownEventType
from eidetica.events import types as T
from eidetica.events.types import EVENT_TYPES, Event, decode, encode, register_upcaster

NOW = dt.datetime(2026, 11, 22, 10, 4, tzinfo=dt.timezone.utc)


def sample(cls: type[Event]) -> Event:
    """An instance of ``cls`` with every required field filled by type."""
    values: dict[str, typing.Any] = {}
    hints = typing.get_type_hints(cls)
    for f in msgspec.structs.fields(cls):
        if f.required:
            tp = hints[f.name]
            values[f.name] = {
                str: f"{f.name}-value",
                int: 7,
                float: 0.5,
                bytes: b"\x00\x01\xff",
                dt.datetime: NOW,
                list[str]: ["a", "b"],
                list[int]: [1, 2],
            }[tp]
    return cls(**values)


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda c: c.__name__)
def test_every_type_round_trips(cls: type[Event]) -> None:
    ev = sample(cls)
    back = decode(encode(ev))
    assert type(back) is cls
    assert back == ev


def test_every_design_event_type_exists() -> None:
    names = {c.__name__ for c in EVENT_TYPES}
    assert names >= {
        "SessionStarted", "MessageAppended", "ChunksEmbedded", "SummaryCommitted", "FactAsserted",
        "FactReinforced", "FactSuperseded", "FactDecayed", "FactPruned", "FactDeleted", "NoteStored",
        "NoteDeleted", "ScheduleCreated", "ScheduleUpdated", "ScheduleDeleted", "ScheduleRun",
        "SessionForgotten", "UserForgotten", "EmbedderChanged",
    }


def test_events_are_frozen() -> None:
    ev = T.NoteStored(note_id="n", user_id="u", text="x")
    with pytest.raises(AttributeError):
        ev.text = "y"  # type: ignore[misc]


def test_old_bytes_decode_with_a_newer_struct_that_adds_a_defaulted_field() -> None:
    class NoteStoredV1(msgspec.Struct, frozen=True, tag="NoteStored", kw_only=True):
        note_id: str
        user_id: str
        text: str

    class NoteStoredV2(msgspec.Struct, frozen=True, tag="NoteStored", kw_only=True):
        note_id: str
        user_id: str
        text: str
        pinned: bool = False
        tags: list[str] = []

    old = msgspec.msgpack.encode(NoteStoredV1(note_id="n1", user_id="u", text="hello"))
    new = msgspec.msgpack.decode(old, type=NoteStoredV2)
    assert new == NoteStoredV2(note_id="n1", user_id="u", text="hello", pinned=False, tags=[])
    # and the project's own decoder reads bytes written by the older shape
    assert decode(old) == T.NoteStored(note_id="n1", user_id="u", text="hello")


def test_newer_bytes_with_extra_fields_still_decode() -> None:
    class NoteStoredV3(msgspec.Struct, frozen=True, tag="NoteStored", kw_only=True):
        note_id: str
        user_id: str
        text: str
        color: str = "red"

    data = msgspec.msgpack.encode(NoteStoredV3(note_id="n", user_id="u", text="t", color="blue"))
    assert decode(data) == T.NoteStored(note_id="n", user_id="u", text="t")


def test_unknown_tag_raises_a_clear_error() -> None:
    class FromTheFuture(msgspec.Struct, tag="FromTheFuture"):
        x: int

    with pytest.raises(UnknownEventType) as ei:
        decode(msgspec.msgpack.encode(FromTheFuture(x=1)))
    assert ei.value.tag == "FromTheFuture"
    assert "FromTheFuture" in str(ei.value)


def test_upcaster_turns_a_retired_tag_into_a_current_event() -> None:
    class NoteSaved(msgspec.Struct, tag="NoteSaved"):
        id: str
        owner: str
        body: str

    register_upcaster(
        "NoteSaved", lambda raw: T.NoteStored(note_id=raw["id"], user_id=raw["owner"], text=raw["body"])
    )
    got = decode(msgspec.msgpack.encode(NoteSaved(id="n", owner="u", body="b")))
    assert got == T.NoteStored(note_id="n", user_id="u", text="b")


def test_known_tag_with_bad_fields_is_a_validation_error() -> None:
    data = msgspec.msgpack.encode({"type": "NoteStored", "note_id": 5})
    with pytest.raises(msgspec.ValidationError):
        decode(data)
