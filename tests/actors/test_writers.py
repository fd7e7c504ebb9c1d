"""Every actor appends through one helper (``actors._writer.append_expecting``): a stale writer refolds and decides again.

Two actors of the same stream stand for a second writer (an import, a restarted actor): the
one that appends second holds a stale version, so its append is refused, it refolds and
decides on what the other wrote. Nothing is written twice, nothing is lost, versions stay dense.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import eidetica
from eidetica.actors import MemoryConfig, SessionActor
from eidetica.actors._writer import append_expecting
from eidetica.actors.items import ItemsActor, item_id
from eidetica.actors.notes import NotesActor
from eidetica.actors.schedules import SchedulesActor
from eidetica.errors import WrongExpectedVersion
from eidetica.events import NewEvent, NoteDeleted
from eidetica.providers import HashEmbedder
from tests.support.clock import Clock

TICK = dt.timedelta(seconds=1)  # every reading of the clock is a second later


@pytest.fixture
def m(tmp_path: Path):
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=Clock(tick=TICK),
                       config=MemoryConfig(min_interval_seconds=60)) as mem:
        yield mem


def _versions(m, stream: str) -> list[int]:
    return [r.version for r in m.log.read_stream(stream)]


def test_notes_second_writer_redecides(m) -> None:
    a = NotesActor(m.log, m.tenant, "u", m.embedder, m.clock)
    b = NotesActor(m.log, m.tenant, "u", m.embedder, m.clock)
    a.store("first", note_id="note-x")
    assert b.store("first", note_id="note-x") == "note-x"  # b refolds and sees the note is there: nothing written
    assert "note-x" in b.notes and b.version == a.version
    b.store("second", note_id="note-y")  # b's version is current now: a plain append
    assert _versions(m, a.stream) == list(range(4))  # two notes, each with its chunk event


def test_items_second_writer_redecides(m) -> None:
    a = ItemsActor(m.log, m.tenant, "u", m.embedder, m.clock)
    b = ItemsActor(m.log, m.tenant, "u", m.embedder, m.clock)
    a.put_many([{"namespace": ["n"], "key": "k", "value": {"v": 1}, "texts": None}])
    b.put_many([{"namespace": ["n"], "key": "j", "value": {"v": 2}, "texts": None}])  # stale version: refused, refolded, redone
    assert set(b.live) == {item_id(["n"], "k"), item_id(["n"], "j")}
    b.put_many([{"namespace": ["n"], "key": "k", "value": None}])  # its fold now knows the item a put: deleted
    assert [r.type for r in m.log.read_stream(a.stream)] == ["ItemPut", "ItemPut", "ItemDeleted"]


def test_schedules_second_writer_redecides(m) -> None:
    a = SchedulesActor(m.log, m.tenant, "u", m.config, m.clock)
    b = SchedulesActor(m.log, m.tenant, "u", m.config, m.clock)
    s1 = a.create("one", "interval", "3600")
    s2 = b.create("two", "interval", "3600")
    assert {s.schedule_id for s in b.list()} == {s1.schedule_id, s2.schedule_id}
    assert _versions(m, a.stream) == [0, 1]


def test_session_second_writer_redecides(m) -> None:
    args = (m.log, m.tenant, "sess", "u", m.embedder, m.config, m.clock)
    a, b = SessionActor(*args), SessionActor(*args)
    a.append_many([{"role": "user", "content": "hello"}])
    b.append_many([{"role": "user", "content": "again"}])  # refolded: it takes the next sequence, no second SessionStarted
    assert [(x.sequence, x.content) for x in b.history()] == [(0, "hello"), (1, "again")]
    assert [r.type for r in m.log.read_stream(a.stream)].count("SessionStarted") == 1
    assert b.retract_last().content == "again"
    assert a.retract_last().content == "hello"  # a was stale: refolded, it takes back the message still last


def test_helper_gives_up_after_its_tries(m) -> None:
    a = NotesActor(m.log, m.tenant, "u", m.embedder, m.clock)
    a.store("x", note_id="note-x")
    calls = []

    class Stuck:  # a fold that never catches up: every attempt is refused
        log, stream, version = m.log, a.stream, -1

        def reload(self) -> None:
            calls.append(1)

    ev = [NewEvent.of(NoteDeleted(note_id="note-x"), tenant=m.tenant)]
    with pytest.raises(WrongExpectedVersion):
        append_expecting(Stuck(), lambda: ev, tries=3)
    assert len(calls) == 2 and a.version == m.log.stream_version(a.stream)  # nothing written
