"""Opening a store as history grows: open time, RSS after open, first search and first read.

Builds two stores through the log (200 messages per session, 50 users, each message with
its ``ChunksEmbedded`` event carrying a 384-d vector, as the session actor writes them),
projects them once (LanceDB + Tantivy + state, closing writes a state snapshot), then opens
each in fresh processes, with its state snapshot and with the snapshots moved away (a
full replay: the baseline), and measures ``eidetica.open()``, the RSS right after it, the
first ``search`` and the first ``read`` (both include their first-use costs).
Sizes: 100,000 and 1,000,000 messages (``--quick``: 100,000 and 300,000; ``--small`` /
``--large`` override). It also measures what the state fold costs per message in RAM with
message bodies kept in memory (before) and with only the offset index (after).
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

DIM = 384
PER_SESSION = 200
USERS = 50
WORDS = ("alpha beta gamma delta coffee jazz hiking berlin lisbon cats chess yoga piano tea running kyoto pasta "
         "garden train river market violin novel cheese summer winter").split()


def build(path: Path, messages: int) -> float:
    """Write ``messages`` messages (with their chunk vectors) through the log, then project them; returns seconds."""
    from eidetica.events import ArrowLog, ChunksEmbedded, MessageAppended, NewEvent, SessionStarted
    from eidetica.events.streams import session_stream

    t = time.perf_counter()
    rng = np.random.default_rng(0)
    pick = random.Random(0)
    centers = rng.standard_normal((64, DIM)).astype("f4")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    log = ArrowLog(path / "log", fsync="never")
    k = 0
    for s in range(messages // PER_SESSION):
        sid, uid = f"s{s}", f"u{s % USERS}"
        evs = [NewEvent.of(SessionStarted(session_id=sid, user_id=uid), time=t0 + dt.timedelta(seconds=k))]
        chunks = []
        vecs = centers[np.arange(k, k + PER_SESSION) % 64] + 0.3 * rng.standard_normal((PER_SESSION, DIM)).astype("f4")
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        for q in range(PER_SESSION):
            text = " ".join(pick.choice(WORDS) for _ in range(30)) + f" message {k}"
            eid = uuid.UUID(int=pick.getrandbits(128))
            tm = t0 + dt.timedelta(seconds=k)
            meta = {"i": k}
            evs.append(NewEvent.of(MessageAppended(session_id=sid, user_id=uid, role="user" if q % 2 == 0 else "assistant",
                                                   content=text, sequence=q, metadata=meta), event_id=eid, time=tm))
            chunks.append(NewEvent.of(ChunksEmbedded(
                model_id=f"hash-{DIM}", dim=DIM, chunk_ids=[f"{eid.hex}:0"], vectors=vecs[q].astype("<f4").tobytes(),
                texts=[text], source_id=eid.hex, kind="message", user_id=uid, session_id=sid, time=tm,
                metadata=dict(meta, sequence=q, role="user")), time=tm))
            k += 1
        log.append(session_stream("default", sid), evs + chunks)
    log.close()
    # project once, as the store's own process would have while the messages came in
    subprocess.run([sys.executable, __file__, "--child", str(path), "--project"], check=True)
    return time.perf_counter() - t


def child(path: str, project: bool) -> None:
    """In a fresh process: open, measure, print one JSON line, and exit without writing a snapshot."""
    t0 = time.perf_counter()
    import eidetica
    from eidetica.providers import HashEmbedder

    t1, c1 = time.perf_counter(), time.process_time()
    m = eidetica.open(path, embedder=HashEmbedder(DIM))
    t2, c2 = time.perf_counter(), time.process_time()
    rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    if project:
        m.close()  # writes the state snapshot
        return
    snap = m.stats()["snapshot"]
    t3 = time.perf_counter()
    hits = m.search("coffee jazz lisbon", user="u7", top_k=10, min_score=0.0)
    t4 = time.perf_counter()
    msgs = m.session("s7", user="u7").read()
    t5 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "open_cpu_s": c2 - c1, "rss_mib": rss, "first_search_ms": (t4 - t3) * 1e3,
                      "first_read_ms": (t5 - t4) * 1e3, "hits": len(hits), "read": len(msgs),
                      "tail_events": snap["tail_events"], "from_snapshot": snap["age_s"] is not None}), flush=True)
    os._exit(0)  # no close: the next run must find the store as it was


def log_child(path: str) -> None:
    """In a fresh process: open only the store's log read-only (no checkpoint is written), print one JSON line."""
    import resource

    from eidetica.events import ArrowLog

    rss0 = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    c0, t0 = time.process_time(), time.perf_counter()
    log = ArrowLog(Path(path) / "log", readonly=True)
    c1, t1 = time.process_time(), time.perf_counter()
    rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    print(json.dumps({"log_open_cpu_s": c1 - c0, "log_open_s": t1 - t0, "log_rss_mib": rss - rss0, "events": log.head(),
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
    os._exit(0)


def child_open(flag: str, path: Path, aside: Path | None) -> dict:
    """Run this script's ``flag`` child on ``path`` in a fresh process, with ``aside`` (if given) moved away meanwhile."""
    moved = aside.with_name(aside.name + ".aside") if aside is not None else None
    if moved is not None:
        os.replace(aside, moved)
    try:
        out = subprocess.run([sys.executable, __file__, flag, str(path)], check=True, capture_output=True, text=True)
    finally:
        if moved is not None:
            os.replace(moved, aside)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_log(path: Path, checkpoint: bool) -> dict:
    """The log's own open in a fresh process, with its recovery checkpoint or with it moved away (a full scan)."""
    return child_open("--log-child", path, None if checkpoint else path / "log" / "p000" / "recovery.ckpt")


def log_opens(paths: dict[str, Path]) -> dict:
    """Median log open CPU seconds and the RSS it adds, per store, with and without the checkpoint."""
    out: dict = {}
    for label, path in paths.items():
        for mode, ck in (("", True), ("_full_scan", False)):
            runs = [measure_log(path, ck) for _ in range(2)]
            out[f"log_open_cpu_s_{label}{mode}"] = round(float(np.median([r["log_open_cpu_s"] for r in runs])), 3)
            out[f"log_rss_mib_{label}{mode}"] = round(float(np.median([r["log_rss_mib"] for r in runs])), 1)
        out[f"log_events_{label}"] = runs[0]["events"]
    return out


def measure(path: Path, snapshots: bool) -> dict:
    """One fresh-process open of a store, with its snapshot or with the snapshots moved away."""
    return child_open("--child", path, None if snapshots else path / "snapshots")


def ram_per_message(path: Path, messages: int) -> dict:
    """Bytes per message of the state fold: with bodies in memory (no log to read them from) vs the offset index."""
    import tracemalloc

    from eidetica.events import ArrowLog
    from eidetica.projections import Projector, StateProjection

    log = ArrowLog(path / "log", readonly=True)
    out = {}
    try:
        for name, st_log in (("with_bodies", None), ("offset_index", log)):
            tracemalloc.start()
            st = StateProjection(log=st_log)
            Projector(log, [st]).catch_up()
            used = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            out[name] = round(used / messages, 1)
            del st
    finally:
        log.close()
    return out


def actor_folds(root: Path, lengths: tuple[int, ...]) -> dict:
    """CPU ms of an actor's first use (it folds its own stream) by stream length, in a store beside the big ones.

    A SessionActor replays its session's stream and a FactCurator its user's facts stream
    on first use (never at open): this shows what that costs as one stream grows, with the
    rest of the log held fixed.
    """
    import eidetica
    from eidetica.events import ArrowLog, ChunksEmbedded, FactAsserted, MessageAppended, NewEvent, SessionStarted
    from eidetica.events.streams import facts_stream, session_stream
    from eidetica.providers import HashEmbedder

    path = root / "actors"
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(1)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    log = ArrowLog(path / "log", fsync="never")
    for n in lengths:
        sid, uid = f"long{n}", f"u{n}"
        log.append(session_stream("default", sid), [NewEvent.of(SessionStarted(session_id=sid, user_id=uid), time=t0)])
        for lo in range(0, n, 200):
            evs, chunks = [], []
            vecs = rng.standard_normal((200, DIM)).astype("<f4")
            for q in range(lo, min(lo + 200, n)):
                eid, text = uuid.uuid4(), f"message {q} of session {sid} " + " ".join(WORDS[(q + j) % len(WORDS)] for j in range(20))
                evs.append(NewEvent.of(MessageAppended(session_id=sid, user_id=uid, role="user", content=text, sequence=q),
                                       event_id=eid, time=t0))
                chunks.append(NewEvent.of(ChunksEmbedded(
                    model_id=f"hash-{DIM}", dim=DIM, chunk_ids=[f"{eid.hex}:0"], vectors=vecs[q - lo].tobytes(), texts=[text],
                    source_id=eid.hex, kind="message", user_id=uid, session_id=sid, time=t0), time=t0))
            log.append(session_stream("default", sid), evs + chunks)
        facts = []
        for q in range(n):
            fid = f"fact-{uid}-{q}"
            facts.append(NewEvent.of(FactAsserted(fact_id=fid, user_id=uid, content=f"fact {q}: likes {WORDS[q % len(WORDS)]}"), time=t0))
            facts.append(NewEvent.of(ChunksEmbedded(
                model_id=f"hash-{DIM}", dim=DIM, chunk_ids=[fid], vectors=rng.standard_normal(DIM).astype("<f4").tobytes(),
                texts=[f"fact {q}"], source_id=fid, kind="fact", user_id=uid, time=t0), time=t0))
        for lo in range(0, len(facts), 400):
            log.append(facts_stream("default", uid), facts[lo : lo + 400])
    log.close()
    from eidetica.actors import MemoryConfig

    out: dict = {}
    # three opens: a full replay with actor snapshots off (what every first use cost before), the
    # same replay writing the actor's snapshot (paid once), then a first use from that snapshot
    for suffix, every in (("", 10**9), ("_writing", 1_000), ("_snapshot", 1_000)):
        with eidetica.open(path, embedder=HashEmbedder(DIM), config=MemoryConfig(actor_snapshot_events=every)) as m:
            for kind in ("session_actor", "curator"):
                out.setdefault(f"{kind}_cpu_ms{suffix}", {})
            for n in lengths:
                c = time.process_time()
                m.runtime.session("default", f"long{n}", f"u{n}")
                out[f"session_actor_cpu_ms{suffix}"][str(n)] = round((time.process_time() - c) * 1e3, 1)
                c = time.process_time()
                m.runtime.curator("default", f"u{n}")
                out[f"curator_cpu_ms{suffix}"][str(n)] = round((time.process_time() - c) * 1e3, 1)
    shutil.rmtree(path, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 and 300,000 messages")
    ap.add_argument("--small", type=int, default=None)
    ap.add_argument("--large", type=int, default=None)
    ap.add_argument("--runs", type=int, default=2, help="fresh-process opens per store and mode (median)")
    ap.add_argument("--keep", default=None, help="build (or reuse) the stores under this directory")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--project", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--actors-only", action="store_true", help="only the actors' first-use fold costs")
    ap.add_argument("--log-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--log-only", nargs="+", default=None, metavar="STORE", help="only the log's own open, on built stores")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.project)
        return
    if a.log_child:
        log_child(a.log_child)
        return
    if a.log_only:
        print(json.dumps({"bench": "open_log", **log_opens({Path(p).name: Path(p) for p in a.log_only}),
                          "loadavg_1m": round(os.getloadavg()[0], 1)}))
        return
    if a.actors_only:
        print(json.dumps({"bench": "open_actors", **actor_folds(Path(tempfile.mkdtemp(prefix="bench-open-")), (200, 2000, 20000))}))
        return
    small = a.small or 100_000
    large = a.large or (300_000 if a.quick else 1_000_000)
    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-open-"))
    result: dict = {"bench": "open", "messages_small": small, "messages_large": large}
    try:
        for label, n in (("small", small), ("large", large)):
            path = root / f"store-{n}"
            for moved in (path / "snapshots.aside", path / "log" / "p000" / "recovery.ckpt.aside"):  # an interrupted run's
                if moved.exists():
                    os.replace(moved, moved.with_name(moved.name.removesuffix(".aside")))
            if not (path / "snapshots").is_dir():
                shutil.rmtree(path, ignore_errors=True)
                took = build(path, n)
                print(f"built {n:,} messages in {took:.0f} s", flush=True)
            result[f"log_mib_{label}"] = round(sum(f.stat().st_size for f in (path / "log").rglob("*") if f.is_file()) / 2**20)
            for mode, snap in (("", True), ("_replay", False)):
                runs = [measure(path, snap) for _ in range(a.runs)]
                print(label, mode or "_snapshot", runs, flush=True)
                med = lambda key: float(np.median([r[key] for r in runs]))  # noqa: E731, B023 (used within the iteration)
                result[f"open_s_{label}{mode}"] = round(med("open_s"), 3)
                result[f"open_cpu_s_{label}{mode}"] = round(med("open_cpu_s"), 3)  # holds under load
                result[f"rss_mib_{label}{mode}"] = round(med("rss_mib"), 1)
                result[f"first_search_ms_{label}{mode}"] = round(med("first_search_ms"), 1)
                result[f"first_read_ms_{label}{mode}"] = round(med("first_read_ms"), 1)
            result[f"import_s_{label}"] = round(float(np.median([r["import_s"] for r in runs])), 3)
        result["state_bytes_per_message"] = ram_per_message(root / f"store-{small}", small)
        result.update(log_opens({"small": root / f"store-{small}", "large": root / f"store-{large}"}))
        result["actor_first_use"] = actor_folds(root, (200, 2000) if a.quick else (200, 2000, 20000))
        result["open_ratio_large_vs_small"] = round(result["open_s_large"] / result["open_s_small"], 2)
        result["open_cpu_ratio_large_vs_small"] = round(result["open_cpu_s_large"] / result["open_cpu_s_small"], 2)
        result["loadavg_1m"] = round(os.getloadavg()[0], 1)
        result["targets"] = {"ratio<=1.5": result["open_ratio_large_vs_small"] <= 1.5,
                             "open_s_large<=2": result["open_s_large"] <= 2.0,
                             "rss_mib_large<=300": result["rss_mib_large"] <= 300}
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
