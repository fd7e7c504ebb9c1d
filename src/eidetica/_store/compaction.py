"""Compaction planning: which logged content ``compact`` redacts and which vectors ``reembed`` keeps.

A scan of the whole log (two passes per partition: tombstones first, then every event
they cover); the facade applies the plan (``EventLog.redact``, a fresh index build).
"""

from __future__ import annotations

from typing import Any

from ..events import EventLog, RecordedEvent
from ..events.envelope import events_from_batch

__all__ = ["plan_compaction"]


def plan_compaction(log: EventLog) -> tuple[dict[int, set[int]], list[tuple[RecordedEvent, Any]]]:
    """Offsets whose content users asked to forget (to redact), and the live ChunksEmbedded events (to re-embed)."""
    tombs: dict[str, int] = {}
    # (tenant, id): a tenant's ids are its own (a message id is the caller's event id, which
    # another tenant may use too), so one tenant's deletion never redacts another's content
    deleted: set[tuple[str, str]] = set()  # users asked: the content goes
    inactive: set[tuple[str, str]] = set()  # superseded or pruned: history stays, rows go
    gone_types = {"SessionForgotten", "UserForgotten", "FactDeleted", "NoteDeleted", "ScheduleDeleted", "FactSuperseded",
                  "FactPruned"}
    # items: (stream, item id) -> version of its last delete / its last put; the events of an
    # item before its last delete are forgotten, its chunks before its last put are stale
    item_gone: dict[tuple[str, str], int] = {}
    item_put: dict[tuple[str, str], int] = {}
    for p in range(log.partitions):
        for batch in log.read_batches(partition=p):
            types = batch.column("type").to_pylist()
            if not gone_types.intersection(types) and not {"ItemDeleted", "ItemPut", "MessageRetracted",
                                                            "SummaryCommitted"}.intersection(types):
                continue
            for ev in events_from_batch(batch):
                if ev.type == "SummaryCommitted":
                    if ev.decode().rewritten:  # type: ignore[attr-defined]
                        # summarised again without forgotten messages: the earlier summaries may quote them
                        tombs[ev.stream] = max(tombs.get(ev.stream, -1), ev.version)
                elif ev.type in ("ItemDeleted", "ItemPut"):
                    seen = item_gone if ev.type == "ItemDeleted" else item_put
                    k = (ev.stream, ev.decode().item_id)  # type: ignore[attr-defined]
                    seen[k] = max(seen.get(k, -1), ev.version)
                elif ev.type in ("SessionForgotten", "UserForgotten"):
                    tombs[ev.stream] = max(tombs.get(ev.stream, -1), ev.version)
                elif ev.type == "MessageRetracted":
                    deleted.add((ev.tenant, ev.decode().message_id or "-"))  # type: ignore[attr-defined]
                elif ev.type in gone_types:
                    d = ev.decode()
                    ident = getattr(d, "fact_id", "") or getattr(d, "note_id", "") or getattr(d, "schedule_id", "")
                    (deleted if ev.type in ("FactDeleted", "NoteDeleted", "ScheduleDeleted") else inactive).add((ev.tenant, ident))
    redact: dict[int, set[int]] = {}
    live: list[tuple[RecordedEvent, Any]] = []
    latest_summary: dict[tuple[str, str], int] = {}
    for p in range(log.partitions):
        for batch in log.read_batches(partition=p):
            for ev in events_from_batch(batch):
                if ev.type in ("Redacted", "SessionForgotten", "UserForgotten"):
                    continue
                forgotten = ev.version < tombs.get(ev.stream, -1)
                d = None  # type: ignore[assignment]  # the decoded event, where one is needed
                if not forgotten and ev.type in ("ItemPut", "ItemTouched", "ItemDeleted"):
                    forgotten = ev.version < item_gone.get((ev.stream, ev.decode().item_id), -1)  # type: ignore[attr-defined]
                elif not forgotten and ev.stream.startswith("items:") and ev.type == "ChunksEmbedded":
                    d = ev.decode()
                    k = (ev.stream, d.source_id)  # type: ignore[attr-defined]
                    forgotten = ev.version < item_gone.get(k, -1)
                    if not forgotten and ev.version < item_put.get(k, -1):
                        continue  # an older value's chunks: not live, kept in the log as history
                elif not forgotten and ev.type in ("FactAsserted", "FactReinforced", "FactDecayed", "NoteStored", "NoteUpdated",
                                                   "ChunksEmbedded"):
                    d = ev.decode()
                    src = getattr(d, "source_id", None) or getattr(d, "fact_id", None) or getattr(d, "note_id", "")
                    forgotten = (ev.tenant, src) in deleted
                elif not forgotten and ev.type in ("ScheduleCreated", "ScheduleUpdated", "ScheduleRun"):
                    # a deleted schedule's name, payload and run outputs are the user's text too
                    forgotten = (ev.tenant, ev.decode().schedule_id) in deleted  # type: ignore[attr-defined]
                elif not forgotten and ev.type == "MessageAppended":
                    forgotten = (ev.tenant, ev.event_id.hex) in deleted  # taken back (MessageRetracted)
                if forgotten:
                    redact.setdefault(p, set()).add(ev.offset)
                elif ev.type == "ChunksEmbedded":
                    if (ev.tenant, d.source_id) in inactive:  # type: ignore[union-attr,attr-defined]
                        continue
                    if d.kind == "summary":  # type: ignore[union-attr,attr-defined]
                        latest_summary[(ev.tenant, d.source_id)] = len(live)  # type: ignore[union-attr,attr-defined]
                    live.append((ev, d))
    stale = {i for i, (e, d) in enumerate(live) if d.kind == "summary" and latest_summary.get((e.tenant, d.source_id)) != i}
    return redact, [x for i, x in enumerate(live) if i not in stale]
