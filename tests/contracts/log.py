"""The log port's conformance suite: every EventLog implementation subclasses it."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from eidetica.errors import EventIdConflict, InvalidInput, WrongExpectedVersion
from eidetica.events import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    EventLog,
    MessageAppended,
    NewEvent,
    SessionStarted,
)
from eidetica.events.envelope import utcnow


def msg(i: int, session: str = "s1", tenant: str = "t") -> NewEvent:
    """A MessageAppended event with a recognisable payload."""
    return NewEvent.of(
        MessageAppended(session_id=session, user_id="u", role="user", content=f"message {i}", sequence=i),
        tenant=tenant,
    )


def same_partition(log: EventLog, stream: str) -> str:
    """Another stream name that hashes to ``stream``'s partition."""
    want = log.partition_of(stream)
    return next(f"{stream}-{k}" for k in range(1000) if log.partition_of(f"{stream}-{k}") == want)


def all_events(log: EventLog) -> list:
    """Every committed event, all partitions."""
    return [e for p in range(log.partitions) for e in log.read(partition=p)]


class LogConformance:
    """Behaviour every log must show. Subclasses provide ``make_log``."""

    partitions = 1

    def make_log(self, **kw: Any) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def log(self):
        log = self.make_log()
        yield log
        log.close()

    def test_append_returns_dense_offsets(self, log: EventLog) -> None:
        assert log.append("a", [msg(0), msg(1)]) == (0, 1)
        assert log.append("b", [msg(2)]) == (2, 2) or log.partitions > 1
        assert log.head(log.partition_of("a")) >= 2

    def test_read_returns_what_was_appended(self, log: EventLog) -> None:
        evs = [msg(i) for i in range(5)]
        log.append("a", evs)
        got = log.read(partition=log.partition_of("a"))
        assert [g.event_id for g in got] == [e.event_id for e in evs]
        assert [g.payload for g in got] == [e.payload for e in evs]
        assert [g.version for g in got] == [0, 1, 2, 3, 4]
        assert [g.offset for g in got] == [0, 1, 2, 3, 4]
        assert all(g.stream == "a" and g.tenant == "t" and g.type == "MessageAppended" for g in got)
        assert got[3].decode().content == "message 3"

    def test_read_from_offset_and_limit(self, log: EventLog) -> None:
        for i in range(4):
            log.append("a", [msg(3 * i), msg(3 * i + 1), msg(3 * i + 2)])
        pa_ = log.partition_of("a")
        got = log.read(4, 5, partition=pa_)
        assert [g.offset for g in got] == [4, 5, 6, 7, 8]
        assert log.read(12, partition=pa_) == []
        assert [g.offset for g in log.read(11, 100, partition=pa_)] == [11]

    def test_read_stream_from_version(self, log: EventLog) -> None:
        log.append("a", [msg(0), msg(1)])
        log.append("b", [msg(10)])
        log.append("a", [msg(2)])
        assert [e.version for e in log.read_stream("a")] == [0, 1, 2]
        assert [e.decode().sequence for e in log.read_stream("a", 1)] == [1, 2]
        assert log.read_stream("nope") == []
        assert log.stream_version("a") == 2
        assert log.stream_version("nope") == NO_STREAM

    def test_expected_version_exact(self, log: EventLog) -> None:
        log.append("a", [msg(0)], NO_STREAM)
        log.append("a", [msg(1)], 0)
        with pytest.raises(WrongExpectedVersion) as ei:
            log.append("a", [msg(2)], 0)
        assert (ei.value.stream, ei.value.expected, ei.value.actual) == ("a", 0, 1)
        assert log.stream_version("a") == 1
        assert len(all_events(log)) == 2

    def test_expected_version_constants(self, log: EventLog) -> None:
        with pytest.raises(WrongExpectedVersion):
            log.append("a", [msg(0)], STREAM_EXISTS)
        log.append("a", [msg(0)], NO_STREAM)
        with pytest.raises(WrongExpectedVersion) as ei:
            log.append("a", [msg(1)], NO_STREAM)
        assert ei.value.actual == 0
        log.append("a", [msg(1)], STREAM_EXISTS)
        log.append("a", [msg(2)], ANY)
        assert log.stream_version("a") == 2
        assert len(all_events(log)) == 3

    def test_idempotent_reappend_returns_original_offsets(self, log: EventLog) -> None:
        evs = [msg(0), msg(1)]
        first = log.append("a", evs, NO_STREAM)
        log.append("a", [msg(2)])
        # a retry of the same events, even with a now-stale expected version, is a no-op
        assert log.append("a", evs, NO_STREAM) == first
        assert len(all_events(log)) == 3

    def test_partial_reappend_is_rejected(self, log: EventLog) -> None:
        evs = [msg(0), msg(1)]
        log.append("a", evs)
        with pytest.raises(EventIdConflict) as e:
            log.append("a", [msg(5), evs[0]])
        assert e.value.event_id == str(evs[0].event_id)  # the id that was known, named
        assert len(all_events(log)) == 2

    @pytest.mark.parametrize("n", [1, 2])
    def test_a_known_id_with_other_content_is_a_conflict(self, log: EventLog, n: int) -> None:
        evs = [msg(i) for i in range(n)]
        log.append("a", evs)
        changed = [NewEvent(type=e.type, payload=e.payload + b"x" if i == n - 1 else e.payload, event_id=e.event_id,
                            tenant=e.tenant) for i, e in enumerate(evs)]
        retyped = [NewEvent(type="Other", payload=e.payload, event_id=e.event_id, tenant=e.tenant) for e in evs]
        for bad in (changed, retyped):
            with pytest.raises(EventIdConflict, match="other content") as e:
                log.append("a", bad)
            assert isinstance(e.value.event_id, str) and e.value.event_id in str(e.value)
        assert len(all_events(log)) == n
        assert log.append("a", evs) == (0, n - 1)  # the very events: still a retry

    def test_event_ids_are_scoped_per_tenant(self, log: EventLog) -> None:
        mine = msg(0, tenant="acme")
        log.append("a", [mine])
        theirs = NewEvent(type=mine.type, payload=b"another tenant's event", event_id=mine.event_id, tenant="globex")
        other = same_partition(log, "a")
        # the same caller id in another tenant is another event: stored, never answered with acme's offset
        assert log.append(other, [theirs]) == (1, 1)
        assert log.append(other, [theirs]) == (1, 1)  # and idempotent in its own tenant
        assert log.append("a", [mine]) == (0, 0)
        # a batch mixing a fresh id with one only the other tenant knows is a plain new append
        fresh = NewEvent(type="T", payload=b"x", tenant="globex")
        again = NewEvent(type="T", payload=b"y", event_id=uuid.uuid4(), tenant="globex")
        log.append(other, [again])
        with pytest.raises(EventIdConflict) as e:
            log.append(other, [fresh, again, NewEvent(type="T", payload=b"z", event_id=mine.event_id, tenant="globex")])
        assert e.value.event_id == str(again.event_id)  # globex's own id, never acme's
        assert [(ev.tenant, ev.event_id) for ev in all_events(log)] == [
            ("acme", mine.event_id), ("globex", mine.event_id), ("globex", again.event_id)]

    @pytest.mark.parametrize(
        "stream,events,expected,field",
        [
            ("", "ok", ANY, "stream"),
            (None, "ok", ANY, "stream"),
            ("a", [], ANY, "events"),
            ("a", "notalist", ANY, "events"),
            ("a", ["x"], ANY, "events[0]"),
            ("a", "ok", -3, "expected_version"),
            ("a", "ok", "1", "expected_version"),
            ("a", "dup", ANY, "events[1].event_id"),
            ("a", "big", ANY, "events[0].payload"),
        ],
    )
    def test_bad_input_names_field_and_writes_nothing(self, stream, events, expected, field) -> None:
        log = self.make_log(max_payload_bytes=1000)
        try:
            log.append("keep", [msg(0)])
            if events == "ok":
                events = [msg(1)]
            elif events == "dup":
                e = msg(1)
                events = [e, e]
            elif events == "big":
                events = [NewEvent(type="X", payload=b"x" * 1001)]
            with pytest.raises(InvalidInput) as ei:
                log.append(stream, events, expected)
            assert ei.value.field == field
            assert len(all_events(log)) == 1
        finally:
            log.close()

    def test_new_event_checks_its_fields(self) -> None:
        with pytest.raises(InvalidInput) as ei:
            NewEvent(type="", payload=b"")
        assert ei.value.field == "type"
        with pytest.raises(InvalidInput) as ei:
            NewEvent(type="X", payload="text")  # type: ignore[arg-type]
        assert ei.value.field == "payload"
        with pytest.raises(InvalidInput) as ei:
            NewEvent(type="X", payload=b"", event_id="abc")  # type: ignore[arg-type]
        assert ei.value.field == "event_id"
        import datetime as dt

        with pytest.raises(InvalidInput) as ei:
            NewEvent(type="X", payload=b"", time=dt.datetime(2026, 1, 1))
        assert ei.value.field == "time"

    def test_event_time_is_kept_or_stamped(self, log: EventLog) -> None:
        import datetime as dt

        when = dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc)
        before = utcnow()
        log.append("a", [NewEvent.of(SessionStarted(session_id="s", user_id="u"), time=when), msg(1)])
        got = all_events(log)
        assert got[0].time == when
        assert before <= got[1].time <= utcnow()

    def test_concurrent_appends_keep_streams_dense(self, log: EventLog) -> None:
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                for i in range(50):
                    log.append(f"s{k % 4}", [msg(i, tenant=str(k))])
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        total = sum(log.head(p) for p in range(log.partitions))
        assert total == 400
        for s in range(4):
            assert [e.version for e in log.read_stream(f"s{s}")] == list(range(100))
        for p in range(log.partitions):
            assert [e.offset for e in log.read(partition=p)] == list(range(log.head(p)))

    def test_concurrent_appenders_share_commits(self, log: EventLog) -> None:
        # group commit: 16 threads appending one event per call produce far fewer batches
        # (one write + fsync each) than calls; a commit per call would make them equal
        if getattr(log, "fsync", None) != "always":
            pytest.skip("commits are shared to save fsyncs: only logs that fsync every commit group them")

        def work(k: int) -> None:
            for i in range(20):
                log.append(f"g{k}", [msg(i, tenant=str(k))])

        ts = [threading.Thread(target=work, args=(k,)) for k in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        batches = sum(1 for p in range(log.partitions) for _ in log.read_batches(partition=p))
        assert sum(log.head(p) for p in range(log.partitions)) == 320
        assert batches < 320 * 0.75

    def test_a_failing_request_does_not_fail_its_group(self, log: EventLog) -> None:
        # requests committed together are judged one by one: a stale expected_version or
        # a partial re-append fails alone, the others in the same commit succeed
        log.append("base", [msg(0)])
        seen = msg(1)
        log.append("seen", [seen])
        barrier = threading.Barrier(12)
        out: dict[int, object] = {}

        def work(k: int) -> None:
            barrier.wait()
            try:
                if k == 0:
                    out[k] = log.append("base", [msg(2)], 5)
                elif k == 1:
                    out[k] = log.append("seen", [seen, msg(3)])
                else:
                    out[k] = log.append(f"ok{k}", [msg(10 + k)], NO_STREAM)
            except Exception as e:  # noqa: BLE001 - checked below
                out[k] = e

        ts = [threading.Thread(target=work, args=(k,)) for k in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert isinstance(out[0], WrongExpectedVersion)
        assert isinstance(out[1], EventIdConflict)
        assert all(isinstance(out[k], tuple) for k in range(2, 12))
        assert log.stream_version("base") == 0 and log.stream_version("seen") == 0
        assert all(log.stream_version(f"ok{k}") == 0 for k in range(2, 12))

    def test_close_answers_every_appender(self) -> None:
        # appends racing close() either succeed (and stay readable) or fail with
        # InvalidInput; none hangs and none is half-written
        log = self.make_log()
        acked: list[tuple[str, int]] = []
        failed: list[BaseException] = []
        started = threading.Barrier(9)

        def work(k: int) -> None:
            started.wait()
            for i in range(1000):
                try:
                    log.append(f"c{k}", [msg(i)])
                    acked.append((f"c{k}", i))
                except InvalidInput as e:
                    failed.append(e)
                    return

        ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        started.wait()
        deadline = time.monotonic() + 60
        while len(acked) < 40 and time.monotonic() < deadline:  # appends are flowing: now close
            threading.Event().wait(0.001)
        assert len(acked) >= 40
        log.close()
        for t in ts:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in ts)
        assert all("closed" in str(e) for e in failed)
        log = self.reopen(log)
        try:
            if log is not None:
                for k in range(8):
                    assert len(log.read_stream(f"c{k}")) == sum(1 for s, _ in acked if s == f"c{k}")
        finally:
            if log is not None:
                log.close()

    def reopen(self, log: EventLog) -> EventLog | None:
        """The same log opened anew, or None when it does not outlive close()."""
        return None

    def test_optimistic_concurrency_has_one_winner(self, log: EventLog) -> None:
        log.append("a", [msg(0)])
        results: list[str] = []
        barrier = threading.Barrier(6)

        def work(k: int) -> None:
            barrier.wait()
            try:
                log.append("a", [msg(100 + k)], 0)
                results.append("ok")
            except WrongExpectedVersion:
                results.append("stale")

        ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(results) == ["ok"] + ["stale"] * 5
        assert log.stream_version("a") == 1

    def test_wait_for_and_subscribe(self, log: EventLog) -> None:
        p = log.partition_of("a")
        assert log.wait_for(0, partition=p, timeout=0.05) is False
        stop = threading.Event()
        seen: list[int] = []

        def follow() -> None:
            for ev in log.subscribe(0, partition=p, stop=stop, poll_seconds=0.02):
                seen.append(ev.offset)
                if len(seen) == 3:
                    stop.set()

        t = threading.Thread(target=follow)
        t.start()
        log.append("a", [msg(0)])
        log.append("a", [msg(1), msg(2)])
        t.join(timeout=10)
        assert not t.is_alive()
        assert seen == [0, 1, 2]
        assert log.wait_for(2, partition=p, timeout=1) is True

    def test_unique_event_ids_are_required_across_streams(self, log: EventLog) -> None:
        e = msg(0)
        log.append("a", [e])
        # the same id sent to another stream of the same partition names another event: refused,
        # not acknowledged with the first event's offset (a stream in a's partition: every variant asserts)
        other = same_partition(log, "a")
        with pytest.raises(EventIdConflict, match="another stream"):
            log.append(other, [e])
        with pytest.raises(EventIdConflict):
            log.append(other, [msg(1), e])
        assert log.read_stream(other) == []
        assert log.stream_version(other) == NO_STREAM
        assert len(all_events(log)) == 1

    @pytest.mark.parametrize("n", [1, 3])
    def test_a_retry_is_a_no_op_whatever_its_expected_version(self, log: EventLog, n: int) -> None:
        # single-event and multi-event appends are admitted by different code paths: both
        evs = [msg(i) for i in range(n)]
        first = log.append("a", evs, NO_STREAM)
        log.append("a", [msg(10)])
        for exp in (NO_STREAM, ANY, STREAM_EXISTS, 0, 7):
            assert log.append("a", evs, exp) == first
        assert log.stream_version("a") == n
        assert [e.event_id for e in log.read_stream("a")] == [e.event_id for e in evs] + [log.read_stream("a")[-1].event_id]
        assert len(all_events(log)) == n + 1

    @pytest.mark.parametrize("n", [1, 2])
    def test_retries_committed_in_one_group_are_written_once(self, log: EventLog, n: int) -> None:
        # the same events sent by many callers at once land in one commit: one copy is written,
        # every caller gets its offsets
        evs = [msg(i) for i in range(n)]
        barrier = threading.Barrier(8)
        out: list[object] = []

        def work() -> None:
            barrier.wait()
            try:
                out.append(log.append("a", evs))
            except Exception as e:  # noqa: BLE001 - checked below
                out.append(e)

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        p = log.partition_of("a")
        assert out == [(0, n - 1)] * 8
        assert [e.event_id for e in log.read(partition=p)] == [e.event_id for e in evs]
        assert log.stream_version("a") == n - 1

    @pytest.mark.parametrize("n", [1, 2])
    def test_one_id_with_different_events_at_once_stores_one(self, log: EventLog, n: int) -> None:
        # callers racing with one id but different content: one event is stored and acknowledged,
        # every other caller gets EventIdConflict (never an offset of an event that is not theirs)
        ids = [uuid.uuid4() for _ in range(n)]
        barrier = threading.Barrier(8)
        out: dict[int, object] = {}

        def work(k: int) -> None:
            evs = [NewEvent(type="T", payload=f"caller {k} event {i}".encode(), event_id=ids[i]) for i in range(n)]
            barrier.wait()
            try:
                out[k] = log.append("a", evs)
            except Exception as e:  # noqa: BLE001 - checked below
                out[k] = e

        ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        won = [k for k, r in out.items() if r == (0, n - 1)]
        assert len(won) == 1 and all(isinstance(r, EventIdConflict) for k, r in out.items() if k != won[0])
        assert [e.payload for e in log.read_stream("a")] == [f"caller {won[0]} event {i}".encode() for i in range(n)]

    def test_event_ids_are_uuids(self, log: EventLog) -> None:
        e = NewEvent(type="X", payload=b"p", event_id=uuid.UUID(int=7))
        log.append("a", [e])
        assert all_events(log)[0].event_id == uuid.UUID(int=7)

    # -- the methods the store calls beyond the fold (sweep, stats, compaction) --------------------
    def test_streams_lists_every_stream_with_an_event(self, log: EventLog) -> None:
        assert log.streams() == []
        log.append("a", [msg(0)])
        log.append("b", [msg(1), msg(2)])
        assert sorted(log.streams()) == ["a", "b"]

    def test_event_offsets_find_logged_ids_only(self, log: EventLog) -> None:
        evs = [msg(0), msg(1)]
        first, _ = log.append("a", evs)
        other = uuid.uuid4()
        got = log.event_offsets([evs[1].event_id, other, evs[0].event_id], "a", "t")
        assert got == [first + 1, None, first]
        assert log.event_offsets([evs[0].event_id], "a", "another tenant") == [None]

    def test_redact_keeps_the_envelope_and_drops_the_payload(self, log: EventLog) -> None:
        evs = [msg(i) for i in range(4)]
        log.append("a", evs)
        p = log.partition_of("a")
        report = log.redact({p: {1, 2}})
        assert report["redacted"] == 2 and {"segments_rewritten", "bytes_before", "bytes_after"} <= set(report)
        got = log.read_stream("a")
        assert [g.event_id for g in got] == [e.event_id for e in evs]  # ids, versions and offsets stay
        assert [g.type for g in got] == ["MessageAppended", "Redacted", "Redacted", "MessageAppended"]
        assert all(b"message 1" not in g.payload and b"message 2" not in g.payload for g in got)
        assert got[3].decode().content == "message 3"
        assert log.redact({p: {1}})["redacted"] == 0  # already gone: nothing more to do
        log.append("a", [msg(9)])  # the log takes appends again afterwards
        assert log.read_stream("a")[-1].version == 4

    def test_disk_bytes_and_maintain_answer(self, log: EventLog) -> None:
        log.append("a", [msg(0)])
        assert isinstance(log.disk_bytes(), int) and log.disk_bytes() >= 0
        assert isinstance(log.maintain(), int)
