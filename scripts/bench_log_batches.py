"""Append throughput of the durable ArrowLog by batch size, against the disk's floor and SQLite.

For batch sizes 1, 10, 100 and 1000 events per append call (fsync="always": every call is
durable before it returns), measures events/s of:

- ArrowLog.append (one call per batch),
- the floor: the same payload bytes written with os.write + fdatasync once per batch,
- SQLite WAL, synchronous=FULL, one transaction per batch.

The three are interleaved per round on the same disk, and each measurement stops after a
fixed number of events or a time budget, whichever comes first. Prints progress lines, then
one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from bench_log import fresh, sqlite_log  # noqa: E402  (a sibling script: the same baseline table and disk hygiene)

from eidetica.events import ArrowLog, MessageAppended, NewEvent

SIZES = (1, 10, 100, 1000)


def make_events(n: int) -> list[NewEvent]:
    """``n`` MessageAppended events with ~150-byte contents (the same shape as bench_log)."""
    out = []
    for i in range(n):
        content = (f"message {i}: " + "lorem ipsum dolor sit amet " * 6)[:150]
        ev = MessageAppended(session_id=f"s{i % 50}", user_id="u", role="user", content=content, sequence=i)
        out.append(NewEvent.of(ev, tenant="bench"))
    return out


def _batches(events: list[NewEvent], size: int) -> list[list[NewEvent]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


def _timed(batches: list[list[NewEvent]], one: Callable[[int, list[NewEvent]], None], budget_s: float) -> float:
    """Run ``one`` over batches until done or the budget is spent; events per second."""
    n = 0
    t = time.perf_counter()
    for i, b in enumerate(batches):
        one(i, b)
        n += len(b)
        if time.perf_counter() - t > budget_s:
            break
    el = time.perf_counter() - t
    return n / el if el > 0 else float("inf")


def floor_rate(d: str, batches: list[list[NewEvent]], budget_s: float) -> float:
    """os.write + fdatasync of each batch's payload bytes."""
    blobs = [b"".join(e.payload for e in b) for b in batches]
    fd = os.open(fresh(os.path.join(d, "floor.bin")), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        def one(i: int, b: list[NewEvent]) -> None:
            """Write and sync batch i."""
            os.write(fd, blobs[i])
            os.fdatasync(fd)

        return _timed(batches, one, budget_s)
    finally:
        os.close(fd)


def arrow_rate(d: str, batches: list[list[NewEvent]], budget_s: float) -> float:
    """ArrowLog.append of each batch, fsync="always"."""
    path = fresh(os.path.join(d, "arrowlog"))
    log = ArrowLog(path, fsync="always")
    try:
        return _timed(batches, lambda i, b: log.append(f"session:bench:s{i % 64}", b), budget_s)
    finally:
        log.close()


def sqlite_rate(d: str, batches: list[list[NewEvent]], budget_s: float) -> float:
    """SQLite WAL, synchronous=FULL, one transaction per batch."""
    con = sqlite_log(os.path.join(d, "log.sqlite"))
    now = int(time.time() * 1e6)
    versions: dict[str, int] = {}
    rows = []
    for i, b in enumerate(batches):
        stream = f"session:bench:s{i % 64}"
        v = versions.get(stream, 0)
        versions[stream] = v + len(b)
        rows.append([(e.event_id.bytes, stream, v + j, e.type, now, e.tenant, e.payload) for j, e in enumerate(b)])

    def one(i: int, b: list[NewEvent]) -> None:
        """Insert batch i in one transaction."""
        con.execute("BEGIN")
        con.executemany(
            "INSERT INTO events (event_id, stream, version, type, time, tenant, payload) VALUES (?,?,?,?,?,?,?)", rows[i]
        )
        con.execute("COMMIT")

    try:
        return _timed(batches, one, budget_s)
    finally:
        con.close()


def main() -> None:
    """Measure every batch size and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller run (under 30 s)")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    rounds = 2 if args.quick else 3
    events_per = 5_000 if args.quick else 30_000
    budget = 1.5 if args.quick else 5.0
    d = tempfile.mkdtemp(prefix="eidetica-bench-batches-", dir=args.dir)
    try:
        events = make_events(events_per)
        result: dict[str, dict[str, float]] = {"arrowlog": {}, "disk_floor": {}, "sqlite": {}}
        for size in SIZES:
            batches = _batches(events, size)
            got: dict[str, list[float]] = {k: [] for k in result}
            for _ in range(rounds):
                got["disk_floor"].append(floor_rate(d, batches, budget))
                got["arrowlog"].append(arrow_rate(d, batches, budget))
                got["sqlite"].append(sqlite_rate(d, batches, budget))
            for k, v in got.items():
                result[k][str(size)] = round(statistics.median(v))
            print(
                f"batch {size:>5}: floor {result['disk_floor'][str(size)]:>10,} ev/s  arrowlog "
                f"{result['arrowlog'][str(size)]:>10,} ev/s  sqlite {result['sqlite'][str(size)]:>10,} ev/s",
                flush=True,
            )
        out: dict[str, object] = {
            "batch_sizes": list(SIZES),
            "events_per_s": result,
            "arrowlog_vs_floor": {s: round(result["arrowlog"][s] / result["disk_floor"][s], 3) for s in result["arrowlog"]},
        }
        print(json.dumps(out))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
