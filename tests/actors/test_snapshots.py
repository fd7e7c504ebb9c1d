"""Actors built from their snapshot plus the stream's tail behave exactly as ones built by full replay.

Real parts: an ArrowLog on disk, the store's actor snapshots (Arrow IPC), the offline
summariser; histories are randomised (appends with repeated content, retractions, summaries,
session forgets; remembers that reinforce and supersede, deletes, the cap's pruning, decay,
user forgets) and the two folds are compared field by field after every few operations.
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import eidetica
from eidetica.actors import ActorSnapshots, MemoryConfig
from eidetica.actors.curator import FactCurator
from eidetica.actors.session import SessionActor
from eidetica.events.streams import session_stream
from eidetica.projections._snapshot import SnapshotWarning
from eidetica.providers import HashEmbedder, OfflineLLM
from tests.support.clock import Clock
from tests.support.words import WORDS

TICK = dt.timedelta(seconds=1)  # every reading of the clock is a second later

def session_fold(a: SessionActor) -> dict:
    """Everything a session actor decides with."""
    return {"messages": [(m.role, m.content, m.time, m.sequence, m.metadata) for m in a.messages],
            "hashes": dict(a.hashes), "ids": dict(a.message_ids), "eids": dict(a.message_eids),
            "last": a.last_sequence, "owner": a.owner, "started": a.started, "version": a.version,
            "summary": a.summary(), "needs_summary": a.needs_summary(), "read": _msgs(a.read()), "restore": _msgs(a.restore())}


def _msgs(msgs: list) -> list:
    # the summary's system message is stamped with the clock's now, not a stored time
    return [(m.role, m.content, m.sequence, m.metadata, None if m.metadata.get("summary") else m.time) for m in msgs]


def curator_fold(c: FactCurator) -> dict:
    """Everything a curator decides with, and what it answers."""
    facts = {k: (f.content, f.category, f.confidence, f.status, f.created, f.reinforced, f.decayed, f.superseded_by,
                 f.sources, None if f.vector is None else f.vector.tobytes()) for k, f in c.facts.items()}
    vs = c._vectors
    q = np.random.default_rng(0).standard_normal(c.embedder.dim).astype(np.float32)
    return {"facts": facts, "extracted": set(c.extracted), "requests": dict(c.requests), "active": set(c._active),
            "order": dict(c._order), "rows": list(vs.keys), "free": list(vs.free),
            "mat": vs.mat[: vs.used].tobytes(), "version": c.version, "nearest": vs.best_above(q, float("-inf")),
            "weakest": [f.fact_id for f in c._weakest(3)], "listed": [f.fact_id for f in c.active()]}


def _store(tmp_path: Path, every: int) -> eidetica.Memory:
    config = MemoryConfig(actor_snapshot_events=every, max_memories=12, window=4, token_budget=120)
    return eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=Clock(tick=TICK), config=config)


def _fresh(m: eidetica.Memory, kind: str, ident: str, snapshots: ActorSnapshots | None):
    if kind == "session":
        return SessionActor(m.log, m.tenant, ident, "u", m.embedder, m.config, m.clock, snapshots)
    return FactCurator(m.log, m.tenant, ident, m.embedder, OfflineLLM(), m.config, m.clock, snapshots)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_session_actor_from_snapshot_equals_full_replay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    with _store(tmp_path, every=rng.choice([3, 7, 20])) as m:
        snaps = m.actor_snapshots
        s = m.session("s1", user="u")
        for step in range(60):
            op = rng.random()
            if op < 0.7:
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
                s.append(rng.choice(["user", "assistant"]), text, {"k": step} if rng.random() < 0.3 else None)
            elif op < 0.8:
                m.runtime.session(m.tenant, "s1", "u").retract_last()
            elif op < 0.9:
                m.runtime.summarizer().summarize(m.runtime.session(m.tenant, "s1", "u"), force=True)
            elif op < 0.93:
                s.forget()
            else:  # the runtime's actor saves its fold (as at close), a fresh one starts from it
                m.runtime.save_snapshots()
            if step % 5 == 4:
                m.runtime.session(m.tenant, "s1", "u").save_snapshot(force=rng.random() < 0.5)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # a valid snapshot is never refused
                    from_snap = _fresh(m, "session", "s1", snaps)
                replayed = _fresh(m, "session", "s1", None)
                assert session_fold(from_snap) == session_fold(replayed)
        assert list((snaps.dir / "session").rglob("manifest.json")), "no session snapshot was ever written"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_curator_from_snapshot_equals_full_replay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    with _store(tmp_path, every=rng.choice([3, 7, 20])) as m:
        snaps = m.actor_snapshots
        for step in range(60):
            c = m.runtime.curator(m.tenant, "u")
            op = rng.random()
            if op < 0.55:
                # few words: near-duplicates reinforce, "not" contradicts (supersedes)
                text = " ".join(rng.choice(WORDS[:5]) for _ in range(rng.randint(2, 4)))
                c.remember(text + (" not" if rng.random() < 0.2 else ""), rng.choice(["general", "food"]),
                           request_id=f"r{rng.randint(0, 80)}" if rng.random() < 0.3 else "")
            elif op < 0.65:
                c.remember_many([f"batch {rng.choice(WORDS)} {i} {rng.choice(WORDS)}" for i in range(rng.randint(1, 5))])
            elif op < 0.75 and c.active():
                c.forget(rng.choice(c.active()).fact_id)
            elif op < 0.82:
                c.sweep(m.clock.now + dt.timedelta(days=rng.choice([8, 40])))
            elif op < 0.88:
                c.extract([{"session_id": "s1", "sequence": step, "content": f"I live in {rng.choice(WORDS)} city",
                            "metadata": {}}])
            elif op < 0.91:
                c.forget_user()
            else:
                m.runtime.save_snapshots()
            if step % 5 == 4:
                m.runtime.curator(m.tenant, "u").save_snapshot(force=rng.random() < 0.5)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    from_snap = _fresh(m, "curator", "u", snaps)
                replayed = _fresh(m, "curator", "u", None)
                assert curator_fold(from_snap) == curator_fold(replayed)
        assert list((snaps.dir / "curator").rglob("manifest.json")), "no curator snapshot was ever written"


def _long_session(tmp_path: Path) -> eidetica.Memory:
    m = _store(tmp_path, every=10)
    s = m.session("s1", user="u")
    for i in range(30):
        s.append("user", f"message {i} about {WORDS[i % len(WORDS)]}")
    m.runtime.save_snapshots()
    return m


def test_first_use_replays_only_the_tail(tmp_path: Path) -> None:
    m = _long_session(tmp_path)
    try:
        m.session("s1", user="u").append("user", "one more after the snapshot")
        snap = m.actor_snapshots.load("session", session_stream(m.tenant, "s1"), 1, m.log)
        assert snap is not None and [r.decode().content for r in snap.tail if r.type == "MessageAppended"] == [
            "one more after the snapshot"]
        assert session_fold(_fresh(m, "session", "s1", m.actor_snapshots)) == session_fold(_fresh(m, "session", "s1", None))
    finally:
        m.close()


def test_a_damaged_or_foreign_snapshot_falls_back_to_a_replay(tmp_path: Path) -> None:
    m = _long_session(tmp_path)
    try:
        want = session_fold(_fresh(m, "session", "s1", None))
        [arrow] = [p for p in (m.actor_snapshots.dir / "session").rglob("messages.arrow")]
        data = bytearray(arrow.read_bytes())
        data[len(data) // 2] ^= 0x40
        arrow.write_bytes(bytes(data))
        with pytest.warns(SnapshotWarning, match="checksum"):
            a = _fresh(m, "session", "s1", m.actor_snapshots)
        assert session_fold(a) == want
        # the replay wrote a good one again; a stale schema version is refused
        with pytest.warns(SnapshotWarning, match="schema version"):
            assert m.actor_snapshots.load("session", session_stream(m.tenant, "s1"), 2, m.log) is None
    finally:
        m.close()
    # another store's snapshot (same stream name, other events) is refused: the log is the truth
    other = _long_session(tmp_path / "other")
    other.close()
    mine = tmp_path / "s" / "snapshots" / "actors"
    theirs = tmp_path / "other" / "s" / "snapshots" / "actors"
    shutil.rmtree(mine)
    shutil.copytree(theirs, mine)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=Clock(tick=TICK),
                       config=MemoryConfig(actor_snapshot_events=10)) as m2:
        with pytest.warns(SnapshotWarning, match="no longer ends"):
            a = _fresh(m2, "session", "s1", m2.actor_snapshots)
        assert session_fold(a) == session_fold(_fresh(m2, "session", "s1", None))


def test_compact_leaves_no_actor_snapshot_with_forgotten_text(tmp_path: Path) -> None:
    with _store(tmp_path, every=3) as m:
        c = m.runtime.curator(m.tenant, "u")
        fid = c.remember("my locker code is zebra-4471")
        for i in range(6):
            c.remember(f"unrelated fact {i} {WORDS[i]}")
        c.save_snapshot(force=True)
        c.forget(fid)
        m.runtime.save_snapshots()
        files = list(m.actor_snapshots.dir.rglob("*.arrow"))
        assert any(b"zebra-4471" in p.read_bytes() for p in files)  # the deleted fact's content is in a snapshot
        m.compact()
        leftover = [p for p in (tmp_path / "s").rglob("*") if p.is_file() and b"zebra-4471" in p.read_bytes()]
        assert leftover == []
        assert curator_fold(m.runtime.curator(m.tenant, "u")) == curator_fold(_fresh(m, "curator", "u", None))
