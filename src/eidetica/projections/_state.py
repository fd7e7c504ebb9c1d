"""StateProjection: in-memory folds of the log (sessions, summaries, facts, notes, schedules).

It keeps what decisions need (per message only its sequence, log time and log offset:
24 bytes in three arrays) and reads message bodies from the log when asked, through that
offset index. Given a snapshot directory it starts from the newest valid snapshot (Arrow
IPC files, see ``_snapshot``) and the Projector replays only the tail; it writes a new one
after ``snapshot_events`` events or ``snapshot_seconds`` seconds (when the Projector runs
its housekeeping), on ``rebuild`` and when closed with at least ``close_events`` unsaved.
Without one it is rebuilt on every start (its checkpoint starts at 0).
Every fold is idempotent: messages are keyed by sequence, notes by id, and the events of
facts and schedules are remembered per entity by event id, so replaying a suffix of the
log twice changes nothing.

Forgetting: ``SessionForgotten`` removes everything of that session; ``UserForgotten``
removes what its stream holds of that user within the tenant: on ``facts:`` the facts, on
``notes:`` the notes, on ``items:`` the items, on ``schedules:`` the schedules (on any other stream: everything of
the user). So ``clear(sessions=False)`` leaves sessions alone, and ``forget_user`` (which
writes it on all three streams and a ``SessionForgotten`` per session) forgets everything.
Each leaves a tombstone (the forget event's log time) per scope. An event of that
session or user whose log time is not after the tombstone is ignored even when it
arrives later (it may live in another partition), so the fold does not depend on how the
Projector interleaves partitions: a rebuild gives the same state as incremental apply.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time as _time
from collections.abc import Sequence
from typing import Any

import msgspec
import pyarrow as pa

from ..events import EventLog, RecordedEvent
from ..events import types as ev
from ..events.streams import parse_stream
from ._base import Projection
from ._ranking import speaker_label
from ._records import (
    SUCCESS_STATUSES,
    FactInfo,
    ItemInfo,
    MessageInfo,
    NoteInfo,
    ScheduleInfo,
    SessionInfo,
)
from ._snapshot import SnapshotStore
from ._state_rows import (
    _as_time,
    _Fact,
    _from_us,
    _Schedule,
    _schedule_from_row,
    _Session,
    _us,
    _utcnow,
)
from ._state_tables import fold_tables, restore_fold

__all__ = [
    "StateProjection",
    "SessionInfo",
    "MessageInfo",
    "FactInfo",
    "NoteInfo",
    "ScheduleInfo",
    "SUCCESS_STATUSES",
    "ItemInfo",
]



RUN_HISTORY = 100
_TYPES = frozenset(t.__struct_config__.tag for t in ev.EVENT_TYPES) - {"ChunksEmbedded"}


class StateProjection(Projection):
    """In-memory folds of sessions, summaries, facts, notes and schedules, per tenant."""

    name = "state"
    SCHEMA_VERSION = 5  # of the snapshot tables; bump on any change to them (older ones are then refused)

    def __init__(
        self,
        name: str = "state",
        *,
        log: EventLog | None = None,
        snapshots: str | os.PathLike[str] | None = None,
        snapshot_events: int = 50_000,
        snapshot_seconds: float = 300.0,
        close_events: int = 1_000,
    ) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._checkpoint: dict[int, int] = {}
        self._log = log
        # without a log to read them back from, bodies are kept here (tests, tools)
        self._bodies: dict[tuple[str, str, int], ev.MessageAppended] | None = {} if log is None else None
        self._store = SnapshotStore(snapshots, name, self.SCHEMA_VERSION) if snapshots is not None else None
        self.snapshot_events = snapshot_events
        self.snapshot_seconds = snapshot_seconds
        self.close_events = close_events
        self._unsaved = 0  # events applied since the last snapshot
        self._saved_at = _time.monotonic()
        self.snapshot_checkpoint: dict[int, int] = {}  # the checkpoint of the snapshot on disk
        self.snapshot_created: dt.datetime | None = None
        self._clear()
        if self._store is not None:
            self._load_snapshot()

    def _clear(self) -> None:
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._session_user: dict[tuple[str, str], str] = {}  # survives forgetting: ids only
        self._user_sessions: dict[tuple[str, str], set[str]] = {}
        self._facts: dict[tuple[str, str], dict[str, _Fact]] = {}  # (tenant, user) -> facts
        self._fact_owner: dict[tuple[str, str], str] = {}  # (tenant, fact_id) -> user
        self._notes: dict[tuple[str, str], dict[str, NoteInfo]] = {}
        self._note_owner: dict[tuple[str, str], str] = {}
        # a schedule restored from a snapshot stays its encoded row until first used (``_decoded``): a
        # schedules actor with many schedules starts without building every one
        self._schedules: dict[tuple[str, str], dict[str, _Schedule | bytes]] = {}
        self._schedule_owner: dict[tuple[str, str], str] = {}
        self._user_tomb: dict[tuple[str, str, str], dt.datetime] = {}  # (tenant, user, scope) -> time
        self._session_tomb: dict[tuple[str, str], dt.datetime] = {}
        self._embedder: tuple[str, int] | None = None
        self._items: dict[tuple[str, tuple[str, ...]], dict[str, ItemInfo]] = {}  # (tenant, namespace) -> key -> item
        self._item_at: dict[tuple[str, str], tuple[tuple[str, ...], str, int]] = {}  # (tenant, item id) -> (ns, key, version)
        # user messages no ExtractionCompleted covers yet, per (tenant, session): what a crash between an
        # append and its extraction leaves (resumed at open); ``_early``: completions folded before their
        # message (another partition's tail applied first)
        self._todo: dict[tuple[str, str], set[int]] = {}
        self._early: dict[tuple[str, str], set[int]] = {}

    # -- port --------------------------------------------------------------------------
    def apply(self, events: Sequence[RecordedEvent]) -> None:
        """Fold a batch of events into the in-memory state (idempotent)."""
        with self._lock:
            self._unsaved += len(events)
            for rec in events:
                if rec.type not in _TYPES:
                    continue  # chunks (heavy vectors) and unknown types are not ours
                try:
                    e = rec.decode()
                except Exception:  # noqa: BLE001 - an undecodable event must not stall the fold
                    continue
                handler = _HANDLERS.get(type(e))
                if handler is not None:
                    handler(self, rec, e)

    def checkpoint(self) -> dict[int, int]:
        """Partition -> next offset to apply; empty after construction (replay everything)."""
        with self._lock:
            return dict(self._checkpoint)

    def save_checkpoint(self, checkpoint: dict[int, int]) -> None:
        """Remember the checkpoint in memory (the state is rebuilt on every start)."""
        with self._lock:
            self._checkpoint = dict(checkpoint)

    def reset(self) -> None:
        """Forget everything, including the checkpoint and the snapshots on disk."""
        with self._lock:
            self._clear()
            if self._bodies is not None:
                self._bodies.clear()
            self._checkpoint = {}
            if self._store is not None:
                self._store.clear()  # a rebuild (compact) must not leave an old one with forgotten text
                self.snapshot_checkpoint, self.snapshot_created = {}, None

    def snapshot_due(self, behind: int) -> bool:
        """Whether ``behind`` events not in the snapshot make one due: ``snapshot_events``, or any after ``snapshot_seconds``."""
        return behind >= self.snapshot_events or (behind > 0 and _time.monotonic() - self._saved_at >= self.snapshot_seconds)

    def maintain(self, force: bool = False) -> None:
        """Write a snapshot when ``snapshot_events`` events or ``snapshot_seconds`` passed (or now, when forced)."""
        if self._store is None or not self._unsaved:
            return
        if force or self.snapshot_due(self._unsaved):
            self.write_snapshot()

    def write_snapshot(self, *, closing: bool = False) -> str | None:
        """Write a snapshot now (closing: only with ``close_events`` unsaved); returns its path."""
        if self._store is None:
            return None
        with self._lock:
            if closing and self._unsaved < self.close_events:
                return None
            if not self._checkpoint:
                return None  # nothing applied: nothing to save
            tables, meta = self._tables()
            path = self._store.write(tables, self._checkpoint, meta)
            self._unsaved = 0
            self._saved_at = _time.monotonic()
            self.snapshot_checkpoint = dict(self._checkpoint)
            self.snapshot_created = _utcnow()
            return str(path)

    def snapshot_info(self) -> dict[str, Any]:
        """The snapshot this state started from or last wrote: checkpoint, creation time, directory."""
        with self._lock:
            newest = None if self._store is None else self._store.newest()
            return {"checkpoint": dict(self.snapshot_checkpoint), "created": self.snapshot_created,
                    "path": None if newest is None or self.snapshot_created is None else str(newest)}

    def close(self) -> None:
        """Write a snapshot when enough is unsaved, so the next start replays a short tail."""
        self.write_snapshot(closing=True)

    # -- helpers -----------------------------------------------------------------------
    def _user_dead(self, tenant: str, user_id: str, scope: str, time: dt.datetime) -> bool:
        """Whether a user forget of this scope (or of everything) covers an event at ``time``."""
        for sc in (scope, "all"):
            t = self._user_tomb.get((tenant, user_id, sc))
            if t is not None and time <= t:
                return True
        return False

    def _dead(self, tenant: str, user_id: str | None, session_id: str | None, time: dt.datetime,
              scope: str = "sessions") -> bool:
        """Whether an event of this user/session is covered by a later forget."""
        if user_id is not None and self._user_dead(tenant, user_id, scope, time):
            return True
        if session_id is not None:
            t = self._session_tomb.get((tenant, session_id))
            if t is not None and time <= t:
                return True
            u = self._session_user.get((tenant, session_id))
            if u is not None and user_id is None and self._user_dead(tenant, u, "sessions", time):
                return True
        return False

    def _learn_session(self, tenant: str, session_id: str, user_id: str) -> None:
        """Record which user a session belongs to; purge a summary a user forget covers."""
        if not user_id:
            return
        key = (tenant, session_id)
        if self._session_user.get(key) == user_id:
            return
        self._session_user[key] = user_id
        self._user_sessions.setdefault((tenant, user_id), set()).add(session_id)
        s = self._sessions.get(key)
        if s is not None and not s.user_id:
            s.user_id = user_id
        if s is not None and s.summary is not None and self._user_dead(tenant, user_id, "sessions", s.summary[3]):
            s.summary = None
            if not s.seqs and not s.forgotten:
                del self._sessions[key]

    def _session(self, tenant: str, session_id: str, user_id: str, time: dt.datetime) -> _Session:
        key = (tenant, session_id)
        s = self._sessions.get(key)
        if s is None:
            s = self._sessions[key] = _Session(user_id or self._session_user.get(key, ""), time)
        elif time < s.started:
            s.started = time
        return s

    # -- handlers ----------------------------------------------------------------------
    def _on_session_started(self, rec: RecordedEvent, e: ev.SessionStarted) -> None:
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        if self._dead(rec.tenant, e.user_id, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, e.user_id, rec.time)
        if s.forgotten:
            s.forgotten = False
        s.last = max(s.last, rec.time)

    def _on_message(self, rec: RecordedEvent, e: ev.MessageAppended) -> None:
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        if self._dead(rec.tenant, e.user_id, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, e.user_id, rec.time)
        s.forgotten = False
        # keyed by sequence, first one wins; the session actor appends increasing sequences,
        # so the linear membership test only runs for out-of-order histories (imports)
        if e.sequence > s.top or e.sequence not in s.seqs:
            us = _us(rec.time)
            s.top = max(s.top, e.sequence)
            s.seqs.append(e.sequence)
            s.times.append(us)
            s.offsets.append(rec.offset)
            if self._log is not None:
                s.part = self._log.partition_of(rec.stream)
            if self._bodies is not None:
                self._bodies[(rec.tenant, e.session_id, e.sequence)] = e
            name = e.metadata.get("name") if e.metadata else None
            if isinstance(name, str) and name.strip():
                s.names[name.strip()] = max(s.names.get(name.strip(), us), us)
            elif (label := speaker_label(e.content)) is not None:
                s.labels[e.sequence] = label
                s.label_n[label] = s.label_n.get(label, 0) + 1
            if e.extract:
                key = (rec.tenant, e.session_id)
                early = self._early.get(key)
                if early is not None and e.sequence in early:
                    early.discard(e.sequence)
                    if not early:
                        del self._early[key]
                else:
                    self._todo.setdefault(key, set()).add(e.sequence)
        s.last = max(s.last, rec.time)

    def _on_extraction(self, rec: RecordedEvent, e: ev.ExtractionCompleted) -> None:
        key = (rec.tenant, e.session_id)
        todo = self._todo.get(key, set())
        s = self._sessions.get(key)
        for q in e.sequences:
            if q in todo:
                todo.discard(q)
            elif s is None or q > s.top:  # its message is not folded yet (another partition)
                self._early.setdefault(key, set()).add(q)
        if key in self._todo and not todo:
            del self._todo[key]

    def _prune_todo(self, key: tuple[str, str]) -> None:
        """Keep only pending extractions of messages still live (after a retraction or a forget)."""
        todo = self._todo.get(key)
        if todo is None:
            return
        s = self._sessions.get(key)
        live = todo & set(s.seqs) if s is not None and not s.forgotten else set()
        if live:
            self._todo[key] = live
        else:
            del self._todo[key]

    def _on_message_retracted(self, rec: RecordedEvent, e: ev.MessageRetracted) -> None:
        s = self._sessions.get((rec.tenant, e.session_id))
        if s is not None:
            s.retract(e.sequence)
            self._prune_todo((rec.tenant, e.session_id))
            if self._bodies is not None:
                self._bodies.pop((rec.tenant, e.session_id, e.sequence), None)
            s.last = max(s.last, rec.time)

    def _on_summary(self, rec: RecordedEvent, e: ev.SummaryCommitted) -> None:
        if self._dead(rec.tenant, None, e.session_id, rec.time):
            return
        s = self._session(rec.tenant, e.session_id, "", rec.time)
        if s.summary is None or e.epoch >= s.summary[0]:
            s.summary = (e.epoch, e.text, e.upto_sequence, rec.time)
        s.last = max(s.last, rec.time)

    def _on_session_forgotten(self, rec: RecordedEvent, e: ev.SessionForgotten) -> None:
        key = (rec.tenant, e.session_id)
        self._learn_session(rec.tenant, e.session_id, e.user_id)
        prev = self._session_tomb.get(key)
        self._session_tomb[key] = rec.time if prev is None else max(prev, rec.time)
        s = self._sessions.get(key)
        user = e.user_id or self._session_user.get(key, "")
        if s is None:
            if self._dead(rec.tenant, user or None, None, rec.time):
                return
            s = self._sessions[key] = _Session(user, rec.time)
        s.keep_after(rec.time)
        if s.summary is not None and s.summary[3] <= rec.time:
            s.summary = None
        if not s.seqs:
            s.forgotten = True
        self._prune_todo(key)
        s.last = max(s.last, rec.time)

    def _on_user_forgotten(self, rec: RecordedEvent, e: ev.UserForgotten) -> None:
        t, u = rec.tenant, e.user_id
        kind = parse_stream(rec.stream)[0] if rec.stream.count(":") == 2 else ""
        scope = kind if kind in ("facts", "notes", "schedules", "items") else "all"
        prev = self._user_tomb.get((t, u, scope))
        self._user_tomb[(t, u, scope)] = rec.time if prev is None else max(prev, rec.time)
        if scope == "all":
            self._forget_user_sessions(rec, t, u)
        if scope in ("facts", "all"):
            facts = self._facts.get((t, u), {})
            for fid in [f for f, x in facts.items() if x.created <= rec.time]:
                del facts[fid]
                self._fact_owner.pop((t, fid), None)
        if scope in ("notes", "all"):
            notes = self._notes.get((t, u), {})
            for nid in [n for n, x in notes.items() if x.time <= rec.time]:
                del notes[nid]
                self._note_owner.pop((t, nid), None)
        if scope in ("items", "all"):
            for iid, (ns, key, _) in list(self._item_at.items()):
                if iid[0] != t:
                    continue
                it = self._items.get((t, ns), {}).get(key)
                if it is not None and it.user_id == u and it.updated_at <= rec.time:
                    self._drop_item(t, iid[1])
        if scope in ("schedules", "all"):
            scheds = self._decoded((t, u))
            for sid in [s for s, x in scheds.items() if x.created <= rec.time]:
                del scheds[sid]
                self._schedule_owner.pop((t, sid), None)

    def _forget_user_sessions(self, rec: RecordedEvent, t: str, u: str) -> None:
        for sid in list(self._user_sessions.get((t, u), ())):
            s = self._sessions.get((t, sid))
            if s is None:
                continue
            s.keep_after(rec.time)
            if s.summary is not None and s.summary[3] <= rec.time:
                s.summary = None
            if not s.seqs and s.summary is None:
                del self._sessions[(t, sid)]
            self._prune_todo((t, sid))

    def _fact(self, tenant: str, fact_id: str) -> _Fact | None:
        u = self._fact_owner.get((tenant, fact_id))
        return None if u is None else self._facts.get((tenant, u), {}).get(fact_id)

    def _on_fact_asserted(self, rec: RecordedEvent, e: ev.FactAsserted) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "facts"):
            return
        f = self._fact(rec.tenant, e.fact_id)
        if f is None:
            f = _Fact(e.user_id, e, rec.time)
            self._facts.setdefault((rec.tenant, e.user_id), {})[e.fact_id] = f
            self._fact_owner[(rec.tenant, e.fact_id)] = e.user_id
        if rec.event_id in f.seen:
            return
        f.seen.add(rec.event_id)
        f.history.append((rec.time, "FactAsserted", {"content": e.content, "category": e.category,
                                                      "confidence": float(e.confidence)}))

    def _fact_event(self, rec: RecordedEvent, fact_id: str, detail: dict[str, Any]) -> _Fact | None:
        f = self._fact(rec.tenant, fact_id)
        if f is None or rec.event_id in f.seen:
            return None
        f.seen.add(rec.event_id)
        f.history.append((rec.time, rec.type, detail))
        f.updated = max(f.updated, rec.time)
        return f

    def _on_fact_reinforced(self, rec: RecordedEvent, e: ev.FactReinforced) -> None:
        f = self._fact_event(rec, e.fact_id, {"confidence": float(e.confidence)})
        if f is not None:
            f.confidence = float(e.confidence)
            f.sources.extend(e.sources)

    def _on_fact_decayed(self, rec: RecordedEvent, e: ev.FactDecayed) -> None:
        f = self._fact_event(rec, e.fact_id, {"confidence": float(e.confidence)})
        if f is not None:
            f.confidence = float(e.confidence)

    def _on_fact_superseded(self, rec: RecordedEvent, e: ev.FactSuperseded) -> None:
        f = self._fact_event(rec, e.fact_id, {"by": e.by})
        if f is not None:
            f.status, f.by = "superseded", e.by

    def _on_fact_pruned(self, rec: RecordedEvent, e: ev.FactPruned) -> None:
        f = self._fact_event(rec, e.fact_id, {"reason": e.reason})
        if f is not None:
            f.status = "pruned"

    def _on_fact_deleted(self, rec: RecordedEvent, e: ev.FactDeleted) -> None:
        f = self._fact_event(rec, e.fact_id, {})
        if f is not None:
            f.status = "deleted"

    def _on_note_stored(self, rec: RecordedEvent, e: ev.NoteStored) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "notes"):
            return
        if (rec.tenant, e.note_id) in self._note_owner:
            return
        self._notes.setdefault((rec.tenant, e.user_id), {})[e.note_id] = NoteInfo(
            note_id=e.note_id, text=e.text, time=rec.time, user_id=e.user_id
        )
        self._note_owner[(rec.tenant, e.note_id)] = e.user_id

    def _on_note_updated(self, rec: RecordedEvent, e: ev.NoteUpdated) -> None:
        u = self._note_owner.get((rec.tenant, e.note_id))
        notes = self._notes.get((rec.tenant, u), {}) if u is not None else {}
        n = notes.get(e.note_id)
        if n is not None:
            notes[e.note_id] = msgspec.structs.replace(n, text=e.text)  # one stream: updates arrive in order

    def _on_note_deleted(self, rec: RecordedEvent, e: ev.NoteDeleted) -> None:
        u = self._note_owner.pop((rec.tenant, e.note_id), None)
        if u is not None:
            self._notes.get((rec.tenant, u), {}).pop(e.note_id, None)

    def _schedule(self, tenant: str, schedule_id: str) -> _Schedule | None:
        u = self._schedule_owner.get((tenant, schedule_id))
        if u is None:
            return None
        d = self._schedules.get((tenant, u), {})
        x = d.get(schedule_id)
        if isinstance(x, bytes):
            x = d[schedule_id] = _schedule_from_row(u, x)
        return x

    def _decoded(self, key: tuple[str, str]) -> dict[str, _Schedule]:
        """A user's schedules, every one decoded."""
        d = self._schedules.get(key, {})
        for sid, x in d.items():
            if isinstance(x, bytes):
                d[sid] = _schedule_from_row(key[1], x)
        return d  # type: ignore[return-value]

    def _on_schedule_created(self, rec: RecordedEvent, e: ev.ScheduleCreated) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "schedules"):
            return
        if self._schedule(rec.tenant, e.schedule_id) is not None:
            return
        self._schedules.setdefault((rec.tenant, e.user_id), {})[e.schedule_id] = _Schedule(e.user_id, e, rec.time)
        self._schedule_owner[(rec.tenant, e.schedule_id)] = e.user_id

    def _on_schedule_updated(self, rec: RecordedEvent, e: ev.ScheduleUpdated) -> None:
        s = self._schedule(rec.tenant, e.schedule_id)
        if s is not None:
            for k, v in e.changes.items():
                if k in s.fields:
                    s.fields[k] = _as_time(v) if k == "next_run_at" else v
            s.updated = max(s.updated, rec.time)

    def _on_schedule_deleted(self, rec: RecordedEvent, e: ev.ScheduleDeleted) -> None:
        u = self._schedule_owner.pop((rec.tenant, e.schedule_id), None)
        if u is not None:
            self._schedules.get((rec.tenant, u), {}).pop(e.schedule_id, None)

    def _on_schedule_run(self, rec: RecordedEvent, e: ev.ScheduleRun) -> None:
        s = self._schedule(rec.tenant, e.schedule_id)
        if s is None or rec.event_id in s.runs:
            return
        s.runs.add(rec.event_id)  # one stream, one writer: runs arrive in stream order
        s.run_count += 1
        s.failures = 0 if e.status in SUCCESS_STATUSES else s.failures + 1
        s.history = (s.history + [{"run_id": e.run_id or str(rec.event_id), "run_at": e.run_at, "status": e.status,
                                   "result": e.result, "output_summary": e.output_summary,
                                   "output": e.output or e.output_summary}])[-RUN_HISTORY:]
        s.fields["next_run_at"] = e.next_run_at
        if e.next_run_at is None:
            s.fields["enabled"] = False  # a finished one-shot
        s.updated = max(s.updated, rec.time)

    def _drop_item(self, tenant: str, iid: str) -> None:
        at = self._item_at.pop((tenant, iid), None)
        if at is None:
            return
        bucket = self._items.get((tenant, at[0]))
        if bucket is not None:
            bucket.pop(at[1], None)
            if not bucket:
                del self._items[(tenant, at[0])]

    def _item_seen(self, rec: RecordedEvent, iid: str) -> bool:
        """Whether this item event (or a later one) is already folded: replays change nothing."""
        at = self._item_at.get((rec.tenant, iid))
        return at is not None and at[2] >= rec.version

    def _on_item_put(self, rec: RecordedEvent, e: ev.ItemPut) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "items") or self._item_seen(rec, e.item_id):
            return
        ns = tuple(e.namespace)
        bucket = self._items.setdefault((rec.tenant, ns), {})
        old = bucket.get(e.key)
        bucket[e.key] = ItemInfo(
            item_id=e.item_id, user_id=e.user_id, namespace=ns, key=e.key, value=dict(e.value),
            created_at=old.created_at if old is not None else rec.time, updated_at=rec.time, indexed=e.indexed,
            ttl_minutes=e.ttl_minutes, expires_at=e.expires_at,
        )
        self._item_at[(rec.tenant, e.item_id)] = (ns, e.key, rec.version)

    def _on_item_touched(self, rec: RecordedEvent, e: ev.ItemTouched) -> None:
        at = self._item_at.get((rec.tenant, e.item_id))
        if at is None or at[2] >= rec.version:
            return
        bucket = self._items.get((rec.tenant, at[0]), {})
        it = bucket.get(at[1])
        if it is not None:
            bucket[at[1]] = msgspec.structs.replace(it, expires_at=e.expires_at)
        self._item_at[(rec.tenant, e.item_id)] = (at[0], at[1], rec.version)

    def _on_item_deleted(self, rec: RecordedEvent, e: ev.ItemDeleted) -> None:
        if not self._item_seen(rec, e.item_id):
            self._drop_item(rec.tenant, e.item_id)

    def _on_embedder_changed(self, rec: RecordedEvent, e: ev.EmbedderChanged) -> None:
        self._embedder = (e.model_id, e.dim)

    # -- queries -----------------------------------------------------------------------
    def sessions(self, tenant: str, user_id: str | None = None, *, include_forgotten: bool = False) -> list[SessionInfo]:
        """Sessions of a tenant (optionally one user's), most recently updated first."""
        with self._lock:
            if user_id is None:
                items = [(sid, s) for (t, sid), s in self._sessions.items() if t == tenant]
            else:
                ids = self._user_sessions.get((tenant, user_id), ())
                items = [(sid, self._sessions[(tenant, sid)]) for sid in ids if (tenant, sid) in self._sessions]
                items = [(sid, s) for sid, s in items if s.user_id == user_id]
            out = [self._session_info(sid, s) for sid, s in items if include_forgotten or not s.forgotten]
        out.sort(key=lambda i: (i.last_time, i.session_id), reverse=True)
        return out

    def _session_info(self, sid: str, s: _Session) -> SessionInfo:
        return SessionInfo(
            session_id=sid,
            user_id=s.user_id,
            message_count=len(s.seqs),
            last_time=s.last,
            started_time=s.started,
            forgotten=s.forgotten,
        )

    def session(self, tenant: str, session_id: str) -> SessionInfo | None:
        """One session's info (forgotten ones too), or None when unknown."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return None if s is None else self._session_info(session_id, s)

    def messages(self, tenant: str, session_id: str, sequences: set[int] | None = None) -> list[MessageInfo]:
        """A session's messages in sequence order (only ``sequences`` when given; [] when unknown or forgotten);
        bodies come from the log."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            if s is None or s.forgotten:
                return []
            rows = sorted(r for r in zip(s.seqs, s.times, s.offsets) if sequences is None or r[0] in sequences)
            part = s.part
            if self._bodies is not None:
                bodies = {q: self._bodies[(tenant, session_id, q)] for q, _, _ in rows}
        if self._bodies is None:
            by_offset = {r.offset: r for r in self._log.read_offsets([o for _, _, o in rows], partition=part)}  # type: ignore[union-attr]
            bodies = {}
            for q, _, o in rows:
                r = by_offset.get(o)
                e = r.decode() if r is not None and r.type == "MessageAppended" else None
                if isinstance(e, ev.MessageAppended) and e.session_id == session_id and r.tenant == tenant:  # type: ignore[union-attr]
                    bodies[q] = e
        return [
            MessageInfo(session_id=session_id, user_id=b.user_id, role=b.role, content=b.content, sequence=q,
                        time=_from_us(tm), metadata=dict(b.metadata))
            for q, tm, _ in rows if (b := bodies.get(q)) is not None
        ]

    def pending_extractions(self) -> list[tuple[str, MessageInfo]]:
        """(tenant, message) of every live user message no ``ExtractionCompleted`` covers yet, oldest first per session."""
        with self._lock:
            todo = [(k, set(v)) for k, v in self._todo.items()]
        return [(t, m) for (t, sid), seqs in todo for m in self.messages(t, sid, seqs)]

    def names(self, tenant: str, session_id: str) -> set[str]:
        """The participant names (``metadata["name"]``) of a session's live messages."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return set() if s is None or s.forgotten else set(s.names)

    def labels(self, tenant: str, session_id: str) -> dict[str, int]:
        """Speaker labels (``"Name: "``) that start a session's live messages without ``metadata["name"]``, with counts."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            return {} if s is None or s.forgotten else dict(s.label_n)

    def participants(self, tenant: str, user_id: str) -> tuple[set[str], dict[str, int]]:
        """A user's participant names: ``metadata["name"]`` of every live session, and the
        speaker-label counts of the sessions that have no metadata name (one lock, no log read)."""
        names: set[str] = set()
        labels: dict[str, int] = {}
        with self._lock:
            for sid in self._user_sessions.get((tenant, user_id), ()):
                s = self._sessions.get((tenant, sid))
                if s is None or s.forgotten or s.user_id != user_id:
                    continue
                if s.names:
                    names.update(s.names)
                else:
                    for label, c in s.label_n.items():
                        labels[label] = labels.get(label, 0) + c
        return names, labels

    def summary(self, tenant: str, session_id: str) -> tuple[int, str | None, int]:
        """(epoch, text, upto_sequence) of the session's latest summary; (0, None, -1) when none."""
        with self._lock:
            s = self._sessions.get((tenant, session_id))
            if s is None or s.summary is None:
                return (0, None, -1)
            return (s.summary[0], s.summary[1], s.summary[2])

    def facts(self, tenant: str, user_id: str, include_inactive: bool = False) -> list[FactInfo]:
        """A user's facts, newest first; only active ones unless ``include_inactive``."""
        with self._lock:
            facts = self._facts.get((tenant, user_id), {})
            out = [f.info(fid) for fid, f in facts.items() if include_inactive or f.status == "active"]
        out.sort(key=lambda f: (f.created, f.fact_id), reverse=True)
        return out

    def fact_counts(self, tenant: str, cap: int | None = None) -> dict[str, int]:
        """Facts of a tenant by status, and how many users hold ``cap`` or more active facts."""
        out = {"active": 0, "superseded": 0, "deleted": 0, "pruned": 0, "users": 0, "users_at_cap": 0}
        with self._lock:
            for (t, _), facts in self._facts.items():
                if t != tenant:
                    continue
                out["users"] += 1
                active = 0
                for f in facts.values():
                    out[f.status] = out.get(f.status, 0) + 1
                    active += f.status == "active"
                out["users_at_cap"] += cap is not None and active >= cap
        return out

    def fact(self, tenant: str, fact_id: str) -> FactInfo | None:
        """One fact (any status) or None."""
        with self._lock:
            f = self._fact(tenant, fact_id)
            return None if f is None else f.info(fact_id)

    def fact_history(self, tenant: str, fact_id: str) -> list[tuple[dt.datetime, str, dict[str, Any]]]:
        """A fact's events as (log time, event type name, detail), oldest first."""
        with self._lock:
            f = self._fact(tenant, fact_id)
            return [] if f is None else sorted(f.history, key=lambda h: h[0])

    def notes(self, tenant: str, user_id: str) -> list[NoteInfo]:
        """A user's notes, newest first."""
        with self._lock:
            out = list(self._notes.get((tenant, user_id), {}).values())
        out.sort(key=lambda n: (n.time, n.note_id), reverse=True)
        return out

    def note(self, tenant: str, note_id: str) -> NoteInfo | None:
        """One note or None."""
        with self._lock:
            u = self._note_owner.get((tenant, note_id))
            return None if u is None else self._notes.get((tenant, u), {}).get(note_id)

    def schedules(self, tenant: str, user_id: str) -> list[ScheduleInfo]:
        """A user's schedules, oldest first."""
        with self._lock:
            out = [s.info(sid) for sid, s in self._decoded((tenant, user_id)).items()]
        out.sort(key=lambda s: (s.created, s.schedule_id))
        return out

    def schedule(self, tenant: str, schedule_id: str) -> ScheduleInfo | None:
        """One schedule or None."""
        with self._lock:
            s = self._schedule(tenant, schedule_id)
            return None if s is None else s.info(schedule_id)

    def users(self, tenant: str) -> list[str]:
        """Users of a tenant that have any live session, fact, note or schedule."""
        with self._lock:
            found = {s.user_id for (t, _), s in self._sessions.items() if t == tenant and s.user_id and not s.forgotten}
            for d in (self._facts, self._notes, self._schedules):
                found.update(u for (t, u), items in d.items() if t == tenant and items)
        return sorted(found)

    def user_counts(self, tenant: str, user_id: str) -> dict[str, Any]:
        """A user's sessions, messages, active facts, notes, schedules and last activity (no rows built)."""
        with self._lock:
            ss = [s for sid in self._user_sessions.get((tenant, user_id), ())
                  if (s := self._sessions.get((tenant, sid))) is not None and not s.forgotten and s.user_id == user_id]
            facts = self._facts.get((tenant, user_id), {})
            notes = self._notes.get((tenant, user_id), {})
            scheds = self._decoded((tenant, user_id))
            times = [s.last for s in ss] + [f.updated for f in facts.values()] + [n.time for n in notes.values()]
            times += [x.updated for x in scheds.values()]
            return {"sessions": len(ss), "messages": sum(len(s.seqs) for s in ss),
                    "facts": sum(f.status == "active" for f in facts.values()), "notes": len(notes),
                    "schedules": len(scheds), "last_activity": max(times, default=None)}

    def facts_page(self, tenant: str, user_id: str, *, status: str | None = None, category: str | None = None,
                   offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """One page of a user's facts of any status (newest first), with counts by status and by category:
        only the page's rows are built (a user may hold many thousands)."""
        status_n: dict[str, int] = {}
        category_n: dict[str, int] = {}
        with self._lock:
            facts = self._facts.get((tenant, user_id), {})
            keys = []
            for fid, f in facts.items():
                status_n[f.status] = status_n.get(f.status, 0) + 1
                category_n[f.category] = category_n.get(f.category, 0) + 1
                if (status is None or f.status == status) and (category is None or f.category == category):
                    keys.append((f.created, fid))
            keys.sort(reverse=True)
            rows = [facts[fid].info(fid) for _, fid in keys[offset:offset + limit]]
        return {"facts": rows, "total": len(keys), "statuses": status_n, "categories": category_n}

    def item(self, tenant: str, namespace: tuple[str, ...], key: str) -> ItemInfo | None:
        """One framework store item, or None."""
        with self._lock:
            return self._items.get((tenant, tuple(namespace)), {}).get(key)

    def item_by_id(self, tenant: str, item_id: str) -> ItemInfo | None:
        """One framework store item by its id, or None."""
        with self._lock:
            at = self._item_at.get((tenant, item_id))
            return None if at is None else self._items.get((tenant, at[0]), {}).get(at[1])

    def item_namespaces(self, tenant: str) -> list[tuple[str, ...]]:
        """Namespaces of the tenant that hold at least one item, sorted."""
        with self._lock:
            return sorted(ns for (t, ns), b in self._items.items() if t == tenant and b)

    def items(self, tenant: str, prefix: tuple[str, ...] = ()) -> list[ItemInfo]:
        """Items of the tenant under a namespace prefix, newest update first."""
        n = len(prefix)
        with self._lock:
            out = [it for (t, ns), b in self._items.items() if t == tenant and ns[:n] == tuple(prefix) for it in b.values()]
        out.sort(key=lambda i: (i.updated_at, i.namespace, i.key), reverse=True)
        return out

    def embedder(self) -> tuple[str, int] | None:
        """(model_id, dim) from the last ``EmbedderChanged`` event, or None."""
        with self._lock:
            return self._embedder

    # -- snapshots ---------------------------------------------------------------------
    def _tables(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The whole fold as Arrow tables (lock held): what a snapshot holds (``_state_tables``)."""
        return fold_tables(self)

    def tables(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The fold as Arrow tables and meta, what a snapshot holds (for a fold kept apart: a schedules actor's)."""
        with self._lock:
            return self._tables()

    def restore(self, tables: dict[str, pa.Table], meta: dict[str, Any]) -> None:
        """Replace the fold by the one ``tables()`` gave."""
        with self._lock:
            self._restore(tables, meta)

    def _load_snapshot(self) -> None:
        """Start from the newest valid snapshot (if any): the Projector then replays only the tail."""
        assert self._store is not None
        heads = {p: self._log.head(p) for p in range(self._log.partitions)} if self._log is not None else None
        snap = self._store.load(heads)
        if snap is None:
            return
        try:
            self._restore(snap.tables, snap.meta)
        except Exception as e:  # noqa: BLE001 - a snapshot that passed its checksum but not our reader
            import warnings

            from ._snapshot import SnapshotWarning

            warnings.warn(f"eidetica: ignoring snapshot {snap.path}: {e}; replaying the log instead", SnapshotWarning,
                          stacklevel=2)
            self._clear()
            return
        self._checkpoint = dict(snap.checkpoint)
        self.snapshot_checkpoint = dict(snap.checkpoint)
        self.snapshot_created = snap.created

    def _restore(self, t: dict[str, pa.Table], meta: dict[str, Any]) -> None:
        restore_fold(self, t, meta)

    def snapshot(self) -> dict[str, Any]:
        """Every tenant's state as plain data (for comparing folds in tests and tools)."""
        with self._lock:
            tenants = sorted({t for t, _ in self._sessions} | {t for t, _ in self._facts} | {t for t, _ in self._items}
                             | {t for t, _ in self._notes} | {t for t, _ in self._schedules})
            out: dict[str, Any] = {}
            for t in tenants:
                users = self.users(t)
                out[t] = {
                    "sessions": [(i, self.messages(t, i.session_id), self.summary(t, i.session_id))
                                 for i in self.sessions(t, include_forgotten=True)],
                    "facts": {u: self.facts(t, u, include_inactive=True) for u in users},
                    "notes": {u: self.notes(t, u) for u in users},
                    "schedules": {u: self.schedules(t, u) for u in users},
                    "items": self.items(t),
                }
            dump: dict[str, Any] = msgspec.to_builtins(out)
            return dump


_HANDLERS: dict[type, Any] = {
    ev.SessionStarted: StateProjection._on_session_started,
    ev.MessageAppended: StateProjection._on_message,
    ev.MessageRetracted: StateProjection._on_message_retracted,
    ev.SummaryCommitted: StateProjection._on_summary,
    ev.SessionForgotten: StateProjection._on_session_forgotten,
    ev.UserForgotten: StateProjection._on_user_forgotten,
    ev.ExtractionCompleted: StateProjection._on_extraction,
    ev.FactAsserted: StateProjection._on_fact_asserted,
    ev.FactReinforced: StateProjection._on_fact_reinforced,
    ev.FactDecayed: StateProjection._on_fact_decayed,
    ev.FactSuperseded: StateProjection._on_fact_superseded,
    ev.FactPruned: StateProjection._on_fact_pruned,
    ev.FactDeleted: StateProjection._on_fact_deleted,
    ev.NoteStored: StateProjection._on_note_stored,
    ev.NoteDeleted: StateProjection._on_note_deleted,
    ev.NoteUpdated: StateProjection._on_note_updated,
    ev.ScheduleCreated: StateProjection._on_schedule_created,
    ev.ScheduleUpdated: StateProjection._on_schedule_updated,
    ev.ScheduleDeleted: StateProjection._on_schedule_deleted,
    ev.ScheduleRun: StateProjection._on_schedule_run,
    ev.EmbedderChanged: StateProjection._on_embedder_changed,
    ev.ItemPut: StateProjection._on_item_put,
    ev.ItemTouched: StateProjection._on_item_touched,
    ev.ItemDeleted: StateProjection._on_item_deleted,
}
