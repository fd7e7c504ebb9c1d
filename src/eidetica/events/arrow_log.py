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
import mmap
import os
import threading
import time
import warnings
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .._util import observe as _observe
from .._util.fs import fsync_dir, replace
from ..errors import CorruptLog, InvalidInput, StorageError, StoreLocked
from .envelope import LOG_SCHEMA, batch_checksum
from .log import DEFAULT_MAX_PAYLOAD_BYTES, BatchLog, FsyncPolicy, _BatchEntry, _IdIndex

__all__ = ["ArrowLog", "SEGMENT_SUFFIX", "CheckpointWarning"]

SEGMENT_SUFFIX = ".arrows"
FORMAT_VERSION = 1
_SCHEMA_BYTES = LOG_SCHEMA.serialize().to_pybytes()
_MARKER = b"\xff\xff\xff\xff"
_CRC_KEY = b"eidetica.crc32"
_ROWS_KEY = b"eidetica.rows"
_MAX_RESYNC_PROBES = 4096
CHECKPOINT_NAME = "recovery.ckpt"
CHECKPOINT_MAGIC = b"EIDETICA-LOG-CHECKPOINT\n"
CHECKPOINT_VERSION = 3  # 2: a keyed hash of (tenant, id); 3: the raw id and a tenant tag (older files are refused: one full scan)


class CheckpointWarning(UserWarning):
    """A log recovery checkpoint was refused (damaged, stale, foreign): every segment is scanned instead."""


@dataclass(frozen=True)
class _Loc:
    path: str
    start: int
    end: int


class _LocTable:
    """Locators of a checkpoint's batches, as columns: built into ``_Loc`` one at a time when asked."""

    __slots__ = ("paths", "seg", "start", "end")

    def __init__(self, paths: list[str], seg: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.paths, self.seg, self.start, self.end = paths, seg, start, end

    def __call__(self, i: int) -> _Loc:
        return _Loc(self.paths[int(self.seg[i])], int(self.start[i]), int(self.end[i]))


class _FdSink:
    """The raw file under a segment's buffered stream: writes go to our fd, unless disarmed."""

    closed = False

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: Any) -> int:
        """Write all of ``data`` (a dropped, failed segment's leftovers go nowhere)."""
        if self.fd >= 0:
            _write_all(self.fd, data)
        return len(data)

    def flush(self) -> None:
        """Nothing to flush: every write went to the fd."""

    def close(self) -> None:
        """The fd is closed by the segment, which knows when it is safe."""


class _Segment:
    """The open, appendable segment of one partition.

    One IPC stream writer lives as long as the segment (a writer per commit costs more
    than the commit's own encoding), writing into a buffer flushed to the fd once per
    commit, so a commit is one write call.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.size = 0  # bytes flushed to the file, all of them whole verified batches
        self._raw = _FdSink(fd)
        self._sink = pa.BufferedOutputStream(pa.PythonFile(self._raw, mode="w"), _BUFFER_BYTES)
        self._writer = pa.ipc.new_stream(self._sink, LOG_SCHEMA)

    def append(self, batch: pa.RecordBatch) -> tuple[int, int]:
        """Write one batch with its row count and checksum; returns its (start, end) in the file."""
        start = self._sink.tell()
        if self.size == 0:
            start = len(_SCHEMA_BYTES)  # the schema goes out with the first batch
        self._writer.write_batch(
            batch,
            custom_metadata={_CRC_KEY: str(batch_checksum(batch)).encode(), _ROWS_KEY: str(batch.num_rows).encode()},
        )
        self._sink.flush()
        end = self._sink.tell()
        self.size = end
        return start, end

    def finish(self, sync: bool) -> None:
        """Write the end-of-stream marker and close the file."""
        try:
            self._writer.close()
            self._sink.flush()
            if sync:
                os.fdatasync(self.fd)
        finally:
            self.drop()

    def drop(self) -> None:
        """Close the file without writing anything more (the buffered rest is discarded)."""
        self._raw.fd = -1
        os.close(self.fd)


_BUFFER_BYTES = 1 << 20


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _verify(batch: pa.RecordBatch, meta: Any, expected_first: int | None) -> str | None:
    """Why a decoded batch is not trustworthy, or None when it is."""
    if meta is None or _CRC_KEY not in meta or _ROWS_KEY not in meta:
        return "batch has no checksum metadata"
    try:
        rows, _ = int(meta[_ROWS_KEY]), int(meta[_CRC_KEY])
    except ValueError:
        return "batch metadata is damaged"
    if rows != batch.num_rows or batch.num_rows == 0:
        return f"batch length {batch.num_rows} != recorded {rows}"
    try:
        if any(col.null_count for col in batch.columns) or not batch.schema.equals(LOG_SCHEMA):
            return "batch has nulls or a foreign schema"
        if batch_checksum(batch) != int(meta[_CRC_KEY]):
            return "batch checksum mismatch"
    except (ValueError, pa.ArrowException) as e:  # damaged lengths or buffers
        return f"batch cannot be verified: {e}"
    first = batch.column(0)[0].as_py()
    if expected_first is not None and first != expected_first:
        return f"batch starts at offset {first}, expected {expected_first}"
    return None


def _scan(
    path: str, buf: pa.Buffer, first_offset: int, position: int = 0
) -> Iterator[tuple[pa.RecordBatch, int, int] | tuple[None, int, str]]:
    """Yield (batch, start, end) for each verified batch, then (None, position, problem) on failure.

    With ``position`` (the end of a batch already known good), scanning starts there.
    """
    if position > len(_SCHEMA_BYTES):
        shift = position - len(_SCHEMA_BYTES)
        for batch, start, end in _scan(path, pa.py_buffer(_SCHEMA_BYTES + buf.slice(position).to_pybytes()), first_offset):
            yield batch, start + shift, (end + shift if batch is not None else end)  # type: ignore[misc, operator]
        return
    src = pa.BufferReader(buf)
    try:
        reader = pa.ipc.open_stream(src)
    except (pa.ArrowException, OSError) as e:
        yield None, 0, f"unreadable stream header: {e}"
        return
    if not reader.schema.equals(LOG_SCHEMA):
        yield None, 0, "segment schema is not the log schema"
        return
    expected = first_offset
    while True:
        start = src.tell()
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as e:
            yield None, start, f"unreadable batch: {e}"
            return
        problem = _verify(batch, meta, expected)
        if problem:
            yield None, start, problem
            return
        expected += batch.num_rows
        yield batch, start, src.tell()


def _verified_batch_after(buf: pa.Buffer, position: int) -> bool:
    """Whether any verifiable batch starts after ``position`` (then the damage is not a torn tail)."""
    data = buf.to_pybytes()
    pos, probes = position, 0
    while probes < _MAX_RESYNC_PROBES:
        pos = data.find(_MARKER, pos + 1)
        if pos < 0:
            return False
        probes += 1
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(_SCHEMA_BYTES + data[pos:]))
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except (pa.ArrowException, OSError, StopIteration):
            continue
        if _verify(batch, meta, None) is None:
            return True
    return True  # could not rule it out: refuse to truncate


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
                loaded = self._parse_checkpoint(partition, f, segs)
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

    def _parse_checkpoint(self, partition: int, f: Any, segs: list[str]) -> tuple[Any, ...]:
        """Check a checkpoint file against its digest and the segments on disk; decode it.

        The digest is checked by reading the file in chunks; the arrays are then views of a
        read-only memory map whose pages are given back once decoded, so the id map and the
        batch table cost page cache rather than process memory until a lookup touches them.
        """
        if f.read(len(CHECKPOINT_MAGIC)) != CHECKPOINT_MAGIC:
            raise ValueError("not a log checkpoint")
        digest = f.read(65)[:64].decode("ascii", "replace")
        h = hashlib.sha256()
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
        if h.hexdigest() != digest:
            raise ValueError("checksum mismatch")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        pos = len(CHECKPOINT_MAGIC) + 65
        nl = data.find(b"\n", pos)
        if nl < 0:
            raise ValueError("checkpoint header is not terminated")
        header = json.loads(data[pos:nl])
        body = memoryview(data)[nl + 1 :]
        if header.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint format {header.get('version')} is not {CHECKPOINT_VERSION}")
        if header["partition"] != partition or header["partitions"] != self.partitions:
            raise ValueError("checkpoint of another partition layout")
        arrays: dict[str, np.ndarray] = {}
        at = 0
        for name, dtype, n in header["arrays"]:
            size = np.dtype(dtype).itemsize * n
            arrays[name] = np.frombuffer(body[at : at + size], dtype=dtype)
            at += size
        if at != len(body):
            raise ValueError("checkpoint body length does not match its header")
        names = [os.path.join(self._pdir(partition), n) for n in header["segments"]]
        covered = len(names)
        if [os.path.basename(p) for p in segs[:covered]] != header["segments"]:
            raise ValueError("the segments it covers are not the ones on disk")
        ends = header["segment_ends"]
        seg, start, end, firsts = arrays["batch_seg"], arrays["batch_start"], arrays["batch_end"], arrays["batch_first"]
        counts = arrays["batch_count"]
        for k, path in enumerate(names):
            size = os.path.getsize(path)
            if size < ends[k] or (k < covered - 1 and size > ends[k] + 8):  # 8: an end-of-stream marker
                raise ValueError(f"segment {os.path.basename(path)} changed size since the checkpoint")
            # the last covered batch of each segment is read and verified again (catches a rewrite)
            i = int(np.searchsorted(seg, k, side="right")) - 1
            if i < 0 or seg[i] != k or int(end[i]) != ends[k]:
                raise ValueError("checkpoint batch table does not match its segments")
            with pa.memory_map(path) as mm:
                buf = mm.read_buffer()
                piece = _SCHEMA_BYTES + buf.slice(int(start[i]), int(end[i]) - int(start[i])).to_pybytes()
                batch, meta = pa.ipc.open_stream(pa.py_buffer(piece)).read_next_batch_with_custom_metadata()
                problem = _verify(batch, meta, int(firsts[i]))
                if problem:
                    raise ValueError(f"segment {os.path.basename(path)}: {problem}")
        head = int(header["next_offset"])
        if len(firsts) and int(firsts[-1] + counts[-1]) != head:
            raise ValueError("checkpoint batch table does not end at its head")
        ids = _IdIndex(arrays["id_hi"], arrays["id_lo"], arrays["id_offset"], arrays["id_tenant"])
        if len(ids) != head:
            raise ValueError("checkpoint id map does not hold one id per event")
        streams = header["streams"]
        bounds = np.concatenate(([0], np.cumsum(arrays["stream_count"]))).tolist()
        offs = arrays["stream_offsets"]
        stream_offsets: dict[str, array[int]] = {}
        for j, st in enumerate(streams):
            a = array("q")
            a.frombytes(offs[bounds[j] : bounds[j + 1]].tobytes())
            stream_offsets[st] = a
        versions = dict(zip(streams, arrays["stream_version"].tolist()))
        batch_cols = (firsts, counts, _LocTable(names, seg, start, end))
        resume = (covered, ends[-1]) if covered else None
        data.madvise(mmap.MADV_DONTNEED)  # decoded: lookups fault back in the few pages they touch
        return head, ids, versions, stream_offsets, batch_cols, resume

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


def _redact_batch(batch: pa.RecordBatch, wanted: set[int]) -> tuple[pa.RecordBatch, int]:
    """The batch with payloads at ``wanted`` offsets replaced by a ``Redacted`` marker."""
    from .types import Redacted, encode

    offsets = batch.column(0).to_pylist()
    hit = [o in wanted for o in offsets]
    if not any(hit):
        return batch, 0
    types = batch.column(4).to_pylist()
    payloads = batch.column(7).to_pylist()
    new_types, new_payloads = [], []
    n = 0
    for h, t, pl in zip(hit, types, payloads):
        if h and t != "Redacted":
            new_types.append("Redacted")
            new_payloads.append(encode(Redacted(original_type=t)))
            n += 1
        else:
            new_types.append(t)
            new_payloads.append(pl)
    cols = list(batch.columns)
    cols[4] = pa.array(new_types, pa.string())
    cols[7] = pa.array(new_payloads, pa.large_binary())
    return pa.record_batch(cols, schema=LOG_SCHEMA), n


