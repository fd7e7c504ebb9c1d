"""The projection port's conformance suite, plus the shared test workload.

Every Projection implementation subclasses ``ProjectionConformance`` and provides
``make_projection`` and ``observe`` (a comparable picture of its whole output).
The workload helpers (deterministic hashed vectors, a mixed multi-tenant event stream)
are shared by the projection tests, the crash child and the rebuild-parity test.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from eidetica.events import (
    ArrowLog,
    ChunksEmbedded,
    EventLog,
    FactAsserted,
    FactDecayed,
    FactDeleted,
    FactPruned,
    FactReinforced,
    FactSuperseded,
    MessageAppended,
    NewEvent,
    NoteDeleted,
    NoteStored,
    RecordedEvent,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleRun,
    ScheduleUpdated,
    SessionForgotten,
    SessionStarted,
    SummaryCommitted,
    UserForgotten,
)
from eidetica.projections import Projection, Projector

DIM = 48
NS = uuid.UUID("8e2c4c1a-0000-4000-8000-00000000a11c")

WORDS = (
    "coffee tea espresso morning breakfast pancake garden tomato basil flower rose tulip paris london "
    "tokyo berlin train flight hotel beach mountain hiking climbing skiing guitar piano violin concert "
    "jazz novel poetry history physics chemistry python rust compiler database memory cache server "
    "football tennis swimming marathon doctor dentist allergy peanut birthday wedding sister brother "
    "mother father dog cat hamster parrot salary budget mortgage apartment kitchen painting museum"
).split()


def hvec(text: str, dim: int = DIM) -> np.ndarray:
    """A deterministic unit vector from hashed word features (same words -> same vector)."""
    v = np.zeros(dim, dtype=np.float32)
    for w in re.findall(r"\w+", text.lower()):
        h = hashlib.blake2b(w.encode(), digest_size=8).digest()
        v[h[0] % dim] += 1.0 if h[1] & 1 else -1.0
        v[h[2] % dim] += 0.5 if h[3] & 1 else -0.5
    n = float(np.linalg.norm(v))
    if n == 0.0:
        v[0] = 1.0
        return v
    return v / n


def emb(ids: list[str], texts: list[str], *, kind: str = "message", source: str = "", user: str = "u",
        session: str = "", time: dt.datetime | None = None, tenant: str = "t", confidence: float = 1.0,
        dim: int = DIM, metadata: dict[str, Any] | None = None, vectors: np.ndarray | None = None) -> NewEvent:
    """A ChunksEmbedded event of ``texts`` with hashed vectors (or ``vectors``)."""
    vecs = (np.stack([hvec(t, dim) for t in texts]) if vectors is None else vectors).astype("<f4")
    return NewEvent.of(ChunksEmbedded(model_id="h", dim=dim, chunk_ids=ids, vectors=vecs.tobytes(), texts=texts,
                                      source_id=source, kind=kind, user_id=user, session_id=session, time=time,
                                      confidence=confidence, metadata=metadata or {}), tenant=tenant)


def eid(*parts: Any) -> uuid.UUID:
    """A deterministic event id."""
    return uuid.uuid5(NS, ":".join(map(str, parts)))


@dataclass
class Workload:
    """A mixed, multi-tenant workload, generated deterministically from a seed.

    ``appends`` is a list of (stream, [NewEvent]) in append order. Tenants and ids include
    quotes and query-syntax characters on purpose.
    """

    seed: int = 7
    tenants: tuple[str, ...] = ("acme", "o'neil", "tenant:b")
    users: int = 3
    sessions: int = 2
    messages: int = 6
    dim: int = DIM
    appends: list[tuple[str, list[NewEvent]]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.n = 0
        self._build()

    # -- text and chunks ---------------------------------------------------------------
    def sentence(self) -> str:
        """A unique sentence (a serial token keeps every vector distinct)."""
        self.n += 1
        words = self.rng.sample(WORDS, self.rng.randint(4, 9))
        s = " ".join(words) + f" item{self.n}"
        self.texts.append(s)
        return s

    def chunks(self, tenant: str, kind: str, source: str, ids: list[str], texts: list[str], *, user: str,
               session: str = "", category: str = "", confidence: float = 1.0,
               time: dt.datetime | None = None, metadata: dict[str, Any] | None = None) -> NewEvent:
        """A ChunksEmbedded event with hashed vectors."""
        vecs = np.stack([hvec(t, self.dim) for t in texts]).astype("<f4")
        return NewEvent.of(
            ChunksEmbedded(model_id="hash", dim=self.dim, chunk_ids=ids, vectors=vecs.tobytes(), texts=texts,
                           source_id=source, kind=kind, user_id=user, session_id=session, category=category,
                           confidence=confidence, time=time, metadata=metadata or {}),
            tenant=tenant, event_id=eid(tenant, "chunks", kind, source, *ids),
        )

    def _build(self) -> None:
        rng = self.rng
        plans: list[Iterator[tuple[str, list[NewEvent]]]] = []
        for t in self.tenants:
            for u in range(self.users):
                user = f"u{u}" if u != 2 else "u' OR 1=1 --"
                for s in range(self.sessions):
                    plans.append(self._session(t, user, f"s{u}-{s}"))
                plans.append(self._facts(t, user))
                plans.append(self._notes(t, user))
                plans.append(self._schedules(t, user))
        # interleave the plans at random, like concurrent actors would
        while plans:
            i = rng.randrange(len(plans))
            try:
                self.appends.append(next(plans[i]))
            except StopIteration:
                plans.pop(i)
        # forget one session and one user per tenant, then that user comes back
        for t in self.tenants:
            self.appends.append((f"session:{t}:s0-1", [NewEvent.of(SessionForgotten(session_id="s0-1", user_id="u0"),
                                                                    tenant=t, event_id=eid(t, "sf"))]))
            # what forget_user writes: a tombstone per session, and one on each per-user stream
            for s in range(self.sessions):
                sid = f"s1-{s}"
                self.appends.append((f"session:{t}:{sid}", [NewEvent.of(SessionForgotten(session_id=sid, user_id="u1"),
                                                                         tenant=t, event_id=eid(t, "uf", sid))]))
            for kind in ("facts", "notes", "schedules"):
                self.appends.append((f"{kind}:{t}:u1", [NewEvent.of(UserForgotten(user_id="u1"), tenant=t,
                                                                     event_id=eid(t, "uf", kind))]))
            self.appends.extend(self._session(t, "u1", "s1-back"))

    def _session(self, t: str, user: str, sid: str) -> Iterator[tuple[str, list[NewEvent]]]:
        rng = self.rng
        stream = f"session:{t}:{sid}"
        yield stream, [NewEvent.of(SessionStarted(session_id=sid, user_id=user), tenant=t, event_id=eid(t, sid, "start"))]
        epoch = 0
        for i in range(self.messages):
            text = self.sentence()
            parts = [text] if rng.random() < 0.7 else [text, self.sentence()]
            old = rng.random() < 0.2
            when = dt.datetime(2024, 1, 1 + i, tzinfo=dt.timezone.utc) if old else None
            evs = [
                NewEvent.of(MessageAppended(session_id=sid, user_id=user, role=rng.choice(["user", "assistant"]),
                                            content=" ".join(parts), sequence=i, metadata={"turn": i}),
                            tenant=t, event_id=eid(t, sid, "msg", i)),
                self.chunks(t, "message", f"{sid}:{i}", [f"{sid}:{i}:{k}" for k in range(len(parts))], parts,
                            user=user, session=sid, time=when, metadata={"turn": i, "quote": "it's"}),
            ]
            yield stream, evs
            if i % 3 == 2:
                text = "summary " + self.sentence()
                yield f"summary:{t}:{sid}", [
                    NewEvent.of(SummaryCommitted(session_id=sid, epoch=epoch, text=text, upto_sequence=i),
                                tenant=t, event_id=eid(t, sid, "sum", epoch)),
                    self.chunks(t, "summary", f"summary:{sid}", [f"summary:{sid}:{epoch}"], [text], user=user,
                                session=sid, metadata={"sources": [{"turn": i}]}),
                ]
                epoch += 1

    def _facts(self, t: str, user: str) -> Iterator[tuple[str, list[NewEvent]]]:
        rng = self.rng
        stream = f"facts:{t}:{user}"
        live: list[str] = []
        for k in range(6):
            fid = f"fact-{user}-{k}"
            text = self.sentence()
            cat = rng.choice(["general", "food", "work's"])
            yield stream, [
                NewEvent.of(FactAsserted(fact_id=fid, user_id=user, content=text, category=cat, confidence=0.8),
                            tenant=t, event_id=eid(t, fid, "assert")),
                self.chunks(t, "fact", fid, [fid], [text], user=user, category=cat, confidence=0.8),
            ]
            live.append(fid)
            op = rng.random()
            target = rng.choice(live)
            if op < 0.3:
                yield stream, [NewEvent.of(FactReinforced(fact_id=target, confidence=0.9 + 0.01 * k), tenant=t,
                                           event_id=eid(t, fid, "reinforce"))]
            elif op < 0.45 and len(live) > 1:
                live.remove(target)
                yield stream, [NewEvent.of(FactSuperseded(fact_id=target, by=fid), tenant=t, event_id=eid(t, fid, "sup"))]
            elif op < 0.6 and len(live) > 1:
                live.remove(target)
                yield stream, [NewEvent.of(FactDeleted(fact_id=target), tenant=t, event_id=eid(t, fid, "del"))]
            elif op < 0.7:
                yield stream, [NewEvent.of(FactDecayed(fact_id=target, confidence=0.5), tenant=t,
                                           event_id=eid(t, fid, "decay"))]
            elif op < 0.75 and len(live) > 1:
                live.remove(target)
                yield stream, [NewEvent.of(FactPruned(fact_id=target, reason="weak"), tenant=t,
                                           event_id=eid(t, fid, "prune"))]

    def _notes(self, t: str, user: str) -> Iterator[tuple[str, list[NewEvent]]]:
        stream = f"notes:{t}:{user}"
        for k in range(3):
            nid = f"note-{user}-{k}"
            text = self.sentence()
            yield stream, [
                NewEvent.of(NoteStored(note_id=nid, user_id=user, text=text), tenant=t, event_id=eid(t, nid)),
                self.chunks(t, "note", nid, [nid], [text], user=user),
            ]
        yield stream, [NewEvent.of(NoteDeleted(note_id=f"note-{user}-1"), tenant=t, event_id=eid(t, user, "nd"))]

    def _schedules(self, t: str, user: str) -> Iterator[tuple[str, list[NewEvent]]]:
        stream = f"schedules:{t}:{user}"
        base = dt.datetime(2026, 1, 1, 9, tzinfo=dt.timezone.utc)
        for k in range(2):
            sid = f"sched-{user}-{k}"
            yield stream, [NewEvent.of(ScheduleCreated(schedule_id=sid, user_id=user, name=f"job {k}", cadence="cron",
                                                       expression="0 9 * * *", next_run_at=base),
                                       tenant=t, event_id=eid(t, sid, "c"))]
            yield stream, [NewEvent.of(ScheduleUpdated(schedule_id=sid, changes={"name": f"job {k}b"}), tenant=t,
                                       event_id=eid(t, sid, "u"))]
            yield stream, [NewEvent.of(ScheduleRun(schedule_id=sid, run_at=base, result="ok",
                                                   next_run_at=base + dt.timedelta(days=1)),
                                       tenant=t, event_id=eid(t, sid, "r"))]
        yield stream, [NewEvent.of(ScheduleDeleted(schedule_id=f"sched-{user}-0"), tenant=t, event_id=eid(t, user, "sd"))]

    # -- use ---------------------------------------------------------------------------
    def append_to(self, log: EventLog, start: int = 0, stop: int | None = None) -> dict[int, int]:
        """Append ``appends[start:stop]``; returns partition -> last offset written."""
        last: dict[int, int] = {}
        for stream, evs in self.appends[start:stop]:
            _, hi = log.append(stream, evs)
            p = log.partition_of(stream)
            last[p] = max(last.get(p, -1), hi)
        return last

    def queries(self, n: int, seed: int = 1) -> list[dict[str, Any]]:
        """``n`` search argument dicts (text + vector, sometimes filters) over the workload's tenants."""
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            words = rng.sample(WORDS, rng.randint(1, 4))
            if rng.random() < 0.3:
                words += rng.choice(self.texts).split()[:3]
            text = " ".join(words)
            q: dict[str, Any] = {"tenant": rng.choice(self.tenants), "text": text, "vector": hvec(text, self.dim),
                                 "top_k": 10}
            r = rng.random()
            if r < 0.15:
                q["kinds"] = rng.sample(["message", "fact", "note", "summary"], rng.randint(1, 2))
            elif r < 0.25:
                q["user_id"] = rng.choice(["u0", "u1", "u' OR 1=1 --"])
            elif r < 0.3:
                q["exclude_session"] = "s0-0"
            out.append(q)
        return out


def all_events(log: EventLog) -> list[RecordedEvent]:
    """Every committed event, partition by partition."""
    return [e for p in range(log.partitions) for e in log.read(partition=p)]


class ProjectionConformance:
    """Behaviour every projection must show. Subclasses provide ``make_projection`` and ``observe``."""

    durable = False  # whether the checkpoint survives reopening the projection

    def make_projection(self, path: str) -> Projection:
        raise NotImplementedError

    def observe(self, proj: Projection) -> Any:
        """A comparable picture of everything the projection holds."""
        raise NotImplementedError

    @pytest.fixture(scope="class")
    @classmethod
    def workload(cls) -> Workload:
        return Workload(seed=3, users=3, sessions=2, messages=5)

    @pytest.fixture
    def log(self, tmp_path, workload: Workload):
        log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
        workload.append_to(log)
        yield log
        log.close()

    @pytest.fixture
    def proj(self, tmp_path):
        p = self.make_projection(str(tmp_path / "proj"))
        yield p
        p.close()

    def test_new_projection_is_empty_with_zero_checkpoint(self, proj: Projection) -> None:
        assert proj.checkpoint() == {} or all(v == 0 for v in proj.checkpoint().values())
        assert self.observe(proj) == self.observe_empty()

    def observe_empty(self) -> Any:
        raise NotImplementedError

    def test_apply_is_idempotent(self, proj: Projection, log: EventLog) -> None:
        evs = all_events(log)
        proj.apply(evs)
        once = self.observe(proj)
        assert once != self.observe_empty()
        proj.apply(evs)
        assert self.observe(proj) == once

    def test_replaying_any_suffix_converges(self, proj: Projection, log: EventLog) -> None:
        evs = all_events(log)
        proj.apply(evs)
        full = self.observe(proj)
        rng = random.Random(5)
        for _ in range(2):
            cut = rng.randrange(len(evs))
            proj.apply(evs[cut:])  # a crash after output, before the checkpoint: replay from older
            assert self.observe(proj) == full

    def test_batches_equal_one_apply(self, tmp_path, proj: Projection, log: EventLog) -> None:
        evs = all_events(log)
        for i in range(0, len(evs), 37):
            proj.apply(evs[i : i + 37])
        other = self.make_projection(str(tmp_path / "other"))
        try:
            other.apply(evs)
            assert self.observe(proj) == self.observe(other)
        finally:
            other.close()

    def test_checkpoint_is_saved_after_output(self, proj: Projection, log: EventLog) -> None:
        calls: list[tuple[str, Any]] = []
        real_apply, real_save = proj.apply, proj.save_checkpoint

        def apply(events):  # records the order of calls; the real methods do the work
            real_apply(events)
            calls.append(("apply", events[-1].offset))

        def save(ck):
            calls.append(("save", dict(ck)))
            real_save(ck)

        proj.apply, proj.save_checkpoint = apply, save  # type: ignore[method-assign]
        Projector(log, [proj], batch_size=25).catch_up()
        assert calls and calls[0][0] == "apply"
        for (a, off), (s, ck) in zip(calls[::2], calls[1::2]):
            assert a == "apply" and s == "save"
            assert off + 1 in ck.values()
        assert proj.checkpoint() == {p: log.head(p) for p in range(log.partitions) if log.head(p)}

    def test_failed_apply_leaves_checkpoint_behind(self, proj: Projection, log: EventLog) -> None:
        real_apply = proj.apply
        seen = {"n": 0}

        def flaky(events):
            seen["n"] += 1
            if seen["n"] == 3:
                raise RuntimeError("disk full")
            real_apply(events)

        proj.apply = flaky  # type: ignore[method-assign]
        pj = Projector(log, [proj], batch_size=20)
        with pytest.raises(RuntimeError):
            pj.catch_up()
        ck = proj.checkpoint()
        assert sum(ck.values()) == 40  # two batches made it, the third did not
        proj.apply = real_apply  # type: ignore[method-assign]
        pj.catch_up()
        fresh = all_events(log)
        assert proj.checkpoint() == {p: log.head(p) for p in range(log.partitions) if log.head(p)}
        assert fresh  # and the output equals a one-shot apply
        expected = self.observe(proj)
        proj.reset()
        proj.apply(fresh)
        assert self.observe(proj) == expected

    def test_reset_empties(self, proj: Projection, log: EventLog) -> None:
        Projector(log, [proj]).catch_up()
        assert proj.checkpoint()
        proj.reset()
        assert proj.checkpoint() == {}
        assert self.observe(proj) == self.observe_empty()

    def test_checkpoint_across_reopen(self, tmp_path, log: EventLog) -> None:
        path = str(tmp_path / "reopen")
        p = self.make_projection(path)
        Projector(log, [p]).catch_up()
        ck, seen = p.checkpoint(), self.observe(p)
        p.close()
        q = self.make_projection(path)
        try:
            if self.durable:
                assert q.checkpoint() == ck
                assert self.observe(q) == seen
            else:
                assert q.checkpoint() == {}
            Projector(log, [q]).catch_up()  # either way, catching up gives the same output
            assert self.observe(q) == seen
        finally:
            q.close()
