"""Bulk rebuild of a chunk index: one streamed LanceDB append, Tantivy built once at the end."""

from __future__ import annotations

import logging
import time
from typing import Any

from ._base import atomic_write_json
from ._maintenance import Maintenance

__all__ = ["BulkRebuild"]

log = logging.getLogger("eidetica.projections._index")  # the index's own logger, as before the split


class BulkRebuild(Maintenance):
    """``ChunkIndex``'s bulk mode (a mixin over ``Maintenance``: it works on the index's engines and
    files, and uses its ``reset``, ``save_checkpoint`` and ``_executor``)."""

    _ckpt: dict[int, int]
    _bulk: dict[int, int] | None

    def begin_rebuild(self) -> None:
        """Enter bulk mode for a replay into this (empty) index; ``end_rebuild`` leaves it.

        In bulk mode new rows stream into one LanceDB append (``LanceChunks.bulk_add``),
        Tantivy is not written per batch but built once from the table at the end, while
        the vector index trains in a native thread, and checkpoints are only remembered:
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
                self._lance.flush_bulk()
                self._finish_bulk()
                self._bulk = None
                self.save_checkpoint(ckpt)
                self._meta.pop("rebuilding", None)
                atomic_write_json(self._meta_path, self._meta)
            except BaseException:
                self._bulk = None
                try:
                    self.reset()  # no half-built index: the caller replays from 0
                except Exception:  # noqa: BLE001 - the original error matters more; reopen resets too
                    log.exception("chunk index: reset after a failed rebuild failed")
                raise

    def _write_bulk(self, b: Any) -> None:
        """Bulk mode's write: LanceDB only; fresh rows go to the streamed append."""
        lance = self._lance
        rows = list(b.pending.values())
        if b.deletes or b.confs or any(hash(r.key) in lance.keys for r in rows):
            # these touch rows already sent: commit the stream, then write as usual
            if b.deletes:
                lance.delete(b.deletes)
            if b.confs:
                lance.update_confidence(list(b.confs.values()))
            lance.upsert(rows)
        else:
            lance.bulk_add(rows)
        self._marks.flush()

    def _finish_bulk(self) -> None:
        """The end of a bulk load: compact if needed, then the vector and scalar indexes in a
        native thread while this thread (Python, GIL-bound) builds Tantivy from the table."""
        lance = self._lance
        n = lance.count()
        # usually one fragment already (a streamed append); several if deletes split the stream
        lance.optimize(self.cleanup_after)

        def indexes() -> int:
            if n:
                lance.ensure_scalar_indexes()
            return lance.build_ann(n) if self._ann_due(n) else 0

        fut = self._executor().submit(indexes)
        try:
            self._text.rebuild(lance.iter_batches())
            self._text_only = set()
        finally:
            parts = fut.result()
        if parts:
            self._meta["ann_partitions"] = parts
            self._meta["ann_rows"] = n
        self._marks.sync()
        self._writes = 0
        self._last_maintain = time.monotonic()
