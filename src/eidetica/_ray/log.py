"""The log on Ray: ``LogActor`` owns the store's ``ArrowLog`` (the single writer); ``RemoteLog`` is the log port over it."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import ray

from ..events import ANY, ArrowLog, EventLog, NewEvent, RecordedEvent
from .calls import Written, _get, _listed, _noted

__all__ = ["LogActor", "RemoteLog"]


# -- the log -----------------------------------------------------------------------------
@ray.remote(max_concurrency=64)
class LogActor:
    """Owns the store's ArrowLog in one process."""

    def __init__(self, path: str, fsync: str = "always", **options: Any) -> None:
        self.log = ArrowLog(path, fsync=fsync, **options)  # type: ignore[arg-type]

    def call(self, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method of the log."""
        return getattr(self.log, method)(*args, **kw)

    def read_batches(self, from_offset: int, partition: int) -> list[Any]:
        """Committed batches from an offset (materialised: they cross the Ray boundary)."""
        return list(self.log.read_batches(from_offset, partition=partition))

    def partitions(self) -> int:
        """The log's partition count."""
        return self.log.partitions

    def heads(self) -> list[int]:
        """Every partition's next offset, in one call."""
        return [self.log.head(p) for p in range(self.log.partitions)]

    def wait_past(self, nexts: list[int], timeout: float) -> list[int]:
        """Every partition's next offset, once one passes ``nexts`` or after ``timeout`` seconds (a long poll)."""
        deadline = time.monotonic() + timeout
        parts = self.log.partitions
        while True:
            heads = [self.log.head(p) for p in range(parts)]
            remaining = deadline - time.monotonic()
            if any(h > n for h, n in zip(heads, nexts)) or remaining <= 0:
                return heads
            # one partition: block on its next commit; several: look again every 50 ms
            self.log.wait_for(nexts[0], partition=0, timeout=remaining if parts == 1 else min(remaining, 0.05))

    def fsync_policy(self) -> str:
        """The log's ``fsync`` setting (``always``, ``batch`` or ``never``)."""
        return self.log.fsync

    def pid(self) -> int:
        """The process id (for fault-injection tests)."""
        return os.getpid()


class RemoteLog(EventLog):
    """The log port, served by a LogActor."""

    def __init__(self, handle: Any, written: Written | None = None) -> None:
        self.handle = handle
        self.partitions = _get(handle.partitions.remote())
        self.closed = False
        self.written = written  # the handle's read floor, raised by every append made here

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY) -> tuple[int, int]:
        """Append through the LogActor (one remote call for the whole batch)."""
        first, last = _get(self.handle.call.remote("append", stream, _listed(events), expected_version))
        if last >= 0:
            _noted({self.partition_of(stream): last}, self.written)
        return first, last

    def read_batches(self, from_offset: int = 0, *, partition: int = 0) -> Iterator[Any]:
        """Committed batches, fetched in one call."""
        return iter(_get(self.handle.read_batches.remote(from_offset, partition)))

    def read_stream(self, stream: str, from_version: int = 0) -> list[RecordedEvent]:
        """A stream's events."""
        return _get(self.handle.call.remote("read_stream", stream, from_version))

    def read_offsets(self, offsets: Sequence[int], *, partition: int = 0) -> list[RecordedEvent]:
        """The events at these offsets (message bodies the views read on demand)."""
        return _get(self.handle.call.remote("read_offsets", list(offsets), partition=partition))

    def head(self, partition: int = 0) -> int:
        """Next offset of a partition."""
        return _get(self.handle.call.remote("head", partition))

    def stream_version(self, stream: str) -> int:
        """A stream's last version."""
        return _get(self.handle.call.remote("stream_version", stream))

    def wait_for(self, offset: int, *, partition: int = 0, timeout: float | None = None) -> bool:
        """Wait (in the actor) until an offset is committed."""
        return _get(self.handle.call.remote("wait_for", offset, partition=partition, timeout=timeout))

    def streams(self) -> list[str]:
        """Every stream with an event."""
        return _get(self.handle.call.remote("streams"))

    def event_offsets(self, event_ids: Sequence[uuid.UUID], stream: str, tenant: str) -> list[int | None]:
        """Where a tenant's event ids were logged in a stream's partition (one call)."""
        return _get(self.handle.call.remote("event_offsets", list(event_ids), stream, tenant))

    @property
    def fsync(self) -> str:
        """The log actor's ``fsync`` setting (what ``open(..., fsync=...)`` asked of it)."""
        return _get(self.handle.fsync_policy.remote())

    def disk_bytes(self) -> int:
        """Bytes of the log on disk."""
        return _get(self.handle.call.remote("disk_bytes"))

    def redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        """Compaction, done by the owner of the log."""
        return _get(self.handle.call.remote("redact", offsets))

    def close(self) -> None:
        """The actor keeps the log open for other clients; nothing to release here."""
        self.closed = True
