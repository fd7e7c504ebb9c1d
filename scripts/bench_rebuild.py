"""Cost of ``m.rebuild()`` (a replay of the whole log into empty projections), with and without the
chunk index's in-memory bulk buffer, on one store.

Builds a store of N messages (``extend`` in batches of 100 over 100 sessions of one user,
HashEmbedder 384-d, extraction off: messages and rolling summaries are indexed, each new summary
deleting its predecessor's row), then times ``m.rebuild()`` twice: ``unbuffered_s`` with
``index.bulk_rows = 0`` (every batch written through to LanceDB, and every delete of a row
already written run as a LanceDB statement: what bulk mode did before the buffer) and
``buffered_s`` with the default buffer (rows held in memory, deletes applied there, one streamed
append at the end). Both must leave the same rows (``same_rows``). ``as_of`` folds a log prefix
into a scratch store the same way, so this is its cost too. ``--quick``: 10,000 messages.
Last line: one JSON object.
"""

from __future__ import annotations

import json
import time

from bench_asof import corpus_store  # a sibling script: the same corpus and sizes


def main() -> None:
    """Build, rebuild both ways, print one JSON line."""
    with corpus_store(__doc__) as (m, n, build_s):
        events = sum(m.log.head(p) for p in range(m.log.partitions))
        idx = m.index
        default_rows = idx.bulk_rows
        timings: dict[str, float] = {}
        snaps = {}
        for label, limit in (("unbuffered", 0), ("buffered", default_rows)):
            idx.bulk_rows = limit
            t = time.perf_counter()
            m.rebuild()
            timings[label] = time.perf_counter() - t
            snaps[label] = idx.snapshot()
        idx.bulk_rows = default_rows
        rows = len(snaps["buffered"]["lance"])
        same = snaps["unbuffered"] == snaps["buffered"] and snaps["buffered"]["lance"] == snaps["buffered"]["text"]
    out = {"messages": n, "events": events, "rows": rows, "build_s": round(build_s, 1),
           "unbuffered_s": round(timings["unbuffered"], 2), "buffered_s": round(timings["buffered"], 2),
           "speedup": round(timings["unbuffered"] / timings["buffered"], 2), "same_rows": same}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
