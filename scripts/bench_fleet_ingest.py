"""Fleet ingest: K concurrent agents append chat turns through ``open(runtime="ray")``, with one
embedder for the fleet's writes against two replicas (one per node), on a two-raylet cluster here.

A ``ray.cluster_utils.Cluster`` (head + one worker node, one CPU each) on 127.0.0.1. For each layout
(``embedder_replicas=1``, then ``2``; two view replicas both times) a fresh store; K agents (Ray
tasks pinned alternately to the two nodes) each append T chat turns to their own session, one
``append`` a turn, as an agent does. Reports messages/s per layout, whether the two replicas sit
one per node (``replicas_per_node_ok``), ``lost`` (acknowledged turns missing from their session
afterwards), where the time went (seconds spent embedding inside the replicas, the rest: log,
actors, Ray calls) and each view replica's lag right after the last acknowledgement (folding
keeps up when it is near 0). Default embedder (all-MiniLM-L6-v2). ``--quick``: K=4, T=15.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import ray

TEXTS = ["I moved to Berlin last spring and still miss the sea", "we should plan the kayak trip for June",
         "my sister's wedding is in Lisbon in September", "I started learning the violin again",
         "the new job has a long commute but good coffee", "remind me to call the dentist on Friday"]


@ray.remote(num_cpus=0)
def agent(path: str, k: int, turns: int, replicas: int) -> tuple[str, int, float]:
    """One agent: opens the store, appends ``turns`` chat turns to its session; (node, acknowledged, seconds)."""
    import eidetica

    m = eidetica.open(path, runtime="ray", embedder_replicas=replicas, views_replicas=2)
    try:
        s = m.session(f"agent-{k}", user=f"user-{k}")
        t = time.perf_counter()
        done = 0
        for i in range(turns):
            s.append("user" if i % 2 == 0 else "assistant", f"{TEXTS[(k + i) % len(TEXTS)]} (agent {k}, turn {i})")
            done += 1
        return ray.get_runtime_context().get_node_id(), done, time.perf_counter() - t
    finally:
        m.close()


def on(node_id: str) -> dict:
    """Options that pin a task to a node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


def run(root: Path, nodes: list[str], replicas: int, k: int, turns: int) -> dict:
    """One layout: a fresh store, K agents at once; figures of the run."""
    import eidetica
    from eidetica._ray import shutdown_store, store_key

    path = root / f"store-{replicas}"
    m = eidetica.open(path, runtime="ray", embedder_replicas=replicas, views_replicas=2)
    try:
        m.session("warm", user="warm").append("user", "warm up every replica's model")
        key = store_key(path)
        embedders = [ray.get_actor(n) for n in ray.util.list_named_actors() if n.startswith(f"eidetica:{key}:embedder")]
        before = sum(ray.get(h.status.remote())["embed_s"] for h in embedders)
        t = time.perf_counter()
        got = ray.get([agent.options(**on(nodes[i % len(nodes)])).remote(str(path), i, turns, replicas) for i in range(k)])
        wall = time.perf_counter() - t
        lags = {r["replica"]: r["lag"] for r in m.views.status()}
        rows = [ray.get(h.status.remote()) for h in embedders]
        embed_s = sum(r["embed_s"] for r in rows) - before
        acked = sum(n for _, n, _ in got)
        found = sum(len(m.session(f"agent-{i}", user=f"user-{i}").history()) for i in range(k))
        return {"messages_per_s": round(acked / wall, 2), "wall_s": round(wall, 2), "acknowledged": acked,
                "lost": max(0, acked - found), "replica_nodes": sorted(r["node"] for r in rows),
                "served": {r["replica"]: r["served"] for r in rows},
                "embed_s": round(embed_s, 2), "agent_s": round(sum(s for _, _, s in got), 2),
                "view_lag_after": lags}
    finally:
        m.close()
        shutdown_store(path)


def main() -> None:
    """Start the cluster, run both layouts, print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 agents x 15 turns")
    ap.add_argument("--agents", type=int, default=None)
    ap.add_argument("--turns", type=int, default=None)
    args = ap.parse_args()
    k = args.agents or (4 if args.quick else 8)
    turns = args.turns or (15 if args.quick else 50)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="eidetica", log_to_driver=False)
    try:
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        with tempfile.TemporaryDirectory() as d:
            one = run(Path(d), nodes, 1, k, turns)
            print(json.dumps({"replicas_1": one}), flush=True)
            two = run(Path(d), nodes, 2, k, turns)
            print(json.dumps({"replicas_2": two}), flush=True)
    finally:
        ray.shutdown()
        c.shutdown()
    out = {"agents": k, "turns_per_agent": turns, "messages_per_s_1_replica": one["messages_per_s"],
           "messages_per_s_2_replicas": two["messages_per_s"],
           "speedup_2_vs_1": round(two["messages_per_s"] / one["messages_per_s"], 2),
           "replicas_per_node_ok": two["replica_nodes"] == nodes, "lost": one["lost"] + two["lost"],
           # where the time went: seconds inside the models (summed over replicas) against the wall
           "embed_s_1": one["embed_s"], "wall_s_1": one["wall_s"], "embed_s_2": two["embed_s"], "wall_s_2": two["wall_s"],
           "view_lag_after_1": one["view_lag_after"], "view_lag_after_2": two["view_lag_after"],
           "served_2": two["served"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
