"""Scale curve: many users, short chat messages, written through the public API; what each size costs.

One store grows in rounds: every user's session gets ``PER_CALL`` short chat turns per round
(``session(...).extend``), and every fifth user two memories (``remember_many``), each round's
rate counting its indexing (LanceDB + Tantivy caught up inside the timed span); HashEmbedder
384-d, extraction off, ``fsync="never"`` (as the other corpus benchmarks). At each measured
size it records: the ingest rate of the last round, disk size, open time and RSS after open (a
fresh process opens the closed store), a user's ``search`` / ``recall`` / ``context`` p50 and
p95 (sampled users, warmed up), ``compact``, ``as_of`` recent (1% back) and half back (handle
plus first search, then p50), and ``rebuild`` (events/s). ``--quick``: 1,000 users, 10,000
against 100,000 messages; full: 10,000 users, 100k / 300k / 1M. Each size prints a progress
JSON line; the last line is one JSON object comparing the smallest with the largest size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_CALL = 10  # chat turns per extend call: one short exchange
WORDS = ("coffee jazz hiking berlin lisbon cats chess yoga piano tea running kyoto pasta garden train river "
         "market violin novel cheese summer winter bike museum sushi tennis camping paris cooking dogs").split()
QUERIES = ["coffee in berlin", "piano and chess", "summer hiking trip", "cheese market", "violin novel"]


def open_store(path: Path):
    """The store as this benchmark opens it (HashEmbedder 384-d, no fsync, extraction off)."""
    import eidetica
    from eidetica.actors import MemoryConfig
    from eidetica.providers import HashEmbedder

    return eidetica.open(path, embedder=HashEmbedder(384), fsync="never", config=MemoryConfig(auto_extract=False))


def _turn(u: int, r: int, i: int) -> dict:
    words = " ".join(WORDS[(u * 13 + r * 7 + i * 3 + j) % len(WORDS)] for j in range(6))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{words} ({u}.{r}.{i})"}


def write_round(m, users: int, r: int) -> int:
    """One round: PER_CALL turns to each user's session, two memories to every fifth user; returns messages."""
    for u in range(users):
        m.session(f"u{u}-s{r % 5}", user=f"u{u}").extend([_turn(u, r, i) for i in range(PER_CALL)])
        if u % 5 == r % 5:
            m.remember_many([f"u{u} likes {WORDS[(u + r) % len(WORDS)]} round {r}",
                             f"u{u} lives near the {WORDS[(u * 3 + r) % len(WORDS)]}"], user=f"u{u}")
    return users * PER_CALL


def _pcts(times: list[float]) -> tuple[float, float]:
    s = sorted(times)
    return round(statistics.median(s), 2), round(s[min(len(s) - 1, int(len(s) * 0.95))], 2)


def latencies(m, users: int, sample: int = 40) -> dict:
    """search / recall / context p50 and p95 (ms) over sampled users and queries (warm-up excluded)."""
    rng = random.Random(7)
    picks = [f"u{rng.randrange(users)}" for _ in range(sample)]
    out = {}
    for name, call in (("search", lambda q, u: m.search(q, user=u)), ("recall", lambda q, u: m.recall(q, user=u)),
                       ("context", lambda q, u: m.context(q, user=u))):
        call("warm up", picks[0])
        times = []
        for k, u in enumerate(picks):
            t = time.perf_counter()
            call(QUERIES[k % len(QUERIES)], u)
            times.append((time.perf_counter() - t) * 1000)
        out[f"{name}_p50_ms"], out[f"{name}_p95_ms"] = _pcts(times)
    return out


def open_in_fresh_process(path: Path) -> dict:
    """Open time and RSS right after open, in a process that has not touched the store before."""
    code = (f"import sys, time, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_scale as b\n"
            "import eidetica, eidetica.providers, eidetica.actors  # imports are not the open\n"
            "t = time.perf_counter(); m = b.open_store(sys.argv[1]); s = time.perf_counter() - t\n"
            "rss = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')][0] / 1024\n"
            "m.close(); print(json.dumps({'open_s': round(s, 2), 'rss_mib': round(rss)}))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def du_mib(path: Path) -> float:
    """Bytes on disk under ``path`` in MiB."""
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 1)


def timed_as_of(m, offset: int) -> tuple[float, float]:
    """(seconds for the handle and its first search, p50 ms of later searches)."""
    t = time.perf_counter()
    with m.as_of(offset) as past:
        past.search(QUERIES[0], user="u1")
        first = time.perf_counter() - t
        times = []
        for q in QUERIES * 2:
            t1 = time.perf_counter()
            past.search(q, user="u1")
            times.append((time.perf_counter() - t1) * 1000)
    return round(first, 2), round(statistics.median(times), 2)


def measure(path: Path, m, users: int, messages: int, round_rate: float) -> tuple[dict, object]:
    """Everything at one size; returns the figures and the (reopened) store."""
    row: dict = {"messages": messages, "users": users, "ingest_per_s": round(round_rate)}
    m.close()
    row["disk_mib"] = du_mib(path)
    row.update(open_in_fresh_process(path))
    m = open_store(path)
    row.update(latencies(m, users))
    head = m.log.head(0)
    row["asof_recent_first_s"], row["asof_recent_p50_ms"] = timed_as_of(m, head - 1 - head // 100)
    row["asof_half_first_s"], row["asof_half_p50_ms"] = timed_as_of(m, head // 2)
    t = time.perf_counter()
    m.compact()
    row["compact_s"] = round(time.perf_counter() - t, 2)
    events = sum(m.log.head(p) for p in range(m.log.partitions))
    t = time.perf_counter()
    m.rebuild()
    rb = time.perf_counter() - t
    row["rebuild_s"], row["rebuild_events_per_s"] = round(rb, 2), round(events / rb)
    row["events"] = events
    return row, m


def plot(rows: list[dict], path: str) -> None:
    """Latency p50 per call and open time against the message count, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["messages"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for k in ("search", "recall", "context"):
        a.plot(xs, [r[f"{k}_p50_ms"] for r in rows], marker="o", label=f"{k} p50")
    a.set(xscale="log", xlabel="messages", ylabel="ms", title="a user's call, p50")
    a.legend()
    b.plot(xs, [r["open_s"] for r in rows], marker="o", label="open (s)")
    b.plot(xs, [r["rebuild_s"] for r in rows], marker="o", label="rebuild (s)")
    b.plot(xs, [r["compact_s"] for r in rows], marker="o", label="compact (s)")
    b.set(xscale="log", xlabel="messages", ylabel="s", title="whole-store operations")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    """Grow, measure at each size, print progress lines and one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 users, 10,000 vs 100,000 messages")
    ap.add_argument("--sizes", default=None, help="comma-separated message counts (default by mode)")
    ap.add_argument("--users", type=int, default=None)
    ap.add_argument("--dir", default=None, help="where the store grows (default: a temporary directory)")
    ap.add_argument("--plot", default=None, help="write a PNG of the curve here")
    args = ap.parse_args()
    users = args.users or (1_000 if args.quick else 10_000)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [10_000, 100_000] if args.quick else [100_000, 300_000, 1_000_000])
    rows: list[dict] = []
    rates: list[float] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "s"
        m = open_store(path)
        written, r = 0, 0
        for size in sizes:
            while written < size:
                t = time.perf_counter()
                written += write_round(m, users, r)
                m._sync()  # indexed too: the projector lags far behind a bulk writer, and a close leaves it to the next open
                rates.append(users * PER_CALL / (time.perf_counter() - t))
                r += 1
            row, m = measure(path, m, users, written, rates[-1])
            rows.append(row)
            print(json.dumps({"progress": row}), flush=True)
        m.close()
    small, large = rows[0], rows[-1]
    out = {"users": users, "messages_small": small["messages"], "messages_large": large["messages"]}
    for k in ("search", "recall", "context"):
        out[f"{k}_p50_ms_small"], out[f"{k}_p50_ms_large"] = small[f"{k}_p50_ms"], large[f"{k}_p50_ms"]
        out[f"{k}_p50_ratio"] = round(large[f"{k}_p50_ms"] / small[f"{k}_p50_ms"], 2)
    out.update(open_s_large=large["open_s"], rss_mib_large=large["rss_mib"], disk_mib_large=large["disk_mib"],
               ingest_per_s_start=round(rates[0]), ingest_per_s_end=round(rates[-1]),
               ingest_end_vs_start=round(rates[-1] / rates[0], 2),
               rebuild_events_per_s_small=small["rebuild_events_per_s"],
               rebuild_events_per_s_large=large["rebuild_events_per_s"],
               rebuild_ratio=round(large["rebuild_events_per_s"] / small["rebuild_events_per_s"], 2),
               compact_s_large=large["compact_s"], asof_half_first_s_large=large["asof_half_first_s"],
               asof_recent_first_s_large=large["asof_recent_first_s"], sizes=rows)
    if args.plot:
        plot(rows, args.plot)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
