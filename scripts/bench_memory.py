"""End-to-end speed through the public API on the embedded runtime with the default embedder.

Measures messages appended per second (embedding and projection included), ``recall``
p50/p95 with 10,000 and 100,000 facts stored, and ``context()`` p50. The stored facts are
bulk-loaded through the log (FactAsserted + ChunksEmbedded events, as an import would) with
precomputed vectors, so the run stays short; every ``recall`` embeds its query with the
default embedder and that time counts. Prints one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
import uuid

import numpy as np
from rich.progress import track

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.events import ChunksEmbedded, FactAsserted, NewEvent
from eidetica.events.streams import facts_stream
from eidetica.providers import HashEmbedder, default_embedder

SUBJECTS = ["coffee", "jazz", "hiking", "Python", "Rust", "sushi", "Berlin", "Lisbon", "cats", "chess", "yoga",
            "the piano", "gardening", "cycling", "sci-fi novels", "tea", "running", "photography", "Kyoto", "pasta"]
VERBS = ["likes", "dislikes", "is learning", "often talks about", "wants to try", "recently started", "is allergic to",
         "grew up with", "plans a trip about", "reads about"]
QUERIES = ["what food does the user like", "which city does the user live in", "hobbies and sports",
           "programming languages", "travel plans", "allergies", "music taste", "pets", "what to cook tonight",
           "books to recommend"]


def fact_text(rng: random.Random, i: int) -> str:
    """A varied short fact."""
    return f"The user {rng.choice(VERBS)} {rng.choice(SUBJECTS)} and {rng.choice(SUBJECTS)} (note {i})"


def bulk_load(m: eidetica.Memory, start: int, count: int, users: int, model_id: str, dim: int) -> None:
    """Append facts with precomputed vectors straight to the log, then project them."""
    rng = random.Random(start)
    hasher = HashEmbedder(dim=dim)
    per_user: dict[int, list[NewEvent]] = {}
    for i in range(start, start + count):
        text = fact_text(rng, i)
        u = i % users
        fid = f"fact-{uuid.UUID(int=rng.getrandbits(128))}"
        vec = hasher.embed([text])
        per_user.setdefault(u, []).extend([
            NewEvent.of(FactAsserted(fact_id=fid, user_id=f"user{u}", content=text, category="general"), tenant=m.tenant),
            NewEvent.of(ChunksEmbedded(model_id=model_id, dim=dim, chunk_ids=[fid], vectors=vec.astype("<f4").tobytes(),
                                       texts=[text], source_id=fid, kind="fact", user_id=f"user{u}", category="general"),
                        tenant=m.tenant),
        ])
    for u, evs in track(per_user.items(), description=f"loading {count:,} facts"):
        for k in range(0, len(evs), 2000):
            m.log.append(facts_stream(m.tenant, f"user{u}"), evs[k : k + 2000])
    t = time.perf_counter()
    m._sync()
    print(f"projected {count:,} facts in {time.perf_counter() - t:.1f} s", flush=True)


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile in milliseconds."""
    return float(np.percentile(np.array(xs) * 1000, p))


def time_calls(fn, args: list) -> list[float]:
    """Seconds per call."""
    out = []
    for a in args:
        t = time.perf_counter()
        fn(a)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    """Run the measurements and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer messages and queries (under 5 minutes)")
    args = ap.parse_args()
    n_msgs = 150 if args.quick else 600
    n_queries = 100 if args.quick else 300
    root = tempfile.mkdtemp(prefix="eidetica-bench-memory-")
    emb = default_embedder()
    emb.embed(["warm up the model"])
    try:
        m = eidetica.open(root, embedder=emb, config=MemoryConfig(auto_extract=False, strategy="sliding_window"))
        s = m.session("bench", user="writer")
        rng = random.Random(1)
        texts = [f"message {i}: {fact_text(rng, i)}. Let's discuss {rng.choice(SUBJECTS)} tomorrow." for i in range(n_msgs)]
        t = time.perf_counter()
        for i, text in enumerate(texts):
            s.append("user" if i % 2 == 0 else "assistant", text)
        m._sync()  # projection included
        append_rate = n_msgs / (time.perf_counter() - t)
        print(f"append: {append_rate:,.1f} messages/s (embed + log + projection)", flush=True)

        users = 100
        bulk_load(m, 0, 10_000, users, emb.model_id, emb.dim)
        qs = [(rng.choice(QUERIES), f"user{rng.randrange(users)}") for _ in range(n_queries)]
        m.recall(*qs[0][:1], user=qs[0][1])
        r10 = time_calls(lambda q: m.recall(q[0], user=q[1]), qs)
        print(f"recall @10k facts: p50 {pct(r10, 50):.1f} ms, p95 {pct(r10, 95):.1f} ms", flush=True)

        bulk_load(m, 10_000, 90_000, users, emb.model_id, emb.dim)
        m.recall(*qs[0][:1], user=qs[0][1])
        r100 = time_calls(lambda q: m.recall(q[0], user=q[1]), qs)
        print(f"recall @100k facts: p50 {pct(r100, 50):.1f} ms, p95 {pct(r100, 95):.1f} ms", flush=True)
        ctx = time_calls(lambda q: m.context(q[0], user=q[1]), qs[: max(50, n_queries // 3)])
        print(f"context @100k facts: p50 {pct(ctx, 50):.1f} ms", flush=True)
        embed_only = time_calls(lambda q: emb.embed([q[0] + " " + str(rng.random())]), qs[:50])
        print(f"(query embedding alone: p50 {pct(embed_only, 50):.1f} ms)", flush=True)
        m.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "append_msgs_per_s": round(append_rate, 1),
        "recall_p50_ms_10k": round(pct(r10, 50), 2),
        "recall_p95_ms_10k": round(pct(r10, 95), 2),
        "recall_p50_ms_100k": round(pct(r100, 50), 2),
        "recall_p95_ms_100k": round(pct(r100, 95), 2),
        "context_p50_ms": round(pct(ctx, 50), 2),
        "query_embed_p50_ms": round(pct(embed_only, 50), 2),
    }))


if __name__ == "__main__":
    main()
