"""ChunkIndex: the LanceDB ``chunks`` table and the Tantivy index, fed from the same events.

Row semantics
-------------
* ``ChunksEmbedded`` -> one row per chunk id (id = chunk id, tenant = envelope tenant,
  time = the event's ``time`` field or the envelope time). A ``kind="summary"`` event first
  deletes the older rows of the same ``source_id`` (a newer summary replaces the old one).
* ``FactReinforced`` / ``FactDecayed`` set ``confidence`` on rows whose source_id is the fact.
* ``FactSuperseded`` / ``FactDeleted`` / ``FactPruned`` delete rows whose source_id is the
  fact; ``NoteDeleted`` those of the note; ``SessionForgotten`` the message and summary rows
  of the session; ``UserForgotten`` the user's rows of its stream's kind (facts, notes, items; a
  schedules tombstone has no rows), every row of the user on another stream (always within the tenant).
* ``ItemPut`` deletes the older rows of its item (the ``ChunksEmbedded`` written with it,
  kind ``item``, brings the new ones; an item put with ``index=False`` has none);
  ``ItemDeleted`` deletes the item's rows; ``MessageRetracted`` those of the message.

Idempotence and order independence
----------------------------------
Rows are keyed by ``(tenant, chunk id)``; LanceDB rows are written with ``merge_insert``
on the key (plain appends for keys never seen), Tantivy documents by delete-term + add.
A delete only removes rows written by events no later (log time) than itself, and leaves a
mark (``marks.jsonl``) so that a row of the same source/session/user arriving later from
another partition, but older than the delete, is not inserted. Applying a batch twice, or
replaying from any older checkpoint, therefore converges to the same rows, and a rebuild
from offset 0 equals the incrementally built index.

Scores (``SearchHit.score``): ``_candidates`` gathers a search's candidates from the engines,
``_ranking.fuse`` ranks them (the options are described in ``_candidates``).

BM25 is computed exactly from the live statistics of the query's tenant (see
``_tantivy``), so deleted documents and other tenants never influence a score, and a
rebuilt index scores exactly like the incrementally built one. Filter values are escaped
SQL literals for LanceDB and term queries for Tantivy; query text is only ever analyzed
into terms, never parsed as query syntax.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import DimensionMismatch, InvalidInput
from ..events import RecordedEvent
from ..events import types as ev
from ._base import Projection, SearchHit, atomic_write_json, read_json
from ._candidates import gather, mmr_order
from ._lance import LanceChunks
from ._maintenance import du
from ._marks import Marks
from ._ranking import SearchOptions, check_min_score, fuse
from ._rebuild import BulkRebuild
from ._rows import Filters, Pred, Row, from_us, make_key, pack_meta, to_us, vectors_of
from ._tantivy import TantivyChunks, analyze, query_terms

__all__ = ["ChunkIndex"]

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "text")
_SESSION_KINDS = ("message", "summary")
_HANDLED = frozenset({
    "ChunksEmbedded", "FactReinforced", "FactDecayed", "FactSuperseded", "FactDeleted", "FactPruned",
    "NoteDeleted", "SessionForgotten", "UserForgotten", "ItemPut", "ItemDeleted",
    "MessageRetracted",
})
FORMAT = 1


# UserForgotten on a user's facts / notes / schedules stream deletes rows of that kind only
# (schedules have none); on any other stream, every row of the user.
_USER_FORGET_KINDS: dict[str, tuple[str, ...] | None] = {
    "facts": ("fact",), "notes": ("note",), "items": ("item",), "schedules": (),
}


class _Batch:
    """What one ``apply`` call will write: deletes, confidence changes, upserts (in that order)."""

    def __init__(self) -> None:
        self.pending: dict[str, Row] = {}
        self.deletes: list[Pred] = []
        self.confs: dict[tuple[str, str], tuple[Pred, float]] = {}

    def delete(self, p: Pred) -> None:
        self.pending = {k: r for k, r in self.pending.items() if not p.matches(r)}
        self.deletes.append(p)

    def empty(self) -> bool:
        return not (self.pending or self.deletes or self.confs)


class ChunkIndex(BulkRebuild, Projection):
    """LanceDB vectors + Tantivy BM25 over the chunks of every tenant, with hybrid search.

    Files under ``path``: ``lance/`` (the ``chunks`` table), ``text/`` (Tantivy generations),
    ``marks.jsonl`` (deletes and confidence changes), ``checkpoint.json``, ``meta.json``.
    ``ann_threshold``: rows from which an IVF_FLAT index is built (retrained after 4x
    growth); ``optimize_every``: write batches between checks whether LanceDB
    ``optimize()`` pays off (many small fragments or unindexed rows; idle ``maintain()``
    checks too, at most every ``maintain_interval`` seconds);
    ``cleanup_after``: age of old table versions ``optimize()`` deletes; ``ann``: overrides
    of ``ANN_DEFAULTS`` (partitions, sample rate, iterations, nprobes); ``scan_rows``: the largest
    scope (a tenant, a user, a user's kinds of rows) whose vector queries are answered by an
    exact scan in memory, loaded on its first query (``_scan``; larger scopes go to LanceDB),
    ``scan_cache_rows``: rows held in memory for such scans in all (least recently used dropped).
    """

    name = "chunks"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dim: int,
        ann_threshold: int = 50_000,
        optimize_every: int = 256,
        name: str = "chunks",
        ann: dict[str, Any] | None = None,
        cleanup_after: dt.timedelta = dt.timedelta(seconds=30),
        maintain_interval: float = 30.0,
        scan_rows: int = 20_000,
        scan_cache_rows: int = 100_000,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidInput("dim", "must be a positive int", dim)
        if not isinstance(ann_threshold, int) or ann_threshold < 1:
            raise InvalidInput("ann_threshold", "must be a positive int", ann_threshold)
        if not isinstance(optimize_every, int) or optimize_every < 1:
            raise InvalidInput("optimize_every", "must be a positive int", optimize_every)
        for field, v in (("scan_rows", scan_rows), ("scan_cache_rows", scan_cache_rows)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInput(field, "must be an int >= 0", v)
        self.name = name
        self.path = os.fspath(path)
        self.dim = dim
        self.ann_threshold = ann_threshold
        self.optimize_every = optimize_every
        self.cleanup_after = cleanup_after
        self.maintain_interval = maintain_interval
        self._last_maintain = time.monotonic()
        os.makedirs(self.path, exist_ok=True)
        self._meta_path = os.path.join(self.path, "meta.json")
        meta = read_json(self._meta_path)
        if meta is not None and int(meta.get("dim", dim)) != dim:
            raise DimensionMismatch(int(meta["dim"]), dim)
        self._meta: dict[str, Any] = meta or {"format": FORMAT, "dim": dim, "ann_rows": 0}
        if meta is None:
            atomic_write_json(self._meta_path, self._meta)
        self._lock = threading.RLock()
        if self._meta.get("rebuilding"):
            # an interrupted rebuild or reset (see reset): its rows are discarded below, and a table
            # whose drop was cut short may not even open
            shutil.rmtree(os.path.join(self.path, "lance"), ignore_errors=True)
        self._lance = LanceChunks(os.path.join(self.path, "lance"), dim, ann)
        if self._lance.stored_dim() != dim:
            raise DimensionMismatch(self._lance.stored_dim(), dim)
        self._lance.ann_parts = int(self._meta.get("ann_partitions", 0))
        self._lance.scans.scope_rows = scan_rows
        self._lance.scans.cache_rows = scan_cache_rows
        self._text = TantivyChunks(os.path.join(self.path, "text"))
        # Keys Tantivy may hold that LanceDB does not. LanceDB is written first, so a process
        # that died between a LanceDB delete and the Tantivy commit left such documents (a reset
        # killed between its drop and Tantivy's is flagged and redone on open, see reset). The
        # replay must not take them for new keys (``lance.keys`` is rebuilt from LanceDB's live
        # rows only) and skip their delete-by-key: that duplicated them in Tantivy. A superset
        # (the term dictionary keeps deleted, unmerged documents' keys): an extra delete is a
        # no-op. Cleared whenever Tantivy is rebuilt or emptied.
        self._text_only_keys: set[int] | None = None  # computed on first use (see _text_only)
        self._marks = Marks(os.path.join(self.path, "marks.jsonl"))
        self._ckpt_path = os.path.join(self.path, "checkpoint.json")
        self._ckpt = self._read_checkpoint()
        self._writes = 0  # write batches since the last optimize
        self._skipped = 0
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._bulk: dict[int, int] | None = None  # during a rebuild: the checkpoint not yet saved
        if self._meta.get("rebuilding"):
            # a rebuild was interrupted: its checkpoint was never saved, so the log is replayed
            # from 0 anyway; start that replay from empty engines (no half-loaded table)
            log.warning("chunk index at %s: an interrupted rebuild is discarded", self.path)
            self.reset()

    @property
    def _text_only(self) -> set[int]:
        """Keys Tantivy may hold that LanceDB does not (see __init__), on first use: both key
        scans cost in proportion to the index, and a store opened to be read needs neither."""
        if self._text_only_keys is None:
            self._text_only_keys = self._text.key_hashes() - self._lance.keys
        return self._text_only_keys

    @_text_only.setter
    def _text_only(self, value: set[int]) -> None:
        self._text_only_keys = value

    # -- port --------------------------------------------------------------------------
    def _read_checkpoint(self) -> dict[int, int]:
        data = read_json(self._ckpt_path, {}) or {}
        return {int(p): int(o) for p, o in data.get("checkpoint", {}).items()}

    def checkpoint(self) -> dict[int, int]:
        """Partition -> next offset to apply, as last saved (empty for a new index)."""
        with self._lock:
            return dict(self._ckpt)

    def save_checkpoint(self, checkpoint: dict[int, int]) -> None:
        """Persist the checkpoint (after syncing the marks it depends on); during a rebuild, at its end."""
        with self._lock:
            if self._bulk is not None:
                self._bulk = dict(checkpoint)  # the output is not durable yet: see begin_rebuild
                return
            self._marks.sync()
            atomic_write_json(self._ckpt_path, {"checkpoint": {str(p): int(o) for p, o in checkpoint.items()}})
            self._ckpt = dict(checkpoint)

    def reset(self) -> None:
        """Drop every row, the text index, the marks and the checkpoint."""
        with self._lock:
            self._bulk = None
            self._buffer = None
            # flagged first: a process killed midway (a table half dropped, Tantivy still full)
            # reopens into another reset (see __init__)
            self._meta["rebuilding"] = True
            atomic_write_json(self._meta_path, self._meta)
            # then the checkpoint: "replay from 0" is always right
            atomic_write_json(self._ckpt_path, {"checkpoint": {}})
            self._ckpt = {}
            self._lance.drop()
            self._text.reset()
            self._text_only = set()
            self._marks.reset()
            self._meta["ann_rows"] = 0
            self._meta.pop("rebuilding", None)
            atomic_write_json(self._meta_path, self._meta)
            self._writes = 0

    def apply(self, events: Sequence[RecordedEvent]) -> None:
        """Fold a batch of events into both engines (idempotent; see the module docstring)."""
        with self._lock:
            b = _Batch()
            for rec in events:
                if rec.type not in _HANDLED:
                    continue
                try:
                    e = rec.decode()
                except Exception:  # noqa: BLE001 - a poison event must not stall the projection
                    self._skipped += 1
                    log.warning("chunk index: cannot decode event at offset %s (%s)", rec.offset, rec.type)
                    continue
                self._fold(b, rec, e)
            if b.empty():
                return
            if self._bulk is not None:
                self._write_bulk(b)
                self._writes += 1
                return
            try:
                self._write(b)
            except BaseException:
                self._text.rollback()
                raise
            self._writes += 1
            if self._writes % self.optimize_every == 0:
                self._maintain_if_needed()

    def _fold(self, b: _Batch, rec: RecordedEvent, e: ev.Event) -> None:
        tenant, etime = rec.tenant, to_us(rec.time)
        if isinstance(e, ev.ChunksEmbedded):
            self._fold_chunks(b, rec, e, etime)
        elif isinstance(e, (ev.FactReinforced, ev.FactDecayed)):
            if e.fact_id and self._marks.add_conf(tenant, e.fact_id, etime, float(e.confidence)):
                p = Pred(tenant, "source_id", e.fact_id, etime)
                for r in b.pending.values():
                    if p.matches(r):
                        r.confidence = float(e.confidence)
                b.confs[(tenant, e.fact_id)] = (p, float(e.confidence))
        elif isinstance(e, (ev.FactSuperseded, ev.FactDeleted, ev.FactPruned)):
            self._delete(b, Pred(tenant, "source_id", e.fact_id, etime))
        elif isinstance(e, ev.NoteDeleted):
            self._delete(b, Pred(tenant, "source_id", e.note_id, etime))
        elif isinstance(e, ev.SessionForgotten):
            self._delete(b, Pred(tenant, "session_id", e.session_id, etime, _SESSION_KINDS))
        elif isinstance(e, ev.UserForgotten):
            # scoped by its stream (see _state): clearing memories leaves the user's sessions
            kinds = _USER_FORGET_KINDS.get(rec.stream.split(":", 1)[0])
            if kinds != ():
                self._delete(b, Pred(tenant, "user_id", e.user_id, etime, kinds))
        elif isinstance(e, ev.ItemPut):
            # a new value replaces the old rows; no mark: the new rows come at this same time
            self._delete(b, Pred(tenant, "source_id", e.item_id, etime), mark=False)
        elif isinstance(e, ev.ItemDeleted):
            self._delete(b, Pred(tenant, "source_id", e.item_id, etime))
        elif isinstance(e, ev.MessageRetracted):
            self._delete(b, Pred(tenant, "source_id", e.message_id, etime))

    def _delete(self, b: _Batch, p: Pred, mark: bool = True) -> None:
        if not p.value:
            return
        b.delete(p)
        if mark:
            self._marks.add_delete(p)

    def _fold_chunks(self, b: _Batch, rec: RecordedEvent, e: ev.ChunksEmbedded, etime: int) -> None:
        n = len(e.chunk_ids)
        vecs = vectors_of(e.vectors, n, self.dim) if e.dim == self.dim else None
        if vecs is None or (e.texts and len(e.texts) != n):
            self._skipped += 1
            log.warning("chunk index: skipping ChunksEmbedded at offset %s: dim %s / %s vectors bytes for %s "
                        "chunks do not fit dim %s", rec.offset, e.dim, len(e.vectors), n, self.dim)
            return
        tenant = rec.tenant
        if e.kind == "summary" and e.source_id:
            self._delete(b, Pred(tenant, "source_id", e.source_id, etime), mark=False)
        ts = to_us(e.time) if e.time is not None else etime
        meta = pack_meta(e.metadata)
        texts = e.texts or [""] * n
        marks = self._marks
        check = bool(marks.dels or marks.confs)
        pending = b.pending
        for i, cid in enumerate(e.chunk_ids):
            row = Row(key=make_key(tenant, cid), id=cid, tenant=tenant, user_id=e.user_id, session_id=e.session_id,
                      kind=e.kind, source_id=e.source_id, text=texts[i], category=e.category,
                      confidence=float(e.confidence), ts=ts, etime=etime, metadata=meta, vector=vecs[i])
            if check:
                if marks.kills(row):
                    continue
                c = marks.conf_for(row)
                if c is not None:
                    row.confidence = c
            if row.key in pending:
                del pending[row.key]
            pending[row.key] = row

    def _write(self, b: _Batch) -> None:
        lance, text = self._lance, self._text
        if b.deletes:
            lance.delete(b.deletes)
            text.delete(b.deletes)
        if b.confs:
            updates = list(b.confs.values())
            lance.update_confidence(updates)
            preds = [p for p, _ in updates]
            conf_of = {(p.tenant, p.value): c for p, c in updates}
            touched = []
            for r in text.matching(preds):
                if r.key in b.pending or any(d.matches(r) for d in b.deletes):
                    continue
                r.confidence = conf_of[(r.tenant, r.source_id)]
                touched.append(r)
            text.upsert(touched)
        rows = list(b.pending.values())
        if rows:
            # fresh (no Tantivy delete-by-key needed): a key neither engine may hold
            known, extra = lance.keys, self._text_only
            if extra:
                fresh = [(h := hash(r.key)) not in known and h not in extra for r in rows]
            else:
                fresh = [hash(r.key) not in known for r in rows]
            # LanceDB encodes and writes in native threads while this thread feeds Tantivy
            fut = self._executor().submit(lance.upsert, rows)
            try:
                text.upsert(rows, fresh)
            finally:
                fut.result()
        self._marks.flush()
        text.commit()

    # -- queries -----------------------------------------------------------------------
    def count(self, tenant: str | None = None) -> int:
        """Rows of one tenant (or of all tenants)."""
        if tenant is None:
            return self._lance.count()
        f = Filters.build(tenant, None, None, None, None, None, None, None)
        return 0 if f.empty() else self._lance.count(f.sql())

    def stats(self) -> dict[str, Any]:
        """Rows, disk bytes, LanceDB versions/fragments/indexes, Tantivy docs/segments, checkpoint."""
        with self._lock:
            ls = self._lance.stats()
            return {
                "rows": ls["rows"],
                "disk_bytes": du(self.path),
                "lance": ls,
                "text": {"docs": self._text.num_docs(), "segments": self._text.num_segments(),
                         "generation": self._text.gen},
                "ann": {"indexed": self._lance.has_ann(), "threshold": self.ann_threshold,
                        "trained_rows": int(self._meta.get("ann_rows", 0))},
                "checkpoint": dict(self._ckpt),
                "skipped_events": self._skipped,
                "marks": len(self._marks.dels) + len(self._marks.confs),
                "scan": {"scopes": len(self._lance.scans.scopes), "rows": self._lance.scans.rows(),
                         "scope_rows": self._lance.scans.scope_rows},
            }

    def search(
        self,
        *,
        tenant: str,
        text: str | None = None,
        vector: np.ndarray | Callable[[], np.ndarray] | None = None,
        top_k: int = 10,
        mode: str = "hybrid",
        kinds: Sequence[str] | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        exclude_session: str | None = None,
        category: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        min_score: float | None = None,
        options: SearchOptions | None = None,
        **option_fields: Any,
    ) -> list[SearchHit]:
        """Hybrid / vector / text search within one tenant (``since`` inclusive, ``until`` exclusive).

        Scoring options come as one ``SearchOptions`` (``options``), or as its field names
        (``option_fields``, validated by ``SearchOptions.check``), not both; see the module
        docstring and ``_ranking`` for the scores. ``vector`` may be a callable returning the
        query's vector: it is called while the BM25 side runs in another thread.
        """
        if mode not in MODES:
            raise InvalidInput("mode", f"must be one of {', '.join(MODES)}", mode)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise InvalidInput("top_k", "must be an int >= 0", top_k)
        min_score = check_min_score(min_score, -math.inf, math.inf)  # raw scores here (calibrate=False): any finite number
        if text is not None and not isinstance(text, str):
            raise InvalidInput("text", f"must be a string, not {type(text).__name__}", text)
        if options is not None and option_fields:
            raise InvalidInput(next(iter(option_fields)), "give options or option fields, not both")
        if options is not None and not isinstance(options, SearchOptions):
            raise InvalidInput("options", "must be a SearchOptions", options)
        opts = options if options is not None else SearchOptions.check(**option_fields)
        f = Filters.build(tenant, kinds, user_id, session_id, exclude_session, category, since, until)
        # a callable vector (the query's embedding, computed on demand) is called while the
        # text side runs in another thread: the model's time and BM25's overlap
        later = vector if callable(vector) else None
        qvec = None if later is not None else self._query_vector(vector)
        has_vec = later is not None or qvec is not None
        if text is None and not has_vec:
            raise InvalidInput("text", "give text, vector, or both")
        if mode == "hybrid" and not has_vec:
            mode = "text"
        elif mode == "hybrid" and text is None:
            mode = "vector"
        elif mode == "vector" and not has_vec:
            mode = "text"
        elif mode == "text" and text is None:
            mode = "vector"
        if top_k == 0 or f.empty():
            return []
        n = max(opts.candidates, top_k)
        # Fetch a little more than n and cut at n ourselves, by (score, recency, key): the
        # engines break ties by physical row order, which differs between an incremental
        # build and a rebuild; this keeps the candidate lists (and so the fusion) identical.
        fetch = n + max(8, n // 4)
        # A user- or session-scoped query admits few rows: an exact search over the (indexed)
        # prefilter beats probing ANN partitions that mostly hold other users' rows.
        narrow = user_id is not None or session_id is not None
        terms = query_terms(text, stopwords=opts.stopwords) if (text is not None and mode != "vector") else []
        vec_hits: list[tuple[str, float]] = []
        txt_hits: list[tuple[float, Row]] = []
        if later is not None and mode != "text":
            # the query's embedding first, with nothing beside it: the local model runs a lone
            # text on every core (a BM25 thread beside it made it 1.5 ms slower on 2 cores), and
            # a remote model's wait dwarfs the BM25 side it could have hidden
            qvec = self._query_vector(later())
        if mode == "hybrid" and terms:
            # the two sides at once: BM25 on the pool, the vector side here
            fut = self._executor().submit(self._text.search, f, terms, fetch)
            try:
                vec_hits = self._lance.vector_search(qvec, f.sql(), fetch, exact=narrow, filters=f)  # type: ignore[arg-type]  # set: mode is not "text"
            finally:
                txt_hits = fut.result()
        elif mode in ("hybrid", "vector"):  # hybrid without a searchable term: the vector side alone
            vec_hits = self._lance.vector_search(qvec, f.sql(), fetch, exact=narrow, filters=f)  # type: ignore[arg-type]  # set: mode is not "text"
        else:
            txt_hits = self._text.search(f, terms, fetch)
        return self._ranked(mode, f, vec_hits, txt_hits, n, top_k, min_score, opts, qvec, terms)

    def unseen(self, tenant: str, words: Sequence[str]) -> list[str]:
        """The words no document of the tenant holds (none of their index terms occurs)."""
        out = []
        for w in words:
            terms = analyze(w)
            if terms and not any(self._text.doc_freq(tenant, terms)):
                out.append(w)
        return out

    def _ranked(self, mode: str, f: Filters, vec_hits: list[tuple[str, float]], txt_hits: list[tuple[float, Row]],
                n: int, top_k: int, min_score: float | None, opts: SearchOptions, qvec: np.ndarray | None,
                terms: Sequence[str]) -> list[SearchHit]:
        """Cut each side's candidates at ``n`` by (score, recency, key), then fuse them."""
        vec_hits = sorted(vec_hits, key=lambda h: (h[1], h[0]))[:n]
        txt_hits = sorted(txt_hits, key=lambda h: (-h[0], -h[1].ts, h[1].key))[:n]
        return self._fuse(mode, f, vec_hits, txt_hits, top_k, min_score, opts, qvec, terms)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="eidetica-search")
        return self._pool

    def _query_vector(self, vector: Any) -> np.ndarray | None:
        if vector is None:
            return None
        try:
            v = np.asarray(vector, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidInput("vector", "must be an array of numbers") from None
        if v.shape[0] != self.dim:
            raise DimensionMismatch(self.dim, int(v.shape[0]))
        if not np.all(np.isfinite(v)):
            raise InvalidInput("vector", "must be finite")
        return v

    def _fuse(
        self,
        mode: str,
        f: Filters,
        vec_hits: list[tuple[str, float]],
        txt_hits: list[tuple[float, Row]],
        top_k: int,
        min_score: float | None,
        opts: SearchOptions | None = None,
        qvec: np.ndarray | None = None,
        terms: Sequence[str] = (),
    ) -> list[SearchHit]:
        """Gather the candidates (engine I/O), rank them (``_ranking.fuse``, pure), re-order by MMR, make hits."""
        opts = opts or SearchOptions()
        cands, vecs = gather(self._lance, self._text, mode, f, vec_hits, txt_hits, opts, qvec, terms)
        ranked, score = fuse(mode, cands, opts, min_score)
        if opts.mmr is not None and len(ranked) > 1:
            ranked = mmr_order(self._lance, f, ranked, score, opts.mmr, top_k, vecs)
        rows, vsim, bm25 = cands.rows, cands.vsim, cands.bm25
        out: list[SearchHit] = []
        # Each search unpacks its own rows, so a hit may keep its row's memoised metadata dict.
        for k in ranked[:top_k]:
            r = rows[k]
            out.append(SearchHit(
                id=r.id, kind=r.kind, text=r.text, score=float(score[k]), time=from_us(r.ts), tenant=r.tenant,
                user_id=r.user_id, session_id=r.session_id, category=r.category,
                confidence=float(r.confidence), source_id=r.source_id, metadata=r.meta_dict(),
                vector_score=vsim.get(k, 0.0), text_score=bm25.get(k, 0.0),
            ))
        return out

    # -- inspection (tests, tools) -----------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Every row of both engines as sorted plain tuples, plus the duplicate key counts."""
        with self._lock:
            lance_keys = list(self._lance.iter_all_keys())
            lance_rows = [r for rows in self._lance.iter_rows() for r in rows]
            text_rows = self._text.all_rows()

            def tup(r: Row) -> tuple[Any, ...]:
                return (r.key, r.id, r.tenant, r.user_id, r.session_id, r.kind, r.source_id, r.text, r.category,
                        round(float(r.confidence), 6), r.ts, r.etime, bytes(r.metadata))

            return {
                "lance": sorted(map(tup, lance_rows)),
                "text": sorted(map(tup, text_rows)),
                "lance_duplicates": len(lance_keys) - len(set(lance_keys)),
                "text_duplicates": len(text_rows) - len({r.key for r in text_rows}),
            }

    def close(self) -> None:
        """Release the Tantivy writer and the search threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lance.abort_bulk()  # an unfinished rebuild: meta.json says so, reopening resets
            self._text.close()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def __enter__(self) -> ChunkIndex:
        """Use as a context manager (closes on exit)."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close the index."""
        self.close()

