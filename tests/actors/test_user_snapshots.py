"""Notes, items and schedules actors built from their snapshot plus the stream's tail fold exactly as a full replay.

Real parts: an ArrowLog on disk, the store's actor snapshots (Arrow IPC), the items' write-behind
worker. Histories are randomised (notes stored, updated, deleted; items put with and without
texts and TTLs, deleted, touched, swept; schedules created, updated, deleted, run; users
forgotten) and the folds are compared after every few operations.
"""

from __future__ import annotations

import datetime as dt
import random
import warnings
from pathlib import Path
from typing import Any

import pytest

import eidetica
from eidetica.actors import ActorSnapshots, MemoryConfig
from eidetica.actors.items import ItemsActor, item_id
from eidetica.actors.notes import NotesActor
from eidetica.actors.schedules import SchedulesActor
from eidetica.events import ChunksEmbedded, ItemPut, NewEvent
from eidetica.events.streams import items_stream
from eidetica.projections._snapshot import SnapshotWarning
from eidetica.providers import HashEmbedder
from tests.support.clock import Clock
from tests.support.words import WORDS

TICK = dt.timedelta(seconds=1)  # every reading of the clock is a second later

KINDS = ("notes", "items", "schedules")


def _store(tmp_path: Path, every: int) -> eidetica.Memory:
    config = MemoryConfig(actor_snapshot_events=every, min_interval_seconds=60)
    return eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=Clock(tick=TICK), config=config)


def _fresh(m: eidetica.Memory, kind: str, user: str, snapshots: ActorSnapshots | None) -> Any:
    if kind == "notes":
        return NotesActor(m.log, m.tenant, user, m.embedder, m.clock, snapshots)
    if kind == "items":
        return ItemsActor(m.log, m.tenant, user, m.embedder, m.clock, None, snapshots)
    return SchedulesActor(m.log, m.tenant, user, m.config, m.clock, snapshots)


def fold(a: Any) -> dict:
    """Everything one of these actors decides with."""
    if isinstance(a, NotesActor):
        return {"notes": set(a.notes), "version": a.version}
    if isinstance(a, ItemsActor):
        return {"live": set(a.live), "ttl": dict(a.ttl), "version": a.version,
                "unembedded": {k: (j.namespace, j.key, j.texts, j.time) for k, j in a.unembedded.items()}}
    return {"schedules": a.list(), "tombs": dict(a._view._user_tomb), "version": a.version}


def _op(m: eidetica.Memory, rng: random.Random, user: str) -> None:
    notes = [n.note_id for n in m.state.notes(m.tenant, user)]
    scheds = [s.schedule_id for s in m.state.schedules(m.tenant, user)]
    keys = [f"k{i}" for i in range(8)]
    op = rng.random()
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if op < 0.15:
        m.store_note(text, user=user)
    elif op < 0.2 and notes:
        m.update_note(rng.choice(notes), text, user=user)
    elif op < 0.27 and notes:
        m.delete_note(rng.choice(notes), user=user)
    elif op < 0.45:
        m.items.put([{"namespace": ("docs", user), "key": rng.choice(keys), "user": user,
                      "value": {"t": text}, "texts": [text] if rng.random() < 0.7 else None,
                      "ttl": rng.choice([None, None, 5.0, 60.0])} for _ in range(rng.randint(1, 3))])
    elif op < 0.52:
        m.items.put([{"namespace": ("docs", user), "key": rng.choice(keys), "user": user, "value": None}])
    elif op < 0.57:
        a = m.runtime.items(m.tenant, user)
        a.touch([item_id(["docs", user], k) for k in rng.sample(keys, 3)])
    elif op < 0.6:
        m.runtime.items(m.tenant, user).sweep(m.clock.now + dt.timedelta(minutes=rng.choice([1, 10, 90])))
    elif op < 0.72:
        m.schedules.create(f"job {text}", *rng.choice([("interval", "3600"), ("interval", "7200"), ("cron", "0 9 * * *")]),
                           user=user)
    elif op < 0.77 and scheds:
        m.schedules.update(rng.choice(scheds), user=user, name=f"renamed {text}", enabled=rng.random() < 0.5)
    elif op < 0.82 and scheds:
        m.schedules.delete(rng.choice(scheds), user=user)
    elif op < 0.92 and scheds:
        m.schedules.record_run(rng.choice(scheds), {"status": rng.choice(["ok", "error"]), "output": text}, user=user)
    elif op < 0.95:
        m.forget_user(user)
    elif op < 0.98:  # the runtime's actors save their folds (as at close)
        m.runtime.save_snapshots()
    else:  # ... and are dropped: the next ones start from their snapshots and go on from there
        m.runtime.close()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_notes_items_schedules_from_snapshot_equal_full_replay(tmp_path: Path, seed: int) -> None:
    rng = random.Random(300 + seed)
    with _store(tmp_path, every=rng.choice([3, 7, 20])) as m:
        snaps = m.actor_snapshots
        started_from_one = dict.fromkeys(KINDS, 0)
        for step in range(80):
            _op(m, rng, rng.choice(["u", "u", "v"]))
            if step % 6 == 5:
                m.gate.sync()  # the items' vectors written behind: both folds below see the same log
                for kind in KINDS:
                    getattr(m.runtime, kind)(m.tenant, "u").save_snapshot(force=rng.random() < 0.5)
                    with warnings.catch_warnings():
                        warnings.simplefilter("error")  # a valid snapshot is never refused
                        from_snap = _fresh(m, kind, "u", snaps)
                    replayed = _fresh(m, kind, "u", None)
                    assert fold(from_snap) == fold(replayed), kind
                    assert from_snap.replayed <= replayed.replayed
                    started_from_one[kind] += from_snap.replayed < replayed.replayed
        assert all(started_from_one.values()), started_from_one  # every kind was compared from a snapshot


def test_a_long_stream_is_snapshotted_and_the_next_start_folds_only_its_tail(tmp_path: Path) -> None:
    with _store(tmp_path, every=20) as m:
        for i in range(30):
            m.store_note(f"note {i} {WORDS[i % len(WORDS)]}", user="u")
        m.items.put([{"namespace": ("docs",), "key": f"k{i}", "value": {"i": i}, "texts": [f"item {i}"], "user": "u"}
                     for i in range(30)])
        for i in range(25):
            m.schedules.create(f"job {i}", "interval", 3600 + i, user="u")
    with _store(tmp_path, every=20) as m:  # closing saved them; this start replays nothing
        assert [getattr(m.runtime, k)(m.tenant, "u").replayed for k in KINDS] == [0, 0, 0]
        m.store_note("one more", user="u")
        assert _fresh(m, "notes", "u", m.actor_snapshots).replayed == 2  # the note and its vectors
        assert _fresh(m, "notes", "u", None).replayed == 62  # 31 notes, each with its vectors


def test_a_damaged_snapshot_is_refused_with_a_warning_and_the_actor_replays(tmp_path: Path) -> None:
    with _store(tmp_path, every=5) as m:
        for i in range(12):
            m.store_note(f"note {i}", user="u")
            m.schedules.create(f"job {i}", "interval", 3600, user="u")
        m.items.put([{"namespace": ("docs",), "key": f"k{i}", "value": {"i": i}, "texts": None, "user": "u"}
                     for i in range(12)])
        m.gate.sync()
        m.runtime.save_snapshots()
        for kind in KINDS:
            want = fold(_fresh(m, kind, "u", None))
            [arrow] = [p for p in (m.actor_snapshots.dir / kind).rglob("*.arrow") if p.stat().st_size > 600][:1]
            data = bytearray(arrow.read_bytes())
            data[len(data) // 2] ^= 0x40
            arrow.write_bytes(bytes(data))
            with pytest.warns(SnapshotWarning, match="checksum"):
                a = _fresh(m, kind, "u", m.actor_snapshots)
            assert fold(a) == want and a.replayed > 0


def _lost_put(m: eidetica.Memory, key: str, text: str) -> None:
    """What a crash between a put and its write-behind vectors leaves: the ItemPut alone."""
    m.log.append(items_stream(m.tenant, "u"), [NewEvent.of(ItemPut(
        item_id=item_id(["u", "m"], key), user_id="u", namespace=["u", "m"], key=key, value={"t": text}, texts=[text]),
        tenant=m.tenant)])


class Flaky(HashEmbedder):
    """The hash embedder, failing on one word (a model that fails on a put's texts, behind the put)."""

    def embed(self, texts: Any) -> Any:
        """Embed, or raise for texts with "bassoon"."""
        texts = list(texts)
        if any("bassoon" in t for t in texts):
            raise RuntimeError("model down")
        return super().embed(texts)


def _chunks(m: eidetica.Memory) -> list[tuple[str, list[str]]]:
    return [(e.source_id, e.texts) for e in (r.decode() for r in m.log.read_stream(items_stream(m.tenant, "u")))
            if isinstance(e, ChunksEmbedded)]


@pytest.mark.parametrize("covered", [True, False], ids=["covered-by-the-snapshot", "in-the-tail"])
def test_an_item_put_whose_vectors_never_came_is_embedded_on_the_next_start(tmp_path: Path, covered: bool) -> None:
    config = MemoryConfig(actor_snapshot_events=3)
    lost = item_id(["u", "m"], "lost")
    with eidetica.open(tmp_path / "s", embedder=Flaky(dim=32), config=config) as m:
        m.items.put([{"namespace": ("u", "m"), "key": f"k{i}", "value": {"i": i}, "texts": [f"item {i}"], "user": "u"}
                     for i in range(4)])
        m.gate.sync()
        actor = m.runtime.items(m.tenant, "u")
        if not covered:
            actor.save_snapshot(force=True)
        m.items.put([{"namespace": ("u", "m"), "key": "lost", "value": {"t": 1}, "texts": ["plays the bassoon"], "user": "u"}])
        with pytest.raises(RuntimeError, match="model down"):
            m.gate.sync()  # the write-behind worker failed: the put is in the log, its vectors are not
        if covered:
            actor.save_snapshot(force=True)  # then the process dies
        assert list(actor.unembedded) == [lost]
        snap = m.actor_snapshots.load("items", items_stream(m.tenant, "u"), 1, m.log)
        assert snap is not None and any(r.type == "ItemPut" for r in snap.tail) != covered
        before = len(_chunks(m))
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), config=config) as m:
        hits = m.items.search(("u",), query="bassoon", limit=1)
        assert [(it.key, score is not None) for it, score in hits] == [("lost", True)]
        assert _chunks(m)[before:] == [(lost, ["plays the bassoon"])]
        assert m.runtime.items(m.tenant, "u").unembedded == {}
        assert m.runtime.items(m.tenant, "u").replayed == (0 if covered else 1)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), config=config) as m:  # recovered once
        m.items.search(("u",), query="bassoon")
        assert len(_chunks(m)) == before + 1


def test_forgotten_text_survives_neither_forget_user_nor_compact_in_these_snapshots(tmp_path: Path) -> None:
    with _store(tmp_path, every=3) as m:
        for i in range(5):
            m.store_note(f"unrelated note {i}", user="w")
            m.schedules.create(f"job {i}", "interval", 3600, user="w")
        m.schedules.create("call the zebra-4471 vet", "interval", 3600, user="w")
        m.store_note("the zebra-4471 note", user="w")
        _lost_put(m, "secret", "the zebra-4471 item")  # user u's put, waiting for vectors: its text is in the snapshot
        for kind, user in [(k, "w") for k in KINDS] + [("items", "u")]:
            getattr(m.runtime, kind)(m.tenant, user).save_snapshot(force=True)

        def holding() -> set[str]:
            return {p.relative_to(m.actor_snapshots.dir).parts[0] for p in m.actor_snapshots.dir.rglob("*.arrow")
                    if b"zebra-4471" in p.read_bytes()}

        assert holding() == {"items", "schedules"}  # a note's snapshot holds ids only
        m.forget_user("w")  # drops w's snapshots at once
        assert holding() == {"items"}
        m.items.put([{"namespace": ("u", "m"), "key": "secret", "value": None, "user": "u"}])  # deleted: compact erases it
        m.runtime.save_snapshots()
        assert holding() == {"items"}  # the snapshot written before the delete is still on disk
        m.compact()
        leftover = [p for p in (tmp_path / "s").rglob("*") if p.is_file() and b"zebra-4471" in p.read_bytes()]
        assert leftover == []
        for kind, user in [(k, "w") for k in KINDS] + [("items", "u")]:
            assert fold(getattr(m.runtime, kind)(m.tenant, user)) == fold(_fresh(m, kind, user, None))
