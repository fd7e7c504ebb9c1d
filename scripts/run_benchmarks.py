"""Run every scripts/bench_*.py in full mode and collect their JSON lines."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys


def main() -> None:
    """Run each benchmark, echo its output, and print all results as one JSON object."""
    here = os.path.dirname(os.path.abspath(__file__))
    results = {}
    for script in sorted(glob.glob(os.path.join(here, "bench_*.py"))):
        name = os.path.basename(script)[:-3]
        print(f"== {name}", flush=True)
        out = subprocess.run([sys.executable, script], capture_output=True, text=True)
        sys.stdout.write(out.stdout)
        sys.stderr.write(out.stderr[-2000:])
        last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
        try:
            results[name] = json.loads(last)
        except json.JSONDecodeError:
            results[name] = {"error": last}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
