"""What serving adds: search p50 in process vs through HTTP (eidetica.connect), and appends/s
from 1 client vs 16 concurrent clients, on the same store and queries, in one run.

Targets (issue 18): HTTP adds at most 3 ms to search p50; 16 clients reach at least 5x one
client's append rate. Prints progress lines, then one JSON object on the last line.

Appends also report their CPU: ``server_cpu_ms_per_append`` (the server process) and
``client_cpu_ms_per_append`` (this process: every client thread), both over the 16-client
phase, and ``one_client_latency_ms``. Together they bound the speedup any number of clients
can reach on this machine: ``ceiling_speedup = cores * one_client_latency / (server + client CPU
per append)`` (16 clients cannot finish appends faster than the cores can pay for them).

``/metrics`` is scraped every 0.5 s while the HTTP phases run (as Prometheus would); the
``metrics`` field of the JSON line compares the server's ``eidetica_http_requests_total`` for the
search and append routes with what this benchmark sent (``match``: equal).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

import eidetica
from eidetica.cli import make_embedder

TOPICS = ["hiking in the alps", "a sourdough starter", "the quarterly budget", "my sister's wedding", "a new laptop",
          "learning Portuguese", "the dentist appointment", "a jazz concert", "moving to Berlin", "the garden roses"]


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p50(xs: list[float]) -> float:
    """Median, in milliseconds."""
    return round(statistics.median(xs) * 1000, 3)


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CPU: dict[str, list[float]] = {}  # label -> CPU ms per search of each pass (this process + the server's)


def timed_searches(m: object, queries: list[str], rounds: int, label: str = "", server_pid: int | None = None) -> list[float]:
    """Latency of each search (after one warm-up pass); CPU per search goes to CPU[label].

    Wall times on a shared machine stretch with its load; CPU time per search does not, so
    the CPU the HTTP path adds (client + server, minus the in-process search) is reported too.
    """
    for q in queries:  # warm-up: one full unmeasured pass (caches, index files, connections)
        m.search(q, user="ada", min_score=0.0)  # type: ignore[attr-defined]
    out = []
    c0, s0 = time.process_time(), proc_cpu(server_pid) if server_pid else 0.0
    for _ in range(rounds):
        for q in queries:
            t = time.perf_counter()
            m.search(q, user="ada", min_score=0.0)  # type: ignore[attr-defined]
            out.append(time.perf_counter() - t)
    used = time.process_time() - c0 + ((proc_cpu(server_pid) - s0) if server_pid else 0.0)
    if label:
        CPU.setdefault(label, []).append(used * 1000 / len(out))
    return out


APPEND_CPU: dict[int, dict[str, float]] = {}  # clients -> CPU ms per append of the server and of the clients
SEARCH_ROUTE = ("/v1/search", "POST", "200")
APPEND_ROUTE = ("/v1/users/{user}/sessions/{session_id}/messages", "POST", "201")


def requests_counted(url: str) -> dict[tuple[str, str, str], float]:
    """``eidetica_http_requests_total`` of the server by (route, method, status), from /metrics."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {(s.labels["route"], s.labels["method"], s.labels["status"]): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "eidetica_http_requests_total"}


class Scraper(threading.Thread):
    """Scrapes /metrics every ``period`` seconds until stopped, as a Prometheus server would."""

    def __init__(self, url: str, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.url, self.period, self.scrapes, self.failures = url, period, 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.period):
            try:
                requests_counted(self.url)
                self.scrapes += 1
            except (httpx.HTTPError, ValueError, KeyError):
                self.failures += 1


def appends(url: str, clients: int, per_client: int, tag: str, server_pid: int | None = None) -> float:
    """Appends/s with ``clients`` concurrent clients (each its own connection and session).

    CPU time (user + system) of the server process and of this process (all client threads)
    over the timed part, divided by the appends, goes to APPEND_CPU[clients]: unlike the rate,
    it holds on a loaded machine.
    """
    handles = [eidetica.connect(url) for _ in range(clients)]
    sessions = [h.session(f"{tag}-{c}", user=f"writer-{c}") for c, h in enumerate(handles)]
    barrier = threading.Barrier(clients + 1)

    def work(c: int) -> None:
        barrier.wait()
        for i in range(per_client):
            sessions[c].append("user" if i % 2 == 0 else "assistant", f"client {c} turn {i}: {TOPICS[i % 10]} again")

    threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0, c0, s0 = time.perf_counter(), time.process_time(), proc_cpu(server_pid) if server_pid else 0.0
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    n = clients * per_client
    APPEND_CPU[clients] = {"client": (time.process_time() - c0) * 1000 / n,
                           "server": ((proc_cpu(server_pid) - s0) * 1000 / n) if server_pid else 0.0}
    for h in handles:
        h.close()
    return round(clients * per_client / elapsed, 1)


def seed(m: object, n_msgs: int, n_queries: int) -> list[str]:
    """Write ``n_msgs`` messages of user "ada" (sessions of 50); returns ``n_queries`` questions about them."""
    for k in range(n_msgs // 50):
        m.session(f"chat-{k}", user="ada").extend(  # type: ignore[attr-defined]
            [{"role": "user" if i % 2 == 0 else "assistant",
              "content": f"Day {k}: we talked about {TOPICS[(k + i) % 10]} and detail number {i}"} for i in range(50)])
    return [f"what did we say about {TOPICS[i % 10]} on day {i % (n_msgs // 50)}" for i in range(n_queries)]


def serve(store: Path, model: str) -> tuple[subprocess.Popen, str]:
    """``eidetica serve`` on a free loopback port, once /healthz answers; (process, URL)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([str(Path(sys.executable).with_name("eidetica")), "serve", "--path", str(store),
                               "--port", str(port), "--model", model],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return server, url


def main() -> None:
    """Run the benchmark and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--model", default="hash-384",
                    help="embedder of the store: hash-384 (default: cheap, so the numbers show what serving adds, not the model's CPU) or minilm")
    args = ap.parse_args()
    n_msgs, n_queries, rounds = (300, 30, 2) if args.quick else (3000, 100, 3)
    one_n, many_per = (60, 20) if args.quick else (300, 60)
    tmp = Path(tempfile.mkdtemp(prefix="bench-server-"))
    store = tmp / "store"
    try:
        m = eidetica.open(store, embedder=make_embedder(args.model))
        queries = seed(m, n_msgs, n_queries)
        inproc = timed_searches(m, queries, rounds, "inproc")
        m.close()
        print(f"in process (before serving): {len(inproc)} searches, p50 {p50(inproc)} ms", file=sys.stderr, flush=True)

        server, url = serve(store, args.model)
        try:
            before = requests_counted(url)
            scraper = Scraper(url)
            scraper.start()
            client = eidetica.connect(url)
            http = timed_searches(client, queries, rounds, "http", server.pid)
            client.close()
            print(f"through HTTP: {len(http)} searches, p50 {p50(http)} ms", file=sys.stderr, flush=True)
            one = appends(url, 1, one_n, "one", server.pid)
            print(f"1 client: {one} appends/s", file=sys.stderr, flush=True)
            many = appends(url, 16, many_per, "many", server.pid)
            print(f"16 clients: {many} appends/s ({many / one:.1f}x)", file=sys.stderr, flush=True)
            scraper.done.set()
            scraper.join()
            after = requests_counted(url)
            sent = {"searches": len(queries) + len(http), "appends": one_n + 16 * many_per}  # warm-up pass included
            counted = {"searches": after.get(SEARCH_ROUTE, 0) - before.get(SEARCH_ROUTE, 0),
                       "appends": after.get(APPEND_ROUTE, 0) - before.get(APPEND_ROUTE, 0)}
            metrics = {"scrapes": scraper.scrapes, "scrape_failures": scraper.failures,
                       "searches_sent": sent["searches"], "searches_counted": int(counted["searches"]),
                       "appends_sent": sent["appends"], "appends_counted": int(counted["appends"]),
                       "match": sent == counted}
            print(f"/metrics: {metrics}", file=sys.stderr, flush=True)
        finally:
            server.terminate()
            server.wait(60)
        # in process again, on the store as the server left it: the two in-process passes bracket the HTTP one
        with eidetica.open(store, embedder=make_embedder(args.model)) as m:
            again = timed_searches(m, queries, rounds, "inproc")
        print(f"in process (after serving): p50 {p50(again)} ms", file=sys.stderr, flush=True)
        inproc += again
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "bench": "server", "quick": args.quick, "model": args.model, "messages": n_msgs, "searches": len(inproc),
        "inproc_search_p50_ms": p50(inproc), "http_search_p50_ms": p50(http),
        "http_added_ms": round(p50(http) - p50(inproc), 3),
        "inproc_search_cpu_ms": round(statistics.mean(CPU["inproc"]), 3),
        "http_search_cpu_ms": round(statistics.mean(CPU["http"]), 3),
        "http_added_cpu_ms": round(statistics.mean(CPU["http"]) - statistics.mean(CPU["inproc"]), 3),
        "one_client_appends_per_s": one, "sixteen_clients_appends_per_s": many,
        "speedup": round(many / one, 2),
        "one_client_latency_ms": round(1000 / one, 3),
        "server_cpu_ms_per_append": round(APPEND_CPU[16]["server"], 3),
        "client_cpu_ms_per_append": round(APPEND_CPU[16]["client"], 3),
        "one_client_server_cpu_ms_per_append": round(APPEND_CPU[1]["server"], 3),
        "one_client_client_cpu_ms_per_append": round(APPEND_CPU[1]["client"], 3),
        # what 2 cores allow: 16 clients can beat one by at most cores x (one append's wall time / its CPU)
        "ceiling_speedup": round((os.cpu_count() or 1) * (1000 / one) / (APPEND_CPU[16]["server"] + APPEND_CPU[16]["client"]), 2),
        "metrics": metrics,
        "loadavg_1m": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(), "targets_met": p50(http) - p50(inproc) <= 3.0 and many >= 5 * one,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
