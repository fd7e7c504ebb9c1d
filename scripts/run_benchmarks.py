"""`make bench`: run every scripts/bench_*.py in full mode and the LoCoMo dev evaluation, write the report.

Each benchmark runs as its own subprocess; the last line of its stdout is its JSON result.
Results (and each run's exit code, duration and output tail) are saved to
docs/bench/results.json, plots to docs/bench/*.png, and the report to docs/benchmarks/make-bench.md
(BENCHMARKS.md is written by hand: it leads with the results table and links the report).
A benchmark that fails, times out or is missing is reported as such, never filled in.

    python scripts/run_benchmarks.py [--quick] [--only NAME ...] [--skip NAME ...]
    python scripts/run_benchmarks.py --render-only     # rebuild the report from results.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import _report  # noqa: E402  (a sibling helper module)

DOCS = REPO / "docs" / "bench"
RESULTS = DOCS / "results.json"
REPORT = REPO / "docs" / "benchmarks" / "make-bench.md"  # BENCHMARKS.md is the curated lead; it links here
TIMEOUT_S = 3 * 3600  # one benchmark; the LoCoMo evaluation takes the longest


def run_one(name: str, cmd: list[str], timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """Run one benchmark command, echo its output live, and return its record (result or error)."""
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t = time.perf_counter()
    lines: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, cwd=REPO, env=env)
        timer = threading.Timer(timeout, proc.kill)  # the child only: never anything it did not start
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                if lines:
                    print(f"   {lines[-1]}", flush=True)  # the last line is the JSON result: not echoed
                lines.append(line)
            rc = proc.wait()
        finally:
            timed_out = not timer.is_alive() and proc.returncode is not None and proc.returncode < 0
            timer.cancel()
        errf.seek(0)
        err = errf.read()
    if timed_out:
        rc = None
        err += f"\ntimed out after {timeout:.0f} s"
    seconds = round(time.perf_counter() - t, 1)
    lines = [ln for ln in lines if ln.strip()]
    record: dict[str, Any] = {"command": cmd[1:], "returncode": rc, "seconds": seconds,
                              "stdout_tail": lines[-40:-1], "stderr_tail": [ln for ln in err.strip().splitlines() if ln.strip()][-25:]}
    result = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError:
            result = None
    if rc == 0 and isinstance(result, dict):
        record["result"] = result
        print(f"   ok in {seconds} s", flush=True)
    else:
        why = "timed out" if rc is None else f"exit code {rc}" if rc != 0 else "last line is not a JSON object"
        record["error"] = why
        record["stdout_tail"] = lines[-40:]
        if lines and not isinstance(result, dict):
            print(f"   {lines[-1]}", flush=True)
        print(f"   FAILED ({why}) after {seconds} s", flush=True)
        for line in record["stderr_tail"][-10:]:
            print(f"   ! {line}", flush=True)
    return record


def bench_commands(quick: bool) -> dict[str, list[list[str]]]:
    """Every benchmark's command line(s), keyed by name; several lines for multi-size runs."""
    py = sys.executable
    out: dict[str, list[list[str]]] = {}
    for script in sorted(glob.glob(str(HERE / "bench_*.py"))):
        name = Path(script).stem
        args = ["--quick"] if quick else []
        out[name] = [[py, script, *args]]
    if "bench_query" in out:
        out["bench_query"] = _report.bench_query_commands(py, str(HERE / "bench_query.py"), quick)
    return out


def locomo_command(data: Path, quick: bool) -> list[str]:
    """The LoCoMo dev evaluation, all modes and the leave-one-conversation-out check, JSON line only."""
    cmd = [sys.executable, str(HERE / "eval_locomo.py"), "--data", str(data), "--json", "--holdout"]
    if quick:
        cmd += ["--limit-conversations", "1"]
    return cmd


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks (or re-render), write results.json, plots and docs/benchmarks/make-bench.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="each benchmark's --quick mode, one LoCoMo conversation (smoke test)")
    ap.add_argument("--only", nargs="+", default=None, help="run only these (e.g. bench_log eval_locomo); others keep their saved results")
    ap.add_argument("--skip", nargs="+", default=[], help="do not run these")
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "locomo-dev"), help="LoCoMo dev split")
    ap.add_argument("--render-only", action="store_true", help="re-render the report and plots from results.json")
    ap.add_argument("--report", default=str(REPORT), help="where to write the report (default: %(default)s)")
    args = ap.parse_args(argv)
    DOCS.mkdir(parents=True, exist_ok=True)
    saved: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.render_only:
        if not saved:
            print(f"nothing to render: {RESULTS} does not exist", file=sys.stderr)
            return 2
        data = saved
    else:
        data = {"machine": _report.machine(), "quick": args.quick, "benchmarks": dict(saved.get("benchmarks", {}))}
        if args.only and saved.get("machine"):  # a partial re-run: keep the full run's description, note the update
            now = data["machine"]
            data["machine"] = dict(saved["machine"], updated=f"{now['date']}: re-ran {', '.join(args.only)}",
                                   commit=saved["machine"].get("commit", "?"))
            data["quick"] = saved.get("quick", False) or args.quick
        started = time.perf_counter()
        cmds = bench_commands(args.quick)
        names = [*cmds, "eval_locomo"]
        for name in names:
            if name in args.skip or (args.only and name not in args.only):
                continue
            at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            if name == "eval_locomo":
                data_dir = Path(args.data)
                if not data_dir.is_dir() or not any(data_dir.glob("*.json")):
                    data["benchmarks"][name] = {"error": f"LoCoMo data not found at {data_dir}", "returncode": None,
                                                "seconds": 0, "command": [], "stdout_tail": [], "stderr_tail": []}
                    print(f"== eval_locomo: MISSING data at {data_dir}", flush=True)
                else:
                    data["benchmarks"][name] = run_one(name, locomo_command(data_dir, args.quick))
            else:
                runs = [run_one(name if len(cmds[name]) == 1 else f"{name} ({i + 1}/{len(cmds[name])})", c)
                        for i, c in enumerate(cmds[name])]
                data["benchmarks"][name] = runs[0] if len(runs) == 1 else _report.merge_runs(name, runs)
            data["benchmarks"][name].update(at=at, quick=args.quick)
        # Canonical order; a saved result of a script that no longer exists is dropped.
        data["benchmarks"] = {k: data["benchmarks"][k] for k in names if k in data["benchmarks"]}
        data["total_seconds"] = round(time.perf_counter() - started, 1)
        RESULTS.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    plots = _report.make_plots(data, DOCS)
    report = Path(args.report)
    report.write_text(_report.render(data, plots, report.parent), encoding="utf-8")
    print(f"wrote {report.relative_to(REPO) if report.is_relative_to(REPO) else report}, "
          f"{len(plots)} plots in {DOCS.relative_to(REPO)}", flush=True)
    failed = sorted(k for k, v in data["benchmarks"].items() if "error" in v)
    summary = {k: ("failed: " + v["error"]) if "error" in v else "ok" for k, v in data["benchmarks"].items()}
    print(json.dumps({"benchmarks": summary, "failed": failed, "report": str(report), "at": dt.datetime.now().isoformat(timespec="seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
