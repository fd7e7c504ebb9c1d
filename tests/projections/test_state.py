"""StateProjection: conformance plus the folds' semantics (sessions, facts, notes, schedules, forgets)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from eidetica.events import (
    ArrowLog,
    EmbedderChanged,
    FactAsserted,
    FactDecayed,
    FactDeleted,
    FactReinforced,
    FactSuperseded,
    MessageAppended,
    NewEvent,
    NoteDeleted,
    NoteStored,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleRun,
    ScheduleUpdated,
    SessionForgotten,
    SessionStarted,
    SummaryCommitted,
    UserForgotten,
)
from eidetica.projections import Projection, Projector, StateProjection
from tests.contracts.projection import ProjectionConformance, Workload


class TestStateConformance(ProjectionConformance):
    durable = False

    def make_projection(self, path: str) -> Projection:
        return StateProjection()

    def observe(self, proj: Projection) -> Any:
        assert isinstance(proj, StateProjection)
        return proj.snapshot()

    def observe_empty(self) -> Any:
        return {}


@pytest.fixture
def log(tmp_path):
    log = ArrowLog(tmp_path / "log", partitions=3, fsync="never")
    yield log
    log.close()


def put(log: ArrowLog, stream: str, *events: Any, tenant: str = "t") -> None:
    log.append(stream, [NewEvent.of(e, tenant=tenant) for e in events])


def fold(log: ArrowLog) -> StateProjection:
    st = StateProjection()
    Projector(log, [st]).catch_up()
    return st


def msg(sid: str, seq: int, user: str = "u", content: str | None = None) -> MessageAppended:
    return MessageAppended(session_id=sid, user_id=user, role="user", content=content or f"m{seq}", sequence=seq)


def test_sessions_messages_in_sequence_order_and_recent_first(log) -> None:
    put(log, "session:t:a", SessionStarted(session_id="a", user_id="u"), msg("a", 2), msg("a", 0), msg("a", 1))
    put(log, "session:t:b", msg("b", 0, user="v"))
    put(log, "session:t:a", msg("a", 1, content="duplicate sequence is ignored"))
    st = fold(log)
    assert [m.sequence for m in st.messages("t", "a")] == [0, 1, 2]
    assert st.messages("t", "a")[1].content == "m1"
    assert [s.session_id for s in st.sessions("t")] == ["a", "b"]  # a was updated last
    assert [s.session_id for s in st.sessions("t", user_id="v")] == ["b"]
    info = st.sessions("t")[0]
    assert info.message_count == 3 and info.user_id == "u" and info.started_time <= info.last_time
    assert st.sessions("other") == [] and st.messages("other", "a") == []


def test_summary_keeps_the_latest_epoch(log) -> None:
    assert fold(log).summary("t", "a") == (0, None, -1)
    put(log, "summary:t:a", SummaryCommitted(session_id="a", epoch=0, text="first", upto_sequence=3),
        SummaryCommitted(session_id="a", epoch=1, text="second", upto_sequence=7))
    assert fold(log).summary("t", "a") == (1, "second", 7)


def test_fact_lifecycle_and_history(log) -> None:
    s = "facts:t:u"
    put(log, s, FactAsserted(fact_id="f1", user_id="u", content="likes tea", category="food", confidence=0.8))
    put(log, s, FactReinforced(fact_id="f1", confidence=0.9, sources=[{"turn": 3}]))
    put(log, s, FactDecayed(fact_id="f1", confidence=0.85))
    put(log, s, FactAsserted(fact_id="f2", user_id="u", content="likes coffee"), FactSuperseded(fact_id="f1", by="f2"))
    put(log, s, FactAsserted(fact_id="f3", user_id="u", content="has a dog"), FactDeleted(fact_id="f3"))
    put(log, s, FactReinforced(fact_id="nope", confidence=1.0))  # unknown fact: ignored
    st = fold(log)
    assert [f.fact_id for f in st.facts("t", "u")] == ["f2"]
    every = {f.fact_id: f for f in st.facts("t", "u", include_inactive=True)}
    assert every["f1"].status == "superseded" and every["f1"].superseded_by == "f2"
    assert every["f1"].confidence == 0.85 and every["f1"].sources == [{"turn": 3}]
    assert every["f3"].status == "deleted"
    hist = st.fact_history("t", "f1")
    assert [h[1] for h in hist] == ["FactAsserted", "FactReinforced", "FactDecayed", "FactSuperseded"]
    assert hist[1][2] == {"confidence": 0.9} and hist[3][2] == {"by": "f2"}
    assert st.fact_history("other", "f1") == [] and st.facts("other", "u") == []


def test_notes_and_schedules(log) -> None:
    put(log, "notes:t:u", NoteStored(note_id="n1", user_id="u", text="one"), NoteStored(note_id="n2", user_id="u", text="two"))
    put(log, "notes:t:u", NoteDeleted(note_id="n1"))
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    sch = "schedules:t:u"
    put(log, sch, ScheduleCreated(schedule_id="j1", user_id="u", name="standup", cadence="cron", expression="0 9 * * *"))
    put(log, sch, ScheduleUpdated(schedule_id="j1", changes={"name": "stand-up", "bogus": 1}))
    put(log, sch, ScheduleRun(schedule_id="j1", run_at=base, status="ok", result="done", next_run_at=base + dt.timedelta(days=1)))
    put(log, sch, ScheduleCreated(schedule_id="j2", user_id="u", name="x", cadence="once", expression="now"), ScheduleDeleted(schedule_id="j2"))
    st = fold(log)
    assert [n.note_id for n in st.notes("t", "u")] == ["n2"]
    (j,) = st.schedules("t", "u")
    assert (j.name, j.run_count, j.last_status, j.last_result) == ("stand-up", 1, "ok", "done")
    assert j.next_run_at == base + dt.timedelta(days=1)


def test_session_forgotten_removes_messages_and_summary(log) -> None:
    put(log, "session:t:a", msg("a", 0), msg("a", 1))
    put(log, "summary:t:a", SummaryCommitted(session_id="a", epoch=0, text="sum", upto_sequence=1))
    put(log, "session:t:b", msg("b", 0))
    put(log, "session:t:a", SessionForgotten(session_id="a", user_id="u"))
    st = fold(log)
    assert st.messages("t", "a") == [] and st.summary("t", "a") == (0, None, -1)
    assert [s.session_id for s in st.sessions("t")] == ["b"]
    forgotten = st.session("t", "a")
    assert forgotten is not None and forgotten.forgotten and forgotten.message_count == 0
    put(log, "session:t:a", msg("a", 5, content="after"))  # a later message brings the session back
    st = fold(log)
    assert [m.content for m in st.messages("t", "a")] == ["after"]


def test_user_forgotten_removes_everything_of_the_user_in_the_tenant(log) -> None:
    for tenant in ("t", "t2"):
        put(log, f"session:{tenant}:a", msg("a", 0), tenant=tenant)
        put(log, f"summary:{tenant}:a", SummaryCommitted(session_id="a", epoch=0, text="s", upto_sequence=0), tenant=tenant)
        put(log, f"facts:{tenant}:u", FactAsserted(fact_id="f", user_id="u", content="c"), tenant=tenant)
        put(log, f"notes:{tenant}:u", NoteStored(note_id="n", user_id="u", text="x"), tenant=tenant)
        put(log, f"schedules:{tenant}:u", ScheduleCreated(schedule_id="j", user_id="u", name="n", cadence="once",
                                                          expression="e"), tenant=tenant)
    put(log, "session:t:b", msg("b", 0, user="other"))
    put(log, "users:t:u", UserForgotten(user_id="u"))  # on no facts/notes/schedules stream: everything
    st = fold(log)
    assert st.sessions("t", "u") == [] and st.messages("t", "a") == [] and st.summary("t", "a")[1] is None
    assert st.facts("t", "u", include_inactive=True) == [] and st.notes("t", "u") == [] and st.schedules("t", "u") == []
    assert [s.session_id for s in st.sessions("t")] == ["b"]
    assert st.users("t") == ["other"]
    # the other tenant's user of the same name is untouched
    assert len(st.messages("t2", "a")) == 1 and len(st.facts("t2", "u")) == 1 and st.summary("t2", "a")[1] == "s"


def test_user_forgotten_on_a_kinds_stream_forgets_that_kind_only(log) -> None:
    put(log, "session:t:a", msg("a", 0))
    put(log, "facts:t:u", FactAsserted(fact_id="f", user_id="u", content="c"))
    put(log, "notes:t:u", NoteStored(note_id="n", user_id="u", text="x"))
    put(log, "schedules:t:u", ScheduleCreated(schedule_id="j", user_id="u", name="n", cadence="once", expression="e"))
    put(log, "facts:t:u", UserForgotten(user_id="u"))
    st = fold(log)
    assert st.facts("t", "u", include_inactive=True) == []
    assert len(st.notes("t", "u")) == 1 and len(st.schedules("t", "u")) == 1 and len(st.messages("t", "a")) == 1
    put(log, "notes:t:u", UserForgotten(user_id="u"))
    put(log, "schedules:t:u", UserForgotten(user_id="u"))
    st = fold(log)
    assert st.notes("t", "u") == [] and st.schedules("t", "u") == []
    assert [s.session_id for s in st.sessions("t", "u")] == ["a"] and len(st.messages("t", "a")) == 1


def test_forget_wins_regardless_of_partition_interleaving(log) -> None:
    """Events of a forgotten user in other partitions stay forgotten however the Projector interleaves."""
    put(log, "session:t:a", msg("a", 0))
    put(log, "summary:t:a", SummaryCommitted(session_id="a", epoch=0, text="s", upto_sequence=0))
    put(log, "users:t:u", UserForgotten(user_id="u"))
    streams = {log.partition_of(s) for s in ("session:t:a", "summary:t:a", "users:t:u")}
    assert len(streams) > 1, "the test needs the streams in different partitions"
    by_part = [log.read(partition=p) for p in range(log.partitions)]
    for order in (range(log.partitions), reversed(range(log.partitions))):
        st = StateProjection()
        for p in order:
            st.apply(by_part[p])
        assert st.messages("t", "a") == [] and st.summary("t", "a")[1] is None, list(order)
        assert st.sessions("t") == []


def test_embedder_is_tracked(log) -> None:
    put(log, "store", EmbedderChanged(model_id="m1", dim=384))
    assert fold(log).embedder() == ("m1", 384)


def test_state_rebuild_equals_incremental(tmp_path) -> None:
    w = Workload(seed=11, users=3, sessions=2, messages=6)
    log = ArrowLog(tmp_path / "wl", partitions=3, fsync="never")
    try:
        inc = StateProjection()
        pj = Projector(log, [inc], batch_size=13)
        step = 17
        for i in range(0, len(w.appends), step):
            w.append_to(log, i, i + step)
            pj.catch_up()
        snap = inc.snapshot()
        assert pj.rebuild() == sum(log.head(p) for p in range(log.partitions))
        assert inc.snapshot() == snap
        assert snap  # non-trivial
    finally:
        log.close()
