"""Projector: tailing, read-your-writes waiting, lag, rebuild with progress, and rebuild parity."""

from __future__ import annotations

import json
import threading
import time

import pytest

from eidetica.errors import InvalidInput
from eidetica.events import ArrowLog, FactAsserted, NewEvent
from eidetica.projections import ChunkIndex, Projector, StateProjection
from tests.contracts.projection import DIM, Workload, emb, hvec


@pytest.fixture
def setup(tmp_path):
    log = ArrowLog(tmp_path / "log", partitions=3, fsync="never")
    idx = ChunkIndex(tmp_path / "idx", dim=DIM)
    st = StateProjection()
    pj = Projector(log, [st, idx], batch_size=50)
    yield log, idx, st, pj
    pj.stop()
    idx.close()
    log.close()


def test_wait_for_read_your_writes_with_background_thread(setup) -> None:
    log, idx, st, pj = setup
    # an hour-long poll: wait_for must wake the thread itself, or it times out (30 s)
    pj.start(poll_seconds=3600)
    try:
        for i in range(5):
            stream = f"session:t:s{i}"
            _, last = log.append(stream, [emb([f"c{i}"], [f"waiting test number{i}"], session=f"s{i}")])
            assert pj.wait_for({log.partition_of(stream): last}, timeout=30)
            hits = idx.search(tenant="t", text=f"number{i}", mode="text")
            assert hits and hits[0].id == f"c{i}"
    finally:
        pj.stop()
    assert not pj.running


def test_wait_for_without_thread_applies_in_the_caller(setup) -> None:
    log, idx, st, pj = setup
    _, last = log.append("facts:t:u", [NewEvent.of(FactAsserted(fact_id="f", user_id="u", content="x"), tenant="t")])
    assert pj.wait_for({log.partition_of("facts:t:u"): last}, timeout=2)
    assert [f.fact_id for f in st.facts("t", "u")] == ["f"]


def test_wait_for_times_out_on_an_offset_not_yet_written(setup) -> None:
    log, idx, st, pj = setup
    assert pj.wait_for({0: 10}, timeout=0.3) is False
    assert pj.wait_for({0: 10}, timeout=0) is False
    assert pj.applied(0) == 0
    with pytest.raises(InvalidInput):
        pj.wait_for({7: 0})


def test_wait_for_sees_an_append_made_while_waiting(setup) -> None:
    log, idx, st, pj = setup
    stream = "session:t:late"
    p = log.partition_of(stream)
    target = log.head(p)
    waiting = threading.Event()
    real_wait = log.wait_for

    def wait_for(*a, **kw):  # the projector waits on the log: the append comes only then
        waiting.set()
        return real_wait(*a, **kw)

    log.wait_for = wait_for

    def later() -> None:
        assert waiting.wait(30)
        log.append(stream, [emb(["late"], ["late arrival"], session="late")])

    th = threading.Thread(target=later)
    th.start()
    assert pj.wait_for({p: target}, timeout=5)
    th.join()
    assert idx.count("t") == 1


def test_lag_and_catch_up(setup) -> None:
    log, idx, st, pj = setup
    w = Workload(seed=2, users=1, sessions=1, messages=3)
    w.append_to(log)
    total = sum(log.head(p) for p in range(log.partitions))
    assert pj.lag() == {"state": total, "chunks": total}
    assert pj.catch_up() == total
    assert pj.lag() == {"state": 0, "chunks": 0}
    assert pj.catch_up() == 0


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_rebuild_reports_progress_and_rejects_unknown_names(setup) -> None:
    log, idx, st, pj = setup
    w = Workload(seed=4, users=2, sessions=1, messages=4)
    w.append_to(log)
    pj.catch_up()
    before = idx.snapshot()
    seen: list[tuple[int, int]] = []
    n = pj.rebuild("chunks", progress=lambda done, total: seen.append((done, total)))
    total = sum(log.head(p) for p in range(log.partitions))
    assert n == total and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert idx.snapshot() == before
    with pytest.raises(InvalidInput):
        pj.rebuild("nope")


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_rebuild_parity_200_queries(tmp_path) -> None:
    """Incremental (background thread, interleaved partitions) vs rebuilt from 0: same rows, same top-10."""
    w = Workload(seed=13, users=3, sessions=3, messages=7)
    log = ArrowLog(tmp_path / "log", partitions=3, fsync="never")
    inc = ChunkIndex(tmp_path / "inc", dim=DIM)
    st = StateProjection()
    pj = Projector(log, [st, inc], batch_size=17)
    pj.start(poll_seconds=0.01)
    try:
        step = 11
        for i in range(0, len(w.appends), step):
            last = w.append_to(log, i, i + step)
            if i % 5 == 0:
                assert pj.wait_for(last, timeout=20)
        assert pj.wait_for({p: log.head(p) - 1 for p in range(log.partitions) if log.head(p)}, timeout=60)
        pj.stop()
        pj.maintain(force=True)
        fresh = ChunkIndex(tmp_path / "fresh", dim=DIM)
        try:
            Projector(log, [fresh], batch_size=1000).rebuild()
            a, b = inc.snapshot(), fresh.snapshot()
            assert a["lance"] == b["lance"] and a["text"] == b["text"]
            assert len(a["lance"]) > 200
            queries = w.queries(200, seed=17)
            same = 0
            for q in queries:
                ra = [h.id for h in inc.search(**q)]
                rb = [h.id for h in fresh.search(**q)]
                assert ra == rb, q
                same += bool(ra)
            assert same > 150
        finally:
            fresh.close()
        snap = st.snapshot()
        Projector(log, [st]).rebuild()
        assert st.snapshot() == snap
    finally:
        pj.stop()
        inc.close()
        log.close()


def test_exact_hit_after_wait_for(setup) -> None:
    log, idx, st, pj = setup
    stream = "notes:t:u"
    _, last = log.append(stream, [emb(["n1"], ["remember the milk"], kind="note", source="n1")])
    assert pj.wait_for({log.partition_of(stream): last})
    (h,) = idx.search(tenant="t", text="milk", vector=hvec("remember the milk"), top_k=1)
    assert h.id == "n1" and h.kind == "note"


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_searches_run_while_the_projector_applies(tmp_path) -> None:
    """Queries from other threads during background apply never fail and never leak tenants."""
    w = Workload(seed=19, users=2, sessions=2, messages=6)
    log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
    idx = ChunkIndex(tmp_path / "idx", dim=DIM, optimize_every=4, maintain_interval=0.0)
    pj = Projector(log, [idx], batch_size=9)
    errors: list[BaseException] = []
    stop = threading.Event()
    queries = w.queries(30, seed=2)
    seen: list[int] = []  # hits checked: the readers' loop must not pass by seeing nothing

    def reader() -> None:
        i = 0
        while not stop.is_set():
            q = queries[i % len(queries)]
            i += 1
            try:
                for h in idx.search(**q):
                    assert h.tenant == q["tenant"]
                    seen.append(1)
            except BaseException as e:  # noqa: BLE001 - collected for the assertion below
                errors.append(e)
                return

    readers = [threading.Thread(target=reader) for _ in range(2)]
    pj.start(poll_seconds=0.01)
    for r in readers:
        r.start()
    try:
        step = 25
        for i in range(0, len(w.appends), step):
            w.append_to(log, i, i + step)
        assert pj.wait_for({p: log.head(p) - 1 for p in range(log.partitions)}, timeout=60)
        deadline = time.monotonic() + 60
        while not seen and not errors and time.monotonic() < deadline:
            threading.Event().wait(0.01)
    finally:
        stop.set()
        for r in readers:
            r.join()
        pj.stop()
        idx.close()
        log.close()
    assert not errors, errors[0]
    assert seen


def _same_index(a: ChunkIndex, b: ChunkIndex, w: Workload, n: int = 60) -> None:
    sa, sb = a.snapshot(), b.snapshot()
    assert sa["lance_duplicates"] == sb["lance_duplicates"] == 0
    assert sa["text_duplicates"] == sb["text_duplicates"] == 0
    assert sa["lance"] == sb["lance"] and sa["text"] == sb["text"] and sa["lance"] == sa["text"]
    for q in w.queries(n, seed=23):
        assert [(h.id, round(h.score, 9)) for h in a.search(**q)] == [(h.id, round(h.score, 9)) for h in b.search(**q)], q


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_rebuilt_index_keeps_converging_under_later_events(tmp_path) -> None:
    """A rebuilt index takes later deletes, confidence changes, summary replacements and
    re-applied batches exactly like the incrementally built one (its Tantivy documents were
    built from the table, the incremental one's from the events)."""
    w = Workload(seed=29, users=3, sessions=2, messages=7)
    log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
    inc = ChunkIndex(tmp_path / "inc", dim=DIM)
    reb = ChunkIndex(tmp_path / "reb", dim=DIM)
    try:
        cut = len(w.appends) * 3 // 5
        w.append_to(log, 0, cut)
        Projector(log, [inc], batch_size=7).catch_up()
        on_disk: list[dict] = []
        pj = Projector(log, [reb], batch_size=5)
        pj.rebuild(progress=lambda d, t: on_disk.append(json.loads((tmp_path / "reb" / "checkpoint.json").read_text())["checkpoint"]))
        # mid-rebuild, the saved checkpoint never covers output that is not durable yet
        assert on_disk and all(c == {} for c in on_disk[:-1])
        assert reb.checkpoint() == {p: log.head(p) for p in range(log.partitions) if log.head(p)}
        _same_index(inc, reb, w)
        w.append_to(log, cut)  # the rest: forgets, deletes, reinforcements, new summaries
        Projector(log, [inc], batch_size=7).catch_up()
        pj.catch_up()
        _same_index(inc, reb, w)
        reb.save_checkpoint({})  # replay everything again on top (idempotent)
        Projector(log, [reb], batch_size=13).catch_up()
        _same_index(inc, reb, w)
    finally:
        inc.close()
        reb.close()
        log.close()


class _Failing(ChunkIndex):
    """A ChunkIndex whose n-th apply raises (a disk error in the middle of a rebuild)."""

    fail_at = 3

    def apply(self, events):  # type: ignore[override]
        self.fail_at -= 1
        if self.fail_at == 0:
            raise OSError("injected failure")
        super().apply(events)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_a_failed_rebuild_leaves_an_index_its_checkpoint_describes(tmp_path) -> None:
    w = Workload(seed=31, users=2, sessions=2, messages=6)
    log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
    w.append_to(log)
    clean = ChunkIndex(tmp_path / "clean", dim=DIM)
    idx = _Failing(tmp_path / "idx", dim=DIM)
    try:
        Projector(log, [clean]).rebuild()
        pj = Projector(log, [idx], batch_size=10)
        with pytest.raises(OSError, match="injected"):
            pj.rebuild()
        assert idx.checkpoint() == {} and pj.applied(0, "chunks") == 0 and pj.applied(1, "chunks") == 0
        assert idx.count() == 0 and idx.snapshot()["text"] == []  # nothing half-loaded is left
        pj.catch_up()  # the projector goes on from the saved checkpoint, in normal mode
        _same_index(clean, idx, w)
        # a process that stops in the middle of a rebuild (no end_rebuild): the next open starts empty
        idx.reset()
        idx.begin_rebuild()
        Projector(log, [idx], batch_size=10).catch_up()
        idx.close()
        reopened = ChunkIndex(tmp_path / "idx", dim=DIM)
        try:
            assert reopened.checkpoint() == {} and reopened.count() == 0 and reopened.snapshot()["text"] == []
            Projector(log, [reopened]).catch_up()
            _same_index(clean, reopened, w)
        finally:
            reopened.close()
    finally:
        clean.close()
        idx.close()
        log.close()
