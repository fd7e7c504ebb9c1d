"""ArrowLog: the durable log, as Arrow IPC stream segments on disk.

Layout under the root directory::

    log.json               format version and partition count
    LOCK                   flock'd by the one writing process
    p000/00000000000000000000.arrows   segments, named by their first offset

Every segment is a plain Arrow IPC *stream* (``pyarrow.ipc.open_stream`` reads it); each
commit is one record batch whose custom metadata carries its row count and a crc32 of
its contents. Opening after a crash truncates a torn tail of the last segment to the
last verified batch; damage anywhere else raises ``CorruptLog``. A segment is rolled by
size, on open, and after a failed write (cut back to its last whole batch first).

Recovery checkpoint (``p000/recovery.ckpt``): what an open rebuilds by scanning every
batch (event id key -> offset, stream versions and offsets, where each batch lies) is written
to one sha256-checked file, atomically (temp file, fsync, rename), covering only batches
already fsynced; an open loads it, checks it against the segments (names, sizes, and the
last covered batch of each re-verified) and scans only what follows. A damaged, stale or
foreign checkpoint is ignored with a ``CheckpointWarning`` and every segment is scanned:
the segments stay the truth. It is written by an open that scanned many events, by
``close`` after many appends, and after ``redact`` (which removes it first).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from .._util import observe as _observe
from .._util.fs import fsync_dir, replace
from ..errors import CorruptLog, InvalidInput, StorageError, StoreLocked
from ._partition import _BatchEntry
from ._segments import (
    _SCHEMA_BYTES,
    CHECKPOINT_MAGIC,
    CHECKPOINT_NAME,
    CHECKPOINT_VERSION,
    _Loc,
    _LocTable,
    _redact_batch,
    _scan,
    _Segment,
    _verified_batch_after,
    _verify,
    _write_all,
    parse_checkpoint,
)
from .log import DEFAULT_MAX_PAYLOAD_BYTES, BatchLog, FsyncPolicy

__all__ = ["ArrowLog", "SEGMENT_SUFFIX", "CheckpointWarning"]

SEGMENT_SUFFIX = ".arrows"
FORMAT_VERSION = 1

class CheckpointWarning(UserWarning):
    """A log recovery checkpoint was refused (damaged, stale, foreign): every segment is scanned instead."""


class ArrowLog(BatchLog):
    """The durable log: Arrow IPC stream segments, group commit, crash recovery."""

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        partitions: int | None = None,
        fsync: FsyncPolicy = "always",
        segment_bytes: int = 64 * 1024 * 1024,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        readonly: bool = False,
        fsync_interval: float = 0.05,
        commit_delay: float = 0.002,
        checkpoint_events: int = 10_000,
        checkpoint_seconds: float = 300.0,
    ) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
        if isinstance(checkpoint_events, bool) or not isinstance(checkpoint_events, int) or checkpoint_events < 1:
            raise InvalidInput("checkpoint_events", "must be an int >= 1", checkpoint_events)
        # a recovery checkpoint is written once this many events are not covered by one
        self.checkpoint_events = checkpoint_events
        if isinstance(checkpoint_seconds, bool) or not isinstance(checkpoint_seconds, (int, float)) \
                or not checkpoint_seconds > 0:
            raise InvalidInput("checkpoint_seconds", "must be a number > 0", checkpoint_seconds)
        self.checkpoint_seconds = float(checkpoint_seconds)
        self._checkpointing = threading.RLock()  # one checkpoint write at a time (housekeeping, close, redact)
        if not isinstance(segment_bytes, int) or segment_bytes < 1024:
            raise InvalidInput("segment_bytes", "must be an int >= 1024", segment_bytes)
        self.segment_bytes = segment_bytes
        self._lock_fd: int | None = None
        stored = self._read_meta()
        if partitions is not None and stored is not None and partitions != stored:
            raise InvalidInput("partitions", f"the log at {self.path} has {stored} partitions, not {partitions}")
        super().__init__(
            partitions=stored or partitions or 1,
            fsync=fsync,
            max_payload_bytes=max_payload_bytes,
            fsync_interval=fsync_interval,
            commit_delay=commit_delay,
        )
        self._open: dict[int, _Segment] = {}
        self._covered = [0] * self.partitions  # events the partition's checkpoint on disk covers
        self._covered_at = [time.monotonic()] * self.partitions  # when it was written (or loaded)
        self.recovered_events = [0] * self.partitions  # events an open scanned from segments (not from a checkpoint)
        if not readonly:
            self._acquire(stored is None)
        try:
            for p in range(self.partitions):
                self._recover(p)
                self._maybe_checkpoint(p)
        except BaseException:
            self._release()
            raise

    # -- opening ---------------------------------------------------------------------
    def _read_meta(self) -> int | None:
        meta_path = os.path.join(self.path, "log.json")
        if not os.path.exists(meta_path):
            if self.readonly:
                raise InvalidInput("path", f"no log at {self.path}")
            return None
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("format") != FORMAT_VERSION:
            raise InvalidInput("path", f"log format {meta.get('format')} is not {FORMAT_VERSION}")
        return int(meta["partitions"])

    def _acquire(self, create: bool) -> None:
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLocked(self.path) from None
            raise
        self._lock_fd = fd
        if create:
            tmp = os.path.join(self.path, "log.json.tmp")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
                json.dump({"format": FORMAT_VERSION, "partitions": self.partitions}, f)
                f.flush()
                os.fsync(f.fileno())
            replace(tmp, os.path.join(self.path, "log.json"), os)  # this module's os: the power-loss tests cut it
        for p in range(self.partitions):
            os.makedirs(self._pdir(p), mode=0o700, exist_ok=True)
        fsync_dir(self.path, os)

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _pdir(self, partition: int) -> str:
        return os.path.join(self.path, f"p{partition:03d}")

    def segments(self, partition: int = 0) -> list[str]:
        """Paths of a partition's segment files, oldest first."""
        d = self._pdir(partition)
        if not os.path.isdir(d):
            return []
        return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(SEGMENT_SUFFIX)]

    def _recover(self, partition: int, use_checkpoint: bool = True) -> None:
        part = self._parts[partition]
        segs = self.segments(partition)
        resume = self._load_checkpoint(partition, segs) if use_checkpoint else None
        for k, path in enumerate(segs):
            last = k == len(segs) - 1
            first = int(os.path.basename(path)[: -len(SEGMENT_SUFFIX)])
            position = 0
            if resume is not None and k < resume[0]:
                if k < resume[0] - 1:
                    continue  # wholly covered by the checkpoint (checked when it was loaded)
                position, first = resume[1], part.next_offset  # the last covered segment: scan what follows
            elif first != part.next_offset:
                raise CorruptLog(path, 0, f"segment starts at offset {first}, expected {part.next_offset}")
            with pa.memory_map(path) as mm:
                buf = mm.read_buffer()
                good_end, torn = position, False
                for batch, start, end in _scan(path, buf, first, position):
                    if batch is None:
                        if last and not _verified_batch_after(buf, start):
                            torn = True  # only the commit in flight at a crash can be torn
                            break
                        raise CorruptLog(path, start, str(end), offset=part.next_offset)
                    part.record_batch(batch, _Loc(path, start, end))  # type: ignore[arg-type]  # a batch: end is int
                    self.recovered_events[partition] += batch.num_rows
                    good_end = end  # type: ignore[assignment]
            if torn and not self.readonly:
                self._truncate_tail(path, good_end)

    # -- recovery checkpoint -------------------------------------------------------------
    def _checkpoint_path(self, partition: int) -> str:
        return os.path.join(self._pdir(partition), CHECKPOINT_NAME)

    def _load_checkpoint(self, partition: int, segs: list[str]) -> tuple[int, int] | None:
        """Load a partition's checkpoint into its (empty) state: (segments covered, end in the last), or None.

        A refused checkpoint leaves the state untouched and warns: the caller scans everything.
        """
        cpath = self._checkpoint_path(partition)
        try:
            f = open(cpath, "rb")
        except FileNotFoundError:
            return None
        except OSError as e:
            warnings.warn(f"eidetica: ignoring log checkpoint {cpath}: {e}; scanning every segment", CheckpointWarning,
                          stacklevel=4)
            return None
        try:
            with f:
                loaded = parse_checkpoint(f, partition, self.partitions, self._pdir(partition), segs)
        except Exception as e:  # noqa: BLE001 - any damage or staleness: the segments are the truth
            warnings.warn(f"eidetica: ignoring log checkpoint {cpath}: {e}; scanning every segment", CheckpointWarning,
                          stacklevel=4)
            return None
        part = self._parts[partition]
        head, ids, versions, stream_offsets, batch_cols, resume = loaded
        resume_at: tuple[int, int] | None = resume
        part.ids = ids
        part.versions = versions
        part.stream_offsets = stream_offsets
        part.batches.freeze(*batch_cols)
        part.next_offset = head
        self._covered[partition] = head
        return resume_at

    def _maybe_checkpoint(self, partition: int) -> None:
        """Write a checkpoint when enough events are not covered by the one on disk."""
        if not self.readonly and self._parts[partition].next_offset - self._covered[partition] >= self.checkpoint_events:
            self.write_checkpoint(partition)

    def maintain(self) -> int:
        """Write every recovery checkpoint that is due while appends go on; returns how many were written.

        Due: ``checkpoint_events`` events not covered by the partition's checkpoint, or
        ``checkpoint_seconds`` since it was written with at least one event not covered (the
        rule the state snapshots follow). Called from a housekeeping thread, never from
        ``append``: commits wait only while the partition's state is copied, not while the
        file is hashed, written and fsynced.
        """
        if self.readonly or self.closed:
            return 0
        written = 0
        now = time.monotonic()
        for p in range(self.partitions):
            behind = self._parts[p].next_offset - self._covered[p]
            if behind >= self.checkpoint_events or (behind > 0 and now - self._covered_at[p] >= self.checkpoint_seconds):
                self.write_checkpoint(p)
                written += 1
        return written

    def write_checkpoint(self, partition: int = 0) -> None:
        """Write a partition's recovery checkpoint now (safe while appends go on: it covers a consistent cut)."""
        if self.readonly:
            raise InvalidInput("log", "is open read-only")
        part = self._part(partition)
        with self._checkpointing:
            with part.commit_lock:  # no commit between the copies below: they describe one head
                cut = self._cut(part)
            if cut is not None:
                self._write_checkpoint_file(partition, *cut)

    def _cut(self, part: Any) -> tuple[Any, ...] | None:
        """Copies of what a checkpoint holds, taken with no commit running (commit lock held)."""
        if not len(part.batches):
            return None
        head = part.next_offset
        tab = part.batches.frozen_loc
        paths: list[str] = list(tab.paths) if isinstance(tab, _LocTable) else []
        index = {p: k for k, p in enumerate(paths)}
        seg = [tab.seg] if isinstance(tab, _LocTable) else []
        start = [tab.start] if isinstance(tab, _LocTable) else []
        end = [tab.end] if isinstance(tab, _LocTable) else []
        tail = list(part.batches.tail)
        for e in tail:
            if e.locator.path not in index:
                index[e.locator.path] = len(paths)
                paths.append(e.locator.path)
        seg.append(np.fromiter((index[e.locator.path] for e in tail), np.int32, len(tail)))
        start.append(np.fromiter((e.locator.start for e in tail), np.int64, len(tail)))
        end.append(np.fromiter((e.locator.end for e in tail), np.int64, len(tail)))
        firsts = np.concatenate([part.batches.frozen_first, np.fromiter((e.first for e in tail), np.int64, len(tail))])
        counts = np.concatenate([part.batches.frozen_count, np.fromiter((e.count for e in tail), np.int64, len(tail))])
        hi, lo, off, tag = part.ids.arrays()  # merged into new arrays: later merges never touch these
        streams = list(part.stream_offsets)
        counts_s = np.fromiter((len(part.stream_offsets[st]) for st in streams), np.int64, len(streams))
        offs = np.frombuffer(b"".join(part.stream_offsets[st].tobytes() for st in streams), np.int64)
        vers = np.fromiter((part.versions[st] for st in streams), np.int64, len(streams))
        return head, paths, seg, start, end, firsts, counts, (hi, lo, off, tag), streams, counts_s, offs, vers

    def _write_checkpoint_file(self, partition: int, head: int, paths: list[str], seg: list[np.ndarray],
                               start: list[np.ndarray], end: list[np.ndarray],
                               firsts: np.ndarray, counts: np.ndarray, ids: tuple[Any, ...], streams: list[str],
                               counts_s: np.ndarray, offs: np.ndarray, vers: np.ndarray) -> None:
        seg_a, start_a, end_a = np.concatenate(seg), np.concatenate(start), np.concatenate(end)
        ends = [int(end_a[np.searchsorted(seg_a, k, side="right") - 1]) for k in range(len(paths))]
        for path in paths:  # cover only what is on disk: a power loss must not take back a covered batch
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        hi, lo, off, tag = ids
        arrays = {"id_hi": hi, "id_lo": lo, "id_offset": off, "id_tenant": tag, "stream_count": counts_s, "stream_offsets": offs,
                  "stream_version": vers, "batch_first": firsts, "batch_count": counts, "batch_seg": seg_a,
                  "batch_start": start_a, "batch_end": end_a}
        header = {"version": CHECKPOINT_VERSION, "partition": partition, "partitions": self.partitions,
                  "next_offset": head, "segments": [os.path.basename(p) for p in paths],
                  "segment_ends": ends, "streams": streams,
                  "arrays": [[k, a.dtype.str, len(a)] for k, a in arrays.items()]}
        h = hashlib.sha256()
        head_bytes = json.dumps(header).encode() + b"\n"
        h.update(head_bytes)
        for a in arrays.values():
            h.update(memoryview(np.ascontiguousarray(a)).cast("B"))  # type: ignore[arg-type]  # ndarray: a buffer
        cpath = self._checkpoint_path(partition)
        tmp = cpath + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:  # written here, not by write_atomic: the checkpoint's crash tests cut _write_all and this module's os
            _write_all(fd, CHECKPOINT_MAGIC + h.hexdigest().encode() + b"\n" + head_bytes)
            for a in arrays.values():
                _write_all(fd, memoryview(np.ascontiguousarray(a)).cast("B"))  # type: ignore[arg-type]  # ndarray: a buffer
            os.fsync(fd)
        finally:
            os.close(fd)
        replace(tmp, cpath, os)
        self._covered[partition] = head
        self._covered_at[partition] = time.monotonic()

    def _drop_checkpoint(self, partition: int) -> None:
        """Remove a partition's checkpoint (before its segments are rewritten)."""
        try:
            os.unlink(self._checkpoint_path(partition))
        except FileNotFoundError:
            return
        fsync_dir(self._pdir(partition), os)
        self._covered[partition] = 0

    def _truncate_tail(self, path: str, good_end: int) -> None:
        if good_end == 0:
            os.unlink(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        fsync_dir(os.path.dirname(path), os)

    # -- writing ---------------------------------------------------------------------
    def append(self, stream: str, events: Any, expected_version: int = -2) -> tuple[int, int]:
        """Append events to a stream atomically; returns (first_offset, last_offset)."""
        if self.readonly:
            raise InvalidInput("log", "is open read-only")
        try:
            return super().append(stream, events, expected_version)
        except OSError as e:
            if isinstance(e, StorageError):
                raise
            # the failed batch was cut off again (see _undo): report it inside the error tree
            raise StorageError(e.errno, e.strerror or str(e), e.filename or str(self.path)) from e

    def _write(self, partition: int, batch: pa.RecordBatch) -> _Loc:
        seg = self._open.get(partition)
        fresh = seg is None
        if seg is None:
            first = batch.column(0)[0].as_py()
            path = os.path.join(self._pdir(partition), f"{first:020d}{SEGMENT_SUFFIX}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                seg = _Segment(path, fd)
            except BaseException:
                os.close(fd)
                os.unlink(path)  # or the next commit could not create it again
                raise
        good = seg.size
        try:
            start, end = seg.append(batch)
            if self.fsync == "always":
                os.fdatasync(seg.fd)
                _observe.count("log_fsyncs")
        except BaseException:
            self._open.pop(partition, None)
            self._undo(seg, good)
            raise
        if fresh:
            self._open[partition] = seg
            fsync_dir(self._pdir(partition), os)
        if end >= self.segment_bytes:
            self._finish(partition)
        return _Loc(seg.path, start, end)

    def _undo(self, seg: _Segment, good: int) -> None:
        """Cut a failed write back off so the file stays a valid stream, and give the segment up.

        The writer's buffer may hold part of the failed batch, so the next commit starts a
        new segment rather than trusting it.
        """
        try:
            if good == 0:
                os.unlink(seg.path)
            else:
                os.ftruncate(seg.fd, good)
        except OSError:
            pass
        finally:
            seg.drop()

    def _sync(self, partition: int) -> None:
        seg = self._open.get(partition)
        if seg is not None:
            os.fdatasync(seg.fd)
            _observe.count("log_fsyncs")

    def _finish(self, partition: int) -> None:
        seg = self._open.pop(partition, None)
        if seg is not None:
            seg.finish(sync=self.fsync != "never")

    def _close_partition(self, partition: int) -> None:
        self._finish(partition)

    # -- reading ---------------------------------------------------------------------
    def _load(self, partition: int, entries: list[_BatchEntry]) -> Iterator[pa.RecordBatch]:
        i = 0
        while i < len(entries):
            j = i + 1
            # one reader per run of adjacent batches in the same segment
            while (
                j < len(entries)
                and entries[j].locator.path == entries[i].locator.path
                and entries[j].locator.start == entries[j - 1].locator.end
            ):
                j += 1
            yield from self._load_segment(entries[i].locator.path, entries[i:j])
            i = j

    def _load_segment(self, path: str, entries: list[_BatchEntry]) -> Iterator[pa.RecordBatch]:
        start, end = entries[0].locator.start, entries[-1].locator.end
        with pa.memory_map(path) as mm:
            buf = mm.read_buffer()
            if start <= len(_SCHEMA_BYTES):
                stream = buf.slice(0, end)
            else:
                stream = pa.py_buffer(_SCHEMA_BYTES + buf.slice(start, end - start).to_pybytes())
            reader = pa.ipc.open_stream(stream)
            for entry in entries:
                pos = entry.locator.start
                try:
                    batch, meta = reader.read_next_batch_with_custom_metadata()
                except (pa.ArrowException, OSError, StopIteration) as e:
                    raise CorruptLog(path, pos, f"unreadable batch: {e}", offset=entry.first) from None
                problem = _verify(batch, meta, entry.first)
                if problem:
                    raise CorruptLog(path, pos, problem, offset=entry.first)
                yield batch

    def redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        """Rewrite segments so the events at these offsets keep their envelope but lose their payload.

        Needs exclusive use of the log (no concurrent appends or reads). Each affected
        segment is written anew beside the old one and renamed over it (atomic), so a
        crash leaves every segment either old or new, never torn.
        """
        if self.readonly:
            raise InvalidInput("log", "is open read-only")
        with self._checkpointing:  # a housekeeping checkpoint must not describe the segments being rewritten
            return self._redact(offsets)

    def _redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        self._stop_writers()  # finishes every open segment (_close_partition)
        for p in range(self.partitions):  # positions are about to change: no checkpoint may point at them
            self._drop_checkpoint(p)
        rewritten = redacted = 0
        before = self.disk_bytes()
        for p, wanted in offsets.items():
            if not wanted:
                continue
            by_path: dict[str, list[_BatchEntry]] = {}
            for e in self._part(p).batches:  # built once: entries of a checkpointed prefix are made on demand
                by_path.setdefault(e.locator.path, []).append(e)
            for path in self.segments(p):
                entries = by_path.get(path, [])
                if not entries or not any(e.first <= o < e.first + e.count for o in wanted for e in entries):
                    continue
                tmp = path + ".compact"
                seg = _Segment(tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
                try:
                    for batch in self._load_segment(path, entries):
                        batch, n = _redact_batch(batch, wanted)
                        redacted += n
                        seg.append(batch)
                except BaseException:
                    seg.drop()
                    raise
                seg.finish(sync=True)
                replace(tmp, path, os)
                rewritten += 1
            fsync_dir(self._pdir(p), os)
        # re-read what is now on disk: positions changed, offsets and versions did not
        self._parts = [type(self._parts[0])(i) for i in range(self.partitions)]
        self.recovered_events = [0] * self.partitions
        for p in range(self.partitions):
            self._recover(p, use_checkpoint=False)
            self._maybe_checkpoint(p)
        self._flusher_stop.clear()
        return {"redacted": redacted, "segments_rewritten": rewritten, "bytes_before": before, "bytes_after": self.disk_bytes()}

    def close(self) -> None:
        """Flush and close segments, release the write lock."""
        if self.closed:
            return
        super().close()  # finishes every open segment (_close_partition)
        try:
            for p in range(self.partitions):
                self._maybe_checkpoint(p)
        except OSError as e:  # an optimisation only: the next open scans more
            warnings.warn(f"eidetica: could not write the log checkpoint: {e}", CheckpointWarning, stacklevel=2)
        finally:
            self._release()

    def disk_bytes(self) -> int:
        """Bytes the log's segments take on disk."""
        return sum(os.path.getsize(s) for p in range(self.partitions) for s in self.segments(p))
