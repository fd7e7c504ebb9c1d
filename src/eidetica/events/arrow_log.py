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
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

from ..errors import CorruptLog, InvalidInput, StorageError, StoreLocked
from .envelope import LOG_SCHEMA, batch_checksum
from .log import DEFAULT_MAX_PAYLOAD_BYTES, BatchLog, FsyncPolicy, _BatchEntry

__all__ = ["ArrowLog", "SEGMENT_SUFFIX"]

SEGMENT_SUFFIX = ".arrows"
FORMAT_VERSION = 1
_SCHEMA_BYTES = LOG_SCHEMA.serialize().to_pybytes()
_MARKER = b"\xff\xff\xff\xff"
_CRC_KEY = b"eidetica.crc32"
_ROWS_KEY = b"eidetica.rows"
_MAX_RESYNC_PROBES = 4096


@dataclass(frozen=True)
class _Loc:
    path: str
    start: int
    end: int


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


def _scan(path: str, buf: pa.Buffer, first_offset: int) -> Iterator[tuple[pa.RecordBatch, int, int] | tuple[None, int, str]]:
    """Yield (batch, start, end) for each verified batch, then (None, position, problem) on failure."""
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
    ) -> None:
        self.path = os.fspath(path)
        self.readonly = readonly
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
        if not readonly:
            self._acquire(stored is None)
        try:
            for p in range(self.partitions):
                self._recover(p)
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
            os.replace(tmp, os.path.join(self.path, "log.json"))
        for p in range(self.partitions):
            os.makedirs(self._pdir(p), mode=0o700, exist_ok=True)
        fsync_dir(self.path)

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

    def _recover(self, partition: int) -> None:
        part = self._parts[partition]
        segs = self.segments(partition)
        for k, path in enumerate(segs):
            last = k == len(segs) - 1
            first = int(os.path.basename(path)[: -len(SEGMENT_SUFFIX)])
            if first != part.next_offset:
                raise CorruptLog(path, 0, f"segment starts at offset {first}, expected {part.next_offset}")
            with pa.memory_map(path) as mm:
                buf = mm.read_buffer()
                good_end, torn = 0, False
                for batch, start, end in _scan(path, buf, first):
                    if batch is None:
                        if last and not _verified_batch_after(buf, start):
                            torn = True  # only the commit in flight at a crash can be torn
                            break
                        raise CorruptLog(path, start, str(end), offset=part.next_offset)
                    part.record_batch(batch, _Loc(path, start, end))
                    good_end = end
            if torn and not self.readonly:
                self._truncate_tail(path, good_end)

    def _truncate_tail(self, path: str, good_end: int) -> None:
        if good_end == 0:
            os.unlink(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        fsync_dir(os.path.dirname(path))

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
        except BaseException:
            self._open.pop(partition, None)
            self._undo(seg, good)
            raise
        if fresh:
            self._open[partition] = seg
            fsync_dir(self._pdir(partition))
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
        self._stop_writers()  # finishes every open segment (_close_partition)
        rewritten = redacted = 0
        before = self.disk_bytes()
        for p, wanted in offsets.items():
            if not wanted:
                continue
            part = self._part(p)
            for path in self.segments(p):
                entries = [e for e in part.batches if e.locator.path == path]
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
                os.replace(tmp, path)
                rewritten += 1
            fsync_dir(self._pdir(p))
        # re-read what is now on disk: positions changed, offsets and versions did not
        self._parts = [type(self._parts[0])(i) for i in range(self.partitions)]
        for p in range(self.partitions):
            self._recover(p)
        self._flusher_stop.clear()
        return {"redacted": redacted, "segments_rewritten": rewritten, "bytes_before": before, "bytes_after": self.disk_bytes()}

    def close(self) -> None:
        """Flush and close segments, release the write lock."""
        if self.closed:
            return
        super().close()  # finishes every open segment (_close_partition)
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


def fsync_dir(path: str) -> None:
    """fsync a directory so a create, rename or unlink inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
