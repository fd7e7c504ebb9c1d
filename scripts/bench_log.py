"""Benchmark the durable event log against the disk's floor and SQLite, in one run.

Prints progress lines, then one JSON object on the last line.
"""

from __future__ import annotations

import _thread
import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time

from eidetica.events import ArrowLog, MessageAppended, NewEvent
from eidetica.events.types import decode

BATCH = 1000


def make_batches(n_batches: int) -> list[list[NewEvent]]:
    """Pre-built batches of ~200-byte MessageAppended payloads."""
    out = []
    for b in range(n_batches):
        evs = []
        for i in range(BATCH):
            content = f"batch {b} message {i}: " + "lorem ipsum dolor sit amet " * 5
            ev = MessageAppended(session_id=f"s{b % 50}", user_id="u", role="user", content=content[:150], sequence=i)
            evs.append(NewEvent.of(ev, tenant="bench"))
        out.append(evs)
    return out


def fresh(path: str) -> str:
    """Remove what an earlier round left at ``path``, and settle the disk before timing.

    The disk here is mounted with ``discard``: freeing a previous round's blocks queues
    TRIMs and journal work that the next fdatasync would otherwise pay inside the timed
    loop, penalising whichever contender happens to run right after a delete.
    """
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)
    os.sync()
    return path


def rate(n: int, seconds: float) -> float:
    """Events per second."""
    return n / seconds if seconds > 0 else float("inf")


def floor_round(d: str, batches: list[list[NewEvent]]) -> float:
    """The disk's floor: the same payload bytes, os.write + fdatasync per batch."""
    blobs = [b"".join(e.payload for e in evs) for evs in batches]
    fd = os.open(fresh(os.path.join(d, "floor.bin")), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    t = time.perf_counter()
    for blob in blobs:
        os.write(fd, blob)
        os.fdatasync(fd)
    el = time.perf_counter() - t
    os.close(fd)
    return rate(len(batches) * BATCH, el)


def arrow_round(d: str, batches: list[list[NewEvent]]) -> float:
    """ArrowLog, one append of 1,000 events per call, fsync always."""
    path = fresh(os.path.join(d, "arrowlog"))
    log = ArrowLog(path, fsync="always")
    t = time.perf_counter()
    for i, evs in enumerate(batches):
        log.append(f"session:bench:s{i}", evs)
    el = time.perf_counter() - t
    log.close()
    return rate(len(batches) * BATCH, el)


def sqlite_log(path: str) -> sqlite3.Connection:
    """A fresh SQLite event table the way a user would set it up: WAL, synchronous=FULL."""
    for suffix in ("-wal", "-shm", ""):
        fresh(path + suffix)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        "CREATE TABLE events (offset INTEGER PRIMARY KEY, event_id BLOB UNIQUE, stream TEXT, "
        "version INTEGER, type TEXT, time INTEGER, tenant TEXT, payload BLOB)"
    )
    con.execute("CREATE UNIQUE INDEX stream_version ON events(stream, version)")
    return con


def sqlite_round(d: str, batches: list[list[NewEvent]]) -> float:
    """SQLite WAL, synchronous=FULL, one transaction per 1,000-row batch."""
    con = sqlite_log(os.path.join(d, "log.sqlite"))
    now = int(time.time() * 1e6)
    rows = [
        [(b * BATCH + i, e.event_id.bytes, f"session:bench:s{b}", i, e.type, now, e.tenant, e.payload) for i, e in enumerate(evs)]
        for b, evs in enumerate(batches)
    ]
    t = time.perf_counter()
    for r in rows:
        con.execute("BEGIN")
        con.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?)", r)
        con.execute("COMMIT")
    el = time.perf_counter() - t
    con.close()
    return rate(len(batches) * BATCH, el)


def concurrent_single(d: str, events: list[NewEvent], threads: int = 16) -> float:
    """16 threads, one event per append call, fsync always: group commit at work."""
    path = fresh(os.path.join(d, "concurrent"))
    log = ArrowLog(path, fsync="always")
    per = len(events) // threads

    def work(k: int) -> None:
        for e in events[k * per : (k + 1) * per]:
            log.append(f"session:bench:t{k}", [e])

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    el = time.perf_counter() - t
    log.close()
    return rate(per * threads, el)


def naive_single(d: str, events: list[NewEvent]) -> float:
    """The naive loop: one appender, one event per append, each append fsynced on its own."""
    path = fresh(os.path.join(d, "naive"))
    log = ArrowLog(path, fsync="always")
    t = time.perf_counter()
    for i, e in enumerate(events):
        log.append(f"session:bench:n{i % 16}", [e])
    el = time.perf_counter() - t
    log.close()
    return rate(len(events), el)


def raw_fsync_single(d: str, events: list[NewEvent]) -> float:
    """The disk's floor for one-at-a-time durability: os.write + fdatasync per event."""
    fd = os.open(fresh(os.path.join(d, "naive.bin")), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    t = time.perf_counter()
    for e in events:
        os.write(fd, e.payload)
        os.fdatasync(fd)
    el = time.perf_counter() - t
    os.close(fd)
    return rate(len(events), el)


def thread_handoff_us(threads: int = 16, laps: int = 500) -> float:
    """What resuming one waiting Python thread costs here: a token passed round a ring of threads.

    Every single-event append in the concurrent round ends by resuming its caller, one at
    a time under the GIL, so this bounds what group commit can save per event.
    """
    gates = [_thread.allocate_lock() for _ in range(threads)]
    for g in gates:
        g.acquire()

    def pass_on(k: int) -> None:
        for _ in range(laps):
            gates[k].acquire()
            gates[(k + 1) % threads].release()

    ts = [threading.Thread(target=pass_on, args=(k,)) for k in range(threads)]
    for th in ts:
        th.start()
    t = time.perf_counter()
    gates[0].release()
    for th in ts:
        th.join()
    return (time.perf_counter() - t) / (threads * laps) * 1e6


def replay(d: str) -> tuple[float, int]:
    """Read the whole log back and decode every payload."""
    log = ArrowLog(os.path.join(d, "arrowlog"), readonly=True)
    t = time.perf_counter()
    n = 0
    for batch in log.read_batches():
        for p in batch.column("payload").to_pylist():
            decode(p)
            n += 1
    el = time.perf_counter() - t
    log.close()
    return rate(n, el), n


def main() -> None:
    """Run every measurement in one process, on one disk, and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller run (under 60 s)")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = ap.parse_args()
    n_batches = 60 if args.quick else 300
    rounds = 3 if args.quick else 5
    single_n = 3200 if args.quick else 16000
    naive_n = 500 if args.quick else 2000
    d = tempfile.mkdtemp(prefix="eidetica-bench-", dir=args.dir)
    try:
        batches = make_batches(n_batches)
        floors, arrows, sqlites = [], [], []
        # Interleave the rounds so a noisy neighbour hits all three alike.
        for r in range(rounds):
            floors.append(floor_round(d, batches))
            arrows.append(arrow_round(d, batches))
            sqlites.append(sqlite_round(d, batches))
            print(f"round {r}: floor {floors[-1]:,.0f}  arrowlog {arrows[-1]:,.0f}  sqlite {sqlites[-1]:,.0f} events/s", flush=True)
        singles = [e for b in make_batches(single_n // BATCH + 1) for e in b][:single_n]
        concs, naives, raws = [], [], []
        for r in range(rounds):  # interleaved too: the ratio compares like with like
            concs.append(concurrent_single(d, singles))
            naives.append(naive_single(d, singles[:naive_n]))
            raws.append(raw_fsync_single(d, singles[:naive_n]))
            print(
                f"round {r}: 16 threads single-event appends {concs[-1]:,.0f}/s; naive loop (append + fsync each) "
                f"{naives[-1]:,.0f}/s; raw os.write + fdatasync per event {raws[-1]:,.0f}/s",
                flush=True,
            )
        conc, naive, raw = statistics.median(concs), statistics.median(naives), statistics.median(raws)
        rep, n = replay(d)
        print(f"replay {n:,} events with payload decode: {rep:,.0f}/s", flush=True)
        result = {
            "events_per_s_batched": round(statistics.median(arrows)),
            "sqlite_events_per_s_batched": round(statistics.median(sqlites)),
            "disk_limit_events_per_s": round(statistics.median(floors)),
            "events_per_s_concurrent_single": round(conc),
            "naive_fsync_events_per_s": round(naive),
            "replay_events_per_s": round(rep),
        }
        result["batched_vs_sqlite"] = round(result["events_per_s_batched"] / result["sqlite_events_per_s_batched"], 2)
        result["batched_vs_disk"] = round(result["events_per_s_batched"] / result["disk_limit_events_per_s"], 2)
        result["concurrent_vs_naive"] = round(conc / naive, 1)
        result["raw_fsync_per_event_per_s"] = round(raw)
        result["thread_handoff_us"] = round(statistics.median(thread_handoff_us() for _ in range(rounds)), 1)
        print(json.dumps(result))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
