"""The log port, and the machinery every implementation shares.

``EventLog`` is the port (a small abstract class). ``BatchLog`` implements it on top of
two hooks a storage backend provides (write one record batch durably, load batches
back), and owns what must behave identically everywhere: argument validation,
``expected_version`` checks, idempotent appends by ``event_id``, group commit (led by
the appending threads themselves, one commit at a time per partition), reads, and
waiting for offsets.
"""

from __future__ import annotations

import abc
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import pyarrow as pa

from .._util import observe as _observe
from ..errors import InvalidInput
from ._partition import _BatchEntry, _holding, _Partition, _Request
from .envelope import (
    ANY,
    NO_STREAM,
    NewEvent,
    RecordedEvent,
    batch_from_runs,
    events_from_batch,
    id_key,
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
