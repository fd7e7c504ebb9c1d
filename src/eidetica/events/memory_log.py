"""InMemoryLog: the reference implementation of the log port, for tests."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from ._partition import _BatchEntry
from .log import DEFAULT_MAX_PAYLOAD_BYTES, BatchLog

__all__ = ["InMemoryLog"]


class InMemoryLog(BatchLog):
    """The log port held in memory: same semantics as ``ArrowLog``, nothing durable."""

    def __init__(self, *, partitions: int = 1, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        super().__init__(partitions=partitions, fsync="never", max_payload_bytes=max_payload_bytes)

    def _write(self, partition: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch

    def _load(self, partition: int, entries: list[_BatchEntry]) -> Iterator[pa.RecordBatch]:
        return (e.locator for e in entries)
