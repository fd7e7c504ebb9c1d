"""The process that holds an embedded store for the stateful test, so the test can SIGKILL it.

argv: store path, face ("sync": ``eidetica.open``; "async": ``AsyncMemory`` over it).
stdin: one JSON request a line, ``{"op", "args"}`` or ``{"many": [[op, args], ...]}`` (run at
once on threads: several clients of one store); stdout: one JSON answer a line, ``{"ok": x}``
or ``{"err": {...}}`` (``model_ops.error_of``). Prints ``READY`` once the store is open.
HashEmbedder(dim=64), the server's ``--model hash-64``: searches for a unique token are
answered by BM25 and by lexical vectors alike, and a crash-restart costs no model load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import eidetica  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402
from tests.support.model_ops import error_of, run  # noqa: E402

_loops = threading.local()


def _resolve(x: object) -> object:
    """An awaitable is run to its end on this thread's own loop (the async face); else returned."""
    if not inspect.isawaitable(x):
        return x
    loop = getattr(_loops, "loop", None)
    if loop is None:
        loop = _loops.loop = asyncio.new_event_loop()
    return loop.run_until_complete(x)


def main() -> None:
    """Open the store, answer requests until stdin closes."""
    path, face = sys.argv[1], sys.argv[2]
    m = eidetica.open(path, embedder=HashEmbedder(dim=64))
    root = eidetica.AsyncMemory(m) if face == "async" else m
    handles: dict[str, object] = {}
    lock = threading.Lock()

    def memory_of(tenant: str) -> object:
        with lock:
            if tenant not in handles:
                handles[tenant] = _resolve(root.for_tenant(tenant))
            return handles[tenant]

    def one(op: str, args: dict) -> dict:
        try:
            return {"ok": run(memory_of, op, args, _resolve)}
        except Exception as e:  # noqa: BLE001 - every error is an answer the test compares
            return {"err": error_of(e)}

    pool = concurrent.futures.ThreadPoolExecutor(8)
    print("READY", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if "many" in req:
            out = {"ok": list(pool.map(lambda r: one(r[0], r[1]), req["many"]))}
        else:
            out = one(req["op"], req["args"])
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        sys.stdout.flush()
    m.close()


if __name__ == "__main__":
    main()
