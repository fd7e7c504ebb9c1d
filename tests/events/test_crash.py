"""Crash tests: SIGKILL a real appending process and check what survives."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from eidetica.events import ArrowLog
from tests.support import SUPPORT
from tests.support._crash_child import event

pytestmark = [pytest.mark.slow, pytest.mark.crash]
CHILD = str(SUPPORT / "_crash_child.py")


def test_sigkill_never_loses_an_acknowledged_event(tmp_path) -> None:
    path = str(tmp_path / "log")
    rng = random.Random(2026)
    acked: dict[tuple[int, int], int] = {}  # (round, i) -> offset
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for rnd in range(20):
        proc = subprocess.Popen([sys.executable, CHILD, path, str(rnd)], stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        # wait for the child to be appending, then kill it at a random moment
        first = proc.stdout.readline()
        assert first.startswith("ACK"), first
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        out = first + proc.stdout.read()
        proc.wait()
        for line in out.splitlines():
            if not line.startswith("ACK"):
                continue  # a line torn by the kill was never complete: not acknowledged
            parts = line.split()
            if len(parts) != 6:
                continue
            r, i, n, first_off, last_off = map(int, parts[1:])
            assert last_off - first_off + 1 == n
            for k in range(n):
                acked[(r, i + k)] = first_off + k

        with ArrowLog(path) as log:
            events = log.read()
            assert [e.offset for e in events] == list(range(len(events))), "offsets are dense"
            by_offset = {e.offset: e for e in events}
            for (r, i), off in acked.items():
                ev = by_offset.get(off)
                assert ev is not None, f"acknowledged event {(r, i)} at offset {off} lost"
                want = event(r, i)
                assert ev.event_id == want.event_id and ev.payload == want.payload
            for ev in events:  # nothing that was never appended
                r, i = map(int, ev.payload.split(b":", 2)[:2])
                want = event(r, i)
                assert ev.event_id == want.event_id and ev.payload == want.payload
    assert len(acked) > 100


TEAR_CHILD = str(SUPPORT / "_crash_tear_child.py")


def test_a_batch_torn_by_a_real_kill_is_cut_away_and_nothing_acknowledged_is_lost(tmp_path) -> None:
    # Not synthetic truncation: the child process writes part of a batch into the segment
    # file itself and is SIGKILLed in the middle of the commit, leaving the torn bytes behind.
    path = str(tmp_path / "log")
    rng = random.Random(4242)
    acked: dict[tuple[int, int], int] = {}
    torn_events: set[tuple[int, int]] = set()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SUPPORT), *sys.path]))
    for rnd in range(6):
        whole, fraction = rng.randrange(0, 5), rng.random()
        proc = subprocess.run([sys.executable, TEAR_CHILD, path, str(rnd), str(whole), str(fraction)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        tears = [line.split() for line in proc.stdout.splitlines() if line.startswith("TEAR")]
        assert len(tears) == 1, proc.stdout
        _, _, i0, n, cut, total = tears[0]
        assert 0 < int(cut) < int(total)  # a real partial batch went to the file
        torn_events |= {(rnd, int(i0) + k) for k in range(int(n))}
        for line in proc.stdout.splitlines():
            if line.startswith("ACK"):
                r, i, n_, first_off, _ = map(int, line.split()[1:])
                for k in range(n_):
                    acked[(r, i + k)] = first_off + k
        with ArrowLog(path, readonly=True) as ro:  # before recovery: the torn bytes are on disk
            last_seg = ro.segments()[-1]
        size_before = os.path.getsize(last_seg)
        with ArrowLog(path) as log:
            events = log.read()
            assert [e.offset for e in events] == list(range(len(events)))
            by_offset = {e.offset: e for e in events}
            for (r, i), off in acked.items():
                ev = by_offset.get(off)
                want = event(r, i)
                assert ev is not None and ev.event_id == want.event_id and ev.payload == want.payload, (r, i)
            keys = {tuple(map(int, e.payload.split(b":", 2)[:2])) for e in events}
            assert not keys & torn_events  # nothing of a torn batch survives
            assert len(events) == len(acked)
        assert not os.path.exists(last_seg) or os.path.getsize(last_seg) < size_before  # the tail was cut
    assert len(acked) > 20
