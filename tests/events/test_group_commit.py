"""Group commit liveness: the lead always passes on, whatever happens to the callers.

Run on both logs: the in-memory reference and the durable ``ArrowLog`` (whose leader
really writes and fsyncs). Threads are ordered by explicit events and by the log's own
queue (waited for with a deadline), never by sleeps; every thread is a daemon, so a stalled
log fails the test instead of hanging the process.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from eidetica.events import ArrowLog, BatchLog, InMemoryLog
from tests.contracts.log import msg


def gated(base: type[BatchLog]) -> type[BatchLog]:
    """``base`` whose commits wait for a gate: a leader stuck in its write/fsync."""

    class Gated(base):  # type: ignore[valid-type, misc]
        fail = False

        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.gate = threading.Event()
            self.entered = threading.Event()

        def _write(self, partition: int, batch: pa.RecordBatch) -> Any:
            self.entered.set()
            assert self.gate.wait(30)
            if self.fail and batch.num_rows > 1:
                raise OSError("disk full")
            return super()._write(partition, batch)

    return Gated


@pytest.fixture(params=["memory", "arrow"])
def make_log(request, tmp_path) -> Callable[[], Any]:
    """A factory for a gated log of either kind."""
    if request.param == "memory":
        return lambda: gated(InMemoryLog)()
    return lambda: gated(ArrowLog)(tmp_path / "log")


def queued(log: BatchLog, n: int, partition: int = 0) -> None:
    """Wait (bounded) until ``n`` requests wait in the partition's queue behind the leader."""
    part = log._parts[partition]
    deadline = time.monotonic() + 30
    while True:
        with part.lock:
            if len(part.pending) >= n:
                return
        assert time.monotonic() < deadline, f"{n} requests never queued"
        threading.Event().wait(0.001)


class Interrupt(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def raise_(*_: Any) -> None:
        raise Interrupt()

    old = signal.signal(signal.SIGUSR1, raise_)
    yield
    signal.signal(signal.SIGUSR1, old)


def test_an_interrupted_follower_does_not_stall_the_log(alarm, make_log) -> None:
    log = make_log()
    leader = threading.Thread(target=log.append, args=("a", [msg(0)]), daemon=True)
    leader.start()
    assert log.entered.wait(30)  # the leader holds the commit
    other_result: list[Any] = []
    other = threading.Thread(target=lambda: other_result.append(log.append("c", [msg(2)])), daemon=True)
    main = threading.main_thread().ident
    assert main == threading.get_ident()

    def choreography() -> None:
        # the main thread queues first behind the leader, another caller queues after it,
        # then the main thread is interrupted (Ctrl-C, a signal): the lead must skip its request
        queued(log, 1)
        other.start()
        queued(log, 2)
        signal.pthread_kill(main, signal.SIGUSR1)

    director = threading.Thread(target=choreography, daemon=True)
    director.start()
    with pytest.raises(Interrupt):
        log.append("b", [msg(1)])
    director.join(30)
    assert other.is_alive()
    log.gate.set()
    leader.join(30)
    other.join(30)
    assert not leader.is_alive() and not other.is_alive()
    assert other_result and isinstance(other_result[0], tuple)
    # the abandoned request was queued, so it is committed like any other; nothing stalls
    assert log.append("d", [msg(3)]) is not None
    assert sorted(e.stream for e in log.read()) == ["a", "b", "c", "d"]
    log.close()


def test_a_failing_write_answers_the_whole_group_and_the_log_goes_on(make_log) -> None:
    log = make_log()
    log.fail = True
    leader = threading.Thread(target=log.append, args=("a", [msg(0)]), daemon=True)
    leader.start()
    assert log.entered.wait(30)
    errors: list[BaseException] = []

    def follower(k: int) -> None:
        try:
            log.append(f"f{k}", [msg(10 + k)])
        except OSError as e:
            errors.append(e)

    fs = [threading.Thread(target=follower, args=(k,), daemon=True) for k in range(4)]
    for f in fs:
        f.start()
    queued(log, 4)  # all four wait behind the leader and go in one group
    log.gate.set()
    leader.join(30)
    for f in fs:
        f.join(30)
    assert not any(f.is_alive() for f in fs)
    assert len(errors) == 4 and all("disk full" in str(e) for e in errors)
    assert [e.stream for e in log.read()] == ["a"]  # nothing of the failed group
    log.fail = False
    assert log.append("g", [msg(20)]) == (1, 1)
    log.close()


def test_callers_queued_behind_a_slow_fsync_all_commit(make_log) -> None:
    # many callers pile up behind one leader's fsync; once it returns, every one of them is
    # answered and the lead keeps passing on until the queue is empty
    log = make_log()
    leader = threading.Thread(target=log.append, args=("a", [msg(0)]), daemon=True)
    leader.start()
    assert log.entered.wait(30)
    out: dict[int, Any] = {}
    ts = [threading.Thread(target=lambda k=k: out.__setitem__(k, log.append(f"q{k}", [msg(k)])), daemon=True)
          for k in range(12)]
    for t in ts:
        t.start()
    queued(log, 12)
    log.gate.set()
    for t in [leader, *ts]:
        t.join(30)
    assert not any(t.is_alive() for t in [leader, *ts])
    assert sorted(out) == list(range(12)) and all(isinstance(v, tuple) for v in out.values())
    assert log.head() == 13
    log.close()


def test_the_same_events_queued_in_one_group_are_written_once(make_log) -> None:
    # retries of one append that wait behind the same leader are admitted in one group:
    # the first is written, the rest are recognised by their event ids within the group
    log = make_log()
    leader = threading.Thread(target=log.append, args=("x", [msg(0)]), daemon=True)
    leader.start()
    assert log.entered.wait(30)
    evs = [msg(1), msg(2)]
    single = [msg(3)]
    out: dict[int, Any] = {}
    ts = [threading.Thread(target=lambda k=k: out.__setitem__(k, log.append("a" if k % 2 else "b",
                                                                            evs if k % 2 else single)),
                           daemon=True)
          for k in range(8)]
    for t in ts:
        t.start()
    queued(log, 8)
    log.gate.set()
    for t in [leader, *ts]:
        t.join(30)
    assert not any(t.is_alive() for t in [leader, *ts])
    assert len({out[k] for k in range(1, 8, 2)}) == 1 and len({out[k] for k in range(0, 8, 2)}) == 1
    assert sorted(e.stream for e in log.read()) == ["a", "a", "b", "x"]
    assert log.stream_version("a") == 1 and log.stream_version("b") == 0
    log.close()
