"""The LLM ledger read back: ``usage`` sums a tenant's ``LlmCalled`` events; ``spent_today`` feeds the token budget.

Events are found by their type column, so only the ledger's rows are decoded. ``spent_today``
keeps a per-process running sum per (tenant, UTC day), read from the log once per tenant and
moved by every ledger write of this process (``add``): a fleet's actors in other processes
keep their own sums (a budget there is per process, read from the log at its start).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pyarrow.compute as pc

from ..events import EventLog
from ..events.envelope import events_from_batch
from ..events.types import LlmCalled

__all__ = ["add", "ledger_events", "spent_today", "usage"]

_lock = threading.Lock()
_spent: dict[tuple[int, str, dt.date], int] = {}  # (id(log), tenant, day) -> tokens
_seeded: set[tuple[int, str]] = set()


def ledger_events(log: EventLog, tenant: str) -> Iterator[tuple[dt.datetime, LlmCalled]]:
    """Every ``LlmCalled`` of ``tenant`` with its envelope time, in log order per partition."""
    for p in range(log.partitions):
        for batch in log.read_batches(partition=p):
            mask = pc.and_(pc.equal(batch.column("type"), "LlmCalled"), pc.equal(batch.column("tenant"), tenant))
            if not pc.any(mask).as_py():
                continue
            for rec in events_from_batch(batch.filter(mask)):
                ev = rec.decode()
                if isinstance(ev, LlmCalled):
                    yield rec.time, ev


def _day(t: dt.datetime) -> dt.date:
    return (t if t.tzinfo is None else t.astimezone(dt.timezone.utc)).date()


def add(log: EventLog, tenant: str, time: dt.datetime, tokens: int) -> None:
    """Count tokens a ledger write of this process just committed (once the tenant's sum is read)."""
    with _lock:
        if (id(log), tenant) in _seeded:
            key = (id(log), tenant, _day(time))
            _spent[key] = _spent.get(key, 0) + tokens


def spent_today(log: EventLog, tenant: str, now: dt.datetime) -> int:
    """Tokens (input + output) the tenant's recorded LLM calls used on ``now``'s UTC day."""
    with _lock:
        if (id(log), tenant) not in _seeded:
            sums: dict[dt.date, int] = defaultdict(int)
            for t, ev in ledger_events(log, tenant):
                sums[_day(t)] += ev.input_tokens + ev.output_tokens
            for day, n in sums.items():
                _spent[(id(log), tenant, day)] = n
            _seeded.add((id(log), tenant))
        return _spent.get((id(log), tenant, _day(now)), 0)


def usage(log: EventLog, tenant: str, user: str | None = None, since: dt.datetime | None = None,
          until: dt.datetime | None = None) -> dict[str, Any]:
    """``{"calls", "input_tokens", "output_tokens", "fallbacks", "by": [...]}`` of the tenant's ledger (``until`` exclusive)."""
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for t, ev in ledger_events(log, tenant):
        if (user is not None and ev.user_id != user) or (since is not None and t < since) or (until is not None and t >= until):
            continue
        key = (ev.model, ev.purpose, ev.user_id, _day(t).isoformat())
        row = rows.setdefault(key, {"model": key[0], "purpose": key[1], "user": key[2], "day": key[3], "calls": 0,
                                    "input_tokens": 0, "output_tokens": 0, "fallbacks": 0})
        if ev.outcome == "fallback":  # the offline extractor ran instead: no call was made
            row["fallbacks"] += 1
            continue
        row["calls"] += 1
        row["input_tokens"] += ev.input_tokens
        row["output_tokens"] += ev.output_tokens
    by = sorted(rows.values(), key=lambda r: (r["day"], r["user"], r["model"], r["purpose"]))
    return {"calls": sum(r["calls"] for r in by), "input_tokens": sum(r["input_tokens"] for r in by),
            "output_tokens": sum(r["output_tokens"] for r in by), "fallbacks": sum(r["fallbacks"] for r in by),
            "by": by}
