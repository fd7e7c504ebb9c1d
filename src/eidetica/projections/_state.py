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
from ._state_facts import FactFolds
from ._state_items import ItemFolds
from ._state_notes import NoteFolds
from ._state_rows import (
    _utcnow,
)
from ._state_schedules import ScheduleFolds
from ._state_sessions import SessionFolds
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



_TYPES = frozenset(t.__struct_config__.tag for t in ev.EVENT_TYPES) - {"ChunksEmbedded"}


class StateProjection(SessionFolds, FactFolds, NoteFolds, ScheduleFolds, ItemFolds, Projection):
    """In-memory folds of sessions, summaries, facts, notes, schedules and items, per tenant.

    One aggregate a module (``_state_sessions``, ``_state_facts``, ``_state_notes``, ``_state_schedules``,
    ``_state_items``, on ``_state_base``'s lock and tombstones); this class is the port, routes each
    event to its aggregate's fold, forgets users across them, and snapshots the whole.
    """

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
        self._reset_tombs()
        self._reset_sessions()
        self._reset_facts()
        self._reset_notes()
        self._reset_schedules()
        self._reset_items()
        self._embedder: tuple[str, int] | None = None

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

    def _on_user_forgotten(self, rec: RecordedEvent, e: ev.UserForgotten) -> None:
        t, u = rec.tenant, e.user_id
        kind = parse_stream(rec.stream)[0] if rec.stream.count(":") == 2 else ""
        scope = kind if kind in ("facts", "notes", "schedules", "items") else "all"
        prev = self._user_tomb.get((t, u, scope))
        self._user_tomb[(t, u, scope)] = rec.time if prev is None else max(prev, rec.time)
        if scope == "all":
            self._forget_user_sessions(rec, t, u)
        if scope in ("facts", "all"):
            self._forget_user_facts(rec, t, u)
        if scope in ("notes", "all"):
            self._forget_user_notes(rec, t, u)
        if scope in ("items", "all"):
            self._forget_user_items(rec, t, u)
        if scope in ("schedules", "all"):
            self._forget_user_schedules(rec, t, u)

    def _on_embedder_changed(self, rec: RecordedEvent, e: ev.EmbedderChanged) -> None:
        self._embedder = (e.model_id, e.dim)

    # -- queries -----------------------------------------------------------------------
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
