"""Reliability of the log: full disks, fuzzed histories, fuzzed segment bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eidetica.errors import CorruptLog, InvalidInput, WrongExpectedVersion
from eidetica.events import ANY, NO_STREAM, STREAM_EXISTS, ArrowLog, InMemoryLog, NewEvent

from .contracts.log import all_events


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MiB tmpfs mounted for the test (needs root), unmounted afterwards."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("full-disk test needs root to mount a tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_fails_cleanly_and_recovers(tiny_disk) -> None:
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * (1024 * 1024))
    log = ArrowLog(tiny_disk / "log")
    acked = []
    with pytest.raises(OSError) as ei:
        for i in range(10_000):
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


# -- fuzzing: the reference and the durable log agree on any history ---------------------
ops = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "tenant:x", "ü-stream"]),
        st.integers(1, 4),  # events in the append
        st.sampled_from(["any", "none", "exists", "exact", "wrong", "retry"]),
        st.binary(max_size=64),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=ops)
def test_arrow_log_behaves_like_the_reference(tmp_path_factory, history) -> None:
    ref = InMemoryLog(partitions=2)
    path = tmp_path_factory.mktemp("fuzz")
    real = ArrowLog(path / "log", partitions=2)
    try:
        # event ids must match for the comparison: replay the same NewEvents into both
        results_ref = []
        results_real = []
        sent = []
        for stream, n, mode, payload in history:
            if mode == "retry":
                if not sent:
                    continue
                s, evs, exp = sent[-1]
            else:
                evs = [NewEvent(type="T", payload=payload + bytes([k])) for k in range(n)]
                v = ref.stream_version(stream)
                exp = {"any": ANY, "none": NO_STREAM, "exists": STREAM_EXISTS, "exact": v, "wrong": v + 1}[mode]
                s = stream
            for log, res in ((ref, results_ref), (real, results_real)):
                try:
                    res.append(("ok", log.append(s, evs, exp)))
                except WrongExpectedVersion as e:
                    res.append(("wrong", e.expected, e.actual))
            if results_ref[-1][0] == "ok" and mode != "retry":
                sent.append((s, evs, exp))
        assert results_ref == results_real
        assert [(e.offset, e.stream, e.version, e.payload, e.event_id) for e in all_events(ref)] == [
            (e.offset, e.stream, e.version, e.payload, e.event_id) for e in all_events(real)
        ]
        real.close()
        reopened = ArrowLog(path / "log")
        assert [(e.offset, e.payload) for e in all_events(reopened)] == [(e.offset, e.payload) for e in all_events(ref)]
        reopened.close()
    finally:
        real.close()
        ref.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096), keep=st.integers(0, 2000))
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
