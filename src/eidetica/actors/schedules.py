"""Schedules: agent reminders and recurring jobs (cron with time zone, once, interval).

``SchedulesActor`` is the single writer of one user's schedules stream (appends carry its
expected version, like Notes and the FactCurator; its fold starts from its snapshot plus the
stream's tail, ``_snapshots``: runs make the stream long); ``Schedules`` is the tenant-wide face the
facade hands out: writes go to the user's actor through the runtime, reads come from the
one schedule read model, ``projections.ScheduleInfo`` folded by the ``StateProjection``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter

from ..errors import InvalidInput, NotFound
from ..events import (
    EventLog,
    NewEvent,
    RecordedEvent,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleRun,
    ScheduleUpdated,
    UserForgotten,
)
from ..events.streams import schedules_stream
from ..projections import ScheduleInfo, StateProjection
from ._config import MemoryConfig
from ._owner import StreamOwner
from ._snapshots import ActorSnapshot, ActorSnapshots, save_actor, start_actor
from ._text import check_id, check_text
from ._writer import append_expecting

__all__ = ["Schedules", "SchedulesActor", "ScheduleInfo", "CADENCES", "OUTPUT_SUMMARY_CHARS"]

OUTPUT_SUMMARY_CHARS = 500
SNAPSHOT_SCHEMA = 1  # of the actor's snapshot (the state projection's tables); bump on any change there
_CUT = " [... {n} more characters cut]"

CADENCES = ("cron", "once", "interval")
SCHEDULE_STATUSES = ("enabled", "disabled")  # what search, list_all and count filter on
_UPDATABLE = {"name", "cadence", "expression", "timezone", "payload", "enabled"}


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
        it = croniter(expression, after.astimezone(tz))
        first = it.get_next(dt.datetime)
        if min_interval > 0:
            gap = _shortest_cron_gap(it, first, min_interval)
            if gap < min_interval:
                raise InvalidInput(
                    "expression", f"cron {expression!r} runs every {gap:.0f}s at times, under the minimum of {min_interval}s",
                    expression,
                )
        return first.astimezone(dt.timezone.utc)
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


def _shortest_cron_gap(it: Any, first: dt.datetime, floor: int, runs: int = 400) -> float:
    """The shortest gap between the next ``runs`` firings (stops early once under ``floor``)."""
    prev, best = first, float("inf")
    for _ in range(runs):
        nxt = it.get_next(dt.datetime)
        best = min(best, (nxt - prev).total_seconds())
        if best < floor:
            break
        prev = nxt
    return best


def output_summary(text: Any) -> str:
    """At most ``OUTPUT_SUMMARY_CHARS`` characters of a run's output; a longer one is cut with a marker saying how much."""
    text = "" if text is None else str(text)
    if len(text) <= OUTPUT_SUMMARY_CHARS:
        return text
    keep = OUTPUT_SUMMARY_CHARS - len(_CUT.format(n=len(text)))
    return text[:keep] + _CUT.format(n=len(text) - keep)


class SchedulesActor(StreamOwner):
    """The single writer of one user's schedules; its state is the schedule read model folded from its stream."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, config: MemoryConfig, clock: Callable[[], dt.datetime],
                 snapshots: ActorSnapshots | None = None) -> None:
        self.log = log
        self.snapshots = snapshots
        self.tenant = tenant
        self.user_id = user_id
        self.config = config
        self.clock = clock
        self.stream = schedules_stream(tenant, user_id)
        self._lock = threading.RLock()
        self.reload()

    def reload(self) -> None:
        """Rebuild the fold (constructor, and after a concurrent writer): snapshot + the stream's tail, or the whole stream."""
        with self._lock:
            start_actor(self, "schedules", SNAPSHOT_SCHEMA, lambda recs: self._view.apply(recs))
            self.save_snapshot()  # a long replay is paid once, not on every start

    def _reset(self) -> None:
        self._view = StateProjection()
        self._covered = -1  # the stream version the snapshot on disk covers

    def _restore(self, snap: ActorSnapshot) -> None:
        self._view.restore(snap.tables, snap.meta)
        self.version = max(self.version, snap.version)
        self._covered = snap.version

    def save_snapshot(self, force: bool = False) -> bool:
        """Write the actor's snapshot when ``snapshots.every`` events are not covered by it (any, when forced)."""
        return save_actor(self, "schedules", SNAPSHOT_SCHEMA, self._view.tables, force)

    def _commit(self, build: Callable[[], list[Any]], now: dt.datetime | None = None) -> None:
        """Append what ``build`` decides on the current fold, with the fold's version expected; refold and redo on a race."""
        with self._lock:
            when = now or self.clock()
            appended, first, _ = append_expecting(self, lambda: [NewEvent.of(e, tenant=self.tenant, time=when) for e in build()])
            base = self.version - len(appended)  # the version the append followed (a refold may have moved it)
            self._view.apply([
                RecordedEvent(offset=first + k, event_id=n.event_id, stream=self.stream, version=base + 1 + k,
                              type=n.type, time=n.time or when, tenant=self.tenant, payload=n.payload)
                for k, n in enumerate(appended)
            ])

    def _find(self, schedule_id: Any) -> ScheduleInfo:
        s = self._view.schedule(self.tenant, schedule_id) if isinstance(schedule_id, str) else None
        if s is None or s.user_id != self.user_id:
            raise NotFound("schedule", str(schedule_id))
        return s

    def get(self, schedule_id: str) -> ScheduleInfo:
        """One of the user's schedules."""
        with self._lock:
            return self._find(schedule_id)

    def list(self) -> list[ScheduleInfo]:
        """The user's schedules, oldest first."""
        with self._lock:
            return self._view.schedules(self.tenant, self.user_id)

    def create(self, name: str, cadence: str, expression: str, timezone: str = "UTC",
               payload: dict[str, Any] | None = None, now: dt.datetime | None = None) -> ScheduleInfo:
        """Create a schedule; bad cadence, cron, time zone, past one-shot or short interval/cron raise InvalidInput."""
        check_text("name", name)
        if cadence not in CADENCES:
            raise InvalidInput("cadence", f"must be one of {', '.join(CADENCES)}", cadence)
        expression = str(expression)
        payload = payload or {}
        if not isinstance(payload, dict):
            raise InvalidInput("payload", "must be a dict", payload)
        now = now or self.clock()  # the caller's clock: on Ray the actor's copy of a custom clock is frozen
        nxt = next_run(cadence, expression, timezone, now, self.config.min_interval_seconds)
        if cadence == "once" and nxt is None:
            raise InvalidInput("expression", "a one-shot time must be in the future", expression)
        sid = f"sched-{uuid.uuid4()}"
        ev = ScheduleCreated(schedule_id=sid, user_id=self.user_id, name=name, cadence=cadence, expression=expression,
                             timezone=timezone, payload=payload, next_run_at=nxt)
        self._commit(lambda: [ev], now)
        return self.get(sid)

    def update(self, schedule_id: str, changes: dict[str, Any], now: dt.datetime | None = None) -> ScheduleInfo:
        """Change name, cadence, expression, timezone, payload or enabled; the next run is recomputed."""
        bad = set(changes) - _UPDATABLE
        if bad:
            raise InvalidInput(sorted(bad)[0], f"cannot be updated (allowed: {', '.join(sorted(_UPDATABLE))})")
        if "payload" in changes and not isinstance(changes["payload"], dict):
            raise InvalidInput("payload", "must be a dict", changes["payload"])
        if "enabled" in changes and not isinstance(changes["enabled"], bool):
            raise InvalidInput("enabled", "must be True or False", changes["enabled"])
        if "name" in changes:
            check_text("name", changes["name"])

        def build() -> list[Any]:
            s = self._find(schedule_id)  # decided on the current fold: a refold redoes it
            merged = {"cadence": s.cadence, "expression": s.expression, "timezone": s.timezone} | changes
            if merged["cadence"] not in CADENCES:
                raise InvalidInput("cadence", f"must be one of {', '.join(CADENCES)}", merged["cadence"])
            merged["expression"] = str(merged["expression"])
            nxt = next_run(merged["cadence"], merged["expression"], merged["timezone"], when,
                           self.config.min_interval_seconds)
            out = dict(changes)
            if "expression" in out:
                out["expression"] = str(out["expression"])
            out["next_run_at"] = nxt.isoformat() if nxt else None
            return [ScheduleUpdated(schedule_id=schedule_id, changes=out)]

        when = now or self.clock()
        self._commit(build, when)
        return self.get(schedule_id)

    def delete(self, schedule_id: str, now: dt.datetime | None = None) -> None:
        """Delete a schedule."""
        def build() -> list[Any]:
            self._find(schedule_id)  # NotFound when it is gone (a refold redoes the check)
            return [ScheduleDeleted(schedule_id=schedule_id)]

        self._commit(build, now)

    def record_run(self, schedule_id: str, run: dict[str, Any], next_run_at: dt.datetime | None = None,
                   now: dt.datetime | None = None) -> ScheduleInfo:
        """Record that a schedule ran; the next run defaults to the cadence's next time (none for a one-shot)."""
        now = now or self.clock()
        run_at = run.get("run_at") or now
        if not isinstance(run_at, dt.datetime) or run_at.utcoffset() is None:
            raise InvalidInput("run_at", "must be a timezone-aware datetime", run_at)
        run_id = check_id("run_id", run["run_id"]) if run.get("run_id") is not None else f"run-{uuid.uuid4()}"

        def build() -> list[Any]:
            s = self._find(schedule_id)
            nxt = next_run_at
            if nxt is None and s.cadence != "once":
                nxt = next_run(s.cadence, s.expression, s.timezone, max(run_at, now), 0)
            result = str(run.get("result", ""))
            output = "" if run.get("output", result) is None else str(run.get("output", result))
            summary = output_summary(output)
            return [ScheduleRun(schedule_id=schedule_id, run_at=run_at, status=str(run.get("status", "ok")), result=result,
                                next_run_at=nxt, output_summary=summary, output="" if summary == output else output,
                                run_id=run_id)]

        self._commit(build, now)
        return self.get(schedule_id)

    def forget_user(self) -> None:
        """Append the user tombstone to the schedules stream."""
        with self._lock:
            self._commit(lambda: [UserForgotten(user_id=self.user_id)])
            if self.snapshots is not None:
                self.snapshots.drop("schedules", self.stream)  # it holds the forgotten schedules
                self._covered = -1


class Schedules:
    """create/get/search/count/update/delete/due/record_run over one tenant's schedules.

    Writes go to the user's ``SchedulesActor`` (through the runtime: one writer per user on
    either runtime); reads come from the store's ``StateProjection`` after catching up.
    """

    def __init__(self, tenant: str, config: MemoryConfig, clock: Callable[[], dt.datetime],
                 actor: Callable[[str], Any], state: Callable[[], Any]) -> None:
        self.tenant = tenant
        self.config = config
        self.clock = clock
        self._actor = actor  # user -> that user's SchedulesActor (or its Ray proxy)
        self._state = state  # caught-up StateProjection (or its Ray proxy)

    def _trim(self, s: ScheduleInfo, history: int | None = None) -> ScheduleInfo:
        keep = self.config.max_run_history if history is None else history
        return msgspec.structs.replace(s, runs=s.runs[-keep:] if keep else [])

    def _all(self, user: str | None) -> list[ScheduleInfo]:
        st = self._state()
        users = [user] if user is not None else st.users(self.tenant)
        return [s for u in users for s in st.schedules(self.tenant, u)]

    def _select(self, query: str | None, user: str | None, status: str | None) -> list[ScheduleInfo]:
        """The schedules matching a query (name or payload, any case) and a status, oldest first."""
        if status is not None and status not in SCHEDULE_STATUSES:
            raise InvalidInput("status", f"must be one of {', '.join(SCHEDULE_STATUSES)}", status)
        q = None if query is None else check_text("query", query).lower()
        items = [s for s in self._all(user)
                 if (q is None or q in s.name.lower() or q in json.dumps(s.payload, default=str).lower())
                 and (status is None or s.enabled == (status == "enabled"))]
        return sorted(items, key=lambda s: (s.created, s.schedule_id))

    def _page(self, items: list[ScheduleInfo], limit: int, offset: int) -> list[ScheduleInfo]:
        for field, value, low in (("limit", limit, 1), ("offset", offset, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidInput(field, f"must be an int >= {low}", value)
        return [self._trim(s) for s in items[offset : offset + limit]]

    def _owner(self, schedule_id: Any, user: str | None) -> str:
        s = self._state().schedule(self.tenant, schedule_id) if isinstance(schedule_id, str) else None
        if s is None or (user is not None and s.user_id != user):
            raise NotFound("schedule", str(schedule_id))
        return s.user_id

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
        return self._trim(self._actor(user).create(name, cadence, str(expression), timezone, payload, self.clock()))

    def get(self, schedule_id: str, *, user: str | None = None, history: int | None = None) -> ScheduleInfo:
        """One schedule with its last ``history`` runs (default ``max_run_history``), each with its full ``output``."""
        if history is not None and (isinstance(history, bool) or not isinstance(history, int) or history < 0):
            raise InvalidInput("history", "must be an int >= 0", history)
        s = self._state().schedule(self.tenant, schedule_id) if isinstance(schedule_id, str) else None
        if s is None or (user is not None and s.user_id != user):
            raise NotFound("schedule", str(schedule_id))
        return self._trim(s, history)

    def search(self, query: str, *, user: str | None = None, limit: int = 20, offset: int = 0,
               status: str | None = None) -> list[ScheduleInfo]:
        """Schedules whose name or payload contains the query (case-insensitive), oldest first; ``count`` gives the total."""
        return self._page(self._select(query, user, status), limit, offset)

    def list_all(self, *, user: str | None = None, limit: int = 20, offset: int = 0,
                 status: str | None = None) -> list[ScheduleInfo]:
        """Every schedule (of a user, or the tenant), oldest first (``status``: enabled or disabled)."""
        return self._page(self._select(None, user, status), limit, offset)

    def count(self, *, user: str | None = None, query: str | None = None, status: str | None = None) -> int:
        """How many schedules (of a user, or the tenant; matching ``query`` and ``status``): a search's total."""
        return len(self._select(query, user, status))

    def update(self, schedule_id: str, *, user: str | None = None, **changes: Any) -> ScheduleInfo:
        """Change name, cadence, expression, timezone, payload or enabled; the next run is recomputed."""
        return self._trim(self._actor(self._owner(schedule_id, user)).update(schedule_id, changes, self.clock()))

    def delete(self, schedule_id: str, *, user: str | None = None) -> None:
        """Delete a schedule."""
        self._actor(self._owner(schedule_id, user)).delete(schedule_id, self.clock())

    def due(self, now: dt.datetime | None = None, limit: int = 100) -> list[ScheduleInfo]:
        """Enabled schedules whose next run is at or before ``now``, soonest first (with runs and consecutive_failures)."""
        now = now or self.clock()
        if not isinstance(now, dt.datetime) or now.tzinfo is None:
            raise InvalidInput("now", "must be timezone-aware", now)
        items = [s for s in self._all(None) if s.enabled and s.next_run_at is not None and s.next_run_at <= now]
        return [self._trim(s) for s in sorted(items, key=lambda s: s.next_run_at)[:limit]]  # type: ignore[arg-type, return-value]

    def record_run(
        self, schedule_id: str, run: dict[str, Any] | str | None = None, next_run_at: dt.datetime | None = None, *, user: str | None = None
    ) -> ScheduleInfo:
        """Record a run (status, result, ``output``: summarised to 500 characters); the next run defaults to the cadence's."""
        run = {"status": run} if isinstance(run, str) else dict(run or {})
        return self._trim(self._actor(self._owner(schedule_id, user)).record_run(schedule_id, run, next_run_at, self.clock()))
