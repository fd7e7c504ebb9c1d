"""N simulated agents holding conversations at once on Ray, then a consistency check.

    python scripts/fleet_demo.py --agents 8 --messages 100            # a local Ray on 127.0.0.1
    python scripts/fleet_demo.py --address auto --path /shared/store  # a running cluster
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import eidetica  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.events.streams import session_stream  # noqa: E402


def main() -> None:
    """Run the fleet and check that every message arrived exactly once, in order."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--messages", type=int, default=100)
    ap.add_argument("--address", default=None, help="Ray address ('auto' for a running cluster); default: start one here")
    ap.add_argument("--path", default=None, help="store path (shared by all nodes)")
    ap.add_argument("--hash-embedder", action="store_true", help="use the test embedder instead of MiniLM")
    args = ap.parse_args()
    if args.address is None:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep a local cluster on loopback
    import ray

    ray.init(address=args.address, num_cpus=None if args.address else 2, include_dashboard=False, namespace="eidetica", log_to_driver=False)
    path = args.path or tempfile.mkdtemp(prefix="eidetica-fleet-")
    embedder = None
    if args.hash_embedder:
        from eidetica.providers import HashEmbedder

        embedder = HashEmbedder(dim=64)
    cfg = MemoryConfig(strategy="sliding_window")
    mems = [eidetica.open(path, tenant=f"agent{k}", runtime="ray", embedder=embedder, config=cfg) for k in range(args.agents)]

    def agent(k: int) -> None:
        s = mems[k].session("chat", user=f"user{k}", buffer=25)
        for i in range(args.messages):
            text = f"I am agent {k} and my lucky number is {k * 11}" if i == 0 else f"agent {k} message {i}"
            s.append("user" if i % 2 == 0 else "assistant", text)
        s.flush()

    t = time.perf_counter()
    threads = [threading.Thread(target=agent, args=(k,)) for k in range(args.agents)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    el = time.perf_counter() - t
    total = args.agents * args.messages
    print(f"{args.agents} agents x {args.messages} messages = {total} in {el:.1f} s ({total / el:,.0f} msgs/s)")
    ok = True
    for k, m in enumerate(mems):
        evs = m.log.read_stream(session_stream(f"agent{k}", "chat"))
        seqs = [e.decode().sequence for e in evs if e.type == "MessageAppended"]
        if seqs != list(range(args.messages)):
            ok = False
            print(f"agent {k}: sequence broken ({len(seqs)} messages)")
    print("consistency check:", "every message exactly once, in order" if ok else "FAILED")
    for m in mems:
        m.close()
    ray.shutdown()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
