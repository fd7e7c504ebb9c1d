"""Ingest of one long history against the embedder's own batch rate, in the same run.

One LongMemEval-S history (about 48 sessions, ~490 turns; the dev split in ../shared/data)
appended the way an application would, one ``extend`` per session with the session's date,
into a fresh store with the default embedder (no cache); then the same embedder, its cache
cleared, embeds the very chunks the store sent it in batches of ``--batch``: the baseline.
``ratio`` = ingest seconds / embedding seconds (the target is <= 1.25). ``--profile`` prints
where ingest's time goes (cProfile, top functions by cumulative time) to stderr.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_longmemeval import DEFAULT_DATA, load_questions, measure_ingest  # noqa: E402


def pick(path: Path, question: str | None) -> Any:
    """The named question, else the first answerable one whose history is closest to 490 turns."""
    qs = [q for q in load_questions(path) if not q.abstention]
    if question:
        return next(q for q in qs if q.qid == question)
    return min(qs, key=lambda q: (abs(q.n_turns - 490), q.qid))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point: prints the figures and the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="longmemeval_s_dev.json.gz")
    ap.add_argument("--question", default=None, help="a question id (default: the history closest to 490 turns)")
    ap.add_argument("--batch", type=int, default=64, help="the embedder's batch size for the baseline")
    ap.add_argument("--embedder", default="local", choices=("local", "hash"))
    ap.add_argument("--profile", action="store_true", help="cProfile the ingest (slower; stats to stderr)")
    args = ap.parse_args(argv)
    q = pick(Path(args.data), args.question)
    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    out = measure_ingest([q], args.embedder, args.batch)
    if prof:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    ratio = out["ingest_s"] / out["embed_s"] if out["embed_s"] else None
    res = {"bench": "ingest", "question": q.qid, "sessions": len(q.sessions), "turns": out["turns"],
           "chunks": out["chunks"], "ingest_s": out["ingest_s"], "embed_s": out["embed_s"],
           "ingest_turns_per_s": out["ingest_turns_per_s"], "embed_chunks_per_s": out["embed_chunks_per_s"],
           "batch": args.batch, "ratio": round(ratio, 3) if ratio else None, "target": 1.25,
           "wall_s": round(time.perf_counter() - t0, 1), "profiled": bool(prof)}
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
