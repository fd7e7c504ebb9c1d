"""Crash test: SIGKILL a process that projects an ArrowLog into a ChunkIndex, again and again.

The child is this file run as a script (``python tests/projections/test_crash.py child ...``),
started with subprocess (spawn, never fork: lancedb). On restart it resumes from its
checkpoint; at the end its rows must equal a clean rebuild's, with no duplicates.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

if __package__:
    from tests.contracts.projection import DIM, Workload
else:  # run as the crash child: the repository root (three levels up) holds the tests package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tests.contracts.projection import DIM, Workload

from eidetica.events import ArrowLog
from eidetica.projections import ChunkIndex, Projector

pytestmark = [pytest.mark.slow, pytest.mark.crash]
ANN_THRESHOLD = 120


def child(log_path: str, idx_path: str, seed: int, compact: bool, rebuild: bool = False) -> None:
    """Project the log (small batches, ANN and optimize along the way) or rebuild it, maybe compact, report."""
    rng = random.Random(seed)
    log = ArrowLog(log_path, readonly=True)
    idx = ChunkIndex(idx_path, dim=DIM, ann_threshold=ANN_THRESHOLD, optimize_every=rng.randint(2, 6))
    pj = Projector(log, [idx], batch_size=rng.randint(3, 25))
    print("READY", idx.count(), flush=True)
    if rebuild:
        idx.bulk_rows = rng.choice([0, 5, idx.bulk_rows])  # spilled along the way, or held to the end
        pj.rebuild()
    else:
        pj.catch_up()
    pj.maintain(force=True)
    if compact:
        idx.compact()
    print("DONE", idx.count(), flush=True)
    idx.close()
    log.close()


def child_reset_killed(log_path: str, idx_path: str) -> None:
    """Project the whole log, then die inside ``reset()`` after LanceDB was dropped, before Tantivy was."""
    from eidetica.projections import _tantivy

    log = ArrowLog(log_path, readonly=True)
    idx = ChunkIndex(idx_path, dim=DIM, ann_threshold=ANN_THRESHOLD)
    Projector(log, [idx], batch_size=7).catch_up()
    print("READY", idx.count(), flush=True)
    _tantivy.TantivyChunks.reset = lambda self: os._exit(9)  # a SIGKILL at exactly this point
    idx.reset()


def _run(args: list[str], kill_after: float | None, entry: str = "child") -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), entry, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("READY"), first
    if kill_after is not None:
        time.sleep(kill_after)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    out = first + proc.stdout.read()
    proc.wait()
    return out


def assert_equals_clean_rebuild(tmp_path, w: Workload, *, min_rows: int, queries: int, seed: int) -> None:
    """The index a killed-and-restarted child left at tmp_path/idx equals a clean rebuild of tmp_path/log.

    Checkpoint at the log's head, no duplicate rows, both engines holding the same rows as
    the rebuild, and the same search results.
    """
    with ArrowLog(str(tmp_path / "log"), readonly=True) as log:
        recovered = ChunkIndex(str(tmp_path / "idx"), dim=DIM, ann_threshold=ANN_THRESHOLD)
        clean = ChunkIndex(tmp_path / "clean", dim=DIM, ann_threshold=ANN_THRESHOLD)
        try:
            assert recovered.checkpoint() == {p: log.head(p) for p in range(log.partitions) if log.head(p)}
            Projector(log, [clean]).rebuild()
            a, b = recovered.snapshot(), clean.snapshot()
            assert a["lance_duplicates"] == 0 and a["text_duplicates"] == 0
            assert a["lance"] == a["text"], "the two engines diverged"
            assert a["lance"] == b["lance"] and len(a["lance"]) > min_rows
            for q in w.queries(queries, seed=seed):
                assert [h.id for h in recovered.search(**q)] == [h.id for h in clean.search(**q)]
        finally:
            recovered.close()
            clean.close()


def test_sigkill_while_projecting_converges_to_a_clean_rebuild(tmp_path) -> None:
    log_path, idx_path = str(tmp_path / "log"), str(tmp_path / "idx")
    w = Workload(seed=31, users=3, sessions=2, messages=5)
    cuts = [0, len(w.appends) // 3, 2 * len(w.appends) // 3, len(w.appends)]
    rng = random.Random(2026)
    killed = 0
    rounds = 10
    rnd = 0
    window = 0.7
    # at least `rounds` rounds, and more (up to 40) until half that many kills landed
    # mid-work: how fast a child finishes depends on the machine's load
    while rnd < rounds or (killed < rounds // 2 and rnd < 40):
        part = min(rnd // 4, 2)
        if rnd in (0, 4, 8):  # the log grows between some rounds, as a live store's would
            with ArrowLog(log_path, partitions=2) as log:
                w.append_to(log, cuts[part], cuts[part + 1])
        out = _run([log_path, idx_path, str(rnd), str(int(rng.random() < 0.3))], kill_after=rng.uniform(0.0, window))
        if "DONE" in out:
            window = max(0.05, window * 0.7)  # the child was faster than the kill: aim earlier
        else:
            killed += 1
        rnd += 1
    assert killed >= rounds // 2, "the kills should mostly land mid-work"
    out = _run([log_path, idx_path, "99", "0"], kill_after=None)  # let it finish
    assert "DONE" in out

    assert_equals_clean_rebuild(tmp_path, w, min_rows=100, queries=40, seed=3)


def test_sigkill_during_rebuild_then_restart_converges(tmp_path) -> None:
    """Kill rebuilds midway (bulk mode: one streamed append, Tantivy built at the end): a
    restart finds either the finished rebuild or an empty index, never a half-loaded one,
    and catching up from there ends equal to a clean rebuild."""
    log_path, idx_path = str(tmp_path / "log"), str(tmp_path / "idx")
    w = Workload(seed=37, users=3, sessions=3, messages=6)
    with ArrowLog(log_path, partitions=2) as log:
        w.append_to(log)
    rng = random.Random(7)
    killed = rnd = 0
    window = 1.0
    while rnd < 8 or (killed < 4 and rnd < 30):
        out = _run([log_path, idx_path, str(rnd), "0", "1"], kill_after=rng.uniform(0.0, window))
        if "DONE" in out:
            window = max(0.05, window * 0.7)
        else:
            killed += 1
        rnd += 1
        # what the next process finds: all or nothing, and a checkpoint that says which
        with ArrowLog(log_path, readonly=True) as log:
            idx = ChunkIndex(idx_path, dim=DIM, ann_threshold=ANN_THRESHOLD)
            try:
                n, ckpt, snap = idx.count(), idx.checkpoint(), idx.snapshot()
            finally:
                idx.close()
            full = {p: log.head(p) for p in range(log.partitions) if log.head(p)}
        assert (n, ckpt, snap["text"]) == (0, {}, []) or (ckpt == full and snap["lance"] == snap["text"]), (n, ckpt)
    assert killed >= 4, "the kills should mostly land mid-rebuild"
    out = _run([log_path, idx_path, "99", "0"], kill_after=None)  # a normal start: catch up
    assert "DONE" in out

    assert_equals_clean_rebuild(tmp_path, w, min_rows=100, queries=40, seed=5)


def test_kill_inside_reset_then_catch_up_leaves_no_stale_text_documents(tmp_path) -> None:
    """A reset killed between dropping the LanceDB table and emptying Tantivy is flagged in
    ``meta.json``: the next open redoes it (no full Tantivy index beside an empty table, whose
    keys a replay from 0 would take for new ones), and catching up converges."""
    log_path, idx_path = str(tmp_path / "log"), str(tmp_path / "idx")
    w = Workload(seed=41, users=2, sessions=2, messages=4)
    with ArrowLog(log_path, partitions=2) as log:
        w.append_to(log)
    out = _run([log_path, idx_path], kill_after=None, entry="child-reset")
    assert out.startswith("READY") and "DONE" not in out
    idx = ChunkIndex(idx_path, dim=DIM, ann_threshold=ANN_THRESHOLD)
    try:  # what the next process starts from: nothing, in both engines
        assert idx.checkpoint() == {} and idx.count() == 0 and idx.stats()["text"]["docs"] == 0
    finally:
        idx.close()
    assert "DONE" in _run([log_path, idx_path, "5", "0"], kill_after=None)

    assert_equals_clean_rebuild(tmp_path, w, min_rows=50, queries=20, seed=9)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child-reset":
    child_reset_killed(sys.argv[2], sys.argv[3])
elif __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1", len(sys.argv) > 6 and sys.argv[6] == "1")
