"""Cost of the erasure receipt: ``compact()`` with its receipt against the compaction it wraps, on one store.

Builds a store of N messages (``extend`` in batches of 100 over 100 sessions of one user,
HashEmbedder 384-d, extraction off), forgets one message in each of 50 sessions
(``forget_message``), copies the store, then times on one copy the bare compaction (plan,
log redaction, fresh indices: what ``compact`` did before the receipt) and on the other
``m.compact()`` (the same plus the receipt: forgotten texts, a scan of every file and of both
engines' rows). Target (issue 35, 100,000 messages): within 2x. ``--quick``: 10,000 messages.
Last line: one JSON object.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from bench_asof import fill, messages_arg, open_store  # a sibling script: the same corpus and sizes


def main() -> None:
    """Build, measure both, print one JSON line."""
    n = messages_arg(__doc__)
    from eidetica._store.compaction import plan_compaction

    d = Path(tempfile.mkdtemp())

    def store(name: str):
        return open_store(d / name)

    try:
        with store("a") as m:
            fill(m, n)
            for k in range(min(50, n // 100)):  # one message in each of (up to) 50 sessions
                m.session(f"s{k}", user="ada").forget_message(5)
        shutil.copytree(d / "a", d / "b")
        with store("a") as m:  # the baseline: compact as it was before the receipt
            t = time.perf_counter()
            m._sync()
            m.actor_snapshots.clear()
            with m._qlock:
                redact, _ = plan_compaction(m.log)
                m.log.redact(redact)
                m.views.fresh(m.embedder)
            m.runtime.close()
            m.actor_snapshots.clear()
            bare = time.perf_counter() - t
        with store("b") as m:
            t = time.perf_counter()
            receipt = m.compact()
            full = time.perf_counter() - t
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps({"messages": n, "compact_s": round(bare, 2), "compact_receipt_s": round(full, 2),
                      "ratio": round(full / bare, 2), "verified": receipt["verified"],
                      "forgotten_texts": receipt["forgotten"]["texts"]}))


if __name__ == "__main__":
    main()
