"""The state's schedules: each with its fields and run history (a part of ``StateProjection``, issue 41).

Folds of the ``schedules`` events, and the queries on them; the tombstones, the lock and the log are
``StateBase``'s. ``StateProjection`` composes the five aggregates and routes each event to its fold.
"""

from __future__ import annotations

from ..events import RecordedEvent
from ..events import types as ev
from ._records import SUCCESS_STATUSES, ScheduleInfo
from ._state_base import StateBase
from ._state_rows import _as_time, _Schedule, _schedule_from_row

RUN_HISTORY = 100  # runs kept per schedule


class ScheduleFolds(StateBase):
    """The schedules aggregate of the state: its maps, folds and queries."""

    # a schedule restored from a snapshot stays its encoded row until first used (``_decoded``): a
    # schedules actor with many schedules starts without building every one
    _schedules: dict[tuple[str, str], dict[str, _Schedule | bytes]]
    _schedule_owner: dict[tuple[str, str], str]

    def _reset_schedules(self) -> None:
        """Empty this aggregate."""
        self._schedules = {}
        self._schedule_owner = {}

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

    def _forget_user_schedules(self, rec: RecordedEvent, t: str, u: str) -> None:
        """Drop the user's schedules created no later than the forget."""
        scheds = self._decoded((t, u))
        for sid in [s for s, x in scheds.items() if x.created <= rec.time]:
            del scheds[sid]
            self._schedule_owner.pop((t, sid), None)
