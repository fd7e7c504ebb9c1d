"""The envelope around every event: what the log stores next to the payload."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import sys
import uuid
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ..errors import InvalidInput
from .types import Event, decode, encode, event_type_name

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "NewEvent",
    "RecordedEvent",
    "LOG_SCHEMA",
    "utcnow",
    "batch_checksum",
    "events_from_batch",
    "batch_from_runs",
    "Run",
    "validate_append",
    "id_key",
    "tenant_tag",
]

ANY = -2
"""Append whatever the stream's version."""
NO_STREAM = -1
"""Append only if the stream has no event yet."""
STREAM_EXISTS = -4
"""Append only if the stream has at least one event."""

LOG_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("event_id", pa.binary(16)),
        ("stream", pa.string()),
        ("version", pa.int64()),
        # utf8, not dictionary: dictionary batches make a message depend on earlier ones,
        # which breaks per-batch verification and reading a batch on its own.
        ("type", pa.string()),
        ("time", pa.timestamp("us", tz="UTC")),
        ("tenant", pa.string()),
        ("payload", pa.large_binary()),
    ]
)


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC, microsecond resolution."""
    return dt.datetime.now(dt.timezone.utc)


class NewEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event to append: the caller picks ``event_id`` so retries are idempotent.

    Fields are checked once, here, when the event is made (``InvalidInput`` names the
    field); ``append`` then only checks what depends on the log (payload limit, repeats).
    """

    type: str
    payload: bytes
    event_id: uuid.UUID = msgspec.field(default_factory=uuid.uuid4)
    tenant: str = "default"
    time: dt.datetime | None = None

    def __post_init__(self) -> None:
        if type(self.type) is not str or not self.type:
            raise InvalidInput("type", "must be a non-empty string", self.type)
        if type(self.payload) is not bytes:
            raise InvalidInput("payload", f"must be bytes, not {type(self.payload).__name__}")
        if not isinstance(self.event_id, uuid.UUID):
            raise InvalidInput("event_id", f"must be a uuid.UUID, not {type(self.event_id).__name__}")
        if type(self.tenant) is not str:
            raise InvalidInput("tenant", f"must be a string, not {type(self.tenant).__name__}")
        if self.time is not None and (
            not isinstance(self.time, dt.datetime) or self.time.utcoffset() is None
        ):
            raise InvalidInput("time", "must be a timezone-aware datetime", self.time)

    @classmethod
    def of(
        cls,
        event: Event,
        *,
        tenant: str = "default",
        event_id: uuid.UUID | None = None,
        time: dt.datetime | None = None,
    ) -> NewEvent:
        """Wrap a domain event, encoding its payload with msgspec."""
        return cls(
            type=event_type_name(event),
            payload=encode(event),
            event_id=event_id or uuid.uuid4(),
            tenant=tenant,
            time=time,
        )


class RecordedEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as the log holds it: envelope plus raw payload."""

    offset: int
    event_id: uuid.UUID
    stream: str
    version: int
    type: str
    time: dt.datetime
    tenant: str
    payload: bytes

    def decode(self) -> Event:
        """The domain event inside the payload."""
        return decode(self.payload)


@functools.lru_cache(maxsize=4096)
def tenant_tag(tenant: str) -> int:
    """A tenant's 64-bit tag in the id index (blake2b of its name), shifted above the 128-bit id."""
    h = hashlib.blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=8, person=b"eidetica-tenant")
    return int.from_bytes(h.digest(), "big") << 128


def id_key(tenant: str, event_id: bytes) -> int:
    """The key an event id has in the log's id index: (tenant tag, caller's id) as one int.

    Each tenant's ids are its own namespace: the key holds the caller's id itself beside a
    64-bit tag of the tenant, so the same id in two tenants is two keys, and one tenant can
    meet another's key only with a name whose blake2b tag equals the other's (a second
    preimage of 64 bits). Keying on the pair, not a hash of the id, costs a shift and an or
    per event where a keyed hash cost a blake2b (about 35% of the batched append).
    """
    return tenant_tag(tenant) | int.from_bytes(event_id, "big")


def _keys(evs: list[NewEvent]) -> list[int]:
    """The id keys of an append's events (the tenant's tag looked up once when they share it)."""
    t0 = evs[0].tenant
    if all(e.tenant == t0 for e in evs):
        tag = tenant_tag(t0)
        return [tag | e.event_id.int for e in evs]
    return [tenant_tag(e.tenant) | e.event_id.int for e in evs]


def validate_append(
    stream: object, events: object, expected_version: object, max_payload_bytes: int
) -> tuple[list[NewEvent], list[int]]:
    """Check an append's arguments (``InvalidInput`` names the bad field); returns the events and their id keys."""
    if type(stream) is not str or not stream.strip():
        if not isinstance(stream, str) or not stream.strip():
            raise InvalidInput("stream", "must be a non-empty string", stream)
    if len(stream) > 1024 or "\x00" in stream:
        raise InvalidInput("stream", "must be at most 1024 characters without NUL", stream)
    if type(expected_version) is not int:
        if isinstance(expected_version, bool) or not isinstance(expected_version, int):
            raise InvalidInput("expected_version", "must be an int or ANY/NO_STREAM/STREAM_EXISTS")
    if expected_version < 0 and expected_version not in (ANY, NO_STREAM, STREAM_EXISTS):
        raise InvalidInput("expected_version", f"{expected_version} is not a version or a constant")
    if type(events) is not list and (isinstance(events, (NewEvent, str, bytes)) or not isinstance(events, Sequence)):
        raise InvalidInput("events", "must be a list of NewEvent")
    evs: list[NewEvent] = list(events)  # a copy: the caller may reuse its list
    if not evs:
        raise InvalidInput("events", "must not be empty")
    if len(evs) == 1:
        ev = evs[0]
        if type(ev) is not NewEvent:
            raise InvalidInput("events[0]", f"must be a NewEvent, not {type(ev).__name__}")
        if len(ev.payload) > max_payload_bytes:
            raise InvalidInput("events[0].payload", f"is {len(ev.payload)} bytes, over the limit of {max_payload_bytes}")
        return evs, [tenant_tag(ev.tenant) | ev.event_id.int]
    if {type(e) for e in evs} != {NewEvent}:
        for i, ev in enumerate(evs):
            if type(ev) is not NewEvent:
                raise InvalidInput(f"events[{i}]", f"must be a NewEvent, not {type(ev).__name__}")
    if max(map(len, [e.payload for e in evs])) > max_payload_bytes:
        for i, ev in enumerate(evs):
            if len(ev.payload) > max_payload_bytes:
                raise InvalidInput(
                    f"events[{i}].payload", f"is {len(ev.payload)} bytes, over the limit of {max_payload_bytes}"
                )
    keys = _keys(evs)
    if len(set(keys)) != len(keys):
        seen: set[int] = set()
        for i, k in enumerate(keys):
            if k in seen:
                raise InvalidInput(f"events[{i}].event_id", "is repeated within the append")
            seen.add(k)
    return evs, keys


class Run(msgspec.Struct):
    """Consecutive events of one stream inside a commit: offsets and versions are dense."""

    stream: str
    first_offset: int
    first_version: int
    events: list[NewEvent]
    keys: list[int]  # the events' id keys (``id_key``)


_TIME = pa.timestamp("us", tz="UTC")


def _fixed(t: pa.DataType, n: int, data: Any) -> pa.Array:
    """A fixed-width column over ready bytes: no per-value conversion (pa.array costs more)."""
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data)])


def _strings(values: list[str]) -> pa.Array:
    """A string column; one repeated value (the common case) is built without a Python loop."""
    first = values[0]
    if values.count(first) == len(values):
        return _same(first, len(values))
    return pa.array(values, pa.string())


def _same(value: str, n: int) -> pa.Array:
    """``n`` copies of one string; small columns come from a cache (arrays are immutable)."""
    return _small_same(value, n) if n <= 64 else pa.repeat(pa.scalar(value, pa.string()), n)


@functools.lru_cache(maxsize=1024)
def _small_same(value: str, n: int) -> pa.Array:
    """Cached ``n`` copies of ``value``: the same few types, tenants and streams recur in commit after commit."""
    return pa.repeat(pa.scalar(value, pa.string()), n)


def batch_from_runs(runs: Sequence[Run], now: dt.datetime) -> pa.RecordBatch:
    """Build one log record batch from admitted runs, column by column."""
    if len(runs) == 1:
        r0 = runs[0]
        evs = r0.events
    else:
        evs = [e for r in runs for e in r.events]
    n = len(evs)
    first = runs[0].first_offset
    now_us = int(now.timestamp() * 1_000_000)
    times_in = [e.time for e in evs]
    if times_in.count(None) == n:
        times = np.full(n, now_us, dtype=np.int64)
    else:
        times = np.array(
            [now_us if t is None else int(t.timestamp() * 1_000_000) for t in times_in], dtype=np.int64
        )
    ids = b"".join([e.event_id.bytes for e in evs])
    if len(runs) == 1:
        versions = _fixed(pa.int64(), n, np.arange(r0.first_version, r0.first_version + n, dtype=np.int64))
        streams = _same(r0.stream, n)
    else:  # many small runs (group commit): plain lists beat per-run numpy calls
        versions = _fixed(
            pa.int64(), n, array("q", [r.first_version + i for r in runs for i in range(len(r.keys))])
        )
        streams = _strings([r.stream for r in runs for _ in r.keys])
    return pa.RecordBatch.from_arrays(
        [
            _fixed(pa.int64(), n, np.arange(first, first + n, dtype=np.int64)),
            _fixed(pa.binary(16), n, ids),
            streams,
            versions,
            _strings([e.type for e in evs]),
            _fixed(_TIME, n, times),
            _strings([e.tenant for e in evs]),
            pa.array([e.payload for e in evs], pa.large_binary()),
        ],
        schema=LOG_SCHEMA,
    )


def events_from_batch(batch: pa.RecordBatch) -> list[RecordedEvent]:
    """Turn a log record batch into envelope structs."""
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    return [
        RecordedEvent(
            offset=o,
            event_id=uuid.UUID(bytes=e),
            stream=s,
            version=v,
            type=t,
            time=tm,
            tenant=tn,
            payload=p,
        )
        for o, e, s, v, t, tm, tn, p in zip(*cols)
    ]


def _layout(t: pa.DataType) -> tuple[bool, int]:
    """(variable width?, bytes per offset or per value) of a column type."""
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return (True, 4)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return (True, 8)
    return (False, t.byte_width)


# Per schema position, worked out once: a per-column type lookup cost more than the
# crc32 itself on the small batches group commit writes.
_LAYOUTS = tuple(_layout(f.type) for f in LOG_SCHEMA)
_ORDER = sys.byteorder


def batch_checksum(batch: pa.RecordBatch) -> int:
    """crc32 over a log batch's logical contents (row count and every column's values).

    Independent of buffer capacity and slicing, so a batch read back from disk checks
    against the crc computed when it was written. The batch must have ``LOG_SCHEMA``
    (readers check the schema first).
    """
    n = batch.num_rows
    crc = zlib.crc32(n.to_bytes(8, "little"))
    columns = batch.columns
    if len(columns) != len(_LAYOUTS):
        raise ValueError(f"a log batch has {len(_LAYOUTS)} columns, not {len(columns)}")
    for arr, (var, width) in zip(columns, _LAYOUTS):
        if arr.null_count:
            raise InvalidInput("batch", "log batches carry no nulls")
        off = arr.offset
        bufs = arr.buffers()
        if not var:
            values = memoryview(bufs[1])[off * width : (off + n) * width]
            if len(values) != n * width:
                raise ValueError("values buffer is shorter than the array")
            crc = zlib.crc32(values, crc)
            continue
        offs = memoryview(bufs[1])[off * width : (off + n + 1) * width]
        if len(offs) != (n + 1) * width:
            raise ValueError("offsets buffer is shorter than the array")
        start = int.from_bytes(offs[:width], _ORDER)
        end = int.from_bytes(offs[n * width :], _ORDER)
        if start == 0:  # the usual case (a fresh or unsliced array): offsets are already rebased
            crc = zlib.crc32(offs, crc)
        else:
            rebased = np.frombuffer(offs, dtype=np.int64 if width == 8 else np.int32) - start
            crc = zlib.crc32(rebased, crc)  # type: ignore[arg-type]  # an ndarray is a buffer; numpy's <3.12 stubs omit it
        data = bufs[2]
        crc = zlib.crc32(memoryview(data)[start:end] if data is not None else b"", crc)
    return crc
