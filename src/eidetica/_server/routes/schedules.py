"""``/v1/schedules``: schedules and their runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ...memory import Memory
from .common import Api, _Body, _json, _set, _wrote

__all__ = ["router"]


class ScheduleIn(_Body):
    """A new schedule."""

    name: Any = None
    cadence: Any = None
    expression: Any = None
    user: Any = None
    timezone: Any = "UTC"
    payload: Any = None


class ScheduleChangeIn(_Body):
    """Changes to a schedule."""

    user: Any = None
    name: Any = None
    cadence: Any = None
    expression: Any = None
    timezone: Any = None
    payload: Any = None
    enabled: Any = None


class RunIn(_Body):
    """A recorded run of a schedule."""

    run: Any = None
    next_run_at: dt.datetime | None = None
    user: Any = None


def router(api: Api) -> APIRouter:
    """The schedules' routes."""
    r = APIRouter()
    M = api.M

    @r.post("/v1/schedules", tags=["schedules"], status_code=201)
    def create_schedule(body: ScheduleIn, m: Memory = M) -> Response:
        """Create a schedule."""
        kw = _set(body)
        args = [kw.pop(k, None) for k in ("name", "cadence", "expression")]
        return _wrote(m, m.schedules.create(*args, user=kw.pop("user", None), **kw), 201)

    @r.get("/v1/schedules", tags=["schedules"])
    def search_schedules(query: str = "", user: str | None = None, limit: int = 20, offset: int = 0,
                         status: str | None = None, m: Memory = M) -> Response:
        """Schedules whose name or payload contains ``query`` (all when empty), oldest first; ``/count`` gives the total."""
        if not query:
            return _json(m.schedules.list_all(user=user, limit=limit, offset=offset, status=status))
        return _json(m.schedules.search(query, user=user, limit=limit, offset=offset, status=status))

    @r.get("/v1/schedules/count", tags=["schedules"])
    def count_schedules(user: str | None = None, query: str | None = None, status: str | None = None,
                        m: Memory = M) -> Response:
        """How many schedules (of a user, or the tenant; matching ``query`` and ``status``)."""
        return _json({"count": m.schedules.count(user=user, query=query, status=status)})

    @r.get("/v1/schedules/due", tags=["schedules"])
    def due(now: dt.datetime | None = None, limit: int = 100, m: Memory = M) -> Response:
        """Enabled schedules due at ``now``, soonest first."""
        return _json(m.schedules.due(now, limit))

    @r.get("/v1/schedules/{schedule_id}", tags=["schedules"])
    def get_schedule(schedule_id: str, user: str | None = None, history: int | None = None,
                     m: Memory = M) -> Response:
        """One schedule with its last ``history`` runs (each with its full output)."""
        return _json(m.schedules.get(schedule_id, user=user, history=history))

    @r.patch("/v1/schedules/{schedule_id}", tags=["schedules"])
    def update_schedule(schedule_id: str, body: ScheduleChangeIn, m: Memory = M) -> Response:
        """Change a schedule; its next run is recomputed."""
        kw = _set(body)
        return _wrote(m, m.schedules.update(schedule_id, user=kw.pop("user", None), **kw))

    @r.delete("/v1/schedules/{schedule_id}", tags=["schedules"])
    def delete_schedule(schedule_id: str, user: str | None = None, m: Memory = M) -> Response:
        """Delete a schedule."""
        m.schedules.delete(schedule_id, user=user)
        return _wrote(m, {"deleted": schedule_id})

    @r.post("/v1/schedules/{schedule_id}/runs", tags=["schedules"])
    def record_run(schedule_id: str, body: RunIn, m: Memory = M) -> Response:
        """Record that a schedule ran."""
        return _wrote(m, m.schedules.record_run(schedule_id, body.run, body.next_run_at, user=body.user))
    return r
