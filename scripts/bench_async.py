"""100 concurrent searches: ``connect_async`` from one event loop vs 100 threads on ``connect()``.

Same served store, same queries, same run: a burst of N searches started at once, as tasks on
one loop (no thread per request) and as N threads sharing one sync client (the baseline). Each
side runs ``--rounds`` bursts after a warm-up; reports the median burst's wall time, searches/s,
this process's CPU per search and the threads each side had alive. Progress on stderr, one JSON
object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_server import seed, serve  # scripts/ is the script's directory: its sys.path[0]

import eidetica
from eidetica.cli import make_embedder


def _burst_threads(client: object, queries: list[str]) -> tuple[float, float, int]:
    """One burst on N threads; (wall s, CPU s of this process, threads alive at the peak)."""
    peak = [0]
    start = threading.Barrier(len(queries) + 1)

    def one(q: str) -> None:
        start.wait()
        peak[0] = max(peak[0], threading.active_count())
        client.search(q, user="ada")  # type: ignore[attr-defined]

    with concurrent.futures.ThreadPoolExecutor(len(queries)) as pool:
        futures = [pool.submit(one, q) for q in queries]
        start.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for f in futures:
            f.result()
        return time.perf_counter() - t0, time.process_time() - c0, peak[0]


async def _burst_async(client: object, queries: list[str]) -> tuple[float, float, int]:
    """One burst as N tasks on this loop; (wall s, CPU s of this process, threads alive)."""
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[client.search(q, user="ada") for q in queries])  # type: ignore[attr-defined]
    return time.perf_counter() - t0, time.process_time() - c0, threading.active_count()


def _summary(label: str, bursts: list[tuple[float, float, int]], n: int) -> dict[str, float]:
    wall = statistics.median(b[0] for b in bursts)
    out = {"burst_ms": round(wall * 1000, 1), "searches_per_s": round(n / wall, 1),
           "client_cpu_ms_per_search": round(statistics.median(b[1] for b in bursts) * 1000 / n, 3),
           "threads": max(b[2] for b in bursts)}
    print(f"{label}: {out}", file=sys.stderr, flush=True)
    return out


def main() -> None:
    """Run the benchmark and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default="hash-384", help="the store's embedder (hash-384: the numbers show the client side)")
    args = ap.parse_args()
    n, rounds, n_msgs = args.concurrency, (2 if args.quick else args.rounds), (300 if args.quick else 2000)
    tmp = Path(tempfile.mkdtemp(prefix="bench-async-"))
    store = tmp / "store"
    try:
        m = eidetica.open(store, embedder=make_embedder(args.model))
        queries = seed(m, n_msgs, n)
        m.close()
        server, url = serve(store, args.model)
        try:
            sync_client = eidetica.connect(url)
            _burst_threads(sync_client, queries)  # warm-up: connections, caches
            threads = _summary("threads", [_burst_threads(sync_client, queries) for _ in range(rounds)], n)
            sync_client.close()

            async def run_async() -> dict[str, float]:
                client = await eidetica.connect_async(url)
                await _burst_async(client, queries)
                bursts = [await _burst_async(client, queries) for _ in range(rounds)]
                await client.close()
                return _summary("async", bursts, n)

            aio = asyncio.run(run_async())
        finally:
            server.terminate()
            server.wait(60)
        print(json.dumps({"bench": "async", "concurrency": n, "rounds": rounds, "model": args.model,
                          "async": aio, "threads": threads,
                          "async_vs_threads_speedup": round(threads["burst_ms"] / aio["burst_ms"], 2)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
