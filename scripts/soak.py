"""Soak: random runs of the model-based state machine (tests/support/stateful.py) for a given time.

Each run is one hypothesis example on a fresh store, over one face in turn (embedded ``open``,
``AsyncMemory``, ``eidetica serve`` + ``connect``), with crashes (SIGKILL of the process that
holds the store) between steps and during writes. A divergence from the model is shrunk by
hypothesis to a minimal failing sequence and printed as a pytest test to paste.

    python scripts/soak.py --minutes 30        # make soak
    python scripts/soak.py --quick             # <= 5 minutes, >= 3,000 operations, >= 20 crashes

The last line is JSON: operations, crashes, divergences, seeds, minutes (and per face).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import textwrap
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
for k, v in {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
             "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(k, v)

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import seed as hseed  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

from tests.support.stateful import COUNTS, TIMES, machine_for  # noqa: E402

FACES = ("sync", "async", "server")


def as_pytest(face: str, s: int, steps: str) -> str:
    """A failing sequence (hypothesis' ``state = ...`` lines) as a pytest test to paste."""
    body = textwrap.indent(steps.strip(), "    ")
    return (f"def test_soak_divergence_{face}_{s}() -> None:\n"
            f"    from tests.support.stateful import {machine_for(face).__name__}\n\n"
            f"{body}\n")


def one_run(face: str, s: int, steps: int, shrink: bool) -> str | None:
    """One example of ``face``'s machine with seed ``s``; None, or the failing sequence as a pytest test."""
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    cfg = settings(max_examples=2, stateful_step_count=steps, deadline=None, database=None, phases=phases,
                   suppress_health_check=list(HealthCheck), print_blob=False)

    @hseed(s)
    def run() -> None:
        run_state_machine_as_test(machine_for(face), settings=cfg)

    try:
        run()
    except Exception as e:  # noqa: BLE001 - a divergence (or a crash of the harness): reported
        notes = "\n".join(getattr(e, "__notes__", []))
        lines = [ln for ln in notes.splitlines() if ln.startswith("state") or ln.startswith("    ")]
        steps_text = "\n".join(lines) if lines else notes
        msg = "".join(traceback.format_exception_only(type(e), e)).strip()
        return f"# {msg[:2000]}\n" + as_pytest(face, s, steps_text)
    return None


def main() -> None:
    """Run faces in turn until the time is up; print each divergence, then the JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--quick", action="store_true", help="at most 5 minutes (our bar)")
    ap.add_argument("--steps", type=int, default=400, help="steps per run (one fresh store each)")
    ap.add_argument("--faces", default=",".join(FACES))
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    ap.add_argument("--no-shrink", action="store_true")
    args = ap.parse_args()
    minutes = min(args.minutes, 4.5) if args.quick else args.minutes
    faces = [f for f in args.faces.split(",") if f]
    rng = random.Random(args.seed)
    end = time.monotonic() + minutes * 60
    t0 = time.monotonic()
    seeds: list[int] = []
    divergences: list[dict[str, object]] = []
    per_face = {f: {"runs": 0, "operations": 0, "crashes": 0} for f in faces}
    k = 0
    while time.monotonic() < end:
        face = faces[k % len(faces)]
        k += 1
        s = rng.randrange(2**32)
        seeds.append(s)
        before = dict(COUNTS)
        # a run's length follows the time left, so the soak ends near its deadline
        left = end - time.monotonic()
        steps = max(20, min(args.steps, int(left * 3)))
        failed = one_run(face, s, steps, not args.no_shrink)
        per_face[face]["runs"] += 1
        per_face[face]["operations"] += COUNTS["operations"] - before["operations"]
        per_face[face]["crashes"] += COUNTS["crashes"] - before["crashes"]
        print(f"{face} seed={s} steps={steps} ops={COUNTS['operations']} crashes={COUNTS['crashes']} "
              f"{'DIVERGED' if failed else 'ok'} t={time.monotonic() - t0:.0f}s", flush=True)
        if failed:
            divergences.append({"face": face, "seed": s})
            print(failed, flush=True)
    print(json.dumps({"operations": COUNTS["operations"], "crashes": COUNTS["crashes"], "divergences": len(divergences),
                      "seeds": seeds, "minutes": round((time.monotonic() - t0) / 60, 2), "faces": per_face,
                      "diverged": divergences,
                      "op_seconds": {k: [v[0], round(v[1], 1)] for k, v in sorted(TIMES.items(), key=lambda kv: -kv[1][1])}}))
    sys.exit(1 if divergences else 0)


if __name__ == "__main__":
    main()
