"""ArrowLog durability: restart, segments, locking, torn tails, corruption, permissions."""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pytest

from eidetica.errors import CorruptLog, InvalidInput, StoreLocked
from eidetica.events import LOG_SCHEMA, NO_STREAM, ArrowLog, NewEvent
from tests.contracts.log import all_events, msg


def fill(path, batches: int = 6, per: int = 5, **kw) -> list[NewEvent]:
    """Write ``batches`` appends into a fresh log and return every event written."""
    written: list[NewEvent] = []
    with ArrowLog(path, **kw) as log:
        for b in range(batches):
            evs = [msg(b * per + i) for i in range(per)]
            log.append(f"s{b % 2}", evs)
            written += evs
    return written


def test_reopen_keeps_events_versions_and_idempotency(tmp_path) -> None:
    evs = [msg(i) for i in range(3)]
    with ArrowLog(tmp_path / "log") as log:
        assert log.append("a", evs, NO_STREAM) == (0, 2)
    with ArrowLog(tmp_path / "log") as log:
        assert [e.event_id for e in all_events(log)] == [e.event_id for e in evs]
        assert log.stream_version("a") == 2
        assert log.append("a", evs, NO_STREAM) == (0, 2)  # a retry after restart: no-op
        assert log.append("a", [msg(3)], 2) == (3, 3)
        assert log.head() == 4


def test_fsync_batch_syncs_in_the_background(tmp_path, monkeypatch) -> None:
    # fsync='batch' acknowledges before the fsync; a background flush follows within
    # fsync_interval, and close() flushes what is left
    synced: list[int] = []
    real = ArrowLog._sync
    monkeypatch.setattr(ArrowLog, "_sync", lambda self, p: (synced.append(p), real(self, p))[1])
    log = ArrowLog(tmp_path / "log", fsync="batch", fsync_interval=0.02)
    rounds = threading.Semaphore(0)  # one release per pass of the background flusher
    real_flush = log._flush_dirty

    def flush() -> None:
        real_flush()
        rounds.release()

    log._flush_dirty = flush  # type: ignore[method-assign]
    log.append("a", [msg(0)])
    for _ in range(2):  # the pass that syncs it, then one more
        assert rounds.acquire(timeout=30)
    assert synced == [0]
    for _ in range(3):  # further passes with nothing written since: no more fsyncs
        assert rounds.acquire(timeout=30)
    assert synced == [0]
    log.append("a", [msg(1)])
    log.close()
    assert len(synced) == 2
    with ArrowLog(tmp_path / "log") as again:
        assert [e.version for e in again.read_stream("a")] == [0, 1]


def test_segments_are_plain_arrow_ipc_streams(tmp_path) -> None:
    written = fill(tmp_path / "log", batches=4)
    with ArrowLog(tmp_path / "log") as log:
        log.append("s9", [msg(99)])  # a new segment on open
        segs = log.segments()
    assert len(segs) == 2
    rows = 0
    for seg in segs:
        table = pa.ipc.open_stream(pa.memory_map(seg)).read_all()
        assert table.schema.equals(LOG_SCHEMA)
        rows += table.num_rows
    assert rows == len(written) + 1
    first = pa.ipc.open_stream(pa.memory_map(segs[0])).read_all()
    assert first.column("payload").to_pylist() == [e.payload for e in written]


def test_segments_roll_by_size(tmp_path) -> None:
    with ArrowLog(tmp_path / "log", segment_bytes=4096) as log:
        for _i in range(40):
            log.append("a", [NewEvent(type="X", payload=os.urandom(300))])
        assert len(log.segments()) > 3
        assert [e.offset for e in all_events(log)] == list(range(40))
    with ArrowLog(tmp_path / "log", segment_bytes=4096) as log:
        assert log.head() == 40
        assert len(log.read_stream("a", 35)) == 5


@pytest.mark.parametrize("fail_at", ["write", "fdatasync"])
def test_a_failed_write_leaves_the_files_recoverable_and_the_log_goes_on(tmp_path, monkeypatch, fail_at) -> None:
    real = getattr(os, fail_at)
    calls = {"n": 0}

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(*args)

    with ArrowLog(tmp_path / "log") as log:
        log.append("a", [msg(0), msg(1)])
        monkeypatch.setattr(os, fail_at, flaky)
        with pytest.raises(OSError):
            log.append("a", [msg(2)])
        monkeypatch.setattr(os, fail_at, real)
        assert log.head() == 2 and log.stream_version("a") == 1  # nothing of the failed append
        assert log.append("a", [msg(2)], 1) == (2, 2)  # the retry lands where the failed one would have
        assert [e.offset for e in all_events(log)] == [0, 1, 2]
    with ArrowLog(tmp_path / "log") as log:
        assert [e.payload for e in all_events(log)] == [msg(i).payload for i in range(3)]
        assert log.append("a", [msg(3)], 2) == (3, 3)


def test_second_writer_gets_a_clear_error(tmp_path) -> None:
    with ArrowLog(tmp_path / "log") as log:
        log.append("a", [msg(0)])
        with pytest.raises(StoreLocked):
            ArrowLog(tmp_path / "log")
        with ArrowLog(tmp_path / "log", readonly=True) as ro:
            assert len(ro.read()) == 1
            with pytest.raises(InvalidInput):
                ro.append("a", [msg(1)])


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_second_writer_process_gets_a_clear_error(tmp_path) -> None:
    with ArrowLog(tmp_path / "log") as log:
        log.append("a", [msg(0)])
        code = textwrap.dedent(
            f"""
            from eidetica.events import ArrowLog
            from eidetica.errors import StoreLocked
            try:
                ArrowLog({str(tmp_path / "log")!r})
            except StoreLocked as e:
                print("LOCKED", e)
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.startswith("LOCKED"), out.stderr
    with ArrowLog(tmp_path / "log") as log:  # released on close
        assert log.head() == 1


def test_partition_count_is_fixed_at_creation(tmp_path) -> None:
    ArrowLog(tmp_path / "log", partitions=4).close()
    with ArrowLog(tmp_path / "log") as log:
        assert log.partitions == 4
    with pytest.raises(InvalidInput) as ei:
        ArrowLog(tmp_path / "log", partitions=2)
    assert ei.value.field == "partitions"


def test_files_are_owner_only(tmp_path) -> None:
    fill(tmp_path / "log", batches=1)
    for root, dirs, files in os.walk(tmp_path / "log"):
        for d in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode) & 0o077 == 0
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) & 0o077 == 0, f


def batch_ends(path) -> list[tuple[int, int]]:
    """(end byte, events before it) for each batch of the first segment."""
    with ArrowLog(path, readonly=True) as log:
        out, n = [], 0
        for entry in log._parts[0].batches:
            n += entry.count
            out.append((entry.locator.end, n))
        return out


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_truncated_tail_recovers_the_verified_prefix(tmp_path) -> None:
    src = tmp_path / "src"
    written = fill(src, batches=8)
    seg = ArrowLog(src, readonly=True).segments()[0]
    size = os.path.getsize(seg)
    ends = batch_ends(src)
    rng = random.Random(7)
    positions = sorted({rng.randrange(0, size) for _ in range(25)} | {0, 1, size - 1, ends[3][0], ends[3][0] + 1})
    for pos in positions:
        work = tmp_path / f"cut{pos}"
        shutil.copytree(src, work)
        with open(ArrowLog(work, readonly=True).segments()[0], "r+b") as f:
            f.truncate(pos)
        expect = max([n for end, n in ends if end <= pos], default=0)
        with ArrowLog(work) as log:
            got = all_events(log)
            assert [e.payload for e in got] == [e.payload for e in written[:expect]], pos
            log.append("after", [msg(1000)])  # and the log takes new appends
        with ArrowLog(work) as log:
            assert log.head() == expect + 1


def _flip(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))


def test_flipped_payload_byte_in_an_older_segment_raises_corrupt_log(tmp_path) -> None:
    fill(tmp_path / "log", batches=3)
    fill(tmp_path / "log", batches=3)  # second segment
    log = ArrowLog(tmp_path / "log", readonly=True)
    seg0 = log.segments()[0]
    payload = msg(4).payload  # fourth... any payload of the first segment
    data = open(seg0, "rb").read()
    pos = data.index(payload) + 20
    _flip(seg0, pos)
    with pytest.raises(CorruptLog) as ei:
        ArrowLog(tmp_path / "log")
    assert ei.value.path == seg0
    assert ei.value.offset is not None
    assert seg0 in str(ei.value)


def test_corruption_in_the_middle_of_the_last_segment_is_not_truncated(tmp_path) -> None:
    fill(tmp_path / "log", batches=6)
    ends = batch_ends(tmp_path / "log")
    seg = ArrowLog(tmp_path / "log", readonly=True).segments()[0]
    data = open(seg, "rb").read()
    pos = data.index(msg(12).payload) + 20  # a payload of the third batch; later batches are fine
    assert ends[1][0] < pos < ends[2][0]
    _flip(seg, pos)
    before = open(seg, "rb").read()
    with pytest.raises(CorruptLog):
        ArrowLog(tmp_path / "log")
    assert open(seg, "rb").read() == before  # nothing was cut away


def test_random_flips_never_pass_silently(tmp_path) -> None:
    src = tmp_path / "src"
    written = fill(src, batches=3)
    fill(src, batches=3)
    seg0 = ArrowLog(src, readonly=True).segments()[0]
    size = os.path.getsize(seg0)
    rng = random.Random(11)
    detected = 0
    for k in range(40):
        work = tmp_path / f"w{k}"
        shutil.copytree(src, work)
        _flip(os.path.join(work, os.path.relpath(seg0, src)), rng.randrange(0, size - 8))
        try:
            with ArrowLog(work) as log:
                got = all_events(log)
        except CorruptLog:
            detected += 1
            continue
        # a flip the checks did not see must have touched no data (padding, unused bytes)
        assert [e.payload for e in got[: len(written)]] == [e.payload for e in written]
        assert len(got) == 2 * len(written)
    assert detected >= 30


def test_redact_removes_payloads_but_keeps_offsets_and_versions(tmp_path) -> None:
    secret = b"TOP-SECRET-MARKER-4711"
    with ArrowLog(tmp_path / "log") as log:
        log.append("keep", [msg(0)])
        log.append("gone", [NewEvent(type="X", payload=secret * 3), NewEvent(type="X", payload=b"other")])
        log.append("keep", [msg(1)])
        report = log.redact({0: {1}})
        assert report["redacted"] == 1 and report["segments_rewritten"] == 1
        evs = log.read()
        assert [e.offset for e in evs] == [0, 1, 2, 3]
        assert evs[1].type == "Redacted" and evs[1].decode().original_type == "X"
        assert evs[2].payload == b"other"
        assert log.stream_version("gone") == 1
        log.append("keep", [msg(2)])
    for root, _, files in os.walk(tmp_path / "log"):
        for f in files:
            assert secret not in open(os.path.join(root, f), "rb").read()
    with ArrowLog(tmp_path / "log") as log:
        assert log.head() == 5
