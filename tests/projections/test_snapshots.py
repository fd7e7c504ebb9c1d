"""State snapshots: a start from a snapshot plus the tail answers exactly as a full replay;
a damaged, stale-format or half-written snapshot is refused with a warning and the log wins."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.errors import InvalidInput, NotFound
from eidetica.events import ArrowLog
from eidetica.projections import Projector, StateProjection
from eidetica.projections._snapshot import SnapshotWarning
from eidetica.providers import HashEmbedder

CFG = MemoryConfig(window=4, token_budget=150, retain_recent=2)
USERS = ("ann", "bob", "cyd")


def open_store(path: Path) -> eidetica.Memory:
    return eidetica.open(path, embedder=HashEmbedder(dim=32), config=CFG)


def reads(state: StateProjection, log: ArrowLog) -> dict:
    """Every read the state answers: sessions with message bodies, summaries, facts, notes, schedules, names."""
    out = state.snapshot()
    out["names"] = {s.session_id: sorted(state.names("default", s.session_id))
                    for s in state.sessions("default", include_forgotten=True)}
    out["labels"] = {s.session_id: state.labels("default", s.session_id)
                     for s in state.sessions("default", include_forgotten=True)}
    out["participants"] = {u: [sorted(x) for x in state.participants("default", u)] for u in USERS}
    out["embedder"] = state.embedder()
    return out


def full_replay(path: Path) -> dict:
    """What a start without any snapshot folds from the whole log."""
    log = ArrowLog(path / "log", readonly=True)
    try:
        st = StateProjection(log=log)
        Projector(log, [st]).catch_up()
        return reads(st, log)
    finally:
        log.close()


def from_snapshot(path: Path) -> tuple[dict, dict]:
    """What a start from the newest snapshot plus the tail folds, and the snapshot it used."""
    log = ArrowLog(path / "log", readonly=True)
    try:
        st = StateProjection(log=log, snapshots=path / "snapshots")
        info = st.snapshot_info()
        Projector(log, [st]).catch_up()
        return reads(st, log), info
    finally:
        log.close()


def random_history(m: eidetica.Memory, rng: random.Random, steps: int, path: Path) -> eidetica.Memory:
    """Random appends, facts, supersedes, notes, schedules, summaries, forgets, snapshots, reopens, a compact."""
    facts: dict[str, list[str]] = {u: [] for u in USERS}
    notes: dict[str, list[str]] = {u: [] for u in USERS}
    scheds: dict[str, list[str]] = {u: [] for u in USERS}
    compacted = False
    for i in range(steps):
        u = rng.choice(USERS)
        sid = f"{u}-s{rng.randrange(2)}"
        op = rng.random()
        try:
            if op < 0.35:
                meta = {"name": rng.choice(["Ann", "Bob", "Cyd"])} if rng.random() < 0.5 else {}
                # some unnamed messages carry a "Name: " speaker label (folded into the state)
                label = f"{rng.choice(['Ann', 'Bob', 'Cyd'])}: " if not meta and rng.random() < 0.6 else ""
                m.session(sid, user=u).append(rng.choice(["user", "assistant"]),
                                              label + f"message {i} of {sid} " * rng.randint(1, 8), meta)
            elif op < 0.45:
                subject = rng.choice(["tea", "jazz", "Lisbon"])
                facts[u].append(m.remember(f"{u} likes {subject}" if rng.random() < 0.5 else f"{u} fact {i} on {subject}", user=u))
            elif op < 0.5 and facts[u]:
                m.forget(facts[u].pop(rng.randrange(len(facts[u]))), user=u)
            elif op < 0.57:
                notes[u].append(m.store_note(f"note {i} for {u}", user=u))
            elif op < 0.6 and notes[u]:
                m.delete_note(notes[u].pop(), user=u)
            elif op < 0.66:
                s = m.schedules.create(f"job {i}", "interval", 3600, user=u, payload={"i": i})
                scheds[u].append(s.id)
            elif op < 0.7 and scheds[u]:
                x = rng.choice(scheds[u])
                if rng.random() < 0.5:
                    m.schedules.record_run(x, {"status": "ok", "result": f"run {i}"}, user=u)
                else:
                    m.schedules.update(x, user=u, name=f"renamed {i}")
            elif op < 0.76:
                m.session(sid, user=u).summarize(force=True)
            elif op < 0.79:
                m.forget_session(sid)
            elif op < 0.81:
                m.forget_user(u)
                facts[u], notes[u], scheds[u] = [], [], []
            elif op < 0.84:  # framework store items: puts (some with a TTL) and deletes
                key = f"k{rng.randrange(3)}"
                value = None if rng.random() < 0.3 else {"text": f"item {i} of {u}", "n": i}
                m.items.put([{"namespace": ("mem", u), "key": key, "value": value, "user": u,
                              "texts": [f"item {i} of {u}"] if value else None,
                              "ttl": 5.0 if rng.random() < 0.3 else None}])
            elif op < 0.86:
                m.session(sid, user=u).pop()  # a retracted message
            elif op < 0.9:
                m.snapshot()
            elif op < 0.96:
                m.close()
                m = open_store(path)
            elif not compacted:
                m.compact()
                compacted = True
        except (InvalidInput, NotFound):
            pass  # a forget of something already gone: fine, the history goes on
    return m


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_reopen_after_a_snapshot_answers_as_a_full_replay(tmp_path, seed) -> None:
    path = tmp_path / "store"
    rng = random.Random(seed)
    m = open_store(path)
    m = random_history(m, rng, 60, path)
    m.snapshot()
    m = random_history(m, rng, 25, path)  # a tail after the last snapshot
    m.projector.catch_up()  # the last step may be a write that no read has caught up with yet
    live = reads(m.state, m.log)
    m.close()
    expected = full_replay(path)
    got, info = from_snapshot(path)
    assert info["created"] is not None and sum(info["checkpoint"].values()) > 0  # a snapshot was used
    assert got == expected
    assert live == expected
    with open_store(path) as m2:  # and through the facade
        assert reads(m2.state, m2.log) == expected


def test_snapshot_is_plain_arrow_and_holds_no_message_bodies(tmp_path) -> None:
    path = tmp_path / "store"
    with open_store(path) as m:
        s = m.session("s1", user="ann")
        for i in range(5):
            s.append("user", f"BODY-{i} stays in the log only")
        m.remember("ann likes tea", user="ann")
        where = Path(m.snapshot())
        st = m.stats()["snapshot"]
        assert st["tail_events"] == 0 and st["age_s"] is not None
        s.append("user", "one more")
        assert m.stats()["snapshot"]["tail_events"] > 0
    manifest = json.loads((where / "manifest.json").read_text())
    assert manifest["schema_version"] == StateProjection.SCHEMA_VERSION
    sessions = pa.ipc.open_file(str(where / "sessions.arrow")).read_all().to_pylist()
    assert [len(r["offsets"]) for r in sessions] == [5] and sessions[0]["sequences"] == [0, 1, 2, 3, 4]
    facts = pa.ipc.open_file(str(where / "facts.arrow")).read_all().to_pylist()
    assert [f["content"] for f in facts] == ["ann likes tea"]
    for f in where.iterdir():
        assert b"BODY-" not in f.read_bytes(), f


def test_a_snapshot_is_written_after_snapshot_events_and_bad_settings_are_refused(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), config=MemoryConfig(snapshot_events=20)) as m:
        s = m.session("s", user="ann")
        s.append("user", "first")
        assert m.stats()["snapshot"]["age_s"] is None  # below the threshold: none yet
        for i in range(12):  # each message is two events (message + its chunk)
            s.append("user", f"message {i}")
        m.list_sessions()  # the projector's housekeeping runs after it applied the new events
        snap = m.stats()["snapshot"]
        assert snap["age_s"] is not None and snap["tail_events"] < 20
    for bad in ({"snapshot_events": 0}, {"snapshot_seconds": -1}, {"snapshot_seconds": True}):
        with pytest.raises(InvalidInput) as e:
            MemoryConfig(**bad)
        assert e.value.field == next(iter(bad))


def _store_with_snapshot(path: Path) -> Path:
    with open_store(path) as m:
        for i in range(6):
            m.session("s", user="ann").append("user", f"message {i}")
        m.remember("ann likes jazz", user="ann")
        where = Path(m.snapshot())
        m.session("s", user="ann").append("user", "after the snapshot")
    return where


def _opens_from_the_log(path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, info = from_snapshot(path)
    assert any(issubclass(w.category, SnapshotWarning) for w in caught), [str(w.message) for w in caught]
    assert info["created"] is None  # refused: nothing was loaded
    assert got == full_replay(path)
    with pytest.warns(SnapshotWarning), open_store(path) as m:
        assert [x.content for x in m.state.messages("default", "s")][-1] == "after the snapshot"


def test_a_flipped_byte_is_refused_with_a_warning(tmp_path) -> None:
    path = tmp_path / "store"
    where = _store_with_snapshot(path)
    f = where / "sessions.arrow"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    _opens_from_the_log(path)


def _rewrite_manifest(where: Path, change: dict, *, reseal: bool = True) -> None:
    """Change manifest fields; ``reseal`` recomputes its checksum (as an older writer would have)."""
    from eidetica.projections._snapshot import _digest

    manifest = dict(json.loads((where / "manifest.json").read_text()), **change)
    if reseal:
        manifest["sha256"] = _digest(manifest)
    (where / "manifest.json").write_text(json.dumps(manifest))


def test_an_older_format_is_refused_with_a_warning(tmp_path) -> None:
    path = tmp_path / "store"
    where = _store_with_snapshot(path)
    _rewrite_manifest(where, {"schema_version": StateProjection.SCHEMA_VERSION - 1})
    _opens_from_the_log(path)


def test_a_checkpoint_beyond_the_log_is_refused(tmp_path) -> None:
    path = tmp_path / "store"
    where = _store_with_snapshot(path)
    ck = json.loads((where / "manifest.json").read_text())["checkpoint"]
    _rewrite_manifest(where, {"checkpoint": {k: v + 1000 for k, v in ck.items()}})
    _opens_from_the_log(path)


def test_a_changed_manifest_is_refused(tmp_path) -> None:
    path = tmp_path / "store"
    where = _store_with_snapshot(path)
    ck = json.loads((where / "manifest.json").read_text())["checkpoint"]
    _rewrite_manifest(where, {"checkpoint": {k: v - 1 for k, v in ck.items()}}, reseal=False)
    _opens_from_the_log(path)


CHILD = """
import os, signal, sys
import eidetica
from eidetica.actors import MemoryConfig
from eidetica.projections import _snapshot
from eidetica.providers import HashEmbedder

path, where = sys.argv[1], sys.argv[2]
m = eidetica.open(path, embedder=HashEmbedder(dim=32), config=MemoryConfig(window=4, token_budget=150, retain_recent=2))
for i in range(5):
    m.session("s", user="ann").append("user", f"first {i}")
m.remember("ann likes tea", user="ann")
m.snapshot()  # the previous, good snapshot
for i in range(5):
    m.session("s", user="ann").append("user", f"second {i}")
m.remember("ann likes jazz", user="ann")
print("ACKED", flush=True)
real_open, real_replace = open, os.replace
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
if where == "table":  # killed half way through writing a table file
    class Half:
        def __init__(self, f): self.f = f
        def write(self, data): self.f.write(bytes(data)[: len(data) // 2]); self.f.flush(); die()
        def __enter__(self): return self
        def __exit__(self, *a): self.f.close()
        def __getattr__(self, n): return getattr(self.f, n)
    _snapshot.open = lambda p, mode="r", *a, **k: Half(real_open(p, mode, *a, **k)) if "w" in mode else real_open(p, mode, *a, **k)
else:  # killed after every file is written, before the rename (its first directory fsync)
    _snapshot.fsync_dir = die
m.snapshot()
print("NOT KILLED", flush=True)
"""


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("where", ["table", "rename"])
def test_sigkill_while_a_snapshot_is_written_loses_nothing(tmp_path, where) -> None:
    path = tmp_path / "store"
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), where], capture_output=True, text=True, timeout=300)
    assert out.returncode == -9 and "ACKED" in out.stdout and "NOT KILLED" not in out.stdout, out.stderr
    assert any(p.name.startswith(".tmp-") for p in (path / "snapshots").iterdir())  # the kill left a half snapshot
    got, info = from_snapshot(path)
    assert info["created"] is not None  # the previous snapshot, not the half-written one
    assert got == full_replay(path)
    with open_store(path) as m:
        assert [x.content for x in m.state.messages("default", "s")] == [f"first {i}" for i in range(5)] + [f"second {i}" for i in range(5)]
        assert sorted(f.content for f in m.state.facts("default", "ann")) == ["ann likes jazz", "ann likes tea"]
        m.snapshot()  # the next snapshot clears the leftovers
    assert not any(p.name.startswith(".tmp-") for p in (path / "snapshots").iterdir())


LANCE_NOISE = """
import sys, tempfile
import numpy as np, pyarrow as pa
from eidetica.projections._lance import LanceChunks
LanceChunks(tempfile.mkdtemp(), 8)  # the store's first LanceDB use, as in eidetica.open()
import lancedb
from lancedb.index import IvfFlat
rng = np.random.default_rng(0)
centers = rng.standard_normal((50, 32)).astype("f4")
def rows(n, off):
    v = centers[rng.integers(0, 50, n)] + 0.2 * rng.standard_normal((n, 32)).astype("f4")
    return pa.table({"id": np.arange(off, off + n), "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 32)})
t = lancedb.connect(tempfile.mkdtemp()).create_table("t", rows(4000, 0))
t.create_index("vector", config=IvfFlat(distance_type="cosine", target_partition_size=100))
for i in range(3):  # growth: optimize() splits IVF partitions (and k-means warns about empty clusters)
    t.add(rows(3000, 4000 + 3000 * i))
    t.optimize()
    t.search(rng.standard_normal(32).astype("f4")).limit(10).to_list()
print("DONE")
"""


@pytest.mark.slow
def test_lancedb_warnings_stay_out_of_the_users_terminal(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LANCEDB_LOG"}
    out = subprocess.run([sys.executable, "-c", LANCE_NOISE], capture_output=True, text=True, timeout=300, env=env)
    assert out.stdout.strip() == "DONE", out.stderr
    assert "WARN" not in out.stderr, out.stderr[:2000]
