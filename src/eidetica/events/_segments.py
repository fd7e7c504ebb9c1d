"""The segment files under ``ArrowLog``: writing, scanning, verifying and redacting batches, and
decoding a recovery checkpoint against them.

Split out of ``events/arrow_log.py`` (issue 41); the format is described there.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .._util import fs as _fs
from ._partition import _IdIndex
from .envelope import LOG_SCHEMA, batch_checksum

_SCHEMA_BYTES = LOG_SCHEMA.serialize().to_pybytes()
_MARKER = b"\xff\xff\xff\xff"
_CRC_KEY = b"eidetica.crc32"
_ROWS_KEY = b"eidetica.rows"
_MAX_RESYNC_PROBES = 4096
CHECKPOINT_NAME = "recovery.ckpt"
CHECKPOINT_MAGIC = b"EIDETICA-LOG-CHECKPOINT\n"
CHECKPOINT_VERSION = 3  # 2: a keyed hash of (tenant, id); 3: the raw id and a tenant tag (older files are refused: one full scan)


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


def parse_checkpoint(f: Any, partition: int, partitions: int, pdir: str, segs: list[str]) -> tuple[Any, ...]:
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
    if header["partition"] != partition or header["partitions"] != partitions:
        raise ValueError("checkpoint of another partition layout")
    arrays: dict[str, np.ndarray] = {}
    at = 0
    for name, dtype, n in header["arrays"]:
        size = np.dtype(dtype).itemsize * n
        arrays[name] = np.frombuffer(body[at : at + size], dtype=dtype)
        at += size
    if at != len(body):
        raise ValueError("checkpoint body length does not match its header")
    names = [os.path.join(pdir, n) for n in header["segments"]]
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
    """fsync a directory so a create, rename or unlink inside it is durable (``_util.fs``'s, with this module's
    ``os``: the power-loss tests replace it to cut at every call)."""
    _fs.fsync_dir(path, os)
