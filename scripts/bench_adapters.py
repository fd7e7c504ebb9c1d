"""EideticaStore against LangGraph's InMemoryStore and SqliteStore (sqlite-vec), same embedder.

All three stores embed with eidetica's default embedder (MiniLM, the same weights and code for
everyone), index the ``text`` field, hold N items in one namespace and answer Q natural-language
queries (``search(namespace, query=..., limit=10)``). Measured, in one run:

* ``put`` per second: single ``store.put`` calls of new texts (each embeds its text), after the
  bulk load; the rate over P puts until the last one is found by a query (the clock stops after
  one ``search`` for it, for every store: eidetica embeds item texts behind the put, in batches,
  and its reads wait for them).
* ``search(query=...)`` p50 / p95: the query's embedding included.

The N-item bulk load goes through each store's own ``batch`` of ``PutOp``s; its vectors come
from a cache filled once before any store is timed (same vectors for everyone), so the load is
not what is measured. Prints one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_memory import QUERIES, SUBJECTS, VERBS  # one corpus vocabulary for the memory benchmarks

import eidetica
from eidetica.integrations.langgraph import EideticaStore
from eidetica.providers import Embedder, LocalEmbedder, default_embedder

NS = ("memories", "user-1")


def memory_text(rng: random.Random, i: int) -> str:
    """A varied short memory."""
    return f"The user {rng.choice(VERBS)} {rng.choice(SUBJECTS)} and {rng.choice(SUBJECTS)} (memory {i})"


class Cached(Embedder):
    """The default embedder, answering texts of the bulk load from a precomputed cache."""

    def __init__(self, inner: Embedder, cache: dict[str, np.ndarray]) -> None:
        self.inner, self.cache = inner, cache
        self.model_id, self.dim = inner.model_id, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        """Cached vectors where known, the model for the rest."""
        texts = list(texts)
        miss = [t for t in texts if t not in self.cache]
        # misses are not remembered: every store pays the model for the same put and query texts
        fresh = dict(zip(miss, self.inner.embed(miss))) if miss else {}
        return (np.stack([self.cache[t] if t in self.cache else fresh[t] for t in texts]).astype(np.float32)
                if texts else np.zeros((0, self.dim), np.float32))


def run_store(name: str, store: Any, items: list[str], puts: list[str], queries: list[str]) -> dict[str, Any]:
    """Bulk load, then time single puts and queries."""
    from langgraph.store.base import PutOp

    t0 = time.perf_counter()
    for k in range(0, len(items), 500):
        store.batch([PutOp(NS, f"m{k + i}", {"text": t}) for i, t in enumerate(items[k : k + 500])])
    load_s = time.perf_counter() - t0
    store.search(NS, query="warm up", limit=10)
    t0, c0 = time.perf_counter(), time.process_time()
    for i, t in enumerate(puts):
        store.put(NS, f"p{i}", {"text": t})
    last_found = store.search(NS, query=puts[-1], limit=1)[0].key == f"p{len(puts) - 1}"
    put_s, put_cpu = time.perf_counter() - t0, time.process_time() - c0
    lat, cpu = [], []
    found = 0
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        res = store.search(NS, query=q, limit=10)
        lat.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)  # every thread of the process: holds under load
        found += len(res) == 10
    lat.sort()
    out = {"store": name, "put_per_s": round(len(puts) / put_s, 1), "search_p50_ms": round(statistics.median(lat), 2),
           "search_p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2), "bulk_load_s": round(load_s, 1),
           "put_cpu_ms": round(put_cpu * 1000 / len(puts), 2), "search_cpu_p50_ms": round(statistics.median(cpu), 2),
           "queries_with_10_hits": found, "last_put_found": last_found}
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    """Run the comparison and print one JSON line last."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="2,000 items, 100 puts, 50 queries")
    args = ap.parse_args()
    n, p, q = (2_000, 100, 50) if args.quick else (10_000, 300, 200)
    rng = random.Random(7)
    items = [memory_text(rng, i) for i in range(n)]
    puts = [memory_text(rng, n + i) for i in range(p)]
    # distinct texts: no embedding cache can answer a query it has seen
    queries = [f"{rng.choice(QUERIES)} {rng.choice(SUBJECTS)} (question {i})" for i in range(q)]
    base = default_embedder()
    cache: dict[str, np.ndarray] = {}
    t0 = time.perf_counter()
    for k in range(0, n, 256):
        for t, v in zip(items[k : k + 256], base.embed(items[k : k + 256])):
            cache[t] = v
    print(json.dumps({"precomputed_vectors": n, "seconds": round(time.perf_counter() - t0, 1)}), flush=True)

    def fresh() -> Cached:
        # a new embedder per store (the weights are shared, the LRU cache is not): no store
        # finds a put or query text already embedded by the store measured before it
        return Cached(LocalEmbedder(), cache)

    def lg_index() -> dict[str, Any]:
        emb = fresh()
        embed: Callable[[list[str]], list[list[float]]] = lambda texts: emb.embed(texts).tolist()  # noqa: E731
        return {"dims": emb.dim, "embed": embed, "fields": ["text"], "text_fields": ["text"]}

    results = []
    with tempfile.TemporaryDirectory() as d:
        from langgraph.store.memory import InMemoryStore

        results.append(run_store("langgraph_inmemory", InMemoryStore(index=lg_index()), items, puts, queries))  # type: ignore[arg-type]

        import pysqlite3 as sqlite3  # this Python cannot load extensions; pysqlite3 can (STACK.md)
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(str(Path(d) / "lg.sqlite"), check_same_thread=False, isolation_level=None)
        sq = SqliteStore(conn, index=lg_index())  # type: ignore[arg-type]
        sq.setup()
        results.append(run_store("langgraph_sqlite_vec", sq, items, puts, queries))
        conn.close()

        with eidetica.open(Path(d) / "eidetica", embedder=fresh()) as m:
            results.append(run_store("eidetica", EideticaStore(m, index={"fields": ["text"]}), items, puts, queries))
        # the same single puts on a log that fsyncs in the background (fsync="batch"): what
        # the durable append costs per put, beside stores that fsync nothing (InMemoryStore)
        with eidetica.open(Path(d) / "eidetica-batch", embedder=fresh(), fsync="batch") as m:
            s = EideticaStore(m, index={"fields": ["text"]})
            t0 = time.perf_counter()
            for i, t in enumerate(puts):
                s.put(NS, f"p{i}", {"text": t})
            s.search(NS, query=puts[-1], limit=1)
            batch_put = round(len(puts) / (time.perf_counter() - t0), 1)
    ours = results[-1]
    best_put = max(r["put_per_s"] for r in results[:2])
    best_p50 = min(r["search_p50_ms"] for r in results[:2])
    print(json.dumps({
        "bench": "adapters", "quick": args.quick, "items": n, "puts": p, "queries": q, "embedder": base.model_id,
        "eidetica_put_per_s": ours["put_per_s"], "eidetica_search_p50_ms": ours["search_p50_ms"],
        "eidetica_search_p95_ms": ours["search_p95_ms"], "eidetica_put_per_s_fsync_batch": batch_put,
        "inmemory_put_per_s": results[0]["put_per_s"], "inmemory_search_p50_ms": results[0]["search_p50_ms"],
        "sqlite_put_per_s": results[1]["put_per_s"], "sqlite_search_p50_ms": results[1]["search_p50_ms"],
        "best_langgraph_put_per_s": best_put, "best_langgraph_search_p50_ms": best_p50,
        # CPU time of the whole process per put / per query (load-independent; the put's includes the model)
        "eidetica_put_cpu_ms": ours["put_cpu_ms"], "inmemory_put_cpu_ms": results[0]["put_cpu_ms"],
        "sqlite_put_cpu_ms": results[1]["put_cpu_ms"], "eidetica_search_cpu_p50_ms": ours["search_cpu_p50_ms"],
        "inmemory_search_cpu_p50_ms": results[0]["search_cpu_p50_ms"], "sqlite_search_cpu_p50_ms": results[1]["search_cpu_p50_ms"],
        "put_target_met": ours["put_per_s"] >= best_put, "search_target_met": ours["search_p50_ms"] <= best_p50 / 2,
    }))


if __name__ == "__main__":
    main()
