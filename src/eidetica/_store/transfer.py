"""Export and import of a tenant's events (JSONL, or Parquet for ``.parquet``)."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Union

import msgspec

from ..errors import EventIdConflict, InvalidInput
from ..events import EventLog, NewEvent, RecordedEvent
from ..events.envelope import events_from_batch
from ..events.streams import parse_stream, session_stream
from ..events.types import EVENT_TYPES

__all__ = ["event_row", "export_events", "import_events", "tenant_events", "write_export"]


_COLUMNS = ("stream", "event_id", "time", "type", "event")  # an export row's fields, in order


def tenant_events(log: EventLog, tenant: str) -> Iterator[RecordedEvent]:
    """Every event of one tenant, in log order per partition."""
    for p in range(log.partitions):
        for batch in log.read_batches(partition=p):
            tenants = batch.column("tenant").to_pylist()
            if tenant not in tenants:
                continue
            for ev in events_from_batch(batch):
                if ev.tenant == tenant:
                    yield ev


def event_row(e: RecordedEvent) -> dict[str, Any]:
    """One exported event (a JSONL line, a Parquet row): stream, id, time, type and the event as plain data."""
    return {"stream": e.stream, "event_id": str(e.event_id), "time": e.time.isoformat(), "type": e.type,
            "event": msgspec.to_builtins(e.decode())}


def write_export(rows: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write exported rows to ``path``: Parquet for ``.parquet`` (the event as a JSON column), else JSONL; returns how many."""
    target = Path(path)
    if target.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [dict(r, event=json.dumps(r["event"], ensure_ascii=False)) for r in rows]
        table = pa.table({k: pa.array([r[k] for r in rows], pa.string()) for k in _COLUMNS})
        pq.write_table(table, target)
        return len(rows)
    n = 0
    with target.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    return n


def export_events(log: EventLog, tenant: str, path: str | os.PathLike[str]) -> int:
    """Write a tenant's events (JSONL, or Parquet for ``.parquet``); returns how many."""
    return write_export((event_row(e) for e in tenant_events(log, tenant)), path)


def import_events(log: EventLog, tenant: str, path: str | os.PathLike[str],
                  write: Callable[[str, list[NewEvent]], Any] | None = None) -> dict[str, Any]:
    """Append events exported by ``export_events`` into ``tenant``; returns ``{"written", "skipped", "conflicts"}``.

    Every event is re-keyed into the importing tenant (its stream and envelope name it; the
    log's event ids are per tenant), so another tenant's export is written as this tenant's
    own. An event already in the store (the same id with the same event) is skipped, so an
    import repeated writes nothing. An id that already names another event of the tenant is
    skipped too and listed in ``conflicts`` (its id, as a string): one such id never costs the
    rest of the import. Store-level events (the embedder's) are never imported: they count as
    skipped. ``write(stream, events)`` appends one stream's new events (the facade: through
    the stream's owner).
    """
    by_stream = _read_export(tenant, path)
    skipped = sum(len(evs) for stream, evs in by_stream.items() if stream.startswith("meta:"))
    conflicts: list[str] = []
    fresh: dict[str, list[NewEvent]] = {}
    for stream, evs in by_stream.items():
        if stream.startswith("meta:"):
            continue
        offsets = log.event_offsets([e.event_id for e in evs], stream, tenant)  # type: ignore[attr-defined]
        known = [e for e, o in zip(evs, offsets) if o is not None]
        for k in range(0, len(known), 1000):
            # writes nothing: checks each is the very event logged; a conflict is sorted out one by one
            _append_or_split(log.append, stream, known[k : k + 1000], conflicts)
        skipped += len(known)
        fresh[stream] = [e for e, o in zip(evs, offsets) if o is None]
    written = 0
    for stream, evs in fresh.items():
        for k in range(0, len(evs), 1000):
            # write: through the stream's one writer; a conflict there (an id taken meanwhile) skips that event only
            n = _append_or_split(write or log.append, stream, evs[k : k + 1000], conflicts)
            written += n
            skipped += len(evs[k : k + 1000]) - n
    return {"written": written, "skipped": skipped, "conflicts": conflicts}


def _append_or_split(append: Callable[[str, list[NewEvent]], Any], stream: str, evs: list[NewEvent],
                     conflicts: list[str]) -> int:
    """Append ``evs`` at once; on ``EventIdConflict`` one by one, noting each conflicting id; returns how many were appended."""
    if not evs:
        return 0
    try:
        append(stream, evs)
        return len(evs)
    except EventIdConflict:
        pass
    n = 0
    for e in evs:  # rare (a conflict in this chunk): each event decides for itself
        try:
            append(stream, [e])
            n += 1
        except EventIdConflict:
            conflicts.append(str(e.event_id))
    return n


def _read_export(tenant: str, path: str | os.PathLike[str]) -> dict[str, list[NewEvent]]:
    """An export's events by stream, re-keyed into ``tenant``; ``InvalidInput`` for anything that is not an export."""
    source = Path(path)
    if not source.exists():
        raise InvalidInput("path", f"{source} does not exist")
    try:  # a damaged or foreign file is bad input (a served import must answer 400, never 500)
        if source.suffix == ".parquet":
            import pyarrow.parquet as pq

            t = pq.read_table(source).to_pylist()
            rows = [dict(r, event=json.loads(r["event"])) for r in t]
        else:
            rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError, TypeError, KeyError) as e:  # UnicodeDecodeError, JSONDecodeError, ArrowInvalid are ValueErrors
        raise InvalidInput("path", f"is not an export (JSONL or Parquet): {type(e).__name__}: {e}") from None
    by_stream: dict[str, list[NewEvent]] = {}
    for i, r in enumerate(rows):
        try:
            ev = msgspec.convert(r["event"], Union[EVENT_TYPES])  # type: ignore[arg-type]  # noqa: UP007 (a tuple of types)
            kind, _tenant, ident = parse_stream(r["stream"])
            stream = r["stream"] if kind == "meta" else f"{kind}:{session_stream(tenant, ident).split(':', 1)[1]}"
            new = NewEvent.of(ev, tenant=tenant, event_id=uuid.UUID(r["event_id"]), time=dt.datetime.fromisoformat(r["time"]))
        except (msgspec.ValidationError, KeyError, ValueError, TypeError, AttributeError) as e:
            raise InvalidInput(f"line {i + 1}", f"is not an exported event: {e}") from None
        by_stream.setdefault(stream, []).append(new)
    return by_stream
