"""Time travel: ``m.as_of(when)``, the store exactly as it was at a moment, read-only.

The log is the only truth, so a past moment is a prefix of it: every event recorded up to
``when`` (an aware datetime: the events' times; or a log offset: the events at or before
it, ``{partition: offset}`` with several partitions) is copied into an in-memory log, and a
``Memory`` over that copy folds and indexes it in a temporary directory. Every read then
answers as the store would have at that moment, through the same code as the live store:
recall, search, context, list_memories, list_sessions, sessions' read/history, notes and
schedules; a fact superseded or deleted later shows as it was. Nothing recorded later is
visible. A write raises ``ReadOnly`` and changes nothing (the copy refuses every append).

The first read pays for the replay (the state fold and the index build of the prefix);
later reads cost what a live read costs. ``close()`` (or leaving the ``with`` block)
removes the temporary directory.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._readonly import scratch_memory
from .errors import InvalidInput, ReadOnly
from .events import InMemoryLog
from .events.envelope import LOG_SCHEMA

_CHUNK = 8192  # rows per copied batch: a stream's read decodes only its rows, but loads whole batches

__all__ = ["as_of", "PastLog", "PastViews", "parse_moment"]


class PastLog(InMemoryLog):
    """An in-memory copy of a log's prefix that refuses every append (``ReadOnly``)."""

    def __init__(self, partitions: int, label: str) -> None:
        super().__init__(partitions=partitions)
        self.label = label
        self._loading = True

    def append(self, stream: str, events: Any, expected_version: int = -2) -> tuple[int, int]:  # type: ignore[override]
        """Refused once loaded: the past is read-only."""
        if not self._loading:
            raise ReadOnly(self.label)
        return super().append(stream, events, expected_version)

    def load(self, partition: int, batch: pa.RecordBatch) -> None:
        """Take one batch of recorded events as it is (offsets and versions already this copy's own)."""
        self._parts[partition].record_batch(batch, batch)  # in memory, a batch is its own locator


def _cut(log: Any, when: Any) -> tuple[Callable[[pa.RecordBatch, int], pa.Array], str]:
    """Which recorded events a moment sees (a mask over one partition's batch), and its name."""
    if isinstance(when, dt.datetime):
        if when.utcoffset() is None:
            raise InvalidInput("when", "must be a timezone-aware datetime or a log offset", when)
        at = pa.scalar(when, type=pa.timestamp("us", tz="UTC"))
        return (lambda batch, p: pc.less_equal(batch.column("time"), at)), f"the store as of {when.isoformat()}"
    if isinstance(when, int) and not isinstance(when, bool):
        cut = {p: when for p in range(log.partitions)}
    elif isinstance(when, Mapping) and all(isinstance(k, int) and isinstance(v, int) for k, v in when.items()):
        cut = {p: when.get(p, -1) for p in range(log.partitions)}
    else:
        raise InvalidInput("when", "must be a timezone-aware datetime, an offset or {partition: offset}", when)
    return (lambda batch, p: pc.less_equal(batch.column("offset"), cut[p])), f"the store as of offset {when}"


def _renumbered(table: pa.Table) -> pa.Table:
    """The kept events of one partition with offsets from 0 and each stream's versions from 0, in log order
    (what appending them anew would give: an event recorded later but dated earlier leaves a gap otherwise)."""
    n = table.num_rows
    codes = table.column("stream").combine_chunks().dictionary_encode().indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    ranked = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1] if n else np.zeros(0, np.int64)
    group_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    versions = np.empty(n, np.int64)
    versions[order] = np.arange(n, dtype=np.int64) - group_start
    table = table.set_column(table.schema.get_field_index("offset"), "offset", pa.array(np.arange(n, dtype=np.int64)))
    return table.set_column(table.schema.get_field_index("version"), "version", pa.array(versions))


def as_of(m: Any, when: Any) -> Any:
    """A read-only ``Memory`` answering as ``m`` would have at ``when`` (a datetime or a log offset)."""
    seen, label = _cut(m.log, when)
    m._sync()
    past = PastLog(m.log.partitions, label)
    for p in range(m.log.partitions):
        # Arrow filters and copies the batches as they are: nothing is decoded or re-encoded
        kept = [batch.filter(pc.or_(seen(batch, p), pc.starts_with(batch.column("stream"), "meta:")))
                # the embedder's identity is the store's, whenever it was first recorded
                for batch in m.log.read_batches(partition=p)]
        table = _renumbered(pa.Table.from_batches([b for b in kept if b.num_rows], schema=LOG_SCHEMA))
        for batch in table.to_batches(max_chunksize=_CHUNK):
            past.load(p, batch)
    past._loading = False
    view = scratch_memory(type(m), past, "eidetica-asof-", tenant=m.tenant, embedder=m.embedder, llm=m.llm,
                          config=m.config, clock=m.clock)
    view.as_of_label = label
    return view


def parse_moment(at: str) -> Any:
    """A moment from the wire: a log offset (digits) or an ISO datetime with its zone."""
    if at.isdigit():
        return int(at)
    try:
        return dt.datetime.fromisoformat(at)
    except ValueError:
        raise InvalidInput("as_of", "must be a log offset or an ISO datetime with a zone", at) from None


class PastViews:
    """The server's past moments (``as_of`` on a read route), built once and kept (the last ``keep``)."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._views: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def get(self, m: Any, at: str) -> Any:
        """The read-only view of ``m`` as of ``at``; a datetime's view is rebuilt once the log has grown."""
        when = parse_moment(at)
        heads = () if isinstance(when, int) else tuple(m.log.head(p) for p in range(m.log.partitions))
        key = (m.tenant, at, heads)  # a later write may carry an earlier time: a datetime's past depends on the head
        with self._lock:
            view = self._views.pop(key, None)
            if view is not None:
                self._views[key] = view  # most recently used last
                return view
        view = as_of(m, when)
        with self._lock:
            self._views[key] = view
            old = list(self._views)[: -self.keep]
            gone = [self._views.pop(k) for k in old]
        for v in gone:
            v.close()
        return view
