"""Schedules: agent reminders and recurring jobs (cron with time zone, once, interval)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter

from ..errors import InvalidInput, NotFound
from ..events import EventLog, NewEvent, ScheduleCreated, ScheduleDeleted, ScheduleRun, ScheduleUpdated, UserForgotten
from ..events.streams import schedules_stream
from ._config import MemoryConfig
from ._text import check_id, check_text

__all__ = ["Schedules", "ScheduleInfo", "CADENCES"]

CADENCES = ("cron", "once", "interval")
_UPDATABLE = {"name", "cadence", "expression", "timezone", "payload", "enabled"}


class ScheduleInfo(msgspec.Struct, kw_only=True):
    """A schedule and its recent runs."""

    id: str
    user_id: str
    name: str
    cadence: str
    expression: str
    timezone: str = "UTC"
    payload: dict[str, Any] = {}
    enabled: bool = True
    next_run_at: dt.datetime | None = None
    created: dt.datetime | None = None
    runs: list[dict[str, Any]] = []


def _zone(name: Any) -> ZoneInfo:
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput("timezone", f"unknown time zone {name!r}", name) from None


def next_run(cadence: str, expression: str, timezone: str, after: dt.datetime, min_interval: int) -> dt.datetime | None:
    """When a schedule runs next after ``after`` (None for a finished one-shot)."""
    tz = _zone(timezone)
    if cadence == "cron":
        if not isinstance(expression, str) or not croniter.is_valid(expression):
            raise InvalidInput("expression", f"{expression!r} is not a valid cron expression", expression)
        return croniter(expression, after.astimezone(tz)).get_next(dt.datetime).astimezone(dt.timezone.utc)
    if cadence == "interval":
        try:
            seconds = int(expression)
        except (TypeError, ValueError):
            raise InvalidInput("expression", "an interval is a whole number of seconds", expression) from None
        if seconds < min_interval:
            raise InvalidInput("expression", f"interval {seconds}s is under the minimum of {min_interval}s", expression)
        return after + dt.timedelta(seconds=seconds)
    if cadence == "once":
        try:
            when = dt.datetime.fromisoformat(str(expression))
        except ValueError:
            raise InvalidInput("expression", "a one-shot time is an ISO 8601 datetime", expression) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=tz)
        when = when.astimezone(dt.timezone.utc)
        return when if when > after else None
    raise InvalidInput("cadence", f"must be one of {', '.join(CADENCES)}", cadence)


class Schedules:
    """create/get/search/count/update/delete/due/record_run over one tenant's schedules."""

    def __init__(self, log: EventLog, tenant: str, config: MemoryConfig, clock: Callable[[], dt.datetime]) -> None:
        self.log = log
        self.tenant = tenant
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._items: dict[str, ScheduleInfo] = {}
        prefix = schedules_stream(tenant, "")
        for stream in getattr(log, "streams", lambda: [])():
            if stream.startswith(prefix):
                for rec in log.read_stream(stream):
                    self._fold(rec.decode(), rec.time)

    def _fold(self, ev: Any, time: dt.datetime) -> None:
        if isinstance(ev, ScheduleCreated):
            self._items[ev.schedule_id] = ScheduleInfo(
                id=ev.schedule_id, user_id=ev.user_id, name=ev.name, cadence=ev.cadence, expression=ev.expression,
                timezone=ev.timezone, payload=dict(ev.payload), next_run_at=ev.next_run_at, created=time,
            )
        elif isinstance(ev, ScheduleUpdated) and ev.schedule_id in self._items:
            s = self._items[ev.schedule_id]
            for k, v in ev.changes.items():
                if k == "next_run_at":
                    v = dt.datetime.fromisoformat(v) if v else None
                setattr(s, k, v)
        elif isinstance(ev, ScheduleRun) and ev.schedule_id in self._items:
            s = self._items[ev.schedule_id]
            s.runs = (s.runs + [{"run_at": ev.run_at, "status": ev.status, "result": ev.result}])[-self.config.max_run_history :]
            s.next_run_at = ev.next_run_at
            if ev.next_run_at is None:
                s.enabled = False
        elif isinstance(ev, ScheduleDeleted):
            self._items.pop(ev.schedule_id, None)
        elif isinstance(ev, UserForgotten):
            for k in [k for k, s in self._items.items() if s.user_id == ev.user_id]:
                del self._items[k]

    def _append(self, user: str, ev: Any, time: dt.datetime | None = None) -> None:
        time = time or self.clock()
        self.log.append(schedules_stream(self.tenant, user), [NewEvent.of(ev, tenant=self.tenant, time=time)])
        self._fold(ev, time)

    def _find(self, schedule_id: str, user: str | None) -> ScheduleInfo:
        s = self._items.get(schedule_id) if isinstance(schedule_id, str) else None
        if s is None or (user is not None and s.user_id != user):
            raise NotFound("schedule", str(schedule_id))
        return s

    def create(
        self,
        name: str,
        cadence: str,
        expression: str | int,
        *,
        user: str,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
    ) -> ScheduleInfo:
        """Create a schedule; bad cadence, cron, time zone, past one-shot or short interval raise InvalidInput."""
        check_id("user", user)
        check_text("name", name)
        if cadence not in CADENCES:
            raise InvalidInput("cadence", f"must be one of {', '.join(CADENCES)}", cadence)
        expression = str(expression)
        payload = payload or {}
        if not isinstance(payload, dict):
            raise InvalidInput("payload", "must be a dict", payload)
        now = self.clock()
        nxt = next_run(cadence, expression, timezone, now, self.config.min_interval_seconds)
        if cadence == "once" and nxt is None:
            raise InvalidInput("expression", "a one-shot time must be in the future", expression)
        sid = f"sched-{uuid.uuid4()}"
        ev = ScheduleCreated(
            schedule_id=sid, user_id=user, name=name, cadence=cadence, expression=expression,
            timezone=timezone, payload=payload, next_run_at=nxt,
        )
        with self._lock:
            self._append(user, ev)
            return self._items[sid]

    def get(self, schedule_id: str, *, user: str | None = None) -> ScheduleInfo:
        """One schedule; ``NotFound`` when it is not this tenant's (or user's)."""
        with self._lock:
            return self._find(schedule_id, user)

    def search(self, query: str, *, user: str | None = None, limit: int = 20) -> list[ScheduleInfo]:
        """Schedules whose name or payload contains the query (case-insensitive)."""
        q = check_text("query", query).lower()
        with self._lock:
            items = [
                s for s in self._items.values()
                if (user is None or s.user_id == user)
                and (q in s.name.lower() or q in json.dumps(s.payload, default=str).lower())
            ]
        return sorted(items, key=lambda s: s.created or self.clock())[:limit]

    def count(self, *, user: str | None = None) -> int:
        """How many schedules (of a user, or the tenant)."""
        with self._lock:
            return sum(1 for s in self._items.values() if user is None or s.user_id == user)

    def update(self, schedule_id: str, *, user: str | None = None, **changes: Any) -> ScheduleInfo:
        """Change name, cadence, expression, timezone, payload or enabled; the next run is recomputed."""
        bad = set(changes) - _UPDATABLE
        if bad:
            raise InvalidInput(sorted(bad)[0], f"cannot be updated (allowed: {', '.join(sorted(_UPDATABLE))})")
        with self._lock:
            s = self._find(schedule_id, user)
            merged = {k: getattr(s, k) for k in ("cadence", "expression", "timezone")} | changes
            if merged["cadence"] not in CADENCES:
                raise InvalidInput("cadence", f"must be one of {', '.join(CADENCES)}", merged["cadence"])
            merged["expression"] = str(merged["expression"])
            nxt = next_run(merged["cadence"], merged["expression"], merged["timezone"], self.clock(), self.config.min_interval_seconds)
            if "payload" in changes and not isinstance(changes["payload"], dict):
                raise InvalidInput("payload", "must be a dict", changes["payload"])
            if "expression" in changes:
                changes["expression"] = str(changes["expression"])
            changes["next_run_at"] = nxt.isoformat() if nxt else None
            self._append(s.user_id, ScheduleUpdated(schedule_id=schedule_id, changes=changes))
            return s

    def delete(self, schedule_id: str, *, user: str | None = None) -> None:
        """Delete a schedule."""
        with self._lock:
            s = self._find(schedule_id, user)
            self._append(s.user_id, ScheduleDeleted(schedule_id=schedule_id))

    def due(self, now: dt.datetime | None = None, limit: int = 100) -> list[ScheduleInfo]:
        """Enabled schedules whose next run is at or before ``now``, soonest first."""
        now = now or self.clock()
        if now.tzinfo is None:
            raise InvalidInput("now", "must be timezone-aware", now)
        with self._lock:
            items = [s for s in self._items.values() if s.enabled and s.next_run_at is not None and s.next_run_at <= now]
        return sorted(items, key=lambda s: s.next_run_at)[:limit]  # type: ignore[arg-type, return-value]

    def record_run(
        self, schedule_id: str, run: dict[str, Any] | str | None = None, next_run_at: dt.datetime | None = None, *, user: str | None = None
    ) -> ScheduleInfo:
        """Record that a schedule ran; the next run defaults to the cadence's next time (none for a one-shot)."""
        run = {"status": run} if isinstance(run, str) else dict(run or {})
        now = self.clock()
        run_at = run.get("run_at") or now
        with self._lock:
            s = self._find(schedule_id, user)
            if next_run_at is None and s.cadence != "once":
                next_run_at = next_run(s.cadence, s.expression, s.timezone, max(run_at, now), 0)
            ev = ScheduleRun(
                schedule_id=schedule_id, run_at=run_at, status=str(run.get("status", "ok")),
                result=str(run.get("result", "")), next_run_at=next_run_at,
            )
            self._append(s.user_id, ev)
            return s

    def forget_user(self, user: str) -> None:
        """Drop a user's schedules (the tombstone is written by the caller's forget_user)."""
        with self._lock:
            self._fold(UserForgotten(user_id=user), self.clock())
