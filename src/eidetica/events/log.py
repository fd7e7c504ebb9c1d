"""The log port, and the machinery every implementation shares.

``EventLog`` is the port (a small abstract class). ``BatchLog`` implements it on top of
two hooks a storage backend provides (write one record batch durably, load batches
back), and owns what must behave identically everywhere: argument validation,
``expected_version`` checks, idempotent appends by ``event_id``, group commit (led by
the appending threads themselves, one commit at a time per partition), reads, and
waiting for offsets.
"""

from __future__ import annotations

import _thread
import abc
import bisect
import threading
import time
import uuid
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from .._util import observe as _observe
from ..errors import EventIdConflict, InvalidInput, WrongExpectedVersion
from .envelope import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    NewEvent,
    RecordedEvent,
    Run,
    batch_from_runs,
    events_from_batch,
    id_key,
    tenant_tag,
    utcnow,
    validate_append,
)

__all__ = ["EventLog", "BatchLog", "FsyncPolicy", "FSYNC_POLICIES", "DEFAULT_MAX_PAYLOAD_BYTES"]

FsyncPolicy = Literal["always", "batch", "never"]
FSYNC_POLICIES: tuple[str, ...] = ("always", "batch", "never")
DEFAULT_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024


class EventLog(abc.ABC):
    """Port: an append-only, partitioned log of events grouped in versioned streams."""

    partitions: int = 1
    durable: bool = False  # on disk, owned by this process (ArrowLog): the store's housekeeping checkpoints it

    def partition_of(self, stream: str) -> int:
        """The partition a stream lives in (stable across processes)."""
        if self.partitions == 1:
            return 0
        return zlib.crc32(stream.encode("utf-8")) % self.partitions

    @abc.abstractmethod
    def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY
    ) -> tuple[int, int]:
        """Append events to a stream atomically; returns (first_offset, last_offset)."""

    @abc.abstractmethod
    def read_batches(self, from_offset: int = 0, *, partition: int = 0) -> Iterator[pa.RecordBatch]:
        """Committed events from ``from_offset`` on, as Arrow record batches."""

    @abc.abstractmethod
    def read_stream(self, stream: str, from_version: int = 0) -> list[RecordedEvent]:
        """A stream's events from ``from_version`` on, in version order."""

    @abc.abstractmethod
    def head(self, partition: int = 0) -> int:
        """The offset the next event of a partition will get (== events committed)."""

    @abc.abstractmethod
    def stream_version(self, stream: str) -> int:
        """A stream's last version, or ``NO_STREAM`` (-1) when it has no event."""

    @abc.abstractmethod
    def wait_for(self, offset: int, *, partition: int = 0, timeout: float | None = None) -> bool:
        """Block until the event at ``offset`` is committed; False on timeout."""

    def read(
        self, from_offset: int = 0, limit: int | None = None, *, partition: int = 0
    ) -> list[RecordedEvent]:
        """Committed events from ``from_offset`` on (at most ``limit``), as envelopes."""
        if limit is not None and limit < 0:
            raise InvalidInput("limit", "must be >= 0", limit)
        out: list[RecordedEvent] = []
        for batch in self.read_batches(from_offset, partition=partition):
            if limit is not None:
                batch = batch.slice(0, limit - len(out))
            out.extend(events_from_batch(batch))
            if limit is not None and len(out) >= limit:
                break
        return out

    def read_offsets(self, offsets: Sequence[int], *, partition: int = 0) -> list[RecordedEvent]:
        """The committed events at these offsets of a partition, in offset order (unknown ones skipped)."""
        want = sorted(set(offsets))
        out: list[RecordedEvent] = []
        for o in want:  # generic and slow: a log with a batch index overrides this
            if out and out[-1].offset >= o:
                continue
            out.extend(e for e in self.read(o, 1, partition=partition) if e.offset == o)
        return out

    # -- what the store reads and does beyond the fold (sweep, stats, compaction, housekeeping) --
    @abc.abstractmethod
    def streams(self) -> list[str]:
        """Every stream with at least one event."""

    @abc.abstractmethod
    def event_offsets(self, event_ids: Sequence[uuid.UUID], stream: str, tenant: str) -> list[int | None]:
        """Where a tenant's event ids were logged in a stream's partition (None: not logged)."""

    @abc.abstractmethod
    def redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        """Keep the events at these offsets (partition -> offsets) as envelopes and drop their payloads (compaction).

        Returns ``{"redacted", "segments_rewritten", "bytes_before", "bytes_after"}``; needs exclusive use.
        """

    def disk_bytes(self) -> int:
        """Bytes the log takes on disk (0: it keeps nothing there)."""
        return 0

    def maintain(self) -> int:
        """Write what is due now (recovery checkpoints); returns how many were written (0: nothing to keep)."""
        return 0

    def subscribe(
        self,
        from_offset: int = 0,
        *,
        partition: int = 0,
        stop: threading.Event | None = None,
        poll_seconds: float = 0.2,
    ) -> Iterator[RecordedEvent]:
        """Follow a partition: yield events from ``from_offset`` on, waiting for new ones."""
        pos = from_offset
        while not (stop is not None and stop.is_set()) and not self.closed:
            for batch in self.read_batches(pos, partition=partition):
                for ev in events_from_batch(batch):
                    yield ev
                    pos = ev.offset + 1
            self.wait_for(pos, partition=partition, timeout=poll_seconds)

    closed: bool = False

    def close(self) -> None:
        """Release files and threads; the log is unusable afterwards."""
        self.closed = True

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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


class BatchLog(EventLog):
    """Shared implementation: subclasses store batches via ``_write`` and ``_load``."""

    def __init__(
        self,
        *,
        partitions: int = 1,
        fsync: FsyncPolicy = "always",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        fsync_interval: float = 0.05,
        commit_delay: float = 0.002,
    ) -> None:
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise InvalidInput("partitions", "must be an int >= 1", partitions)
        if fsync not in FSYNC_POLICIES:
            raise InvalidInput("fsync", "must be 'always', 'batch' or 'never'", fsync)
        if not isinstance(max_payload_bytes, int) or max_payload_bytes < 1:
            raise InvalidInput("max_payload_bytes", "must be a positive int", max_payload_bytes)
        self.partitions = partitions
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.commit_delay = commit_delay
        self.max_payload_bytes = max_payload_bytes
        self._parts = [_Partition(i) for i in range(partitions)]
        self._start_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._flusher_stop = threading.Event()
        self.closed = False

    # -- hooks ---------------------------------------------------------------------
    @abc.abstractmethod
    def _write(self, partition: int, batch: pa.RecordBatch) -> Any:
        """Store one batch (durably when fsync is 'always'); return its locator."""

    @abc.abstractmethod
    def _load(self, partition: int, entries: list[_BatchEntry]) -> Iterator[pa.RecordBatch]:
        """Load the batches behind these entries, in order, verified."""

    def _sync(self, partition: int) -> None:
        """Flush a partition's written batches to disk (fsync='batch')."""

    def _close_partition(self, partition: int) -> None:
        """The partition takes no more writes (close, or exclusive maintenance)."""

    # -- writing -------------------------------------------------------------------
    def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY
    ) -> tuple[int, int]:
        """Append events to a stream atomically; returns (first_offset, last_offset)."""
        evs, keys = validate_append(stream, events, expected_version, self.max_payload_bytes)
        part = self._parts[self.partition_of(stream)]
        req = _Request(stream, evs, keys, expected_version)
        with part.lock:
            if part.stopped:  # set by close() before ``closed``, so this covers a closed log
                raise InvalidInput("log", "is closed")
            part.pending.append(req)
            part.active += 1
            lead = not part.leading
            part.leading = True
            part.maybe_gathered()
        try:
            if not lead:
                self._follow(part, req)
            else:
                self._lead(part, req)
        finally:
            with part.lock:
                part.active -= 1
                part.maybe_gathered()
            if req.next is not None:
                req.next.wake()
        if req.error is not None:
            raise req.error
        assert req.result is not None
        return req.result

    def _follow(self, part: _Partition, req: _Request) -> None:
        """Wait for a leader to commit ``req``, or to hand this caller the lead."""
        try:
            req.wait()
        except BaseException:
            with part.lock:  # interrupted: whoever answers later must not count on us
                must_lead = req.lead
                req.abandoned = not must_lead
            if must_lead:
                self._lead(part, req)
            raise
        if req.lead:
            self._lead(part, req)

    def _lead(self, part: _Partition, own: _Request) -> None:
        """Commit the queued group, then pass the lead to the next waiting caller."""
        while True:
            try:
                with part.commit_lock:
                    self._gather(part)
                    with part.lock:
                        group, part.pending = part.pending, []
                    if group:
                        self._commit(part, group, own)
            finally:
                with part.lock:
                    nxt = next((r for r in part.pending if not r.abandoned), None)
                    if nxt is not None:
                        nxt.lead = True
                    done = nxt is not None or not part.pending
                    if done and nxt is None:
                        part.leading = False
            if nxt is not None:
                nxt.wake()
            if done:
                return
            # only abandoned requests are queued: nobody else will commit them

    def _gather(self, part: _Partition) -> None:
        """With other callers inside append() but not yet queued, give them a moment to join.

        In a closed loop of N appenders, the callers a commit just answered come straight
        back: waiting for them (bounded by commit_delay) makes one group of N instead of
        alternating groups of 1 and N-1, halving the fsyncs per event.
        """
        if self.fsync != "always" or self.commit_delay <= 0 or len(part.pending) >= part.active:
            return
        with part.lock:
            part.gathering = True
            part.full.wait_for(lambda: len(part.pending) >= part.active, self.commit_delay)
            part.gathering = False

    def _commit(self, part: _Partition, reqs: list[_Request], own: _Request) -> None:
        """Admit, write and record one group; every caller in it is answered."""
        try:
            runs = part.admit(reqs, lambda offsets: self._read_committed(part, offsets))
            if runs:
                batch = batch_from_runs(runs, utcnow())
                locator = self._write(part.index, batch)
                _observe.count("log_appends", len(runs))
                _observe.count("log_events", batch.num_rows)
                _observe.observe("log_group_commit", len(runs))  # appends that shared this write
                part.wrote = True
                part.dirty = self.fsync == "batch"
                part.record(runs, locator)
                if part.dirty:
                    self._start_flusher()
        except BaseException as e:  # noqa: BLE001 - every waiter must wake with the error
            for r in reqs:
                if r.error is None:
                    r.error, r.result = e, None
        finally:
            # Wake the callers one after another rather than all at once: each passes the
            # wake-up on as it leaves append(), so only one of them wants the GIL at a time
            # instead of all of them piling onto it (a second sleep and wake-up each).
            # Built under the lock: an interrupted caller marks itself abandoned under it, and
            # one that is already in the chain passes the wake-up on as it leaves.
            # The leader's own request needs no wake-up: it starts the chain as it leaves.
            with part.lock:
                chain = [r for r in reqs if r is not own and not r.lead and not r.abandoned]
                for a, b in zip(chain, chain[1:]):
                    a.next = b
            if chain:
                if any(r is own for r in reqs):
                    own.next = chain[0]
                else:
                    chain[0].wake()

    def _start_flusher(self) -> None:
        """fsync='batch': one background thread syncs written partitions every fsync_interval."""
        if self._flusher is None:
            with self._start_lock:
                if self._flusher is None and not self._flusher_stop.is_set():
                    self._flusher = threading.Thread(target=self._flush_loop, name="eidetica-log-flush", daemon=True)
                    self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._flusher_stop.wait(self.fsync_interval):
            self._flush_dirty()

    def _flush_dirty(self) -> None:
        for part in self._parts:
            if part.dirty:
                with part.commit_lock:
                    if part.dirty:
                        part.dirty = False
                        self._sync(part.index)

    def _stop_writers(self) -> None:
        """Refuse new appends, let in-flight commits finish, sync and release the partitions."""
        for part in self._parts:
            with part.lock:
                part.stopped = True
        for part in self._parts:
            while True:  # a leader drains what was queued before ``stopped``
                with part.lock:
                    if not part.leading:
                        break
                time.sleep(0.001)
        self._flusher_stop.set()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        self._flush_dirty()
        for part in self._parts:
            with part.commit_lock:
                if part.wrote:
                    part.wrote = False
                    self._close_partition(part.index)

    # -- reading -------------------------------------------------------------------
    def _part(self, partition: int) -> _Partition:
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < self.partitions:
            raise InvalidInput("partition", f"must be an int in [0, {self.partitions})", partition)
        return self._parts[partition]

    def read_batches(self, from_offset: int = 0, *, partition: int = 0) -> Iterator[pa.RecordBatch]:
        """Committed events from ``from_offset`` on, as Arrow record batches."""
        if isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0:
            raise InvalidInput("from_offset", "must be an int >= 0", from_offset)
        part = self._part(partition)
        with part.cond:
            entries = part.batches.since(max(part.batches.index(from_offset), 0))
        for entry, batch in zip(entries, self._load(partition, entries)):
            if entry.first < from_offset:
                batch = batch.slice(from_offset - entry.first)
                if batch.num_rows == 0:
                    continue
            yield batch

    def read_stream(self, stream: str, from_version: int = 0) -> list[RecordedEvent]:
        """A stream's events from ``from_version`` on, in version order."""
        if not isinstance(stream, str) or not stream:
            raise InvalidInput("stream", "must be a non-empty string", stream)
        if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 0:
            raise InvalidInput("from_version", "must be an int >= 0", from_version)
        p = self.partition_of(stream)
        part = self._parts[p]
        with part.cond:
            offs = list(part.stream_offsets.get(stream, ())[from_version:])  # the tail only: an actor reads it after its snapshot
            if not offs:
                return []
            wanted = _holding(part, offs)
        return self._read_rows(p, wanted, set(offs))

    def _read_rows(self, partition: int, wanted: list[_BatchEntry], keep: set[int]) -> list[RecordedEvent]:
        """The events at offsets ``keep`` of these batches: only their rows are decoded (a commit holds other streams too)."""
        out: list[RecordedEvent] = []
        for entry, batch in zip(wanted, self._load(partition, wanted)):
            rows = [o - entry.first for o in range(entry.first, entry.first + entry.count) if o in keep]
            if len(rows) == batch.num_rows:
                out.extend(events_from_batch(batch))
            else:
                out.extend(events_from_batch(batch.take(pa.array(rows, pa.int64()))))
        return out

    def read_offsets(self, offsets: Sequence[int], *, partition: int = 0) -> list[RecordedEvent]:
        """The committed events at these offsets, loading only the batches that hold them."""
        return self._read_committed(self._part(partition), offsets)

    def _read_committed(self, part: _Partition, offsets: Sequence[int]) -> list[RecordedEvent]:
        """``read_offsets`` for a partition in hand (also what admit compares a retry with)."""
        want = sorted(set(offsets))
        with part.cond:
            want = [o for o in want if 0 <= o < part.next_offset]
            wanted = _holding(part, want)
        return self._read_rows(part.index, wanted, set(want))

    def head(self, partition: int = 0) -> int:
        """The offset the next event of a partition will get (== events committed)."""
        return self._part(partition).next_offset

    def stream_version(self, stream: str) -> int:
        """A stream's last version, or ``NO_STREAM`` (-1) when it has no event."""
        return self._parts[self.partition_of(stream)].versions.get(stream, NO_STREAM)

    def streams(self) -> list[str]:
        """Every stream with at least one event."""
        return [s for p in self._parts for s in p.versions]

    def event_offset(self, event_id: uuid.UUID, stream: str, tenant: str) -> int | None:
        """The offset a tenant's event id was logged at in a stream's partition, if it was."""
        return self._parts[self.partition_of(stream)].ids.get(id_key(tenant, event_id.bytes))

    def event_offsets(self, event_ids: Sequence[uuid.UUID], stream: str, tenant: str) -> list[int | None]:
        """``event_offset`` for many ids of one stream's partition (one call through a remote log)."""
        ids = self._parts[self.partition_of(stream)].ids
        return [ids.get(id_key(tenant, e.bytes)) for e in event_ids]

    def wait_for(self, offset: int, *, partition: int = 0, timeout: float | None = None) -> bool:
        """Block until the event at ``offset`` is committed; False on timeout."""
        part = self._part(partition)
        deadline = None if timeout is None else time.monotonic() + timeout
        with part.cond:
            while part.next_offset <= offset:
                if self.closed:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                part.cond.wait(remaining if remaining is not None else 0.5)
            return True

    def close(self) -> None:
        """Stop the writers (flushing what they hold) and release resources."""
        if self.closed:
            return
        self._stop_writers()
        self.closed = True
        for part in self._parts:
            with part.cond:
                part.cond.notify_all()
