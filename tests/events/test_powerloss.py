"""Power loss: cut the power at every write/fsync boundary of a scripted workload, then recover.

The log's file calls go through ``PowerLossOs`` (tests/support/_powerloss.py), which records the
durable state (only what was fsynced) before each boundary. Each state is written to a
fresh directory three ways (synced only, a half-written unsynced tail, everything the page
cache held) and opened: every acknowledged event must be there, nothing that was never
appended may appear, and the recovered log verifies, takes an append and reopens.
Removing the fdatasync that precedes an acknowledgement makes this test fail.
"""

from __future__ import annotations

import uuid

import pytest

from eidetica.events import ArrowLog, NewEvent
from eidetica.events import _segments as segments_module
from eidetica.events import arrow_log as arrow_log_module
from tests.support._powerloss import PowerLossOs

NS = uuid.UUID("0b5e55ed-0000-4000-8000-000000000000")


def event(i: int, size: int) -> NewEvent:
    """Event number ``i`` of the workload (deterministic id and payload)."""
    return NewEvent(type="PowerProbe", payload=(f"{i}:".encode() + bytes([i % 251]) * size), event_id=uuid.uuid5(NS, str(i)))


# (stream, events in the append, payload bytes per event): several batches per 4 KiB segment, and rolls
SCRIPT = [("a", 1, 10), ("b", 3, 40), ("a", 1, 3000), ("c", 2, 20), ("b", 1, 900), ("a", 4, 5), ("a", 1, 7)]


def run_workload(root: str, fs: PowerLossOs) -> dict[uuid.UUID, NewEvent]:
    """Two runs of the log (the first closed cleanly, the second cut off): returns every event tried."""
    tried: dict[uuid.UUID, NewEvent] = {}
    i = 0
    for run in range(2):
        log = ArrowLog(root, partitions=2, segment_bytes=4096)
        for stream, n, size in SCRIPT:
            evs = [event(i + k, size) for k in range(n)]
            i += n
            tried.update((e.event_id, e) for e in evs)
            log.append(f"{stream}{run}", evs)
            fs.acked += n  # acknowledged: from here on it must survive any cut
        if run == 0:
            log.close()
    fs.cut("end")
    log.close()
    return tried


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_every_acknowledged_event_survives_a_power_cut_at_every_boundary(tmp_path, monkeypatch) -> None:
    root = tmp_path / "log"
    fs = PowerLossOs(str(root))  # the log directory: its own existence is taken as given
    monkeypatch.setattr(arrow_log_module, "os", fs)
    monkeypatch.setattr(segments_module, "os", fs)  # the segment writes and fsync_dir live there
    acked_order: list[uuid.UUID] = []
    real_append = ArrowLog.append

    def append(self, stream, events, expected_version=-2):  # type: ignore[no-untyped-def]
        out = real_append(self, stream, events, expected_version)
        acked_order.extend(e.event_id for e in events)
        return out

    monkeypatch.setattr(ArrowLog, "append", append)
    tried = run_workload(str(root), fs)
    monkeypatch.undo()  # recovery runs on the real os
    assert len(fs.cuts) > 40 and {c.op for c in fs.cuts} >= {"write", "fdatasync", "fsync", "open"}
    checked = 0
    for cut in fs.cuts:
        for how in ("synced", "torn", "cached"):
            dest = tmp_path / f"cut{cut.index:04d}-{how}"
            fs.materialise(cut, str(dest), how)
            where = f"power cut before boundary {cut.index} ({cut.op}), {how}"
            log_dir = dest
            with ArrowLog(log_dir) as log:
                got = [e for p in range(log.partitions) for e in log.read(partition=p)]
                for p in range(log.partitions):
                    assert [e.offset for e in log.read(partition=p)] == list(range(log.head(p))), where
                ids = {e.event_id: e for e in got}
                for eid in acked_order[: cut.acked]:
                    assert eid in ids, f"{where}: acknowledged event {tried[eid].payload[:8]!r} lost"
                for e in got:
                    assert e.event_id in tried and e.payload == tried[e.event_id].payload, where
                for s in {e.stream for e in got}:
                    assert [e.version for e in log.read_stream(s)] == list(range(log.stream_version(s) + 1)), where
                log.append("after", [NewEvent(type="X", payload=b"after")])
            with ArrowLog(log_dir) as again:  # the recovered log verifies on reopening
                assert sum(again.head(p) for p in range(again.partitions)) == len(got) + 1, where
            checked += 1
    assert checked == 3 * len(fs.cuts)
