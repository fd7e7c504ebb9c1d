"""Bulk rebuild of a chunk index: rows held in memory, one streamed LanceDB append, Tantivy built once at the end."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ._base import atomic_write_json
from ._maintenance import Maintenance
from ._rows import Pred, Row

__all__ = ["BulkRebuild", "BulkBuffer"]

log = logging.getLogger("eidetica.projections._index")  # the index's own logger, as before the split

_SPILL_BATCH = 8_192  # rows per Arrow batch queued to the streamed append

Name = tuple[str, str, str]  # (tenant, field, value): what a delete or confidence change names


def _names(r: Row) -> list[Name]:
    t = r.tenant
    return [(t, f, v) for f, v in (("source_id", r.source_id), ("session_id", r.session_id), ("user_id", r.user_id))
            if v]


class BulkBuffer:
    """The rows of a bulk rebuild not sent to LanceDB yet, by key, and their keys by name
    (tenant, field, value), so that a delete or a confidence change touches only the rows it names.

    ``sent`` holds the names of the rows already sent (spilled): a delete or confidence change
    must reach LanceDB only when it names one of those. ``shadow``: buffered keys that replace
    a row already sent (the same key written again); when such a row is deleted here, the row
    it replaced must leave LanceDB too. Those LanceDB writes wait in ``deletes``, ``gone`` and
    ``confs`` for the next spill, which runs them before it writes anything: they only remove or
    change rows already sent, so running them late, together, changes nothing (a confidence
    change replaces an older one of the same source: ``Marks`` only lets later ones through).
    """

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self._by: dict[Name, set[str]] = {}
        self.sent: set[Name] = set()
        self.shadow: set[str] = set()
        self.deletes: list[Pred] = []
        self.gone: list[str] = []
        self.confs: dict[tuple[str, str], tuple[Pred, float]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def _unindex(self, r: Row) -> None:
        by = self._by
        for n in _names(r):
            keys = by[n]
            keys.discard(r.key)
            if not keys:
                del by[n]

    def add(self, rows: Iterable[Row], sent_keys: set[int]) -> None:
        """Insert or replace rows by key (``sent_keys``: hash(key) of rows that may be in LanceDB)."""
        by, buffered = self._by, self.rows
        for r in rows:
            old = buffered.pop(r.key, None)
            if old is not None:
                self._unindex(old)
            buffered[r.key] = r
            for n in _names(r):
                keys = by.get(n)
                if keys is None:
                    by[n] = {r.key}
                else:
                    keys.add(r.key)
            if sent_keys and hash(r.key) in sent_keys:
                self.shadow.add(r.key)

    def delete(self, p: Pred) -> list[str]:
        """Drop the buffered rows ``p`` covers; returns the keys among them that replaced a row already sent."""
        keys = self._by.get((p.tenant, p.field, p.value))
        if not keys:
            return []
        gone = [k for k in keys if p.matches(self.rows[k])]
        for k in gone:
            self._unindex(self.rows.pop(k))
        replaced = [k for k in gone if k in self.shadow]
        self.shadow.difference_update(replaced)
        return replaced

    def set_confidence(self, p: Pred, conf: float) -> None:
        """Set ``confidence`` on the buffered rows ``p`` covers."""
        for k in self._by.get((p.tenant, p.field, p.value), ()):
            r = self.rows[k]
            if p.matches(r):
                r.confidence = conf

    def was_sent(self, p: Pred) -> bool:
        """Whether ``p`` may cover a row already sent to LanceDB."""
        return (p.tenant, p.field, p.value) in self.sent

    def take(self) -> list[Row]:
        """Every buffered row, emptying the buffer; their names count as sent from now on."""
        self.sent.update(self._by)
        rows = list(self.rows.values())
        self.rows, self._by, self.shadow = {}, {}, set()
        return rows


class BulkRebuild(Maintenance):
    """``ChunkIndex``'s bulk mode (a mixin over ``Maintenance``: it works on the index's engines and
    files, and uses its ``reset``, ``save_checkpoint`` and ``_executor``)."""

    _ckpt: dict[int, int]
    _bulk: dict[int, int] | None
    if TYPE_CHECKING:  # provided by ChunkIndex, the class this mixin is written for

        def reset(self) -> None: ...
        def save_checkpoint(self, checkpoint: dict[int, int]) -> None: ...
        def _executor(self) -> ThreadPoolExecutor: ...
    _buffer: BulkBuffer | None = None  # bulk mode's rows not sent to LanceDB yet
    dim: int
    # Buffered rows past which bulk mode sends them to LanceDB (0: every batch); None: as many as
    # fit ``bulk_bytes``, at a row's vector plus ~1 KB (measured: 100,100 rows of 384-d vectors
    # raised a rebuild's peak RSS by 240 MB), i.e. about 210,000 rows of 384-d, 100,000 of 1024-d.
    bulk_rows: int | None = None
    bulk_bytes = 512 * 2**20

    def begin_rebuild(self) -> None:
        """Enter bulk mode for a replay into this (empty) index; ``end_rebuild`` leaves it.

        In bulk mode new rows are held in memory (``BulkBuffer``), where deletes and confidence
        changes apply to them, and go to LanceDB in one streamed append (``LanceChunks.bulk_add``)
        at the end, or whenever more than ``bulk_rows`` are held (by default what fits
        ``bulk_bytes``; a delete or confidence change that names a row sent that way runs in
        LanceDB as well). Tantivy is not written per batch but built once at the end (from the
        rows sent last when they are all, otherwise from the table), while the vector index
        trains in a native thread, and checkpoints are only remembered:
        the checkpoint file keeps saying "nothing applied" until ``end_rebuild`` has made
        both engines durable. ``meta.json`` marks the rebuild, so a process killed midway
        reopens the index empty and replays from 0 (see ``__init__``). A no-op unless the
        index is empty.
        """
        with self._lock:
            if self._bulk is not None or self._ckpt or self._lance.count() or self._text.num_docs():
                return
            self._meta["rebuilding"] = True
            atomic_write_json(self._meta_path, self._meta)
            self._bulk = {}
            self._buffer = BulkBuffer()

    def end_rebuild(self, completed: bool = True) -> None:
        """Leave bulk mode: build Tantivy and the indexes and save the checkpoint, or (not ``completed``) discard all."""
        with self._lock:
            if self._bulk is None:
                return
            ckpt = self._bulk
            if not completed:
                self.reset()
                return
            try:
                rows = self._spill()
                self._lance.flush_bulk()
                self._finish_bulk(rows)
                self._bulk = None
                self._buffer = None
                self.save_checkpoint(ckpt)
                self._meta.pop("rebuilding", None)
                atomic_write_json(self._meta_path, self._meta)
            except BaseException:
                self._bulk = None
                self._buffer = None
                try:
                    self.reset()  # no half-built index: the caller replays from 0
                except Exception:  # noqa: BLE001 - the original error matters more; reopen resets too
                    log.exception("chunk index: reset after a failed rebuild failed")
                raise

    def _write_bulk(self, b: Any) -> None:
        """Bulk mode's write: deletes and confidence changes on the buffered rows (and, for the rows
        already sent to LanceDB, queued for the next spill), then the batch's rows into the buffer."""
        buf = self._buffer
        assert buf is not None
        for p in b.deletes:
            buf.gone += buf.delete(p)
            if buf.was_sent(p):
                buf.deletes.append(p)
        for p, conf in b.confs.values():
            buf.set_confidence(p, conf)
            if buf.was_sent(p):
                buf.confs[(p.tenant, p.value)] = (p, conf)
        buf.add(b.pending.values(), self._lance.keys)
        limit = self.bulk_rows if self.bulk_rows is not None else self.bulk_bytes // (4 * self.dim + 1024)
        if len(buf) > limit:
            self._spill()

    def _spill(self) -> list[pa.RecordBatch] | None:
        """Run the queued LanceDB deletes and confidence changes, then send the buffered rows (fresh
        keys to the streamed append); returns them as Arrow batches when they are every row of the
        table, else None."""
        buf, lance = self._buffer, self._lance
        assert buf is not None
        if buf.deletes:
            lance.delete(buf.deletes)
        if buf.gone:
            lance.delete_keys(buf.gone)
        if buf.confs:
            lance.update_confidence(list(buf.confs.values()))
        buf.deletes, buf.gone, buf.confs = [], [], {}
        whole = not buf.sent
        rows = buf.take()
        known = lance.keys
        if known:
            lance.upsert([r for r in rows if hash(r.key) in known])  # rows written again after a spill
            rows = [r for r in rows if hash(r.key) not in known]
        out = []
        for i in range(0, len(rows), _SPILL_BATCH):
            batch = lance.bulk_add(rows[i : i + _SPILL_BATCH])
            if whole and batch is not None:
                out.append(batch)
        self._marks.flush()
        return out if whole else None

    def _finish_bulk(self, rows: list[pa.RecordBatch] | None) -> None:
        """The end of a bulk load: compact if needed, then the vector and scalar indexes in a
        native thread while this thread (Python, GIL-bound) builds Tantivy from ``rows`` (every
        row of the table, without vectors) or, when None, from the table."""
        lance = self._lance
        n = lance.count()
        # usually one fragment already (a streamed append); several if spills and deletes split it
        lance.optimize(self.cleanup_after)

        def indexes() -> int:
            if n:
                lance.ensure_scalar_indexes()
            return lance.build_ann(n) if self._ann_due(n) else 0

        fut = self._executor().submit(indexes)
        try:
            self._text.rebuild(lance.iter_batches() if rows is None else rows)
            self._text_only = set()
        finally:
            parts = fut.result()
        if parts:
            self._meta["ann_partitions"] = parts
            self._meta["ann_rows"] = n
        self._marks.sync()
        self._writes = 0
        self._last_maintain = time.monotonic()
