"""Targeted mutation testing: each deliberate bug below must make the tests that guard it fail.

For every mutant the source tree (``src``, ``tests``, ``pyproject.toml``) is copied into a
scratch directory, one exact piece of code is replaced there (the working tree is never
touched), and the tests named for it run against the copy (``PYTHONPATH`` puts the copy's
``src`` ahead of the editable install). A mutant is *caught* when pytest reports failing
tests (exit code 1) or hangs past the deadline. First the same tests run on an unmutated
copy: they must pass, or nothing is learnt.

    python scripts/mutants.py              # every mutant, a table, then {"mutants": N, "caught": N}
    python scripts/mutants.py -k fsync     # only mutants whose name contains "fsync"
    python scripts/mutants.py --list       # names only

Not part of ``make test``: ``make mutants`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE = 900.0  # seconds per mutant: past it the mutant counts as caught (the tests hang)


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug: replace ``old`` (exactly one occurrence) by ``new`` in ``path``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


LOG = "src/eidetica/events/log.py"
ARROW = "src/eidetica/events/arrow_log.py"
ENVELOPE = "src/eidetica/events/envelope.py"
INDEX = "src/eidetica/projections/_index.py"
RANKING = "src/eidetica/projections/_ranking.py"
TANTIVY = "src/eidetica/projections/_tantivy.py"
ROWS = "src/eidetica/projections/_rows.py"
CONFIG = "src/eidetica/actors/_config.py"
REBUILD = "src/eidetica/projections/_rebuild.py"

MUTANTS = [
    Mutant("no fdatasync before acknowledging", ARROW,
           '            if self.fsync == "always":\n                os.fdatasync(seg.fd)\n',
           "            pass\n",
           ("tests/events/test_powerloss.py",)),
    Mutant("no idempotency by event id", LOG,
           "                if known_offs:\n", "                if False:\n",
           ("tests/events/test_reliability.py::test_arrow_log_behaves_like_the_reference",)),
    Mutant("no idempotency, single-event path", LOG,
           "                    known = self.ids.get(keys[0], ids.get(keys[0]))\n",
           "                    known = ids.get(keys[0])\n",
           ("tests/events/test_log_conformance.py",)),
    Mutant("no idempotency, multi-event path", LOG,
           "                    if not self.ids.keys().isdisjoint(keys):\n",
           "                    if False:\n",
           ("tests/events/test_log_conformance.py",)),
    Mutant("no idempotency within one commit group", LOG,
           "                if len(requests) > 1:\n                    ids.update(",
           "                if False:\n                    ids.update(",
           ("tests/events/test_group_commit.py::test_the_same_events_queued_in_one_group_are_written_once",)),
    Mutant("a known id with other content taken as a retry", LOG,
           '            if kind != "Redacted" and (kind != ev.type or payload != ev.payload):\n',
           "            if False:\n",
           ("tests/events/test_log_conformance.py",)),
    Mutant("event ids shared between tenants", ENVELOPE,
           '    return int.from_bytes(h.digest(), "big") << 128\n', '    return 0\n',
           ("tests/events/test_log_conformance.py",)),
    Mutant("no expected-version check", LOG,
           "                    raise WrongExpectedVersion(req.stream, exp, actual)\n",
           "                    pass\n",
           ("tests/events/test_log_conformance.py::TestArrowLog",)),
    Mutant("abandoned caller handed the lead", LOG,
           "                req.abandoned = not must_lead\n", "                req.abandoned = False\n",
           ("tests/events/test_group_commit.py",)),
    Mutant("crc ignored", ARROW,
           "        if batch_checksum(batch) != int(meta[_CRC_KEY]):\n",
           "        if False:\n",
           ("tests/events/test_arrow_log.py",)),
    Mutant("last-segment damage treated as a torn tail", ARROW,
           '    """Whether any verifiable batch starts after ``position`` (then the damage is not a torn tail)."""\n',
           '    """Whether any verifiable batch starts after ``position`` (then the damage is not a torn tail)."""\n'
           "    return False\n",
           ("tests/events/test_arrow_log.py",)),
    Mutant("torn-tail over-truncation", ARROW,
           "                self._truncate_tail(path, good_end)\n",
           "                self._truncate_tail(path, max(0, good_end - 1))\n",
           ("tests/events/test_arrow_log.py", "tests/events/test_powerloss.py")),
    Mutant("redaction skipping a hit", ARROW,
           "    hit = [o in wanted for o in offsets]\n",
           "    hit = [o in wanted and o != min(wanted) for o in offsets]\n",
           ("tests/events/test_arrow_log.py::test_redact_removes_payloads_but_keeps_offsets_and_versions",
            "tests/memory/test_reliability.py::test_forgotten_text_is_nowhere_on_disk_after_compact")),
    Mutant("log checkpoint trusted without its digest", ARROW,
           "        if h.hexdigest() != digest:\n", "        if False:\n",
           ("tests/events/test_checkpoint.py::test_damaged_or_stale_checkpoint_is_refused_with_a_warning",)),
    Mutant("no tenant filter in LanceDB", ROWS,
           '        parts = [f"tenant = {sql_str(self.tenant)}"]\n',
           '        parts = ["1 = 1"]\n',
           ("tests/projections/test_tenancy.py", "tests/projections/test_scores.py", "tests/projections/test_index.py")),
    Mutant("no tenant filter in Tantivy", TANTIVY,
           '    clauses: list[tuple[Any, Query]] = [(Occur.Must, _term("tenant", f.tenant))]\n    if f.kinds',
           "    clauses: list[tuple[Any, Query]] = [(Occur.Must, Query.all_query())]\n    if f.kinds",
           ("tests/projections/test_tenancy.py", "tests/projections/test_scores.py", "tests/projections/test_index.py")),
    Mutant("cross-tenant BM25 statistics", TANTIVY,
           '            agg = searcher.aggregate(_term("tenant", tenant), {"s"',
           '            agg = searcher.aggregate(Query.all_query(), {"s"',
           ("tests/projections/test_scores.py::test_another_tenants_data_never_moves_a_score",)),
    Mutant("cross-tenant BM25 document frequency", TANTIVY,
           '            q = Query.boolean_query([(Occur.Must, _term("tenant", tenant)),\n'
           '                                     (Occur.Must, Query.term_query(SCHEMA, "text", term))])\n',
           '            q = Query.term_query(SCHEMA, "text", term)\n',
           ("tests/projections/test_scores.py::test_another_tenants_data_never_moves_a_score",)),
    Mutant("default vector weight 0.7 -> 0.5", RANKING,
           "VECTOR_WEIGHT = 0.7\n", "VECTOR_WEIGHT = 0.5\n",
           ("tests/projections/test_scores.py",)),
    Mutant("fusion weights swapped", RANKING,
           "    return w * np.asarray(v, dtype=np.float64) + (1.0 - w) * np.asarray(t, dtype=np.float64)",
           "    return (1.0 - w) * np.asarray(v, dtype=np.float64) + w * np.asarray(t, dtype=np.float64)",
           ("tests/projections/test_scores.py", "tests/projections/test_ranking.py", "tests/projections/test_index.py")),
    Mutant("forget_user leaves index rows", INDEX,
           '                self._delete(b, Pred(tenant, "user_id", e.user_id, etime, kinds))\n',
           "                pass\n",
           ("tests/memory/test_memory.py::test_forget_user_removes_everything_of_that_user", "tests/projections/test_index.py")),
    Mutant("checkpoint saved before the output", "src/eidetica/projections/_projector.py",
           "                p.apply(evs)\n                ck = dict(self._pos[p.name])\n                ck[part] = last + 1\n"
           "                p.save_checkpoint(ck)",
           "                ck = dict(self._pos[p.name])\n                ck[part] = last + 1\n"
           "                p.save_checkpoint(ck)\n                p.apply(evs)",
           ("tests/projections/test_state.py", "tests/projections/test_index.py")),
    Mutant("summaries without the epoch check", "src/eidetica/actors/summarizer.py",
           "                epoch,  # -1 (NO_STREAM)", "                -2,  # -1 (NO_STREAM)",
           ("tests/memory/test_memory.py::test_summary_race_has_one_winner_per_epoch",)),
    Mutant("reinforce step 0.1 -> 0.2", CONFIG,
           "    reinforce_step: float = 0.1\n", "    reinforce_step: float = 0.2\n",
           ("tests/memory/test_memory.py::test_reinforcement_raises_confidence_capped_at_one",)),
    Mutant("decay factor 0.95 -> 0.9", CONFIG,
           "    decay_factor: float = 0.95\n", "    decay_factor: float = 0.9\n",
           ("tests/memory/test_memory.py::test_decay_and_prune_run_on_the_sweep",)),
    # session 10: the notes, items and schedules actors' snapshots (must equal a full replay)
    Mutant("notes actor: a delete not folded into its snapshot", "src/eidetica/actors/notes.py",
           "            self.notes.discard(note_id)\n", "            pass\n",
           ("tests/actors/test_user_snapshots.py::test_notes_items_schedules_from_snapshot_equal_full_replay",)),
    Mutant("items actor: TTLs left out of its snapshot", "src/eidetica/actors/items.py",
           "        timed = list(self.ttl.items())\n", "        timed = []\n",
           ("tests/actors/test_user_snapshots.py::test_notes_items_schedules_from_snapshot_equal_full_replay",)),
    Mutant("items actor: puts waiting for vectors left out of its snapshot", "src/eidetica/actors/items.py",
           "msgspec.msgpack.encode(list(self.unembedded.values()))", "msgspec.msgpack.encode([])",
           ("tests/actors/test_user_snapshots.py::test_an_item_put_whose_vectors_never_came_is_embedded_on_the_next_start",)),
    Mutant("state: a schedule decoded from its snapshot row not kept", "src/eidetica/projections/_state.py",
           "            x = d[schedule_id] = _schedule_from_row(u, x)\n", "            x = _schedule_from_row(u, x)\n",
           ("tests/actors/test_user_snapshots.py::test_notes_items_schedules_from_snapshot_equal_full_replay",)),
    # session 12: the chunk index's bulk buffer (a rebuild must equal the incremental index)
    Mutant("bulk rebuild: deletes of spilled rows never reach LanceDB", REBUILD,
           "            lance.delete(buf.deletes)\n", "            pass\n",
           ("tests/projections/test_rebuild_bulk.py",)),
    Mutant("bulk rebuild: a deleted row that replaced a spilled one leaves the old one", REBUILD,
           "            lance.delete_keys(buf.gone)\n", "            pass\n",
           ("tests/projections/test_rebuild_bulk.py",)),
    Mutant("bulk rebuild: confidence changes skip buffered rows", REBUILD,
           "                r.confidence = conf\n", "                pass\n",
           ("tests/projections/test_rebuild_bulk.py",)),
]


def _copy_tree(dest: str, root: str = ROOT) -> None:
    """Copy what the tests need (src, tests, pyproject.toml) from ``root`` to ``dest``."""
    for name in ("src", "tests"):
        shutil.copytree(os.path.join(root, name), os.path.join(dest, name),
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"))
    shutil.copy(os.path.join(root, "pyproject.toml"), dest)


def _pytest(copy: str, tests: tuple[str, ...], selection: tuple[str, ...] = ()) -> tuple[str, float, str]:
    """Run ``tests`` in the copy: ('pass' | 'fail' | 'error' | 'hang', seconds, first failing test)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(copy, "src"), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not ray", *selection, *tests]
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        return "hang", time.monotonic() - t0, "(no answer within the deadline)"
    took = time.monotonic() - t0
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out.stdout, re.M)
    first = failed[0].split(" - ")[0] if failed else ""
    if out.returncode == 0:
        return "pass", took, ""
    if out.returncode == 1:
        return "fail", took, first
    return "error", took, first or out.stdout[-300:] + out.stderr[-300:]


def _imports_the_copy(copy: str) -> bool:
    env = dict(os.environ, PYTHONPATH=os.path.join(copy, "src"))
    out = subprocess.run([sys.executable, "-c", "import eidetica; print(eidetica.__file__)"], cwd=copy, env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().startswith(os.path.join(copy, "src"))


def main() -> None:
    """Apply each mutant to a scratch copy, run its tests, print the table and the summary JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only mutants whose name contains this")
    ap.add_argument("--list", action="store_true", help="print the mutants' names and exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip running the tests on the unmutated copy")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if args.k.lower() in m.name.lower()]
    if args.list:
        for m in chosen:
            print(m.name)
        return
    scratch = tempfile.mkdtemp(prefix="eidetica-mutants-")
    rows: list[tuple[str, str, float, str]] = []
    try:
        base = os.path.join(scratch, "base")
        _copy_tree(base)  # one snapshot of the tree; every mutant starts from it
        if not _imports_the_copy(base):
            sys.exit("the copy's src is not imported first: is PYTHONPATH overridden?")
        if not args.no_baseline:
            tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            status, took, first = _pytest(base, tests)
            print(f"baseline (unmutated, {len(tests)} selections): {status} in {took:.0f}s {first}", flush=True)
            if status != "pass":
                sys.exit("the tests fail without any mutant: fix that first")
        for k, m in enumerate(chosen):
            copy = os.path.join(scratch, f"m{k:02d}")
            _copy_tree(copy, base)  # from the snapshot taken at the start: later edits do not leak in
            target = os.path.join(copy, m.path)
            with open(target, encoding="utf-8") as f:
                src = f.read()
            if src.count(m.old) != 1:
                sys.exit(f"mutant {m.name!r}: the code to replace occurs {src.count(m.old)} times in {m.path}")
            with open(target, "w", encoding="utf-8") as f:
                f.write(src.replace(m.old, m.new))
            status, took, first = _pytest(copy, m.tests)
            rows.append((m.name, status, took, first))
            print(f"  {m.name}: {status} ({took:.0f}s) {first}", file=sys.stderr, flush=True)
            shutil.rmtree(copy, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    caught = sum(1 for _, status, _, _ in rows if status in ("fail", "hang"))
    width = max((len(r[0]) for r in rows), default=10)
    print(f"| {'mutant':<{width}} | result        | seconds | caught by")
    print(f"|{'-' * (width + 2)}|---------------|---------|----------")
    for name, status, took, first in rows:
        verdict = {"fail": "caught", "hang": "caught (hang)", "pass": "MISSED", "error": "ERROR"}[status]
        print(f"| {name:<{width}} | {verdict:<13} | {took:7.0f} | {first}")
    print(json.dumps({"mutants": len(rows), "caught": caught}))


if __name__ == "__main__":
    main()
