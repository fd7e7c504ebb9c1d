"""A partition's in-memory bookkeeping behind ``BatchLog``: waiting appends, batches, the id index.

Split out of ``events/log.py`` (issue 41): ``_Partition`` admits a group of appends (expected
versions, idempotent retries by event id) and records committed runs; ``_Batches`` maps offsets to
stored batches; ``_IdIndex`` maps event ids to offsets in sorted arrays. ``BatchLog`` drives them.
"""

from __future__ import annotations

import _thread
import bisect
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import EventIdConflict, WrongExpectedVersion
from .envelope import (
    NO_STREAM,
    STREAM_EXISTS,
    NewEvent,
    RecordedEvent,
    Run,
    tenant_tag,
)


class _Request:
    """One caller's append, waiting in its partition's queue."""

    __slots__ = ("stream", "events", "keys", "expected", "result", "error", "lead", "abandoned", "next", "_gate")

    def __init__(self, stream: str, events: list[NewEvent], keys: list[int], expected: int) -> None:
        self.stream = stream
        self.events = events
        self.keys = keys  # the events' id keys (``id_key``: tenant and caller id)
        self.expected = expected
        self.result: tuple[int, int] | None = None
        self.error: BaseException | None = None
        self.lead = False  # woken to lead the next group rather than with a result
        self.abandoned = False  # the caller stopped waiting (interrupted): never hand it the lead
        self.next: _Request | None = None  # the caller of the same commit to wake after this one
        # A bare lock held until the request is answered: the cheapest wake-up CPython has
        # (threading.Event adds a Condition and a second lock per wait).
        self._gate = _thread.allocate_lock()
        self._gate.acquire()

    def wait(self) -> None:
        """Block until answered or handed the lead."""
        self._gate.acquire()

    def wake(self) -> None:
        """Answer the waiting caller (result, error or lead set beforehand)."""
        self._gate.release()


@dataclass
class _BatchEntry:
    first: int
    count: int
    locator: Any


def _holding(part: _Partition, offsets: Sequence[int]) -> list[_BatchEntry]:
    """The batches that hold these (ascending, committed) offsets, each once, in log order (lock held)."""
    idx: list[int] = []
    for o in offsets:
        i = part.batches.index(o)
        if not idx or idx[-1] != i:
            idx.append(i)
    return [part.batches[i] for i in idx]


_MASK64 = (1 << 64) - 1


class _IdIndex:
    """Event id key (``id_key``: tenant tag + caller id) -> offset for idempotent appends, in 32 bytes an id.

    Ids live in sorted numpy arrays (high and low 64 bits of the id, tenant tag, offset), searched by
    bisection; new ids go to a dict first and are merged in once it grows, so the map costs
    a few dozen bytes per event instead of a dict entry (about 150) and loads from a log
    checkpoint as three arrays. Offers the ``get`` / ``keys().isdisjoint`` / ``update``
    subset of a dict that ``admit`` and ``record`` use. Writes come from the one committing
    thread; the arrays are swapped as one tuple so a concurrent reader sees a whole set.
    """

    __slots__ = ("cols", "recent")
    MERGE_AT = 1 << 16

    def __init__(self, hi: np.ndarray | None = None, lo: np.ndarray | None = None, off: np.ndarray | None = None,
                 tag: np.ndarray | None = None) -> None:
        if hi is None or lo is None or off is None or tag is None:
            hi, lo, off, tag = np.empty(0, np.uint64), np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.uint64)
        self.cols = (hi, lo, off, tag)  # sorted by hi (the same id in two tenants: equal hi, other tag)
        self.recent: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.cols[0]) + len(self.recent)

    def get(self, key: int, default: int | None = None) -> int | None:
        """The offset of an event id, or ``default``."""
        o = self.recent.get(key)
        if o is not None:
            return o
        hi, lo, off, tag = self.cols
        n = len(hi)
        if n:
            h = np.uint64((key >> 64) & _MASK64)
            i = int(np.searchsorted(hi, h))
            if i < n and hi[i] == h:
                low, t = np.uint64(key & _MASK64), np.uint64(key >> 128)
                while i < n and hi[i] == h:  # equal high halves: one id in several tenants, else practically never
                    if lo[i] == low and tag[i] == t:
                        return int(off[i])
                    i += 1
        return default

    def keys(self) -> _IdIndex:
        """Itself: ``keys().isdisjoint(...)`` reads like a dict's."""
        return self

    def isdisjoint(self, keys: Sequence[int]) -> bool:
        """Whether none of these ids is known."""
        return all(self.get(k) is None for k in keys)

    def __setitem__(self, key: int, offset: int) -> None:
        self.recent[key] = offset

    def update(self, pairs: Any) -> None:
        """Add (id, offset) pairs."""
        self.recent.update(pairs)

    def maybe_merge(self) -> None:
        """Merge the recent ids into the arrays once they are many (keeps memory per id small)."""
        if len(self.recent) >= self.MERGE_AT:  # a merge copies the arrays once: O(n) per MERGE_AT appends
            self.merge()

    def merge(self) -> None:
        """Move every recent id into the sorted arrays."""
        rec = self.recent
        if not rec:
            return
        n = len(rec)
        hi = np.fromiter(((k >> 64) & _MASK64 for k in rec), np.uint64, n)
        lo = np.fromiter((k & _MASK64 for k in rec), np.uint64, n)
        tag = np.fromiter((k >> 128 for k in rec), np.uint64, n)
        off = np.fromiter(rec.values(), np.int64, n)
        order = np.argsort(hi, kind="stable")
        hi, lo, off, tag = hi[order], lo[order], off[order], tag[order]
        old_hi, old_lo, old_off, old_tag = self.cols
        at = np.searchsorted(old_hi, hi)
        self.cols = (np.insert(old_hi, at, hi), np.insert(old_lo, at, lo), np.insert(old_off, at, off),
                     np.insert(old_tag, at, tag))
        self.recent = {}

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(hi, lo, offset, tenant tag) of every id, sorted by hi (merges first)."""
        self.merge()
        return self.cols


class _Batches:
    """A partition's committed batches, in log order: a column prefix (from a checkpoint) plus a list.

    Entries of the prefix are built when asked for, so a log of a million commits does not
    hold a million objects after a checkpointed open.
    """

    def __init__(self) -> None:
        self.frozen_first = np.empty(0, np.int64)
        self.frozen_count = np.empty(0, np.int64)
        self.frozen_loc: Any = None  # i -> locator of prefix batch i
        self.tail: list[_BatchEntry] = []
        self.tail_firsts: list[int] = []

    def freeze(self, first: np.ndarray, count: np.ndarray, loc: Any) -> None:
        """Replace everything with a column prefix (a loaded checkpoint)."""
        self.frozen_first, self.frozen_count, self.frozen_loc = first, count, loc
        self.tail, self.tail_firsts = [], []

    def __len__(self) -> int:
        return len(self.frozen_first) + len(self.tail)

    def append(self, entry: _BatchEntry) -> None:
        """Add the newest batch."""
        self.tail.append(entry)
        self.tail_firsts.append(entry.first)

    def index(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (-1 before the first batch)."""
        if self.tail_firsts and offset >= self.tail_firsts[0]:
            return len(self.frozen_first) + bisect.bisect_right(self.tail_firsts, offset) - 1
        return int(np.searchsorted(self.frozen_first, offset, side="right")) - 1

    def __getitem__(self, i: int) -> _BatchEntry:
        n = len(self.frozen_first)
        if i < 0:
            i += len(self)
        if i >= n:
            return self.tail[i - n]
        return _BatchEntry(int(self.frozen_first[i]), int(self.frozen_count[i]), self.frozen_loc(i))

    def since(self, i: int) -> list[_BatchEntry]:
        """Entries from index ``i`` on."""
        n = len(self.frozen_first)
        return [self[j] for j in range(i, n)] + self.tail[max(i - n, 0):]

    def __iter__(self) -> Iterator[_BatchEntry]:
        return iter(self.since(0))


class _Partition:
    """What one partition knows: offsets, stream versions, event ids, and its batches."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.next_offset = 0
        self.versions: dict[str, int] = {}
        self.ids = _IdIndex()  # id_key(tenant, event id) -> offset: idempotent appends
        self.stream_offsets: dict[str, array[int]] = {}
        self.batches = _Batches()
        self.cond = threading.Condition()
        # Group commit without a writer thread: the first caller to find no leader commits
        # every request queued so far in its own thread (one write, one fsync), wakes their
        # callers, and hands the lead to the next waiting caller. Requests pile up while a
        # commit's fsync runs, so groups form by themselves under concurrency, and a lone
        # caller pays no thread hand-off at all.
        self.lock = threading.Lock()  # guards pending / leading / stopped
        self.pending: list[_Request] = []
        self.leading = False
        self.stopped = False
        self.active = 0  # callers inside append()
        self.gathering = False  # a leader waits for the active callers to queue
        self.full = threading.Condition(self.lock)
        self.commit_lock = threading.Lock()  # one commit (or sync, or close) at a time
        self.dirty = False  # written but not yet fsynced (fsync='batch')
        self.wrote = False

    def maybe_gathered(self) -> None:
        """Wake a gathering leader once every caller inside append() has queued (lock held)."""
        if self.gathering and len(self.pending) >= self.active:
            self.full.notify()

    def record(self, runs: list[Run], locator: Any) -> None:
        """Fold one committed batch, given as its runs."""
        ids, versions, stream_offsets = self.ids, self.versions, self.stream_offsets
        for r in runs:
            first, n = r.first_offset, len(r.keys)
            arr = stream_offsets.get(r.stream)
            if arr is None:
                arr = stream_offsets[r.stream] = array("q")
            if n == 1:  # group commit of single-event appends: skip the bulk machinery
                ids[r.keys[0]] = first
                versions[r.stream] = r.first_version
                arr.append(first)
                continue
            ids.update(zip(r.keys, range(first, first + n)))
            versions[r.stream] = r.first_version + n - 1
            arr.frombytes(np.arange(first, first + n, dtype=np.int64).tobytes())
        first = runs[0].first_offset
        last = runs[-1].first_offset + len(runs[-1].keys) - 1
        with self.cond:
            self.batches.append(_BatchEntry(first, last - first + 1, locator))
            self.next_offset = last + 1
            self.cond.notify_all()
        ids.maybe_merge()

    def record_batch(self, batch: pa.RecordBatch, locator: Any) -> None:
        """Fold a batch read back from storage (recovery)."""
        offsets = batch.column(0).to_pylist()
        tenants = batch.column(6).to_pylist()
        tags = {t: tenant_tag(t) for t in set(tenants)}
        ids = [tags[t] | int.from_bytes(b, "big") for t, b in zip(tenants, batch.column(1).to_pylist())]
        streams = batch.column(2).to_pylist()
        versions = batch.column(3).to_pylist()
        runs: list[Run] = []
        for o, i, s, v in zip(offsets, ids, streams, versions):
            if runs and runs[-1].stream == s:
                runs[-1].keys.append(i)
            else:
                runs.append(Run(s, o, v, [], [i]))
        self.record(runs, locator)

    def admit(self, requests: list[_Request], recorded: Callable[[list[int]], list[RecordedEvent]]) -> list[Run]:
        """Check each request against the state plus earlier requests of the group.

        A request that fails gets its ``error`` set and contributes no run; one whose
        event ids are all logged already, each with the same event, gets its original
        offsets and no run (``recorded`` reads committed events back to compare them).
        """
        runs: list[Run] = []
        versions: dict[str, int] = {}
        ids: dict[int, int] = {}
        offset = self.next_offset
        for req in requests:
            try:
                keys = req.keys
                known_offs: list[int] = []
                if len(keys) == 1:  # the common single-event append: plain lookups
                    known = self.ids.get(keys[0], ids.get(keys[0]))
                    if known is not None:
                        known_offs = [known]
                else:
                    if not self.ids.keys().isdisjoint(keys):
                        known_offs = [o for o in map(self.ids.get, keys) if o is not None]
                    if ids and not ids.keys().isdisjoint(keys):
                        known_offs += [o for o in map(ids.get, keys) if o is not None]
                if known_offs:
                    req.result = self._retried(req, ids, runs, recorded)
                    continue
                actual = versions.get(req.stream, self.versions.get(req.stream, NO_STREAM))
                exp = req.expected
                if (
                    (exp == NO_STREAM and actual != NO_STREAM)
                    or (exp == STREAM_EXISTS and actual == NO_STREAM)
                    or (exp >= 0 and exp != actual)
                ):
                    raise WrongExpectedVersion(req.stream, exp, actual)
                n = len(keys)
                runs.append(Run(req.stream, offset, actual + 1, req.events, keys))
                if len(requests) > 1:
                    ids.update(zip(keys, range(offset, offset + n)))
                versions[req.stream] = actual + n
                req.result = (offset, offset + n - 1)
                offset += n
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                req.error = e
        return runs

    def _retried(self, req: _Request, group: dict[int, int], runs: list[Run],
                 recorded: Callable[[list[int]], list[RecordedEvent]]) -> tuple[int, int]:
        """The original offsets of a retried append; ``EventIdConflict`` unless every id holds this very event.

        The same event is the same stream, type and payload (a redacted one counts: it was
        that event until the user had it forgotten); anything else under a known id would be
        acknowledged without being stored.
        """
        found: list[Any] = [self.ids.get(k, group.get(k)) for k in req.keys]  # ints once no None is left
        if None in found:
            i = next(i for i, o in enumerate(found) if o is not None)
            raise EventIdConflict(str(req.events[i].event_id), "was already appended, but not the other events of this append")
        stored: dict[int, tuple[str, str, bytes]] = {
            e.offset: (e.stream, e.type, e.payload) for e in recorded(sorted(o for o in found if o < self.next_offset))
        }
        for r in runs:  # earlier requests of this group: not committed yet
            for j, ev in enumerate(r.events):
                stored[r.first_offset + j] = (r.stream, ev.type, ev.payload)
        for ev, o in zip(req.events, found):
            stream, kind, payload = stored.get(o, ("", "", b""))
            if stream != req.stream:
                raise EventIdConflict(str(ev.event_id), "already names an event of another stream")
            if kind != "Redacted" and (kind != ev.type or payload != ev.payload):
                raise EventIdConflict(str(ev.event_id), "already names an event with other content")
        return min(found), max(found)
