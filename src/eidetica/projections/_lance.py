"""The LanceDB side of the chunk index: the ``chunks`` table, its indexes and maintenance.

lancedb is imported lazily (inside methods), never when ``eidetica.projections`` is
imported: Ray forks workers after import, and lancedb warns about fork.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ._base import engine_boundary
from ._rows import Filters, Pred, Row, sql_str
from ._scan import ExactScans

__all__ = ["LanceChunks", "ANN_DEFAULTS"]

TABLE = "chunks"
_COLUMNS = ("key", "id", "tenant", "user_id", "session_id", "kind", "source_id", "text", "category",
            "confidence", "ts", "etime", "time", "metadata")
_MAX_OR = 64  # predicates per delete statement

ANN_DEFAULTS: dict[str, Any] = {
    # IVF_FLAT, cosine. IVF_FLAT keeps full vectors, so the distances it returns are exact;
    # only the choice of partitions is approximate (nprobes of them are scanned; a narrow
    # filter that leaves too few rows falls back to an exact scan of the filtered rows).
    # Measured on 2 cores, 100k clustered rows, 16 probes (scripts/bench_query.py data):
    #   48 partitions: build 3.9 s, recall@10 0.968, p50 14 ms
    #   158 partitions (10 iterations, 64 samples each): build 4.3 s, recall 0.990, p50 12 ms
    #   316 partitions (10 iterations, 32 samples each): build 6.1 s, recall 0.996, p50 8 ms
    # k-means cost grows with partitions squared, the assignment pass with rows x partitions.
    # The partition count is given as a target partition size, which the index stores:
    # LanceDB's optimize() splits and joins IVF partitions towards it (given a bare
    # num_partitions, optimize() joined 158 partitions down to 22 here).
    "partitions_per_sqrt_rows": 0.5,  # 158 partitions at 100k rows, 500 at 1M
    "sample_rate": 64,  # k-means training samples per partition
    "max_iterations": 10,
    "nprobes": 16,  # partitions scanned per query: at least this many ...
    "nprobes_fraction": 1 / 16,  # ... or this share of the partitions, whichever is more
    "retrain_growth": 4.0,  # retrain when the table has grown this much since training
}


def schema(dim: int) -> pa.Schema:
    """The ``chunks`` table schema for vectors of ``dim`` dimensions."""
    return pa.schema(
        [
            ("key", pa.string()),
            ("id", pa.string()),
            ("tenant", pa.string()),
            ("user_id", pa.string()),
            ("session_id", pa.string()),
            ("kind", pa.string()),
            ("source_id", pa.string()),
            ("text", pa.string()),
            ("category", pa.string()),
            ("confidence", pa.float64()),
            ("ts", pa.int64()),
            ("etime", pa.int64()),
            ("time", pa.timestamp("us", tz="UTC")),
            ("metadata", pa.binary()),
            ("vector", pa.list_(pa.float32(), dim)),
        ]
    )


def rows_to_batch(rows: Sequence[Row], dim: int) -> pa.RecordBatch:
    """Build an Arrow record batch of rows (each row must carry its vector)."""
    n = len(rows)
    # one pass over the rows into per-column lists (cheaper than a comprehension per column)
    (keys, ids, tenants, users, sessions, kinds, sources, texts, cats, confs, tss, ets, metas, vecs) = (
        map(list, zip(*[(r.key, r.id, r.tenant, r.user_id, r.session_id, r.kind, r.source_id, r.text, r.category,
                         r.confidence, r.ts, r.etime, r.metadata, r.vector) for r in rows])) if n else ([],) * 14)
    ts = np.array(tss, dtype=np.int64)
    flat = np.stack(vecs).astype(np.float32, copy=False).reshape(-1) if n else np.zeros(0, np.float32)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.string()),
            pa.array(ids, pa.string()),
            pa.array(tenants, pa.string()),
            pa.array(users, pa.string()),
            pa.array(sessions, pa.string()),
            pa.array(kinds, pa.string()),
            pa.array(sources, pa.string()),
            pa.array(texts, pa.string()),
            pa.array(cats, pa.string()),
            pa.array(np.array(confs, dtype=np.float64)),
            pa.array(ts),
            pa.array(np.array(ets, dtype=np.int64)),
            pa.array(ts, pa.timestamp("us", tz="UTC")),
            pa.array(metas, pa.binary()),
            pa.FixedSizeListArray.from_arrays(pa.array(flat), dim),
        ],
        schema=schema(dim),
    )


def rows_to_table(rows: Sequence[Row], dim: int) -> pa.Table:
    """Build an Arrow table of rows (each row must carry its vector)."""
    return pa.Table.from_batches([rows_to_batch(rows, dim)])


def table_to_rows(t: pa.Table) -> list[Row]:
    """Rows (without vectors) from an Arrow table with the non-vector columns."""
    cols = {c: t.column(c).to_pylist() for c in _COLUMNS if c != "time"}
    return [
        Row(key=k, id=i, tenant=tn, user_id=u, session_id=s, kind=kd, source_id=src, text=tx, category=c,
            confidence=cf, ts=ts, etime=et, metadata=m or b"")
        for k, i, tn, u, s, kd, src, tx, c, cf, ts, et, m in zip(
            cols["key"], cols["id"], cols["tenant"], cols["user_id"], cols["session_id"], cols["kind"],
            cols["source_id"], cols["text"], cols["category"], cols["confidence"], cols["ts"], cols["etime"],
            cols["metadata"])
    ]


class _Aborted(Exception):
    """Raised into a streamed add to make it fail without committing."""


class StreamedAdd:
    """One ``table.add`` fed batch by batch from a queue, in a thread of its own.

    A bulk load (a rebuild) becomes one append: one version and one large fragment,
    written while the caller decodes the next events, and no compaction afterwards
    (13 appends of 8,000 rows plus the compaction that merged them cost about twice the
    CPU of one streamed append of the same 100,000 rows here). Nothing is visible or
    durable before ``close()`` returns; ``abort()`` makes the add fail, so it commits nothing.
    """

    _END = object()

    def __init__(self, table: Any, schema: pa.Schema, depth: int = 4) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._abort = False
        self.rows = 0
        self._thread = threading.Thread(target=self._run, args=(table, schema), name="eidetica-lance-bulk", daemon=True)
        self._thread.start()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            item = self._q.get()
            if self._abort:
                raise _Aborted("bulk add aborted")
            if item is self._END:
                return
            yield item

    def _run(self, table: Any, schema: pa.Schema) -> None:
        try:
            table.add(pa.RecordBatchReader.from_batches(schema, self._batches()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self._error = e

    def _put(self, item: Any) -> None:
        while True:
            if not self._thread.is_alive():
                if self._abort:
                    return
                raise RuntimeError("the streamed LanceDB add stopped") from self._error
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def put(self, batch: pa.RecordBatch) -> None:
        """Queue a batch (blocks while the writer is behind: bounded memory)."""
        self._put(batch)
        self.rows += batch.num_rows

    def close(self) -> None:
        """End the stream and wait until the add is committed (raises its error, if any)."""
        self._put(self._END)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Make the add fail (nothing committed) and wait for the thread."""
        self._abort = True
        self._put(self._END)
        self._thread.join()


@engine_boundary
class LanceChunks:
    """The ``chunks`` table: idempotent writes, filtered vector search, ANN and compaction."""

    def __init__(self, path: str, dim: int, ann: dict[str, Any] | None = None) -> None:
        # lancedb's Rust logger (env_logger, read once at import) prints WARN lines to the
        # user's terminal; the ones seen here are IVF bookkeeping, not problems: when
        # optimize() splits oversized IVF partitions towards the index's target partition
        # size, the merged index has more partitions than the old one and the builder logs
        # "partition index is X but the number of partitions is Y, skip loading it" for each
        # new partition it does not find in the old index (its rows were reassigned by the
        # split). Errors still print; LANCEDB_LOG set by the user wins.
        os.environ.setdefault("LANCEDB_LOG", "error")
        import lancedb  # lazy: see module docstring

        self.path = path
        self.dim = dim
        self.ann = {**ANN_DEFAULTS, **(ann or {})}
        os.makedirs(path, exist_ok=True)
        self._db = lancedb.connect(path)
        self.table = self._open()
        self._has_ann: bool | None = None
        self.ann_parts = 0  # partitions of the vector index (set when built or by the owner on open)
        # hash(key) of rows that may exist: decides add vs merge. Loaded on first use, not on
        # open: a scan of every key costs time and memory in proportion to the table, and a
        # store opened to be read (a restart, a CLI query) never needs it
        self._keys: set[int] | None = None
        self._stream: StreamedAdd | None = None  # an open bulk append (rebuild), see bulk_add
        # small scopes (a tenant, a user, a user's kinds) answered by an exact scan in memory,
        # loaded on their first query and kept in step by every write below (see _scan)
        self.scans = ExactScans(dim, self._load_scope, self.count)

    # -- opening -----------------------------------------------------------------------
    def _open(self) -> Any:
        names = self._db.list_tables()
        names = getattr(names, "tables", names)
        if TABLE in names:
            return self._db.open_table(TABLE)
        return self._db.create_table(TABLE, schema=schema(self.dim), exist_ok=True)

    def stored_dim(self) -> int:
        """The vector dimension the stored table was created with."""
        return int(self.table.schema.field("vector").type.list_size)

    @property
    def keys(self) -> set[int]:
        """hash(key) of every row that may exist (scanned from the table on first use)."""
        if self._keys is None:
            keys: set[int] = set()
            if self.table.count_rows():
                for batch in self._scan(["key"], None):
                    keys.update(map(hash, batch.column(0).to_pylist()))
            self._keys = keys
        return self._keys

    @keys.setter
    def keys(self, value: set[int]) -> None:
        self._keys = value

    def _load_keys(self) -> None:
        """Forget the loaded keys: the next use scans the table again."""
        self._keys = None

    def _scan(self, columns: list[str], where: str | None) -> Iterator[pa.RecordBatch]:
        q = self.table.search().select(columns).limit(None)
        if where:
            q = q.where(where)
        yield from q.to_batches()

    # -- writing -----------------------------------------------------------------------
    def bulk_add(self, rows: Sequence[Row]) -> pa.RecordBatch | None:
        """Append rows whose keys are new through one streamed add (see ``StreamedAdd``); returns
        the batch queued, without its vectors (None when there were no rows).

        The rows are neither visible nor durable until ``flush_bulk()``; every other write
        flushes first, so writes still apply in order.
        """
        if not rows:
            return None
        if self._stream is None:
            self._stream = StreamedAdd(self.table, schema(self.dim))
        batch = rows_to_batch(rows, self.dim)
        self._stream.put(batch)
        self.keys.update(hash(r.key) for r in rows)
        self.scans.clear()  # a rebuild: reloaded from the table on the next query
        return batch.select([c for c in _COLUMNS if c != "time"])

    def flush_bulk(self) -> None:
        """Commit the open streamed add, if any."""
        s, self._stream = self._stream, None
        if s is not None:
            try:
                s.close()
            finally:
                self._has_ann = None

    def abort_bulk(self) -> None:
        """Drop the open streamed add, if any (nothing of it is committed)."""
        s, self._stream = self._stream, None
        if s is not None:
            s.abort()
            self._load_keys()  # the aborted rows' keys were never written

    def delete(self, preds: Sequence[Pred]) -> None:
        """Delete every row any predicate covers (a few statements, ORed predicates)."""
        self.flush_bulk()
        for i in range(0, len(preds), _MAX_OR):
            self.table.delete(" OR ".join(p.sql() for p in preds[i : i + _MAX_OR]))
        self.scans.delete(preds)

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete the rows with these keys."""
        self.flush_bulk()
        for i in range(0, len(keys), 512):
            self.table.delete("key IN (" + ", ".join(sql_str(k) for k in keys[i : i + 512]) + ")")
        self.scans.clear()

    def update_confidence(self, updates: Sequence[tuple[Pred, float]]) -> None:
        """Set ``confidence`` on the rows each predicate covers."""
        self.flush_bulk()
        by_value: dict[float, list[Pred]] = {}
        for pred, conf in updates:
            by_value.setdefault(float(conf), []).append(pred)
        for conf, preds in by_value.items():
            for i in range(0, len(preds), _MAX_OR):
                where = " OR ".join(p.sql() for p in preds[i : i + _MAX_OR])
                self.table.update(where=where, values={"confidence": conf})
        self.scans.set_confidence(updates)

    def upsert(self, rows: Sequence[Row]) -> None:
        """Insert or replace rows by key: plain appends for new keys, merge_insert for known ones."""
        if not rows:
            return
        self.flush_bulk()
        known = [r for r in rows if hash(r.key) in self.keys]
        fresh = [r for r in rows if hash(r.key) not in self.keys]
        if known:
            data = rows_to_table(known, self.dim)
            (self.table.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(data))
        if fresh:
            self.table.add(rows_to_table(fresh, self.dim))
        self.keys.update(hash(r.key) for r in rows)
        self.scans.upsert(rows)

    # -- reading -----------------------------------------------------------------------
    def count(self, where: str | None = None) -> int:
        """Rows matching an escaped filter (all rows when None)."""
        return int(self.table.count_rows(where) if where else self.table.count_rows())

    def answers_in_memory(self, f: Filters | None) -> bool:
        """Whether a vector search with these filters is answered by a loaded in-memory scope (fast)."""
        return f is not None and self._stream is None and self.scans.loaded(f) is not None

    def _load_scope(self, where: str, limit: int) -> Iterator[tuple[list[Row], np.ndarray]]:
        """Rows (without vectors) and their vectors matching a filter, at most ``limit`` (for ``scans``)."""
        cols = [c for c in _COLUMNS if c != "time"] + ["vector"]
        q = self.table.search().select(cols).where(where).limit(limit)
        for batch in q.to_batches():
            t = pa.Table.from_batches([batch])
            flat = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            yield table_to_rows(t), np.asarray(flat, dtype=np.float32).reshape(t.num_rows, self.dim)

    def vector_search(
        self, vector: np.ndarray, where: str, limit: int, *, exact: bool = False, filters: Filters | None = None
    ) -> list[tuple[str, float]]:
        """Nearest rows by cosine distance among those the filter admits: (key, distance).

        ``filters`` (the same filters as ``where``) lets a query of a small scope (a tenant, a
        user, a user's kinds of rows) be answered exactly from memory (see ``_scan``).

        With an ANN index, exactly ``nprobes`` partitions are scanned (a fixed probe count
        is several times faster in LanceDB than an open-ended one). When that yields fewer
        than ``limit`` rows (a narrow filter, or a small tenant) the query is repeated
        exactly over the filtered rows, so a narrow filter never loses results.
        """
        if filters is not None and self._stream is None:
            hits = self.scans.search(vector, filters, limit)
            if hits is not None:
                return hits
        q = (
            self.table.search(vector, vector_column_name="vector")
            .distance_type("cosine")
            .where(where, prefilter=True)
            .limit(limit)
            .select(["key", "_distance"])
        )
        ann = not exact and self.has_ann()
        if exact:
            q = q.bypass_vector_index()
        elif ann:
            q = q.nprobes(self.nprobes())
        t = q.to_arrow()
        if ann and t.num_rows < limit:
            return self.vector_search(vector, where, limit, exact=True)
        return list(zip(t.column("key").to_pylist(), t.column("_distance").to_pylist()))

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        """Every row without its vector, as Arrow batches (for rebuilding the text index)."""
        yield from self._scan([c for c in _COLUMNS if c != "time"], None)

    def vectors(self, tenant: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors of rows by key within one tenant (query side: rescoring, MMR; callers take
        cosines, so a row served from memory comes unit-normalised)."""
        keys = list(dict.fromkeys(keys))
        out = self.scans.vectors(tenant, keys)
        keys = [k for k in keys if k not in out]
        for i in range(0, len(keys), 512):
            part = keys[i : i + 512]
            where = f"tenant = {sql_str(tenant)} AND key IN (" + ", ".join(sql_str(k) for k in part) + ")"
            t = self.table.search().where(where).select(["key", "vector"]).limit(len(part)).to_arrow()
            if not t.num_rows:
                continue
            flat = t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            mat = np.asarray(flat, dtype=np.float32).reshape(t.num_rows, self.dim)
            out.update(zip(t.column("key").to_pylist(), mat))
        return out

    def iter_rows(self, batch_rows: int = 20_000) -> Iterator[list[Row]]:
        """Every row without its vector, in batches (for rebuilding the text index)."""
        cols = [c for c in _COLUMNS if c != "time"]
        buf: list[Row] = []
        for batch in self._scan(cols, None):
            buf.extend(table_to_rows(pa.Table.from_batches([batch])))
            if len(buf) >= batch_rows:
                yield buf
                buf = []
        if buf:
            yield buf

    # -- indexes and maintenance -------------------------------------------------------
    def nprobes(self) -> int:
        """Partitions scanned per ANN query: max(nprobes, nprobes_fraction x partitions)."""
        return max(int(self.ann["nprobes"]), math.ceil(self.ann_parts * float(self.ann["nprobes_fraction"])))

    def has_ann(self) -> bool:
        """Whether a vector index exists (cached; refreshed when indexes change)."""
        if self._has_ann is None:
            self._has_ann = any("vector" in i.columns for i in self.table.list_indices())
        return self._has_ann

    def needs_optimize(self, max_small_fragments: int = 32) -> bool:
        """Whether optimize() would pay off: many small fragments, or many rows outside the ANN index.

        LanceDB's compaction merges a small fragment into its neighbours up to a million
        rows, so each optimize() can rewrite most of a table below that size: it runs when
        there is enough to gain, not after every write.
        """
        st = self.table.stats()
        frag = st.get("fragment_stats", {}) if isinstance(st, dict) else {}
        if (frag.get("num_small_fragments") or 0) >= max_small_fragments:
            return True
        if self.has_ann():
            for i in self.table.list_indices():
                if "vector" in i.columns:
                    s = self.table.index_stats(i.name)
                    if s is not None and s.num_unindexed_rows >= max(10_000, s.num_indexed_rows // 20):
                        return True
        return False

    def ensure_scalar_indexes(self) -> None:
        """Create the tenant BITMAP and the key/source_id/user_id/session_id BTREE indexes once there are rows."""
        from lancedb.index import Bitmap, BTree

        have = {tuple(i.columns) for i in self.table.list_indices()}
        if self.table.count_rows() == 0:
            return
        # user_id/session_id: memory queries are scoped to a user; a scalar index turns that
        # prefilter from a scan of every row (~100 ms at 100k rows here) into a lookup (~9 ms).
        for col, cfg in (
            ("tenant", Bitmap()), ("key", BTree()), ("source_id", BTree()), ("user_id", BTree()), ("session_id", BTree())
        ):
            if (col,) not in have:
                self.table.create_index(col, config=cfg, replace=True)

    def ann_partitions(self, rows: int) -> int:
        """IVF partitions for a table of ``rows`` rows."""
        p = int(round(math.sqrt(max(rows, 1)) * float(self.ann["partitions_per_sqrt_rows"])))
        return max(2, min(4096, p, rows // 64 or 2))

    def build_ann(self, rows: int) -> int:
        """(Re)train the IVF_FLAT cosine index; returns the partition count."""
        from lancedb.index import IvfFlat

        parts = self.ann_partitions(rows)
        cfg = IvfFlat(
            distance_type="cosine",
            target_partition_size=max(64, rows // parts),
            sample_rate=int(self.ann["sample_rate"]),
            max_iterations=int(self.ann["max_iterations"]),
        )
        self.table.create_index("vector", config=cfg, replace=True)
        self._has_ann = True
        self.ann_parts = parts
        return parts

    def optimize(self, cleanup_older_than: dt.timedelta) -> None:
        """Compact fragments, fold new rows into the indexes, drop versions older than the cutoff."""
        import warnings

        full = cleanup_older_than <= dt.timedelta(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cleanup_older_than=0 warning: we know
            # A full cleanup also deletes files no version references (a replaced vector
            # index was left behind otherwise); safe because this process is the only
            # writer and holds the write lock.
            self.table.optimize(cleanup_older_than=cleanup_older_than, delete_unverified=full)
            if full:  # optimize() prunes before it rewrites the indexes: prune what that left
                self.table.optimize(cleanup_older_than=cleanup_older_than, delete_unverified=True)

    def rewrite(self) -> None:
        """Rewrite every live row into fresh data files and drop all old versions.

        ``delete()`` only writes deletion vectors; this makes deletions physical. The
        overwrite drops the indexes: the scalar ones are recreated here, the vector index
        by the caller's maintenance (it knows the threshold).
        """
        data = self.table.to_arrow()  # live rows of the current version (deletions applied)
        self.table.add(data, mode="overwrite")
        self._has_ann = None
        self.scans.clear()
        del data
        self.optimize(dt.timedelta(0))
        self.ensure_scalar_indexes()
        self._load_keys()

    def drop(self) -> None:
        """Drop the table and start an empty one."""
        self.abort_bulk()
        try:
            self._db.drop_table(TABLE)
        except Exception:  # noqa: BLE001 - missing is fine
            pass
        self.table = self._db.create_table(TABLE, schema=schema(self.dim), exist_ok=True)
        self._has_ann = None
        self.keys = set()
        self.scans.clear()

    def stats(self) -> dict[str, Any]:
        """Rows, versions, fragments and index state of the table."""
        st = self.table.stats()
        frag = st.get("fragment_stats", {}) if isinstance(st, dict) else {}
        idx = {}
        for i in self.table.list_indices():
            idx[i.name] = {"type": i.index_type, "columns": list(i.columns)}
            try:
                s = self.table.index_stats(i.name)
                if s is not None:
                    idx[i.name].update(indexed_rows=s.num_indexed_rows, unindexed_rows=s.num_unindexed_rows)
            except Exception:  # noqa: BLE001 - stats are best effort
                pass
        return {
            "rows": self.table.count_rows(),
            "version": self.table.version,
            "versions": len(self.table.list_versions()),
            "fragments": frag.get("num_fragments"),
            "small_fragments": frag.get("num_small_fragments"),
            "indexes": idx,
        }

    def iter_all_keys(self) -> Iterable[str]:
        """Every key in the table (for tests and checks)."""
        for batch in self._scan(["key"], None):
            yield from batch.column(0).to_pylist()
