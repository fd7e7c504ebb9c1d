"""The state's per-entity folds (a session, a fact, a schedule) and their snapshot row codecs."""

from __future__ import annotations

import datetime as dt
import uuid
from array import array
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
import pyarrow as pa

from ..events import types as ev
from ._base import UTC
from ._records import FactInfo, FactStatus, ScheduleInfo

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_US = dt.timedelta(microseconds=1)


def _us(t: dt.datetime) -> int:
    """Microseconds since the epoch (how message times are kept in the offset index)."""
    return (t - _EPOCH) // _US


def _from_us(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


class _Session:
    """A session's fold: no message bodies, only (sequence, time, offset) per message."""

    __slots__ = ("user_id", "seqs", "times", "offsets", "top", "part", "names", "labels", "label_n", "started",
                 "last", "forgotten", "summary")

    def __init__(self, user_id: str, time: dt.datetime) -> None:
        self.user_id = user_id
        self.seqs = array("q")  # message sequences, in log order
        self.times = array("q")  # their log times (microseconds since the epoch)
        self.offsets = array("q")  # their log offsets (the bodies stay in the log)
        self.top = -1  # highest sequence folded: a repeated sequence is a duplicate
        self.part = 0  # the log partition of the session's stream
        self.names: dict[str, int] = {}  # metadata["name"] -> latest message time (us)
        # messages without metadata["name"] whose text starts with a "Name: " label: sequence ->
        # label, and each label's count (derived, not snapshotted), so a search never reads bodies
        self.labels: dict[int, str] = {}
        self.label_n: dict[str, int] = {}
        self.started = time
        self.last = time
        self.forgotten = False
        self.summary: tuple[int, str, int, dt.datetime] | None = None  # epoch, text, upto, time

    def retract(self, sequence: int) -> None:
        """Drop one message (a retraction): its sequence stays used, so ``top`` is kept."""
        keep = [i for i, q in enumerate(self.seqs) if q != sequence]
        if len(keep) != len(self.seqs):
            self.seqs = array("q", (self.seqs[i] for i in keep))
            self.offsets = array("q", (self.offsets[i] for i in keep))
            self.times = array("q", (self.times[i] for i in keep))
        label = self.labels.pop(sequence, None)
        if label is not None:
            self.count_labels()

    def count_labels(self) -> None:
        """Recount ``label_n`` from ``labels``."""
        n: dict[str, int] = {}
        for label in self.labels.values():
            n[label] = n.get(label, 0) + 1
        self.label_n = n

    def keep_after(self, t: dt.datetime) -> None:
        """Drop the messages (and participant names) a forget at time ``t`` covers."""
        cut = _us(t)
        keep = [i for i, tm in enumerate(self.times) if tm > cut]
        if len(keep) != len(self.times):
            self.seqs = array("q", (self.seqs[i] for i in keep))
            self.offsets = array("q", (self.offsets[i] for i in keep))
            self.times = array("q", (self.times[i] for i in keep))
        self.names = {n: tm for n, tm in self.names.items() if tm > cut}
        if self.labels:
            live = set(self.seqs)
            self.labels = {q: label for q, label in self.labels.items() if q in live}
            self.count_labels()


class _Fact:
    __slots__ = ("user_id", "content", "category", "confidence", "status", "by", "created", "updated",
                 "sources", "history", "seen", "metadata", "attribute")

    def __init__(self, user_id: str, e: ev.FactAsserted, time: dt.datetime) -> None:
        self.user_id = user_id
        self.content = e.content
        self.category = e.category
        self.confidence = float(e.confidence)
        self.status: FactStatus = "active"
        self.by: str | None = None
        self.created = time
        self.updated = time
        self.sources: list[dict[str, Any]] = list(e.sources)
        self.history: list[tuple[dt.datetime, str, dict[str, Any]]] = []
        self.seen: set[Any] = set()
        self.metadata: dict[str, Any] = dict(e.metadata)
        self.attribute = e.attribute

    def info(self, fact_id: str) -> FactInfo:
        return FactInfo(
            fact_id=fact_id,
            content=self.content,
            category=self.category,
            confidence=self.confidence,
            status=self.status,
            superseded_by=self.by,
            created=self.created,
            updated=self.updated,
            sources=list(self.sources),
            user_id=self.user_id,
            metadata=dict(self.metadata),
            attribute=self.attribute,
        )


class _Schedule:
    __slots__ = ("user_id", "fields", "created", "updated", "runs", "history", "run_count", "failures")

    def __init__(self, user_id: str, e: ev.ScheduleCreated, time: dt.datetime) -> None:
        self.user_id = user_id
        self.fields: dict[str, Any] = {
            "name": e.name,
            "cadence": e.cadence,
            "expression": e.expression,
            "timezone": e.timezone,
            "payload": dict(e.payload),
            "next_run_at": e.next_run_at,
            "enabled": True,
        }
        self.created = time
        self.updated = time
        self.runs: set[Any] = set()  # event ids folded (idempotence)
        self.history: list[dict[str, Any]] = []
        self.run_count = 0
        self.failures = 0

    def info(self, schedule_id: str) -> ScheduleInfo:
        f = self.fields
        last = self.history[-1] if self.history else None
        tz = str(f.get("timezone", "UTC"))
        return ScheduleInfo(
            schedule_id=schedule_id,
            user_id=self.user_id,
            name=str(f.get("name", "")),
            cadence=str(f.get("cadence", "")),
            expression=str(f.get("expression", "")),
            timezone=str(f.get("timezone", "UTC")),
            payload=dict(f.get("payload") or {}),
            next_run_at=_as_time(f.get("next_run_at")),
            created=self.created,
            updated=self.updated,
            enabled=bool(f.get("enabled", True)),
            last_run_at=last["run_at"] if last else None,
            last_status=last["status"] if last else None,
            last_result=last["result"] if last else None,
            run_count=self.run_count,
            consecutive_failures=self.failures,
            runs=[dict(r, run_at_local=_local(r["run_at"], tz)) for r in self.history],
            next_run_local=_local(_as_time(f.get("next_run_at")), tz),
            last_run_local=_local(last["run_at"], tz) if last else None,
        )


def _as_time(value: Any) -> dt.datetime | None:
    """A datetime from a schedule field (datetime, ISO string, or epoch seconds)."""
    if value is None or isinstance(value, dt.datetime):
        return value
    try:
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(value, UTC)
        t = dt.datetime.fromisoformat(str(value))
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _local(t: Any, zone: str) -> dt.datetime | None:
    """A time in a schedule's time zone (None stays None; an unknown zone leaves it in UTC)."""
    when = _as_time(t)
    if when is None:
        return None
    try:
        return when.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return when


def _utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


class _FactRow(msgspec.Struct, array_like=True):
    """The nested part of a fact in a snapshot row (msgpack: sources, history, seen event ids)."""

    sources: list[dict[str, Any]]
    history: list[tuple[dt.datetime, str, dict[str, Any]]]
    seen: list[uuid.UUID]
    metadata: dict[str, Any] = {}  # last: a snapshot written before it decodes with none


class _ScheduleRow(msgspec.Struct, array_like=True):
    """A schedule's fold in a snapshot row (msgpack)."""

    fields: dict[str, Any]
    next_run_at: dt.datetime | None
    created: dt.datetime
    updated: dt.datetime
    runs: list[uuid.UUID]
    history: list[dict[str, Any]]
    run_count: int
    failures: int


_ENC = msgspec.msgpack.Encoder()
_SDEC = msgspec.msgpack.Decoder(_ScheduleRow)


def _schedule_row(x: _Schedule) -> bytes:
    """A schedule's fold as its snapshot row."""
    return _ENC.encode(_ScheduleRow({k: v for k, v in x.fields.items() if k != "next_run_at"}, _as_time(x.fields.get("next_run_at")),
                                    x.created, x.updated, sorted(x.runs), x.history, x.run_count, x.failures))


def _schedule_from_row(user_id: str, row: bytes) -> _Schedule:
    """A schedule's fold from its snapshot row."""
    d = _SDEC.decode(row)
    x = _Schedule.__new__(_Schedule)
    x.user_id, x.fields = user_id, dict(d.fields, next_run_at=d.next_run_at)
    x.created, x.updated, x.runs = d.created, d.updated, set(d.runs)
    x.history, x.run_count, x.failures = list(d.history), d.run_count, d.failures
    return x
_TS = pa.timestamp("us", tz="UTC")


def _col(table: pa.Table, name: str) -> list[Any]:
    values: list[Any] = table.column(name).to_pylist()
    return values
