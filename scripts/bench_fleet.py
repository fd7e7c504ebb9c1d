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


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of every live process under ``root`` (the local cluster's raylets, GCS and workers)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    tree, todo = set(), [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        todo.extend(kids)
    return sum(_cpu_s(p) for p in tree)


def read_phase(root: str, agents: int, messages: int, searches: int, embedder: str = "default") -> dict[str, float]:
    """Searches/s and latency of ``agents`` agents (half per node) with 1, then 2 view replicas of one store."""
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from eidetica._fleet import shutdown_store, store_key

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
            def __init__(self, replicas: int, user: str) -> None:
                self.m = eidetica.open(path, runtime="ray", embedder=make_embedder(), config=CONFIG,
                                       views_replicas=replicas)
                self.user = user

            def warm(self) -> None:
                self.m.search("hiking", user=self.user)  # its replica is built and caught up

            def pid(self) -> int:
                return os.getpid()

            def node(self) -> str:
                return ray.get_runtime_context().get_node_id()

            def local(self) -> bool:
                """Whether this agent's first-choice replica runs on its own node."""
                views = self.m.views
                return ray.get(views.handles[views.order[0]].node.remote()) == ray.get_runtime_context().get_node_id()

            def run(self, n: int) -> list[float]:
                lat = []
                for i in range(n):
                    t = time.perf_counter()
                    # distinct questions, as a fleet's are: a repeated one would be answered from the
                    # embedder's cache and measure no embedding at all
                    self.m.search(f"{topics[i % len(topics)]} plans of {self.user}, question {i}", user=self.user)
                    lat.append(time.perf_counter() - t)
                return lat

        for replicas in (1, 2):
            # the replicas are up and caught up before the agents come (as a deployment would start them)
            owner = eidetica.open(path, runtime="ray", embedder=make_embedder(), config=CONFIG, views_replicas=replicas)
            for r in range(replicas):
                owner.views.order = [r]
                owner.search("hiking", user="u0")
            pool = [Agent.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[k % len(nodes)], soft=False))
                    .remote(replicas, f"u{k % users}") for k in range(agents)]
            ray.get([a.warm.remote() for a in pool])
            # CPU seconds per search of each part (load-independent, unlike searches/s on a busy machine)
            named = {n.split(":", 2)[2]: ray.get_actor(n) for n in ray.util.list_named_actors()
                     if n.startswith(f"eidetica:{key_of}:") and n.split(":", 2)[2] in ("log", "embedder", "views", "views:1")}
            pids = {part: ray.get(h.pid.remote()) for part, h in named.items() if hasattr(h, "pid")}
            pids.update({f"agent{k}": ray.get(a.pid.remote()) for k, a in enumerate(pool)})
            status0 = {part: ray.get(h.status.remote()) for part, h in named.items() if part.startswith("views")}
            served0 = {part: st["served"] for part, st in status0.items()}
            cpu0 = {part: _cpu_s(p) for part, p in pids.items()}
            tree0 = _tree_cpu_s(os.getpid())
            t = time.perf_counter()
            lat = np.concatenate(ray.get([a.run.remote(searches) for a in pool]))
            el = time.perf_counter() - t
            used = {part: _cpu_s(p) - cpu0[part] for part, p in pids.items()}
            key = f"{replicas}_replica" + ("s" if replicas > 1 else "")
            n = len(lat)
            for part, before in served0.items():
                st = ray.get(named[part].status.remote())
                done = st["served"] - before
                # where a served search's wall time went inside the replica, ms per search (this round only)
                spent = {k: round((v - status0[part].get("timings", {}).get(k, 0.0)) / max(done, 1) * 1000, 2)
                         for k, v in st.get("timings", {}).items()}
                print(f"  {part} on node {st['node'][:8]}: served {done}, ms per search {spent}", flush=True)
                out[f"served_{part.replace(':', '')}_{key}"] = done
                if done:  # what one search costs the replica that answered it (2 replicas on 2 cores: both busy?)
                    out[f"cpu_ms_per_served_search_{part.replace(':', '')}_{key}"] = round(used[part] / done * 1000, 2)
            for part in ("views", "views:1", "log", "embedder"):
                if part in used:
                    out[f"cpu_ms_per_search_{part.replace(':', '')}_{key}"] = round(used[part] / n * 1000, 2)
            out[f"cpu_ms_per_search_agents_{key}"] = round(sum(v for p, v in used.items() if p.startswith("agent")) / n * 1000, 2)
            out[f"cpu_ms_per_search_cluster_{key}"] = round((_tree_cpu_s(os.getpid()) - tree0) / n * 1000, 2)
            out[f"searches_per_s_{key}"] = round(len(lat) / el, 1)
            out[f"p50_ms_{key}"] = round(float(np.percentile(lat, 50)) * 1000, 1)
            out[f"p95_ms_{key}"] = round(float(np.percentile(lat, 95)) * 1000, 1)
            print(f"read phase, {replicas} replica(s): {out[f'searches_per_s_{key}']:,} searches/s, "
                  f"p50 {out[f'p50_ms_{key}']} ms, p95 {out[f'p95_ms_{key}']} ms", flush=True)
            out[f"agents_reading_their_node_replica_{key}"] = sum(ray.get([a.local.remote() for a in pool]))
            out[f"nodes_with_a_replica_{key}"] = len({r["node"] for r in owner.views.status()})
            out[f"nodes_with_an_agent_{key}"] = len(set(ray.get([a.node.remote() for a in pool])))
            for a in pool:
                ray.kill(a)
            owner.close()
        # one more replica on the worker node, started both ways on the same store
        from eidetica._fleet import ACTOR_OPTIONS, ViewsActor

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
        out["replicas_speedup"] = round(out["searches_per_s_2_replicas"] / out["searches_per_s_1_replica"], 2)
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
    ap.add_argument("--read-embedder", choices=["default", "hash"], default="default",
                    help="the read phase's embedder: the store's default model (what a user gets, default) or the "
                         "cheap hash embedder (searches then cost little inside a replica)")
    args = ap.parse_args()
    agents, messages = (4, 100) if args.quick else (8, 250)
    # 100 searches an agent: rounds of some 20 s, long enough that Ray's start-up noise averages out
    read_messages, searches = (2_000, 10) if args.quick else (20_000, 100)
    import ray

    from eidetica._fleet import shutdown_store

    root = tempfile.mkdtemp(prefix="eidetica-fleet-")
    if args.reads_only:
        try:
            print(json.dumps(read_phase(root, 16, read_messages, searches, args.read_embedder)))
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
        reads = read_phase(root, 16, read_messages, searches, args.read_embedder)
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
