"""The Tantivy side of the chunk index: BM25 over the same rows, keyed and filtered alike.

User text is never parsed as query syntax: it goes through the same analyzer the field is
indexed with (split on non-alphanumerics, lowercase, English stop words, stemming) and each
resulting term becomes a ``term_query``. Filters (tenant first) are separate ``Must`` clauses around
the text clause, so quotes, colons, ``AND``, parentheses or ``*`` in a question are just
characters. Keyword fields are indexed as ``"=" + value`` (see ``term_value``) so even an
empty value is a real term.

Scoring: Tantivy's own BM25 counts deleted-but-unmerged documents in its statistics and
pools every tenant, so an index that saw deletes ranks differently from one rebuilt from
the log. Tantivy therefore only proposes a candidate pool (its top ``2 x limit``); each
candidate is re-scored with exact BM25 (k1=1.2, b=0.75) from the live statistics of the
query's tenant (document count, average length, document frequency of each term), read
from the same searcher snapshot. When the pool holds every match the ranking is exact;
otherwise the pool is Tantivy's best guess, re-ranked exactly.

Layout: ``<root>/CURRENT`` names the live generation directory (``g000001`` ...); a
compaction builds the next generation from the LanceDB rows and swaps ``CURRENT``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import tantivy
from tantivy import Document, Filter, Index, Occur, Query, SchemaBuilder, TextAnalyzerBuilder, Tokenizer

from .._util.fs import write_atomic
from ._base import engine_boundary
from ._rows import Filters, Pred, Row, term_value

__all__ = ["TantivyChunks", "link_generation", "analyze", "query_terms", "QUERY_STOPWORDS", "ANALYZER"]

ANALYZER = "eid_en_v2"
_KEYWORDS = ("tenant", "user_id", "session_id", "kind", "category", "source_id")
_MAX_TERMS = 64
_ANALYZER = (
    TextAnalyzerBuilder(Tokenizer.simple())
    .filter(Filter.remove_long(40))
    .filter(Filter.lowercase())
    .filter(Filter.stopword("english"))
    .filter(Filter.stemmer("english"))
    .build()
)
K1 = 1.2
B = 0.75
FIRST_GENERATION = "g000001"  # a new index's generation directory (a root with no CURRENT starts there)


def tokens(text: str) -> list[str]:
    """Every index term of a text, in order (what the text field indexes)."""
    try:
        return list(_ANALYZER.analyze(text))
    except Exception:  # noqa: BLE001 - e.g. lone surrogates: such text matches nothing
        return []


def analyze(text: str) -> list[str]:
    """The distinct index terms of a query text, in first-seen order (at most 64)."""
    return list(dict.fromkeys(tokens(text)))[:_MAX_TERMS]


# Function words of English questions that the index's stopword filter keeps (it drops only
# Lucene's 33 words): they match most documents and add noise, not topic, to a BM25 query.
QUERY_STOPWORDS = frozenset(
    """a an the is are was were be been being am do does did doing done has have had having of to in on
    for with at by from and or but if that this these those it its as about into than then there
    what when where who whom whose which why how would could should will can may might shall must
    any some ever i me my we our you your he him his she her they them their
    also just very much many more most other such own same so too now""".split()
)
_WORD = re.compile(r"[\w']+")


def query_terms(text: str, *, stopwords: bool = True) -> list[str]:
    """Index terms of a user query, question/function words dropped (all terms when nothing else is left)."""
    if not stopwords:
        return analyze(text)
    kept = " ".join(w for w in _WORD.findall(text) if w.lower().strip("'") not in QUERY_STOPWORDS)
    return analyze(kept) or analyze(text)


def _schema() -> tantivy.Schema:
    sb = SchemaBuilder()
    sb.add_text_field("key", tokenizer_name="raw", index_option="basic")
    for name in _KEYWORDS:
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("text", tokenizer_name=ANALYZER, index_option="freq")
    sb.add_integer_field("ts", indexed=True, fast=True)
    sb.add_integer_field("etime", indexed=True, fast=True)
    sb.add_integer_field("ntok", indexed=False, fast=True)  # doc_len(text): live length statistics
    sb.add_bytes_field("row", stored=True)
    return sb.build()


SCHEMA = _schema()


def doc_len(text: str) -> int:
    """A document's length for BM25: whitespace-separated words (cheap, same at index and query time)."""
    return len(text.split())


def _doc(r: Row) -> Document:
    d = Document()
    d.add_text("key", r.key)
    d.add_text("tenant", term_value(r.tenant))
    d.add_text("user_id", term_value(r.user_id))
    d.add_text("session_id", term_value(r.session_id))
    d.add_text("kind", term_value(r.kind))
    d.add_text("category", term_value(r.category))
    d.add_text("source_id", term_value(r.source_id))
    d.add_text("text", r.text)
    d.add_integer("ts", int(r.ts))
    d.add_integer("etime", int(r.etime))
    d.add_integer("ntok", doc_len(r.text))
    d.add_bytes("row", r.pack())
    return d


_ROW_COLUMNS = ("key", "id", "tenant", "user_id", "session_id", "kind", "source_id", "text", "category",
                "confidence", "ts", "etime", "metadata")  # the order of Row.pack
_PACK = msgspec.msgpack.Encoder()


def docs_from_arrow(batch: pa.RecordBatch, terms: dict[str, str] | None = None) -> Iterator[Document]:
    """The documents of a batch of rows (the LanceDB columns), as ``_doc`` builds them from rows.

    Column-wise, without Row objects. Keyword values repeat a lot (tenant, kind, user,
    session, source), so their term form is computed once per distinct value (``terms``
    carries that cache across batches).
    """
    tv = {} if terms is None else terms
    cols = {c: batch.column(c).to_pylist() for c in _ROW_COLUMNS}

    def kw(values: list[str]) -> list[str]:
        for v in set(values).difference(tv):
            tv[v] = term_value(v)
        return [tv[v] for v in values]

    texts = cols["text"]
    ntoks = [len(t.split()) for t in texts]  # = doc_len, inlined: a call per row costs more here
    metas = [m or b"" for m in cols["metadata"]]
    schema, from_dict, pack = SCHEMA, Document.from_dict, _PACK.encode
    for key, id_, tenant, user, session, kind, source, text, cat, conf, ts, etime, meta, t_tenant, t_user, \
            t_session, t_kind, t_cat, t_source, ntok in zip(
            cols["key"], cols["id"], cols["tenant"], cols["user_id"], cols["session_id"], cols["kind"],
            cols["source_id"], texts, cols["category"], cols["confidence"], cols["ts"], cols["etime"], metas,
            kw(cols["tenant"]), kw(cols["user_id"]), kw(cols["session_id"]), kw(cols["kind"]), kw(cols["category"]),
            kw(cols["source_id"]), ntoks):
        yield from_dict({
            "key": key, "tenant": t_tenant, "user_id": t_user, "session_id": t_session, "kind": t_kind,
            "category": t_cat, "source_id": t_source, "text": text, "ts": ts, "etime": etime, "ntok": ntok,
            "row": pack((key, id_, tenant, user, session, kind, source, text, cat, conf, ts, etime, meta)),
        }, schema)


def _term(field: str, value: str) -> Query:
    return Query.term_query(SCHEMA, field, term_value(value))


def filter_query(f: Filters) -> Query:
    """The filters as one boolean query; the tenant term is always a Must clause."""
    clauses: list[tuple[Any, Query]] = [(Occur.Must, _term("tenant", f.tenant))]
    if f.kinds is not None:
        clauses.append((Occur.Must, Query.boolean_query([(Occur.Should, _term("kind", k)) for k in f.kinds])))
    for field, value in (("user_id", f.user_id), ("session_id", f.session_id), ("category", f.category)):
        if value is not None:
            clauses.append((Occur.Must, _term(field, value)))
    if f.exclude_session is not None:
        clauses.append((Occur.MustNot, _term("session_id", f.exclude_session)))
    if f.since is not None or f.until is not None:
        clauses.append((Occur.Must, Query.range_query(
            SCHEMA, "ts", tantivy.FieldType.Integer,
            f.since, None if f.until is None else f.until - 1, True, True)))
    return Query.boolean_query(clauses)


def pred_query(p: Pred) -> Query:
    """A delete predicate as a query (tenant, field value, etime <= time, optional kinds)."""
    clauses: list[tuple[Any, Query]] = [
        (Occur.Must, _term("tenant", p.tenant)),
        (Occur.Must, _term(p.field, p.value)),
        (Occur.Must, Query.range_query(SCHEMA, "etime", tantivy.FieldType.Integer, None, int(p.time), True, True)),
    ]
    if p.kinds is not None:
        clauses.append((Occur.Must, Query.boolean_query([(Occur.Should, _term("kind", k)) for k in p.kinds])))
    return Query.boolean_query(clauses)


@engine_boundary
class TantivyChunks:
    """The BM25 index over chunk rows: one writer, read-your-writes after every commit."""

    def __init__(self, root: str, *, heap_bytes: int = 64_000_000) -> None:
        self.root = root
        self.heap_bytes = heap_bytes
        os.makedirs(root, exist_ok=True)
        gen = self._current()
        if gen is None:
            gen = FIRST_GENERATION
            os.makedirs(os.path.join(root, gen), exist_ok=True)
            self._set_current(gen)
        self.gen = gen
        self.index = self._open(os.path.join(root, gen))
        self._writer: Any = None
        self._dirty = False
        self._remove_stale()
        self._gen = 0  # bumped after every commit/swap: invalidates the statistics cache
        self._cache: dict[Any, Any] = {}
        self._cache_gen = -1
        self._cache_lock = threading.Lock()
        self._searcher_cache: tuple[int, Any, Any] | None = None
        self._tf: dict[str, tuple[Counter[str], int]] = {}  # text -> (term counts, length), see _terms_of

    # -- files -------------------------------------------------------------------------
    def _current(self) -> str | None:
        try:
            with open(os.path.join(self.root, "CURRENT")) as f:
                gen = f.read().strip()
        except FileNotFoundError:
            return None
        return gen if gen and os.path.isdir(os.path.join(self.root, gen)) else None

    def _set_current(self, gen: str) -> None:
        write_atomic(os.path.join(self.root, "CURRENT"), gen, mode=0o644)

    def _remove_stale(self) -> None:
        for name in os.listdir(self.root):
            p = os.path.join(self.root, name)
            if name != self.gen and name.startswith("g") and os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)

    @staticmethod
    def _open(path: str) -> Index:
        os.makedirs(path, exist_ok=True)
        idx = Index(SCHEMA, path=path, reuse=True)
        idx.register_tokenizer(ANALYZER, _ANALYZER)
        return idx

    def _w(self) -> Any:
        if self._writer is None:
            self._writer = self.index.writer(self.heap_bytes, 1)
        return self._writer

    # -- writing -----------------------------------------------------------------------
    def delete(self, preds: Sequence[Pred]) -> None:
        """Queue deletion of every document a predicate covers (applied at commit)."""
        w = self._w()
        for p in preds:
            w.delete_documents_by_query(pred_query(p))
        self._dirty = self._dirty or bool(preds)

    def upsert(self, rows: Sequence[Row], fresh: Sequence[bool] | None = None) -> None:
        """Queue replace-by-key of rows: delete the key's document, then add the new one.

        ``fresh[i]`` True promises that no document of this index has row i's key (its delete is skipped).
        """
        w = self._w()
        for i, r in enumerate(rows):
            if fresh is None or not fresh[i]:
                w.delete_documents_by_term("key", r.key)
            w.add_document(_doc(r))
        self._dirty = self._dirty or bool(rows)

    def commit(self) -> None:
        """Make queued changes durable and visible to the next search."""
        if self._dirty and self._writer is not None:
            self._writer.commit()
            self.index.reload()
            self._dirty = False
            self._gen += 1

    def rollback(self) -> None:
        """Drop queued, uncommitted changes."""
        if self._writer is not None and self._dirty:
            self._writer.rollback()
            self._dirty = False

    def gc(self) -> None:
        """Delete index files no longer referenced (after merges)."""
        if self._writer is not None:
            try:
                self._writer.garbage_collect_files()
            except Exception:  # noqa: BLE001 - best effort housekeeping
                pass

    def _searcher(self) -> Any:
        """The searcher of the current commit, made once per commit (each costs about 0.5 ms)."""
        cached = self._searcher_cache
        if cached is None or cached[0] != self._gen or cached[1] is not self.index:
            cached = self._searcher_cache = (self._gen, self.index, self.index.searcher())
        return cached[2]

    # -- reading -----------------------------------------------------------------------
    def search(self, f: Filters, terms: Sequence[str], limit: int) -> list[tuple[float, Row]]:
        """Top ``limit`` rows for analyzed ``terms`` within the filters, by exact per-tenant BM25."""
        if not terms or limit <= 0:
            return []
        text = Query.boolean_query([(Occur.Should, Query.term_query(SCHEMA, "text", t)) for t in terms])
        q = Query.boolean_query([(Occur.Must, Query.const_score_query(filter_query(f), 0.0)), (Occur.Must, text)])
        gen = self._gen
        searcher = self._searcher()
        res = searcher.search(q, limit + max(16, limit // 2), count=False)
        if not res.hits:
            return []
        rows = [Row.unpack(searcher.doc(addr).get_first("row")) for _, addr in res.hits]
        scored = list(zip(self._bm25(searcher, gen, f.tenant, terms, rows), rows))
        scored.sort(key=lambda x: (-x[0], -x[1].ts, x[1].key))
        return scored[:limit]

    def score(self, tenant: str, terms: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Exact per-tenant BM25 of given rows for analyzed ``terms`` (0.0 for a row matching none)."""
        if not terms or not rows:
            return [0.0] * len(rows)
        return self._bm25(self._searcher(), self._gen, tenant, terms, rows)

    def idf(self, tenant: str, terms: Sequence[str]) -> list[float]:
        """The BM25 idf of each analyzed term within one tenant (what a matching term can add, per unit of tf)."""
        if not terms:
            return []
        gen = self._gen
        searcher = self._searcher()  # the cached one: a new searcher per query cost about 0.5 ms
        n_docs, _ = self._tenant_stats(searcher, gen, tenant)
        return [math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
                for df in (self._df(searcher, gen, tenant, t) for t in terms)]

    def doc_freq(self, tenant: str, terms: Sequence[str]) -> list[int]:
        """How many live documents of one tenant hold each analyzed term (0: never written there)."""
        gen = self._gen
        searcher = self._searcher()
        return [self._df(searcher, gen, tenant, t) for t in terms]

    def _bm25(self, searcher: Any, gen: int, tenant: str, terms: Sequence[str], rows: Sequence[Row]) -> list[float]:
        n_docs, avgdl = self._tenant_stats(searcher, gen, tenant)
        idf = {}
        for t in terms:
            df = self._df(searcher, gen, tenant, t)
            idf[t] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        out = []
        for r in rows:
            tf, n = self._terms_of(r.text)
            norm = K1 * (1.0 - B + B * n / avgdl) if avgdl > 0 else K1
            s = 0.0
            for t in terms:
                c = tf.get(t, 0)
                if c:
                    s += idf[t] * c * (K1 + 1.0) / (c + norm)
            out.append(s)
        return out

    def _terms_of(self, text: str) -> tuple[Counter[str], int]:
        """Term counts and BM25 length of a text, memoised by the text (the same rows are scored
        query after query: analysing them again cost several ms per search)."""
        got = self._tf.get(text)
        if got is None:
            got = (Counter(tokens(text)), doc_len(text))
            if len(self._tf) >= 100_000:
                self._tf.clear()  # bounded; rebuilt from the rows searches touch
            self._tf[text] = got
        return got

    def _cached(self, gen: int, key: Any, compute: Any) -> Any:
        with self._cache_lock:
            if self._cache_gen != gen:
                self._cache = {}
                self._cache_gen = gen
            if key in self._cache:
                return self._cache[key]
        value = compute()
        with self._cache_lock:
            if self._cache_gen == gen and len(self._cache) < 100_000:
                self._cache[key] = value
        return value

    def _tenant_stats(self, searcher: Any, gen: int, tenant: str) -> tuple[int, float]:
        """(live documents, average indexed length) of one tenant."""

        def compute() -> tuple[int, float]:
            agg = searcher.aggregate(_term("tenant", tenant), {"s": {"stats": {"field": "ntok"}}})["s"]
            n = int(agg.get("count") or 0)
            return n, (float(agg.get("sum") or 0.0) / n if n else 0.0)

        stats: tuple[int, float] = self._cached(gen, ("stats", tenant), compute)
        return stats

    def _df(self, searcher: Any, gen: int, tenant: str, term: str) -> int:
        """Live documents of one tenant containing an index term."""

        def compute() -> int:
            q = Query.boolean_query([(Occur.Must, _term("tenant", tenant)),
                                     (Occur.Must, Query.term_query(SCHEMA, "text", term))])
            return int(searcher.search(q, 1, count=True).count or 0)

        df: int = self._cached(gen, ("df", tenant, term), compute)
        return df

    def adjacent(self, f: Filters, session_id: str, ts: int, *, after: bool, limit: int = 4) -> list[Row]:
        """The message rows of a session (within the filters) closest in time before / after ``ts``."""
        span = Query.range_query(SCHEMA, "ts", tantivy.FieldType.Integer,
                                 ts + 1 if after else None, None if after else ts - 1, True, True)
        q = Query.boolean_query([
            (Occur.Must, filter_query(f)),
            (Occur.Must, _term("session_id", session_id)),
            (Occur.Must, _term("kind", "message")),
            (Occur.Must, span),
        ])
        searcher = self._searcher()
        res = searcher.search(q, limit, count=False, order_by_field="ts",
                              order=tantivy.Order.Asc if after else tantivy.Order.Desc)
        return [Row.unpack(searcher.doc(addr).get_first("row")) for _, addr in res.hits]

    def fetch(self, tenant: str, keys: Sequence[str]) -> dict[str, Row]:
        """Rows by key within one tenant."""
        if not keys:
            return {}
        q = Query.boolean_query([
            (Occur.Must, _term("tenant", tenant)),
            (Occur.Must, Query.term_set_query(SCHEMA, "key", list(keys))),
        ])
        searcher = self._searcher()
        res = searcher.search(q, len(keys), count=False)
        rows = (Row.unpack(searcher.doc(addr).get_first("row")) for _, addr in res.hits)
        return {r.key: r for r in rows}

    def matching(self, preds: Sequence[Pred], limit: int = 1_000_000) -> list[Row]:
        """Committed rows any predicate covers."""
        if not preds:
            return []
        q = Query.boolean_query([(Occur.Should, pred_query(p)) for p in preds])
        searcher = self._searcher()
        res = searcher.search(q, limit, count=False)
        return [Row.unpack(searcher.doc(addr).get_first("row")) for _, addr in res.hits]

    def key_hashes(self) -> set[int]:
        """``hash()`` of every key in the term dictionary (deleted but unmerged documents included)."""
        return {hash(k) for k, _ in self._searcher().terms_with_prefix("key", "")}

    def num_docs(self) -> int:
        """Live documents in the committed index."""
        return int(self._searcher().num_docs)

    def num_segments(self) -> int:
        """Segments of the committed index."""
        return int(self._searcher().num_segments)

    def all_rows(self) -> list[Row]:
        """Every committed row (for tests and checks)."""
        searcher = self._searcher()
        n = max(1, int(searcher.num_docs))
        res = searcher.search(Query.all_query(), n, count=False)
        return [Row.unpack(searcher.doc(addr).get_first("row")) for _, addr in res.hits]

    def terms_with_prefix(self, field: str, prefix: str) -> list[Any]:
        """Terms of a field with a prefix, still present in segments (deleted docs included)."""
        return list(self._searcher().terms_with_prefix(field, prefix))

    # -- lifecycle ---------------------------------------------------------------------
    def _close_writer(self) -> None:
        if self._writer is not None:
            try:
                self._writer.wait_merging_threads()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            self._writer = None

    def rebuild(self, batches: Iterable[Sequence[Row] | pa.RecordBatch]) -> None:
        """Index rows (lists of rows, or Arrow batches of the row columns) into a fresh generation
        directory, then swap it in and delete the old one."""
        self.rollback()
        n = int(self.gen[1:]) + 1
        gen = f"g{n:06d}"
        path = os.path.join(self.root, gen)
        shutil.rmtree(path, ignore_errors=True)
        idx = self._open(path)
        w = idx.writer(self.heap_bytes, 1)
        terms: dict[str, str] = {}
        for rows in batches:
            if isinstance(rows, pa.RecordBatch):
                for d in docs_from_arrow(rows, terms):
                    w.add_document(d)
                if len(terms) > 1_000_000:  # bounded: mostly ids of sources and sessions
                    terms.clear()
                continue
            for r in rows:
                w.add_document(_doc(r))
        w.commit()
        w.wait_merging_threads()
        self._close_writer()
        self._set_current(gen)
        self.gen, self.index = gen, idx
        self.index.reload()
        self._gen += 1
        self._remove_stale()

    def reset(self) -> None:
        """Start an empty generation and delete the old ones."""
        self.rebuild([])

    def close(self) -> None:
        """Roll back anything uncommitted and release the writer."""
        self.rollback()
        self._close_writer()

    # -- a copy of another index (as_of's past index, see _past) ---------------------------
    def drop_and_add(self, keys: Iterable[str], scoped: Iterable[tuple[str, str, str]],
                     batches: Iterable[pa.RecordBatch]) -> None:
        """Delete the documents of ``keys`` and of every (field, tenant, value) in ``scoped``, add the
        rows of ``batches`` (LanceDB columns), and commit."""
        w = self._w()
        for k in keys:
            w.delete_documents_by_term("key", k)
        for field, tenant, value in scoped:
            w.delete_documents_by_query(Query.boolean_query([(Occur.Must, _term("tenant", tenant)),
                                                             (Occur.Must, _term(field, value))]))
        for b in batches:
            for d in docs_from_arrow(b):
                w.add_document(d)
        self._dirty = True
        self.commit()


def link_generation(source: TantivyChunks, root: str) -> bool:
    """Lay out at ``root`` (a new index's directory) a copy of ``source``'s committed documents as its
    first generation: the segment files hard-linked (Tantivy writes each file once and never changes
    it; copied across file systems), the meta copied. False when a file went away meanwhile (a
    merge's cleanup)."""
    src = os.path.join(source.root, source.gen)
    with open(os.path.join(src, "meta.json"), "rb") as f:
        meta = f.read()
    segments = {s["segment_id"].replace("-", "") for s in json.loads(meta)["segments"]}
    dst = os.path.join(root, FIRST_GENERATION)
    os.makedirs(dst, exist_ok=True)
    place = os.link if os.stat(src).st_dev == os.stat(dst).st_dev else shutil.copyfile
    for name in os.listdir(src):
        if name.split(".", 1)[0] in segments:
            try:
                place(os.path.join(src, name), os.path.join(dst, name))
            except FileNotFoundError:
                return False
    with open(os.path.join(dst, "meta.json"), "wb") as f:
        f.write(meta)
    return True
