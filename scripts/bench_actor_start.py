"""A user's first write after a reopen, as that user's history grows: notes, items, schedules.

Builds one store per size with one user holding N notes (``store_note``), N items (LangGraph
store items with a text to index, ``m.items.put`` in batches) and N schedules (interval
cadence), all through the real API (HashEmbedder, 384-d: every note and item carries its
``ChunksEmbedded`` vectors in the log), closes it (the actors save their snapshots there),
then in fresh processes reopens it and times the first ``store_note``, the first item put
and the first ``schedules.create`` of that user: each builds the user's actor, from its
snapshot plus the stream's tail, or (the baseline, the actor snapshots moved away and
snapshots off) by replaying the user's whole stream. The process's first search and first
append (a new log segment) are paid before the clock starts, and what the open built is frozen
out of the cyclic GC's view (``gc.freeze``): neither is the actor's. Each run reopens a fresh
copy of the built store.
A second user holds 10 schedules with N runs between them (``record_run``): how a schedules
stream usually grows (``schedule_runs_*``: the first ``schedules.create`` of that user).
Sizes: 1,000 and 20,000 (``--quick``: 1,000 and 5,000). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
USER = "ada"
OPS = "ops"  # 10 schedules, N runs
WORDS = ("alpha beta gamma delta coffee jazz hiking berlin lisbon cats chess yoga piano tea running kyoto pasta "
         "garden train river market violin novel cheese summer winter").split()
KINDS = ("note", "item", "schedule", "schedule_runs")


def _text(i: int) -> str:
    return f"note {i}: " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12))


def build(path: Path, n: int) -> float:
    """One user with ``n`` notes, ``n`` items and ``n`` schedules, written through the API; returns seconds."""
    import eidetica
    from eidetica.actors import MemoryConfig
    from eidetica.providers import HashEmbedder

    t = time.perf_counter()
    with eidetica.open(path, embedder=HashEmbedder(DIM), fsync="never", config=MemoryConfig(min_interval_seconds=60)) as m:
        for i in range(n):
            m.store_note(_text(i), user=USER)
        for lo in range(0, n, 500):
            m.items.put([{"namespace": ("docs", USER), "key": f"k{i}", "value": {"text": _text(i)}, "texts": [_text(i)],
                          "user": USER} for i in range(lo, min(lo + 500, n))])
        for i in range(n):
            m.schedules.create(f"job {i}", "interval", 3600 + i, user=USER)
        jobs = [m.schedules.create(f"ops job {i}", "interval", 3600, user=OPS).schedule_id for i in range(10)]
        for i in range(n):
            m.schedules.record_run(jobs[i % 10], {"status": "ok" if i % 7 else "error", "output": f"run {i}"}, user=OPS)
        m.search("coffee", user=USER)  # the views catch up here, and closing writes the state snapshot
    return time.perf_counter() - t


def child(path: str, snapshots: bool) -> None:
    """In a fresh process: open, time each kind's first write (and a second one), print one JSON line, exit without close."""
    import eidetica
    from eidetica.actors import MemoryConfig
    from eidetica.providers import HashEmbedder

    # the baseline neither reads nor writes actor snapshots: what every first write cost before them
    # no housekeeping thread: its checkpoints would land in the measured CPU at random
    config = MemoryConfig(min_interval_seconds=60, housekeeping_seconds=0,
                          **({} if snapshots else {"actor_snapshot_events": 10**9}))
    m = eidetica.open(path, embedder=HashEmbedder(DIM), config=config)
    m.search("warm", user="nobody")  # the facade's own first-use costs, paid before the clock starts
    # and the log's first append to each partition after a reopen (a new segment file): not the actor's
    from eidetica.events.streams import items_stream, notes_stream, schedules_stream

    parts = {m.log.partition_of(f(m.tenant, u)) for f in (notes_stream, items_stream, schedules_stream) for u in (USER, OPS)}
    for i in range(10_000):
        if not parts:
            break
        if m.log.partition_of(notes_stream(m.tenant, f"warm{i}")) in parts:
            parts.discard(m.log.partition_of(notes_stream(m.tenant, f"warm{i}")))
            m.store_note("warm", user=f"warm{i}")
    # what the open built (the read model: larger in the larger store) leaves the collector's view: a
    # full collection walking it would land in a few-ms write at random (seen: +4-5 ms in some runs)
    gc.collect()
    gc.freeze()
    writes = {
        "note": lambda k: m.store_note(f"a new note {k}", user=USER),
        "item": lambda k: m.items.put([{"namespace": ("docs", USER), "key": f"new{k}", "value": {"t": k},
                                        "texts": [f"a new item {k}"], "user": USER}]),
        "schedule": lambda k: m.schedules.create(f"new job {k}", "interval", 7200, user=USER),
        "schedule_runs": lambda k: m.schedules.create(f"new ops job {k}", "interval", 7200, user=OPS),
    }
    out: dict = {}
    for kind, write in writes.items():
        for k, label in ((0, "first"), (1, "second")):
            t, c = time.perf_counter(), time.thread_time()  # this thread's CPU: the actor is built in it
            write(k)
            out[f"{kind}_{label}_ms"] = (time.perf_counter() - t) * 1e3
            out[f"{kind}_{label}_cpu_ms"] = (time.thread_time() - c) * 1e3
    actors = {"note": m.runtime.notes(m.tenant, USER), "item": m.runtime.items(m.tenant, USER),
              "schedule": m.runtime.schedules(m.tenant, USER), "schedule_runs": m.runtime.schedules(m.tenant, OPS)}
    for kind, a in actors.items():
        out[f"{kind}_replayed"] = getattr(a, "replayed", None)  # events the start folded (None: not reported)
    if snapshots:  # the actor's start alone, repeated in this (warm) process: what grows with history, if anything
        from eidetica.actors.runtime import make_actor

        for kind, actor_kind, user in (("note", "notes", USER), ("item", "items", USER), ("schedule", "schedules", USER),
                                       ("schedule_runs", "schedules", OPS)):
            took = []
            for _ in range(7):
                c = time.thread_time()
                make_actor(actor_kind, m.log, (m.tenant, user), m.embedder, m.llm, m.config, m.clock, None, m.actor_snapshots)
                took.append((time.thread_time() - c) * 1e3)
            out[f"{kind}_build_cpu_ms"] = float(np.median(took))
    m._sync()  # the items' vectors, written behind the put
    print(json.dumps(out), flush=True)
    os._exit(0)  # no close (the copy is thrown away)


def measure(path: Path, snapshots: bool) -> dict:
    """One fresh-process reopen of a copy of the store (every run finds it as built), with or without its actor snapshots."""
    copy = path.with_name(path.name + ".run")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    os.sync()  # the copy's dirty pages are not the child's first fsync's to write back
    try:
        if not snapshots:
            shutil.rmtree(copy / "snapshots" / "actors", ignore_errors=True)
        out = subprocess.run([sys.executable, __file__, "--child", str(copy)] + ([] if snapshots else ["--replay"]),
                             check=True, capture_output=True, text=True)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 and 5,000 per kind")
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--large", type=int, default=None)
    ap.add_argument("--runs", type=int, default=5, help="fresh-process reopens per store and mode (median)")
    ap.add_argument("--keep", default=None, help="build (or reuse) the stores under this directory")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, not a.replay)
        return
    small, large = a.small, a.large or (5_000 if a.quick else 20_000)
    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-actor-start-"))
    result: dict = {"bench": "actor_start", "per_kind_small": small, "per_kind_large": large}
    try:
        for label, n in (("small", small), ("large", large)):
            path = root / f"user-{n}"
            if not (path / "built").exists():
                shutil.rmtree(path, ignore_errors=True)
                took = build(path, n)
                (path / "built").write_text(str(n))
                print(f"built {n:,} notes, items, schedules and runs in {took:.0f} s", flush=True)
            for mode, snap in (("", True), ("_replay", False)):
                runs = [measure(path, snap) for _ in range(a.runs)]
                print(label, mode or "_snapshot", runs, flush=True)
                for kind in KINDS:
                    for key in (f"{kind}_first_ms", f"{kind}_first_cpu_ms", f"{kind}_second_ms"):
                        result[f"{key}_{label}{mode}"] = round(float(np.median([r[key] for r in runs])), 2)
                    result[f"{kind}_replayed_{label}{mode}"] = runs[0][f"{kind}_replayed"]
                    if not mode:
                        result[f"{kind}_build_cpu_ms_{label}"] = round(float(np.median([r[f"{kind}_build_cpu_ms"] for r in runs])), 2)
        for kind in KINDS:
            for mode in ("", "_replay"):
                for unit in ("ms", "cpu_ms"):
                    result[f"{kind}_first_{unit}_ratio{mode}"] = round(
                        result[f"{kind}_first_{unit}_large{mode}"] / result[f"{kind}_first_{unit}_small{mode}"], 2)
            result[f"{kind}_build_cpu_ms_ratio"] = round(result[f"{kind}_build_cpu_ms_large"] / result[f"{kind}_build_cpu_ms_small"], 2)
        result["loadavg_1m"] = round(os.getloadavg()[0], 1)
        result["targets"] = {f"{kind}_ratio<=1.5": result[f"{kind}_first_cpu_ms_ratio"] <= 1.5 for kind in KINDS}
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
