"""Reliability of the log: full disks, fuzzed histories, fuzzed segment bytes."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eidetica.errors import CorruptLog, EventIdConflict, WrongExpectedVersion
from eidetica.events import ANY, NO_STREAM, STREAM_EXISTS, ArrowLog, NewEvent
from tests.contracts.log import all_events
from tests.support._tmpfs import mounted_tmpfs


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs mounted for the test (needs root), unmounted afterwards."""
    yield from mounted_tmpfs(tmp_path / "tiny", "2m")


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_full_disk_fails_cleanly_and_recovers(tiny_disk) -> None:
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024))
    log = ArrowLog(tiny_disk / "log")
    acked = []
    with pytest.raises(OSError) as ei:
        for _i in range(10_000):
            ev = NewEvent(type="X", payload=os.urandom(4000))
            log.append("s", [ev])
            acked.append(ev)
    assert "No space" in str(ei.value) or ei.value.errno == 28
    head = log.head()
    assert head == len(acked)
    assert [e.payload for e in log.read()] == [e.payload for e in acked]  # readable, nothing partial
    filler.unlink()  # free space: appends work again
    log.append("s", [NewEvent(type="X", payload=b"after")])
    log.close()
    with ArrowLog(tiny_disk / "log") as again:
        evs = again.read()
        assert len(evs) == head + 1 and evs[-1].payload == b"after"


# -- fuzzing: an independent reference and the durable log agree on any history -----------
class ReferenceLog:
    """The log's rules written out again, sharing no code with the log: a list of dicts per partition.

    Rules: a stream lives in partition crc32(name) % partitions; an append whose event ids
    were all logged in that partition before, each in this stream with this type and payload,
    returns their original offsets and writes nothing (whatever the expected version); any
    other use of a logged id (some but not all, another stream, other content) is a conflict;
    otherwise the expected version is checked against the stream's last version
    (-1 when it has none): ANY passes, NO_STREAM wants -1, STREAM_EXISTS wants >= 0, a
    number wants exactly that.
    """

    def __init__(self, partitions: int) -> None:
        self.parts: list[list[dict]] = [[] for _ in range(partitions)]

    def partition_of(self, stream: str) -> int:
        return zlib.crc32(stream.encode("utf-8")) % len(self.parts)

    def version(self, stream: str) -> int:
        return sum(1 for r in self.parts[self.partition_of(stream)] if r["stream"] == stream) - 1

    def append(self, stream: str, events: list[NewEvent], expected: int) -> tuple:
        rows = self.parts[self.partition_of(stream)]
        known = {r["id"]: r for r in rows}
        hits = [known[e.event_id] for e in events if e.event_id in known]
        if hits:
            same = len(hits) == len(events) and all(
                r["stream"] == stream and r["type"] == e.type and r["payload"] == e.payload for r, e in zip(hits, events))
            if not same:
                return ("conflict",)
            return ("ok", (min(r["offset"] for r in hits), max(r["offset"] for r in hits)))
        actual = self.version(stream)
        if expected == NO_STREAM and actual != -1:
            return ("wrong", expected, actual)
        if expected == STREAM_EXISTS and actual == -1:
            return ("wrong", expected, actual)
        if expected >= 0 and expected != actual:
            return ("wrong", expected, actual)
        first = len(rows)
        for k, e in enumerate(events):
            rows.append({"offset": first + k, "stream": stream, "version": actual + 1 + k,
                         "payload": e.payload, "id": e.event_id, "type": e.type})
        return ("ok", (first, first + len(events) - 1))

    def events(self) -> list[tuple]:
        return [(r["offset"], r["stream"], r["version"], r["payload"], r["id"]) for p in self.parts for r in p]


ops = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "tenant:x", "ü-stream"]),
        st.integers(1, 4),  # events in the append
        st.sampled_from(["any", "none", "exists", "exact", "wrong", "retry", "retry_elsewhere", "partial", "changed"]),
        st.binary(max_size=64),
    ),
    max_size=25,
)


def _do(log, stream: str, evs: list[NewEvent], exp: int) -> tuple:
    try:
        return ("ok", log.append(stream, evs, exp))
    except WrongExpectedVersion as e:
        return ("wrong", e.expected, e.actual)
    except EventIdConflict:
        return ("conflict",)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=ops)
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_arrow_log_behaves_like_the_reference(tmp_path_factory, history) -> None:
    ref = ReferenceLog(partitions=2)
    path = tmp_path_factory.mktemp("fuzz")
    real = ArrowLog(path / "log", partitions=2)
    try:
        results_ref: list[tuple] = []
        results_real: list[tuple] = []
        sent: list[tuple[str, list[NewEvent], int]] = []
        for stream, n, mode, payload in history:
            if mode in ("retry", "retry_elsewhere", "partial", "changed"):
                if not sent:
                    continue
                s, evs, exp = sent[-1]
                if mode == "retry_elsewhere":
                    s = stream  # the same ids on another stream: a conflict within the partition
                elif mode == "partial":
                    evs = evs[:1] + [NewEvent(type="T", payload=payload + b"new")]
                elif mode == "changed":  # the same ids with other content
                    evs = [NewEvent(type=e.type, payload=e.payload + b"!", event_id=e.event_id) for e in evs]
            else:
                evs = [NewEvent(type="T", payload=payload + bytes([k])) for k in range(n)]
                v = ref.version(stream)
                exp = {"any": ANY, "none": NO_STREAM, "exists": STREAM_EXISTS, "exact": v, "wrong": v + 1}[mode]
                s = stream
            results_ref.append(ref.append(s, evs, exp))
            results_real.append(_do(real, s, evs, exp))
            if results_ref[-1][0] == "ok" and mode not in ("retry", "partial", "changed"):
                sent.append((s, evs, exp))
        assert results_real == results_ref
        assert [(e.offset, e.stream, e.version, e.payload, e.event_id) for e in all_events(real)] == ref.events()
        assert all(real.stream_version(s) == ref.version(s) for s in {h[0] for h in history})
        real.close()
        reopened = ArrowLog(path / "log")
        assert [(e.offset, e.stream, e.version, e.payload, e.event_id) for e in all_events(reopened)] == ref.events()
        reopened.close()
    finally:
        real.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096), keep=st.integers(0, 2000))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_random_bytes_never_crash_the_segment_reader(tmp_path_factory, data, keep) -> None:
    path = tmp_path_factory.mktemp("junk")
    with ArrowLog(path / "log") as log:
        log.append("s", [NewEvent(type="X", payload=b"good")])
        seg = log.segments()[0]
    with open(seg, "r+b") as f:  # a valid prefix, then junk
        f.truncate(min(keep, os.path.getsize(seg)))
        f.seek(0, 2)
        f.write(data)
    try:
        with ArrowLog(path / "log") as log:
            evs = log.read()
            assert all(e.payload == b"good" for e in evs)
    except CorruptLog as e:
        assert seg in str(e)
