"""Maintenance of a chunk index: LanceDB optimize, the ANN index's (re)training, physical compaction."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

from ._base import atomic_write_json
from ._lance import LanceChunks
from ._marks import Marks
from ._tantivy import TantivyChunks

__all__ = ["Maintenance", "du"]


class Maintenance:
    """``ChunkIndex``'s upkeep (a mixin: it works on the index's engines and files)."""

    _lock: Any
    _lance: LanceChunks
    _text: TantivyChunks
    _marks: Marks
    _meta: dict[str, Any]
    _meta_path: str
    _text_only: set[int]
    _writes: int
    _last_maintain: float
    ann_threshold: int
    cleanup_after: dt.timedelta
    maintain_interval: float

    def maintain(self, force: bool = False) -> None:
        """Build/retrain the ANN index past its thresholds and optimize, when it pays off.

        Unless ``force``: at most once per ``maintain_interval`` seconds, and only when the
        table has many small fragments, many rows outside the ANN index, or needs its ANN
        index (re)built (``apply`` runs the same check every ``optimize_every`` batches).
        """
        with self._lock:
            if not self._writes:
                return
            if force:
                self._maintain()
            elif time.monotonic() - self._last_maintain >= self.maintain_interval:
                self._maintain_if_needed()

    def _ann_due(self, n: int) -> bool:
        ann_rows = int(self._meta.get("ann_rows", 0))
        return n >= self.ann_threshold and (
            not self._lance.has_ann() or n >= ann_rows * float(self._lance.ann["retrain_growth"]))

    def _maintain_if_needed(self) -> None:
        if self._ann_due(self._lance.count()) or self._lance.needs_optimize():
            self._maintain()
        else:
            self._last_maintain = time.monotonic()

    def optimize(self, cleanup_older_than: dt.timedelta | None = None) -> None:
        """Compact fragments, fold new rows into the indexes and drop old versions now."""
        with self._lock:
            self._maintain(cleanup_older_than)

    def _maintain(self, cleanup: dt.timedelta | None = None) -> None:
        n = self._lance.count()
        if n:
            self._lance.ensure_scalar_indexes()
        # compact first, so a new ANN index is trained on the final fragments (no remap)
        self._lance.optimize(self.cleanup_after if cleanup is None else cleanup)
        if self._ann_due(n):
            self._meta["ann_partitions"] = self._lance.build_ann(n)
            self._meta["ann_rows"] = n
            atomic_write_json(self._meta_path, self._meta)
        self._text.gc()
        self._writes = 0
        self._last_maintain = time.monotonic()

    def compact(self) -> None:
        """Make deletions physical: rewrite the table, drop old versions, rebuild Tantivy fresh and swap."""
        with self._lock:
            self._lance.rewrite()
            self._meta["ann_rows"] = 0
            atomic_write_json(self._meta_path, self._meta)
            self._maintain(dt.timedelta(0))  # the vector index again, if the table is large enough
            self._text.rebuild(self._lance.iter_batches())
            self._text_only = set()
            self._marks.rewrite()
            self._writes = 0


def du(path: str) -> int:
    """Bytes of every file under a directory."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total
