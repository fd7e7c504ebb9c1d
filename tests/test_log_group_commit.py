"""Group commit liveness: the lead always passes on, whatever happens to the callers."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Iterator

import pyarrow as pa
import pytest

from eidetica.events import InMemoryLog

from .contracts.log import msg


class GatedLog(InMemoryLog):
    """An in-memory log whose commits wait for a gate: a leader stuck in its fsync."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def _write(self, partition: int, batch: pa.RecordBatch) -> Any:
        self.entered.set()
        self.gate.wait(10)
        return super()._write(partition, batch)


class Interrupt(Exception):
    pass


@pytest.fixture
def alarm() -> Iterator[None]:
    def raise_(*_: Any) -> None:
        raise Interrupt()

    old = signal.signal(signal.SIGALRM, raise_)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def test_an_interrupted_follower_does_not_stall_the_log(alarm) -> None:
    log = GatedLog()
    leader = threading.Thread(target=log.append, args=("a", [msg(0)]))
    leader.start()
    assert log.entered.wait(5)  # the leader holds the commit
    other_result: list[Any] = []
    other = threading.Thread(target=lambda: other_result.append(log.append("c", [msg(2)])))
    # the main thread queues first behind the leader, another caller queues after it, then
    # the main thread is interrupted (Ctrl-C, a signal): the lead must skip its request
    threading.Timer(0.1, other.start).start()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    with pytest.raises(Interrupt):
        log.append("b", [msg(1)])
    assert other.is_alive()
    log.gate.set()
    leader.join(5)
    other.join(5)
    assert not leader.is_alive() and not other.is_alive()
    assert other_result and isinstance(other_result[0], tuple)
    # the abandoned request was queued, so it is committed like any other; nothing stalls
    assert log.append("d", [msg(3)]) is not None
    assert sorted(e.stream for e in log.read()) == ["a", "b", "c", "d"]
    log.close()


def test_a_failing_write_answers_the_whole_group_and_the_log_goes_on() -> None:
    class Flaky(GatedLog):
        fail = True

        def _write(self, partition: int, batch: pa.RecordBatch) -> Any:
            self.entered.set()
            self.gate.wait(10)
            if self.fail and batch.num_rows > 1:
                raise OSError("disk full")
            return InMemoryLog._write(self, partition, batch)

    log = Flaky()
    leader = threading.Thread(target=log.append, args=("a", [msg(0)]))
    leader.start()
    assert log.entered.wait(5)
    errors: list[BaseException] = []

    def follower(k: int) -> None:
        try:
            log.append(f"f{k}", [msg(10 + k)])
        except OSError as e:
            errors.append(e)

    fs = [threading.Thread(target=follower, args=(k,)) for k in range(4)]
    for f in fs:
        f.start()
    time.sleep(0.2)  # all four queue behind the leader and go in one group
    log.gate.set()
    leader.join(5)
    for f in fs:
        f.join(5)
    assert not any(f.is_alive() for f in fs)
    assert len(errors) == 4 and all("disk full" in str(e) for e in errors)
    assert [e.stream for e in log.read()] == ["a"]  # nothing of the failed group
    log.fail = False
    assert log.append("g", [msg(20)]) == (1, 1)
    log.close()
