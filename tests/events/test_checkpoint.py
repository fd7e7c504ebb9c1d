"""ArrowLog recovery checkpoint: a checkpointed open equals a full scan; a bad one is refused; SIGKILL mid-write loses nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

from eidetica.errors import EventIdConflict, InvalidInput
from eidetica.events import ArrowLog
from eidetica.events._partition import _IdIndex
from eidetica.events.arrow_log import CHECKPOINT_MAGIC, CHECKPOINT_NAME, CheckpointWarning
from tests.contracts.log import all_events, msg
from tests.support import ROOT

SMALL_SEGMENTS = 4096  # a few batches a segment: the checkpoint spans several


def grow(path, start: int, batches: int, **kw) -> list:
    """Append ``batches`` appends of 3 events over 3 streams (a fresh segment per open); returns the events."""
    written = []
    with ArrowLog(path, segment_bytes=SMALL_SEGMENTS, **kw) as log:
        for b in range(start, start + batches):
            evs = [msg(b * 3 + i) for i in range(3)]
            log.append(f"s{b % 3}", evs)
            written += evs
    return written


def state(log: ArrowLog) -> dict:
    """Everything recovery rebuilds, in plain values."""
    part = log._parts[0]
    return {
        "head": log.head(),
        "versions": dict(part.versions),
        "stream_offsets": {k: list(v) for k, v in part.stream_offsets.items()},
        "batches": [(e.first, e.count, e.locator) for e in part.batches],
        "events": [(e.offset, e.event_id, e.stream, e.version, e.payload) for e in all_events(log)],
        "streams": sorted(log.streams()),
        "read_stream": [e.offset for e in log.read_stream("s1", 2)],
        "ids": sorted(zip(*[a.tolist() for a in part.ids.arrays()])),  # (hi, lo, offset, tenant tag)
    }


def full_scan(path) -> dict:
    """The state an open without any checkpoint rebuilds."""
    ckpt = os.path.join(path, "p000", CHECKPOINT_NAME)
    aside = ckpt + ".aside"
    os.replace(ckpt, aside)
    try:
        with ArrowLog(path, readonly=True) as log:
            return state(log)
    finally:
        os.replace(aside, ckpt)


def checkpointed(path) -> dict:
    """The state an open from the checkpoint rebuilds (no warning allowed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        with ArrowLog(path, readonly=True) as log:
            assert len(log._parts[0].batches.frozen_first) > 0, "the checkpoint was not used"
            return state(log)


def test_checkpointed_open_equals_a_full_scan_and_keeps_idempotency(tmp_path) -> None:
    path = tmp_path / "log"
    evs = grow(path, 0, 30, checkpoint_events=1)  # close writes a checkpoint over several segments
    assert os.path.exists(path / "p000" / CHECKPOINT_NAME)
    evs += grow(path, 30, 7, checkpoint_events=10**9)  # a tail the checkpoint does not cover
    assert checkpointed(path) == full_scan(path)
    with ArrowLog(path, checkpoint_events=10**9) as log:
        assert log._parts[0].batches.frozen_first[-1] < log.head()
        # retries of covered and uncovered appends return their first offsets, write nothing
        assert log.append("s0", evs[0:3]) == (0, 2)
        assert log.append(f"s{36 % 3}", evs[-3:]) == (len(evs) - 3, len(evs) - 1)  # batch 36 went to s0
        assert log.event_offset(evs[40].event_id, "s1", evs[40].tenant) == 40
        assert log.event_offset(evs[40].event_id, "s1", "another tenant") is None
        with pytest.raises(EventIdConflict):
            log.append("s0", [evs[0], msg(999)])  # some but not all already appended
        assert log.head() == len(evs)
        assert log.append("s2", [msg(1000)], log.stream_version("s2")) == (len(evs), len(evs))


def test_damaged_or_stale_checkpoint_is_refused_with_a_warning(tmp_path) -> None:
    path = tmp_path / "log"
    grow(path, 0, 20, checkpoint_events=1)
    truth = full_scan(path)
    ckpt = path / "p000" / CHECKPOINT_NAME
    good = ckpt.read_bytes()
    body = good.index(b"\n", len(CHECKPOINT_MAGIC) + 65) + 1  # the id map's arrays start here
    in_ids = good[: body + 3] + bytes([good[body + 3] ^ 1]) + good[body + 4 :]  # an id no structural check notices
    for damaged in (good[:-1] + bytes([good[-1] ^ 1]), good[: len(good) // 2], good.replace(b'"version": 3', b'"version": 2'),
                    in_ids):
        ckpt.write_bytes(damaged)
        with pytest.warns(CheckpointWarning), ArrowLog(path, readonly=True) as log:
            assert state(log) == truth
    # stale: the segments it covers were rewritten (positions moved) since it was written
    ckpt.write_bytes(good)
    with ArrowLog(path, checkpoint_events=10**9) as log:
        log.redact({0: {4, 5}})
    assert not ckpt.exists()  # redact removes it first; below the threshold no new one is written
    ckpt.write_bytes(good)
    with pytest.warns(CheckpointWarning, match="segment"), ArrowLog(path, readonly=True) as log:
        after = state(log)
    assert after["head"] == truth["head"] and after["versions"] == truth["versions"]


def test_a_format_2_checkpoint_is_refused_with_a_full_scan_then_replaced(tmp_path, monkeypatch) -> None:
    # format 2 held a keyed hash of (tenant, id) where format 3 holds the id and a tenant tag:
    # the keys cannot be converted without the ids, so an old file costs one full scan
    import eidetica.events.arrow_log as arrow_log

    path = tmp_path / "log"
    with monkeypatch.context() as mp:
        mp.setattr(arrow_log, "CHECKPOINT_VERSION", 2)
        evs = grow(path, 0, 20, checkpoint_events=1)  # a well-formed, checksummed file that says format 2
    truth = full_scan(path)
    with pytest.warns(CheckpointWarning, match="format 2"), ArrowLog(path, checkpoint_events=1) as log:
        assert state(log) == truth
        assert log.event_offset(evs[7].event_id, "s2", evs[7].tenant) == 7
        assert log.append("s0", evs[0:3]) == (0, 2)  # a retry across the refused checkpoint writes nothing
    assert checkpointed(path) == truth  # the close wrote a format-3 checkpoint, used without warning


def test_the_same_event_id_in_two_tenants_is_two_keys_across_a_checkpoint(tmp_path) -> None:
    path = tmp_path / "log"
    a = msg(1)
    b = type(a)(event_id=a.event_id, type=a.type, payload=a.payload, tenant="other", time=a.time)
    with ArrowLog(path, checkpoint_events=1) as log:
        assert log.append("s0", [a]) == (0, 0)
        assert log.append("t0", [b]) == (1, 1)  # another tenant's same id is a new event
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        with ArrowLog(path) as log:
            assert log.event_offset(a.event_id, "s0", a.tenant) == 0
            assert log.event_offset(a.event_id, "t0", "other") == 1
            assert log.append("t0", [b]) == (1, 1) and log.head() == 2


def test_redact_writes_a_fresh_checkpoint_for_the_moved_batches(tmp_path) -> None:
    path = tmp_path / "log"
    grow(path, 0, 20, checkpoint_events=1)
    before = (path / "p000" / CHECKPOINT_NAME).read_bytes()
    with ArrowLog(path, checkpoint_events=1) as log:
        log.redact({0: {4, 5, 40}})
    assert (path / "p000" / CHECKPOINT_NAME).read_bytes() != before
    assert checkpointed(path) == full_scan(path)


def test_covered_batches_lost_by_a_power_failure_make_the_checkpoint_stale(tmp_path) -> None:
    # the checkpoint covers the last segment's batches; if the file comes back shorter (its
    # tail was never on disk), the checkpoint must not vouch for offsets that are gone
    path = tmp_path / "log"
    grow(path, 0, 12, checkpoint_events=1)
    last = ArrowLog(path, readonly=True).segments()[-1]
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) - 30)
    with pytest.warns(CheckpointWarning), ArrowLog(path) as log:
        head = log.head()
        assert head < 36 and [e.offset for e in all_events(log)] == list(range(head))
        assert log.append("s9", [msg(77)]) == (head, head)


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("previous", [False, True])
def test_sigkill_while_writing_the_checkpoint_loses_nothing(tmp_path, previous: bool) -> None:
    path = tmp_path / "log"
    before = grow(path, 0, 10, checkpoint_events=1 if previous else 10**9)
    old = (path / "p000" / CHECKPOINT_NAME).read_bytes() if previous else None
    # below the threshold at open (30 events uncovered without a previous checkpoint, 0 with
    # one), at or above it at close (45 or 15): the close is what writes and dies
    threshold = 15 if previous else 40
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from eidetica.events import arrow_log
        from eidetica.events.arrow_log import ArrowLog, CHECKPOINT_MAGIC
        from tests.contracts.log import msg
        real = arrow_log._write_all
        def dying(fd, data):
            if bytes(data[: len(CHECKPOINT_MAGIC)]) == CHECKPOINT_MAGIC:
                real(fd, bytes(data[: len(data) // 2]))
                os.kill(os.getpid(), signal.SIGKILL)  # half a checkpoint written, never renamed
            real(fd, data)
        arrow_log._write_all = dying
        log = ArrowLog({str(path)!r}, segment_bytes={SMALL_SEGMENTS}, checkpoint_events={threshold})
        for b in range(10, 15):
            print(*log.append(f"s{{b % 3}}", [msg(b * 3 + i) for i in range(3)]), flush=True)
        log.close()
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    acked = [tuple(map(int, line.split())) for line in proc.stdout.splitlines()]
    assert acked[-1] == (42, 44)  # every append was acknowledged before close started the checkpoint
    assert os.path.exists(path / "p000" / (CHECKPOINT_NAME + ".tmp"))
    if previous:
        assert (path / "p000" / CHECKPOINT_NAME).read_bytes() == old  # the rename never happened
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)  # the old one (or none) is whole: no warning
        with ArrowLog(path, segment_bytes=SMALL_SEGMENTS, checkpoint_events=1) as log:
            evs = all_events(log)
            assert [e.offset for e in evs] == list(range(45))  # nothing lost, nothing twice
            assert [e.event_id for e in evs[: len(before)]] == [e.event_id for e in before]
            assert log.append("s0", before[:3]) == (0, 2)
    assert not os.path.exists(path / "p000" / (CHECKPOINT_NAME + ".tmp"))
    assert checkpointed(path) == full_scan(path)  # that open wrote a fresh one


def test_id_index_merges_keep_every_id(monkeypatch) -> None:
    # a big log keeps ids in sorted arrays: ids merged in batches must all stay findable
    monkeypatch.setattr(_IdIndex, "MERGE_AT", 8)
    import random

    rng = random.Random(1)
    index = _IdIndex()
    keys = [rng.getrandbits(128) for _ in range(500)] + [5 << 64 | 1, 5 << 64 | 2, 5 << 64 | 3]  # equal high halves
    for o, k in enumerate(keys):
        index[k] = o
        index.maybe_merge()
    assert len(index.recent) < 8 <= len(index.cols[0])  # most ids sit in the arrays
    assert [index.get(k) for k in keys] == list(range(len(keys)))
    assert index.get(5 << 64 | 4) is None and index.get(rng.getrandbits(128)) is None
    assert not index.keys().isdisjoint([rng.getrandbits(128), keys[7]])


def test_checkpoint_events_is_validated(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="checkpoint_events"):
        ArrowLog(tmp_path / "log", checkpoint_events=0)
    assert not (tmp_path / "log").exists() or not os.listdir(tmp_path / "log")
    shutil.rmtree(tmp_path / "log", ignore_errors=True)
