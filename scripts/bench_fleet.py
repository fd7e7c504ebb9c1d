"""Fleet throughput: RayRuntime with batching vs one remote call per message vs LocalRuntime.

Starts a small local Ray cluster on 127.0.0.1 (num_cpus kept small), runs the same
workload three ways, prints progress, and one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

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


def main() -> None:
    """Run the three variants in one process and print the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer agents and messages")
    args = ap.parse_args()
    agents, messages = (4, 100) if args.quick else (8, 250)
    import ray

    from eidetica._fleet import shutdown_store

    ray.init(num_cpus=2, include_dashboard=False, namespace="eidetica", log_to_driver=False)
    root = tempfile.mkdtemp(prefix="eidetica-fleet-")
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
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({
        "ray_batched_events_per_s": round(batched, 1),
        "ray_naive_events_per_s": round(naive, 1),
        "local_events_per_s": round(local, 1),
        "batched_vs_naive": round(batched / naive, 1),
        "agents": agents,
        "messages_per_agent": messages,
    }))


if __name__ == "__main__":
    main()
