"""The state's read models: what ``StateProjection`` answers (sessions, messages, facts, notes, schedules, items)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import msgspec

__all__ = ["SessionInfo", "MessageInfo", "FactInfo", "FactStatus", "NoteInfo", "ScheduleInfo", "ItemInfo",
           "SUCCESS_STATUSES"]

FactStatus = Literal["active", "superseded", "deleted", "pruned"]


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A session's summary line: who, how many messages, when."""

    session_id: str
    user_id: str
    message_count: int
    last_time: dt.datetime
    started_time: dt.datetime
    forgotten: bool = False


class MessageInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a session (a ``MessageAppended`` plus its log time)."""

    session_id: str
    user_id: str
    role: str
    content: str
    sequence: int
    time: dt.datetime
    metadata: dict[str, Any] = {}


class FactInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A fact about a user with its current confidence and status."""

    fact_id: str
    content: str
    category: str
    confidence: float
    status: FactStatus
    superseded_by: str | None
    created: dt.datetime
    updated: dt.datetime
    sources: list[dict[str, Any]]
    user_id: str = ""
    metadata: dict[str, Any] = {}  # the caller's, given to remember()
    attribute: str = ""  # the single-valued attribute of the user it sets ("diet", "residence", ...); "" when none


class NoteInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A free-form note about a user."""

    note_id: str
    text: str
    time: dt.datetime
    user_id: str = ""


class ScheduleInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A reminder or recurring job, folded from ScheduleCreated/Updated/Deleted/Run (the one schedule read model)."""

    schedule_id: str
    user_id: str
    name: str
    cadence: str
    expression: str
    timezone: str
    payload: dict[str, Any]
    next_run_at: dt.datetime | None
    created: dt.datetime
    updated: dt.datetime
    enabled: bool = True
    last_run_at: dt.datetime | None = None
    last_status: str | None = None
    last_result: str | None = None
    run_count: int = 0
    consecutive_failures: int = 0  # runs since the last successful one (see SUCCESS_STATUSES)
    runs: list[dict[str, Any]] = []  # the latest runs: run_id, run_at (+ run_at_local), status, result, output_summary, output
    next_run_local: dt.datetime | None = None  # next_run_at in the schedule's time zone
    last_run_local: dt.datetime | None = None  # last_run_at in the schedule's time zone

    @property
    def id(self) -> str:
        """The schedule id (``schedule_id``)."""
        return self.schedule_id


# A run whose status is one of these resets ``consecutive_failures``; any other status counts as a failure.
SUCCESS_STATUSES = frozenset({"ok", "success", "succeeded", "done", "completed", "skipped"})


class ItemInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A framework store item (LangGraph ``BaseStore``): its latest value and times."""

    item_id: str
    user_id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    indexed: bool = True
    ttl_minutes: float | None = None
    expires_at: dt.datetime | None = None
