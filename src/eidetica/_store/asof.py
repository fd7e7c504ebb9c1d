"""Time travel: ``m.as_of(when)``, the store exactly as it was at a moment, read-only.

The log is the only truth, so a past moment is a part of it: every event recorded up to
``when`` (an aware datetime: the events' times; or a log offset: the events at or before
it, ``{partition: offset}`` with several partitions). Those events are copied, as Arrow
(sliced when they are a prefix of the log, as they usually are; filtered and renumbered
when a later event was dated earlier), into an in-memory log that refuses every append,
and a ``Memory`` over that copy answers every read through the same code as the live store:
recall, search, context, list_memories, list_sessions, sessions' read/history, notes and
schedules; a fact superseded or deleted later shows as it was. Nothing recorded later is
visible. A write raises ``ReadOnly`` and changes nothing.

The copy's state is folded from its events. Its chunk index, on a large embedded store, is
derived from the live index rather than replayed (``projections._past``): the live rows no
later event touched, taken as Arrow with the live Tantivy segments hard-linked, plus the
touched rows folded again from the copy. So the first read costs about what reading the log
and the live index costs, not a replay of the prefix (``scripts/bench_asof.py``); later reads
cost what a live read costs. ``close()`` (or leaving the ``with`` block) removes the
temporary directory.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidInput, ReadOnly
from ..events import InMemoryLog
from ..events.envelope import LOG_SCHEMA
from ..projections._past import derive_past, rows_of
from ..projections._projector import BULK_EVENTS
from ..projections._tantivy import link_generation
from ..projections._views import model_slug
from .readonly import scratch_memory
from .store import Store

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


def _cut(log: Any, when: Any) -> tuple[Callable[[pa.Table, int], Any], str]:
    """Which recorded events a moment sees (a mask over one partition's events), and its name."""
    if isinstance(when, dt.datetime):
        if when.utcoffset() is None:
            raise InvalidInput("when", "must be a timezone-aware datetime or a log offset", when)
        at = pa.scalar(when, type=pa.timestamp("us", tz="UTC"))
        return (lambda batch, p: pc.less_equal(batch.column("time"), at)), f"the store as of {when.isoformat()}"
    # a log offset is >= 0, as the client checks it (a negative one was read as "before anything" here only)
    if isinstance(when, int) and not isinstance(when, bool) and when >= 0:
        cut = {p: when for p in range(log.partitions)}
    elif isinstance(when, Mapping) and all(isinstance(k, int) and isinstance(v, int) and not isinstance(v, bool)
                                           and v >= 0 for k, v in when.items()):
        cut = {p: when.get(p, -1) for p in range(log.partitions)}
    else:
        raise InvalidInput("when", "must be a timezone-aware datetime, an offset or {partition: offset}", when)
    return (lambda batch, p: pc.less_equal(batch.column("offset"), cut[p])), f"the store as of offset {when}"


def _renumbered(table: pa.Table) -> pa.Table:
    """The kept events of one partition with offsets from 0 and each stream's versions from 0, in log order
    (what appending them anew would give: an event recorded later but dated earlier leaves a gap otherwise),
    in batches of ``_CHUNK``."""
    n = table.num_rows
    codes = table.column("stream").combine_chunks().dictionary_encode().indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    ranked = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1] if n else np.zeros(0, np.int64)
    group_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    versions = np.empty(n, np.int64)
    versions[order] = np.arange(n, dtype=np.int64) - group_start
    table = table.set_column(table.schema.get_field_index("offset"), "offset", pa.array(np.arange(n, dtype=np.int64)))
    table = table.set_column(table.schema.get_field_index("version"), "version", pa.array(versions))
    return pa.Table.from_batches(table.to_batches(max_chunksize=_CHUNK), schema=LOG_SCHEMA)


def _copy(log: Any, seen: Callable[[pa.Table, int], Any], past: PastLog,
          applied: dict[int, int] | None) -> list[pa.RecordBatch] | None:
    """Copy the events a moment sees into ``past``; with ``applied`` (a live index's checkpoint), return
    the events that index applied which the moment does not see (None when it has not applied all
    the moment sees: written meanwhile)."""
    tail: list[pa.RecordBatch] = []
    late = False
    for p in range(log.partitions):
        # Arrow filters and copies the events as they are: nothing is decoded or re-encoded;
        # the embedder's identity is the store's, whenever it was first recorded
        events = pa.Table.from_batches(list(log.read_batches(partition=p)), schema=LOG_SCHEMA)
        keep = pc.or_(seen(events, p), pc.starts_with(events.column("stream"), "meta:"))
        n = pc.sum(keep).as_py() or 0
        # usually the moment is a prefix of the log (its n events are the first n): slices, no copy
        # (the payloads hold vectors)
        prefix = pc.all(keep.slice(0, n)).as_py() is not False
        kept = events.slice(0, n) if prefix else _renumbered(events.filter(keep))
        if applied is not None:
            done = applied.get(p, 0)
            after = (events.slice(n, max(done - n, 0)) if prefix
                     else events.filter(pc.and_(pc.invert(keep), pc.less(events.column("offset"), done))))
            tail.extend(after.to_batches())
            last = pc.max(events.column("offset").filter(keep)).as_py()  # the log's offsets, not the copy's
            late = late or (last is not None and last >= done)
        for batch in kept.to_batches():
            past.load(p, batch)
    past._loading = False
    return None if applied is None or late else tail


def as_of(m: Store, when: Any) -> Any:
    """A read-only ``Memory`` answering as ``m`` would have at ``when`` (a datetime or a log offset)."""
    seen, label = _cut(m.log, when)
    m.gate.sync()
    parts = range(m.log.partitions)
    # a large embedded store: the past's chunk index is derived from the live one (see projections._past);
    # a small one, or one whose index lives elsewhere (Ray), folds it from the copy
    local = m.views.local()
    big = local is not None and sum(m.log.head(p) for p in parts) >= BULK_EVENTS
    live = local.index if local is not None and big else None
    past = PastLog(m.log.partitions, label)
    tmp = Path(tempfile.mkdtemp(prefix="eidetica-asof-"))
    try:
        applied = rows = None
        linked = False
        if live is not None:
            dest = tmp / "index" / model_slug(local.model_id)  # type: ignore[union-attr]  # live: local views
            with live._lock:  # the live index holds still while its rows, files and checkpoint are taken
                applied = live.checkpoint()
                linked = link_generation(live._text, str(dest / "text"))
                rows = rows_of(live)
        # the log only grows: it holds every event the index applied, and what came since stays out
        tail = _copy(m.log, seen, past, applied)
        if tail is not None and rows is not None:
            if not linked:
                shutil.rmtree(dest / "text", ignore_errors=True)  # partly linked: built from the rows instead
            prefix = [b for p in parts for b in past.read_batches(partition=p)]
            derive_past(rows, tail, prefix, dest, dim=m.embedder.dim, model_id=local.model_id,  # type: ignore[union-attr]
                        checkpoint={p: past.head(p) for p in parts}, linked=linked)
        elif live is not None:
            shutil.rmtree(dest, ignore_errors=True)  # events the index had not applied: folded from the copy instead
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    view = scratch_memory(type(m), past, "eidetica-asof-", tmp, tenant=m.tenant, embedder=m.embedder,
                          llm=m.llm, config=m.config, clock=m.clock)
    view.as_of_label = label
    _OPEN[view] = m.log
    return view


# every open past view, by the log it copied: ``compact`` closes them (see close_views)
_OPEN: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def close_views(log: Any) -> int:
    """Close every open past view of ``log``; returns how many. ``compact`` calls it: a view's files hold
    what the store held then (forgotten text included), and the rewritten log's offsets moved."""
    views = [v for v, source in list(_OPEN.items()) if source is log and not v.gate.closed]
    for v in views:
        _OPEN.pop(v, None)
        v.close()
    return len(views)


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

    def get(self, m: Store, at: str) -> Any:
        """The read-only view of ``m`` as of ``at``; a datetime's view is rebuilt once the log has grown."""
        when = parse_moment(at)
        heads = () if isinstance(when, int) else tuple(m.log.head(p) for p in range(m.log.partitions))
        key = (m.tenant, at, heads)  # a later write may carry an earlier time: a datetime's past depends on the head
        with self._lock:
            for k in [k for k, v in self._views.items() if v.gate.closed]:  # closed by ``compact`` (close_views)
                del self._views[k]
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
