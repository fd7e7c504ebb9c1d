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

    def redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        """Replace the payloads at these offsets with ``Redacted`` markers, in place (nothing is on disk)."""
        from ._segments import _redact_batch  # the one rewrite of a batch, shared with ArrowLog

        redacted = 0
        for p, wanted in offsets.items():
            if not wanted:
                continue
            for entry in self._part(p).batches:  # in memory: every entry is an object, its locator the batch
                if any(entry.first <= o < entry.first + entry.count for o in wanted):
                    entry.locator, n = _redact_batch(entry.locator, wanted)
                    redacted += n
        return {"redacted": redacted, "segments_rewritten": 0, "bytes_before": 0, "bytes_after": 0}
