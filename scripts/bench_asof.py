"""Time travel cost: a search as of a past moment against the same search on the live store.

Builds one store of N messages (``extend`` in batches of 100 over 100 sessions of one user,
HashEmbedder 384-d, offline extraction off so only messages are indexed), then times:
``query_p50_ms`` (a live ``search``), ``asof_recent_p50_ms`` (a search on ``m.as_of(offset)``
at the newest 1% of the log, the handle built once, first query excluded), ``asof_half_first_s``
(building the handle as of half the log back plus its first search) and ``asof_half_p50_ms``
(later searches on it). Targets (issue 35, 100,000 messages): recent <= 3x a live query; half
back: first <= 5 s, later <= 3x. ``--quick``: 10,000 messages. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

WORDS = ("alpha beta gamma delta coffee jazz hiking berlin lisbon cats chess yoga piano tea running kyoto pasta "
         "garden train river market violin novel cheese summer winter").split()
QUERIES = ["coffee in berlin", "piano and chess", "summer hiking trip", "cheese market", "violin novel", "kyoto train"]


def _text(i: int) -> str:
    return f"message {i}: " + " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(14))


def open_store(path):
    """A store of this corpus, opened as every benchmark of it does: HashEmbedder 384-d, no fsync, extraction off."""
    import eidetica
    from eidetica.actors import MemoryConfig
    from eidetica.providers import HashEmbedder

    return eidetica.open(path, embedder=HashEmbedder(384), fsync="never", config=MemoryConfig(auto_extract=False))


def fill(m, n: int) -> None:
    """Write the benchmark corpus: ``n`` messages, ``extend`` in batches of 100 over 100 sessions of user "ada"."""
    for lo in range(0, n, 100):
        m.session(f"s{(lo // 100) % 100}", user="ada").extend(
            [{"role": "user", "content": _text(i)} for i in range(lo, min(lo + 100, n))])


@contextlib.contextmanager
def corpus_store(doc: str):
    """What a benchmark of this corpus measures: (store, messages, seconds it took to write), the store
    sized from the command line (``messages_arg``), in a temporary directory, open and warmed up."""
    n = messages_arg(doc)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        with open_store(Path(d) / "s") as m:
            fill(m, n)
            build_s = time.perf_counter() - t
            m.search("warm up", user="ada")
            yield m, n, build_s


def _p50(m, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        for q in QUERIES:
            t = time.perf_counter()
            m.search(q, user="ada", min_score=0.0)
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def messages_arg(doc: str) -> int:
    """The store's size from the command line: ``--messages N``, 10,000 with ``--quick``, else 100,000."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--messages", type=int, default=None)
    args = ap.parse_args()
    return args.messages or (10_000 if args.quick else 100_000)


def main() -> None:
    """Build, measure, print one JSON line."""
    with corpus_store(__doc__) as (m, n, build_s):
        head = m.log.head(0)
        live = _p50(m)
        with m.as_of(head - 1 - head // 100) as recent:
            recent.search("warm up", user="ada")
            recent_p50 = _p50(recent)
        t = time.perf_counter()
        with m.as_of(head // 2) as half:
            half.search(QUERIES[0], user="ada", min_score=0.0)
            half_first = time.perf_counter() - t
            half_p50 = _p50(half)
    out = {"messages": n, "events": head, "build_s": round(build_s, 1), "query_p50_ms": round(live, 2),
           "asof_recent_p50_ms": round(recent_p50, 2), "asof_half_first_s": round(half_first, 2),
           "asof_half_p50_ms": round(half_p50, 2), "recent_ratio": round(recent_p50 / live, 2),
           "half_ratio": round(half_p50 / live, 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
