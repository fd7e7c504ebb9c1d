"""Fleet throughput: RayRuntime with batching vs one remote call per message vs LocalRuntime,
then reads: 16 agents spread over two nodes searching one store with 1 and with 2 view replicas.

Starts a small local Ray cluster on 127.0.0.1 (num_cpus kept small), runs the same
workload three ways, then a two-node ``ray.cluster_utils.Cluster`` (one CPU each) for the read
phase, prints progress, and one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import eidetica  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402

CONFIG = MemoryConfig(auto_extract=False, strategy="sliding_window")


def workload(path: str, runtime: str, agents: int, messages: int, buffer: int) -> float:
    """Agents in threads, each holding one conversation; returns messages per second."""
    mems = [eidetica.open(path, tenant=f"a{k}", runtime=runtime, embedder=HashEmbedder(dim=64), config=CONFIG)
            for k in range(agents)] if runtime == "ray" else None
    local = eidetica.open(path, runtime="local", embedder=HashEmbedder(dim=64), config=CONFIG) if runtime == "local" else None

    def agent(k: int) -> None:
        m = mems[k] if mems else local
        s = m.session(f"s{k}", user=f"u{k}", buffer=buffer)
        for i in range(messages):
            s.append("user" if i % 2 == 0 else "assistant", f"agent {k} says message number {i}")
        s.flush()

    # warm up: create the actors before the clock starts
    for k in range(agents):
        (mems[k] if mems else local).session(f"s{k}", user=f"u{k}")
    ts = [threading.Thread(target=agent, args=(k,)) for k in range(agents)]
    t = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    el = time.perf_counter() - t
    for m in mems or [local]:
        m.close()
    return agents * messages / el


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process used so far, from /proc (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree(root: int) -> set[int]:
    """``root`` and every live process under it (the local cluster: GCS, raylets, workers)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    tree, todo = {root}, [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        todo.extend(kids)
    return tree


def _label(pid: int, known: dict[int, str]) -> str:
    """What a process of the cluster is: one of ours by pid, else by its command (raylet, gcs_server, ...)."""
    if pid in known:
        return known[pid]
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if comm in ("raylet", "gcs_server"):
        return comm
    if "default_worker.py" in cmd or comm.startswith("ray::"):
        return "ray_workers_other"  # idle pooled workers, other actors of the store
    return "ray_other"  # dashboard agents, log monitors, runtime-env agents, ...


def _cpu_by_process(root: int) -> dict[int, float]:
    """CPU seconds so far of every process of the tree under ``root`` (``root`` included)."""
    return {p: _cpu_s(p) for p in _tree(root)}


def _tasks(pid: int) -> Iterator[tuple[str, list[str]]]:
    """A live process's threads: (name with digits dropped, so one pool is one name; /proc stat fields after it)."""
    import re

    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        yield re.sub(r"[\d_-]+$", "", raw[raw.index("(") + 1:raw.rindex(")")]) or "?", raw.rsplit(")", 1)[1].split()


def _cpu_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds so far of a process's threads, summed by thread name."""
    out: dict[str, float] = {}
    for name, fields in _tasks(pid):
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _threads(pid: int) -> dict[str, int]:
    """Threads of a live process, counted by name."""
    out: dict[str, int] = {}
    for name, _ in _tasks(pid):
        out[name] = out.get(name, 0) + 1
    return out


def read_phase(root: str, agents: int, messages: int, seconds: float, embedder: str = "default",
               rounds: int = 4, replica_start: str = "copy") -> dict[str, Any]:
    """Searches/s and latency of ``agents`` agents (half per node) with 1 and 2 view replicas of one store.

    ``rounds`` alternate 1, 2, 1, 2, ... replicas on the same store with the same agents (each holds
    a handle of each kind), so load from outside the benchmark hits both alike; the speedup is the
    median over the (1, 2) pairs, and every round is reported. A round lasts ``seconds``: every agent
    searches until the same deadline (a fixed number of searches per agent would end a round with
    the agents of the faster replica idle, waiting for the slower one's). CPU seconds per search are read per
    process from /proc (load-independent) and grouped by part: replicas, agents, log, embedder,
    driver, raylets, GCS, other Ray processes.
    """
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from eidetica._ray import shutdown_store, store_key

    os.environ.pop("RAY_ADDRESS", None)  # our own cluster, never another one running on the machine
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, namespace="eidetica", log_to_driver=False)
    path = os.path.join(root, "reads")
    out: dict[str, float] = {}

    def make_embedder() -> Any:
        """The store's default embedder (MiniLM, what a user gets) or the cheap hash one (--read-embedder hash)."""
        return HashEmbedder(dim=64) if embedder == "hash" else None
    try:
        users = 16
        m = eidetica.open(path, runtime="ray", embedder=make_embedder(), config=CONFIG)
        topics = ["hiking", "cooking", "chess", "guitar", "gardening", "kayak", "paris", "budget"]
        for u in range(users):
            s = m.session(f"s{u}", user=f"u{u}", buffer=250)
            for i in range(messages // users):
                s.append("user" if i % 2 == 0 else "assistant",
                         f"user {u} talks about {topics[i % len(topics)]} and {topics[(i * 3) % len(topics)]}, note {i}")
            s.flush()
        m.close()
        print(f"read phase: {messages:,} messages written", flush=True)
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        key_of = store_key(path)

        @ray.remote(num_cpus=0)
        class Agent:
            def __init__(self, user: str, k: int) -> None:
                self.k = k
                # one handle per layout: rounds alternate between them in the same processes
                self.ms = {r: eidetica.open(path, runtime="ray", embedder=make_embedder(), config=CONFIG,
                                            views_replicas=r) for r in (1, 2)}
                self.user = user
                self.asked = 0

            def warm(self) -> None:
                for m in self.ms.values():
                    m.search("hiking", user=self.user)  # its replica is built and caught up

            def pid(self) -> int:
                return os.getpid()

            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

            def local(self, replicas: int) -> bool:
                """Whether this agent's first-choice replica runs on its own node."""
                views = self.ms[replicas].views
                return ray.get(views.handles[views.order[0]].node.remote()) == ray.get_runtime_context().get_node_id()

            def run(self, replicas: int, start: float, until: float) -> list[float]:
                """Search from ``start`` to the wall-clock deadline; the latencies of the searches that ended before it."""
                m, lat = self.ms[replicas], []
                time.sleep(max(0.0, start - time.time()))  # every agent starts at once
                while True:
                    i = self.asked
                    self.asked += 1
                    t = time.perf_counter()
                    # distinct questions, as a fleet's are: a repeated one would be answered from the
                    # embedder's cache and measure no embedding at all (the user's own name leaves the
                    # query before it is embedded, so the number alone must differ between agents)
                    m.search(f"{topics[i % len(topics)]} plans of {self.user}, question {self.k * 1_000_000 + i}",
                             user=self.user)
                    if time.time() > until:
                        return lat
                    lat.append(time.perf_counter() - t)

        # the replicas are up and caught up before the agents come (as a deployment would start them)
        owner = eidetica.open(path, runtime="ray", embedder=make_embedder(), config=CONFIG, views_replicas=2,
                              replica_start=replica_start)
        for r in range(2):
            owner.views.order = [r]
            owner.search("hiking", user="u0")
        pool = [Agent.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[k % len(nodes)], soft=False))
                .remote(f"u{k % users}", k) for k in range(agents)]
        ray.get([a.warm.remote() for a in pool])
        named = {n.split(":", 2)[2]: ray.get_actor(n) for n in ray.util.list_named_actors()
                 if n.startswith(f"eidetica:{key_of}:") and n.split(":", 2)[2] in ("log", "embedder", "views", "views:1")}
        known = {ray.get(h.pid.remote()): part.replace(":", "") for part, h in named.items()}
        agent_pids = ray.get([a.pid.remote() for a in pool])
        known.update({p: "agents" for p in agent_pids})
        known[os.getpid()] = "driver"
        replica_pids = {part: p for p, part in known.items() if part.startswith("views")}
        out["replica_threads"] = {part: _threads(p) for part, p in replica_pids.items()}  # type: ignore[assignment]
        out["agent_nodes"] = len(set(ray.get([a.node.remote() for a in pool])))
        parts = ["views", "views1", "agents", "log", "embedder", "driver", "raylet", "gcs_server",
                 "ray_workers_other", "ray_other"]
        totals: dict[int, dict[str, Any]] = {r: {"lat": [], "el": 0.0, "cpu": {}, "served": {}, "timings": {}, "threads": {}}
                                             for r in (1, 2)}
        per_round = []
        for rnd in range(rounds):
            replicas = 1 if rnd % 2 == 0 else 2
            tot = totals[replicas]
            status0 = {part: ray.get(h.status.remote()) for part, h in named.items() if part.startswith("views")}
            cpu0 = _cpu_by_process(os.getpid())
            threads0 = {part: _cpu_by_thread(p) for part, p in replica_pids.items()}
            start = time.time() + 0.5  # the calls reach every agent before the round starts
            until = start + seconds
            lat = np.concatenate(ray.get([a.run.remote(replicas, start, until) for a in pool]))
            el = seconds  # the round: from start to the deadline
            cpu1 = _cpu_by_process(os.getpid())
            for part, p in replica_pids.items():  # inside each replica: which threads spent its CPU
                by = tot["threads"].setdefault(part, {})
                for name, c in _cpu_by_thread(p).items():
                    by[name] = by.get(name, 0.0) + c - threads0[part].get(name, 0.0)
            used: dict[str, float] = {}
            for pid, c in cpu1.items():
                label = _label(pid, known)
                used[label] = used.get(label, 0.0) + c - cpu0.get(pid, 0.0)
            for label, v in used.items():
                tot["cpu"][label] = tot["cpu"].get(label, 0.0) + v
            for part, st0 in status0.items():
                st = ray.get(named[part].status.remote())
                label = part.replace(":", "")
                tot["served"][label] = tot["served"].get(label, 0) + st["served"] - st0["served"]
                for k, v in st.get("timings", {}).items():
                    tot["timings"].setdefault(label, {})
                    tot["timings"][label][k] = tot["timings"][label].get(k, 0.0) + v - st0.get("timings", {}).get(k, 0.0)
            tot["lat"].append(lat)
            tot["el"] += el
            rate = round(len(lat) / el, 1)
            busy = {label: round(used.get(label, 0.0) / el, 2) for label in ("views", "views1")}
            per_round.append({"replicas": replicas, "searches_per_s": rate,
                              "cluster_cpu_ms_per_search": round(sum(used.values()) / len(lat) * 1000, 2),
                              "replica_cores_busy": busy})
            print(f"read round {rnd + 1}/{rounds}, {replicas} replica(s): {rate:,} searches/s, p50 "
                  f"{np.percentile(lat, 50) * 1000:.1f} ms, replicas busy {busy} cores, load {os.getloadavg()[0]:.1f}",
                  flush=True)
        out["replica_threads_after"] = {part: _threads(p) for part, p in replica_pids.items()}  # type: ignore[assignment]
        for replicas, tot in totals.items():
            key = f"{replicas}_replica" + ("s" if replicas > 1 else "")
            lat = np.concatenate(tot["lat"])
            n = len(lat)
            for label, done in tot["served"].items():
                out[f"served_{label}_{key}"] = done
                if done:  # what one search costs the replica that answered it
                    out[f"cpu_ms_per_served_search_{label}_{key}"] = round(tot["cpu"].get(label, 0.0) / done * 1000, 2)
                    spent = {k: round(v / done * 1000, 2) for k, v in tot["timings"].get(label, {}).items()}
                    # CPU ms per served search by thread name, the biggest first
                    by = sorted(tot["threads"].get(label, {}).items(), key=lambda kv: -kv[1])
                    out[f"cpu_ms_per_served_search_by_thread_{label}_{key}"] = {  # type: ignore[assignment]
                        name: round(v / done * 1000, 2) for name, v in by if v / done * 1000 >= 0.05}
                    print(f"  {label}, {replicas} replica(s): served {done}, ms per search {spent}", flush=True)
            for label in parts:  # where one search's CPU goes, process by process
                out[f"cpu_ms_per_search_{label}_{key}"] = round(tot["cpu"].get(label, 0.0) / n * 1000, 2)
            out[f"cpu_ms_per_search_cluster_{key}"] = round(sum(tot["cpu"].values()) / n * 1000, 2)
            out[f"cpu_ms_per_search_outside_replicas_{key}"] = round(
                sum(v for k, v in tot["cpu"].items() if not k.startswith("views")) / n * 1000, 2)
            out[f"searches_per_s_{key}"] = round(n / tot["el"], 1)
            out[f"p50_ms_{key}"] = round(float(np.percentile(lat, 50)) * 1000, 1)
            out[f"p95_ms_{key}"] = round(float(np.percentile(lat, 95)) * 1000, 1)
            out[f"agents_reading_their_node_replica_{key}"] = sum(ray.get([a.local.remote(replicas) for a in pool]))
            out[f"nodes_with_a_replica_{key}"] = len({r["node"] for r in owner.views.status()[:replicas]})
            print(f"read phase, {replicas} replica(s): {out[f'searches_per_s_{key}']:,} searches/s, "
                  f"p50 {out[f'p50_ms_{key}']} ms, p95 {out[f'p95_ms_{key}']} ms", flush=True)
        ratios = [per_round[i + 1]["searches_per_s"] / per_round[i]["searches_per_s"]
                  for i in range(0, len(per_round) - 1, 2)]
        out["replicas_speedup"] = round(float(np.median(ratios)), 2)  # median over the (1, 2) pairs
        out["replicas_speedup_per_pair"] = [round(r, 2) for r in ratios]  # type: ignore[assignment]
        out["read_rounds"] = per_round  # type: ignore[assignment]
        for a in pool:
            ray.kill(a)
        owner.close()
        # one more replica on the worker node, started both ways on the same store
        from eidetica._ray import ACTOR_OPTIONS, ViewsActor

        log_h, emb_h = ray.get_actor(f"eidetica:{key_of}:log"), ray.get_actor(f"eidetica:{key_of}:embedder")
        donor = ray.get_actor(f"eidetica:{key_of}:views")
        for how in ("replay", "copy"):
            t = time.perf_counter()
            extra = ViewsActor.options(
                name=f"eidetica:{key_of}:views:{how}", **ACTOR_OPTIONS,
                scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[-1], soft=False),
            ).remote(os.path.join(path, "replicas", how), log_h, emb_h, f"views:{how}", HashEmbedder(dim=64),
                     donor if how == "copy" else None)
            started = ray.get(extra.status.remote())["started"]
            assert started["how"] == how, started
            out[f"replica_start_{how}_s"] = started["seconds"]  # inside the actor: fold or copy + tail
            out[f"replica_start_{how}_wall_s"] = round(time.perf_counter() - t, 2)  # with the process start
            ray.kill(extra)
            print(f"a new replica by {how}: {started['seconds']} s", flush=True)
        def du(d: str) -> int:
            return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)

        out["replica_disk_bytes"] = du(os.path.join(path, "replicas", "1"))  # what one more replica costs
        out["log_disk_bytes"] = du(os.path.join(path, "log"))
        out["read_agents"] = agents
        out["read_messages"] = messages
        out["read_embedder"] = embedder  # type: ignore[assignment]
        shutdown_store(path)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


def main() -> None:
    """Run the three variants in one process and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer agents and messages")
    ap.add_argument("--reads-only", action="store_true", help="only the read phase (replicas)")
    ap.add_argument("--read-rounds", type=int, default=4,
                    help="read rounds, alternating 1 and 2 replicas (even: every 1-replica round has its 2-replica pair)")
    ap.add_argument("--replica-start", choices=["copy", "replay"], default="copy",
                    help="how the read phase's second replica starts")
    ap.add_argument("--read-embedder", choices=["default", "hash"], default="default",
                    help="the read phase's embedder: the store's default model (what a user gets, default) or the "
                         "cheap hash embedder (searches then cost little inside a replica)")
    args = ap.parse_args()
    agents, messages = (4, 100) if args.quick else (8, 250)
    # rounds of 15 s (4 quick), long enough that Ray's start-up noise averages out
    read_messages, seconds = (2_000, 4.0) if args.quick else (20_000, 15.0)
    import ray

    from eidetica._ray import shutdown_store

    root = tempfile.mkdtemp(prefix="eidetica-fleet-")
    if args.reads_only:
        try:
            print(json.dumps(read_phase(root, 16, read_messages, seconds, args.read_embedder, args.read_rounds,
                                        args.replica_start)))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=2, include_dashboard=False, namespace="eidetica", log_to_driver=False)
    try:
        batched = workload(os.path.join(root, "batched"), "ray", agents, messages, buffer=50)
        shutdown_store(os.path.join(root, "batched"))
        print(f"ray, batched (buffer 50): {batched:,.0f} msgs/s", flush=True)
        naive = workload(os.path.join(root, "naive"), "ray", agents, max(20, messages // 5), buffer=0)
        shutdown_store(os.path.join(root, "naive"))
        print(f"ray, one remote call per message: {naive:,.0f} msgs/s", flush=True)
        local = workload(os.path.join(root, "local"), "local", agents, messages, buffer=50)
        print(f"local runtime: {local:,.0f} msgs/s", flush=True)
    finally:
        ray.shutdown()
    try:
        reads = read_phase(root, 16, read_messages, seconds, args.read_embedder, args.read_rounds, args.replica_start)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "ray_batched_events_per_s": round(batched, 1),
        "ray_naive_events_per_s": round(naive, 1),
        "local_events_per_s": round(local, 1),
        "batched_vs_naive": round(batched / naive, 1),
        "agents": agents,
        "messages_per_agent": messages,
        **reads,
    }))


if __name__ == "__main__":
    main()
