"""Crash-test child for checkpoints while running: append, let housekeeping write checkpoints, wait to be killed.

``log PATH``: appends forever from the main thread while a second thread calls
``ArrowLog.maintain()`` in a loop (checkpoints cut while commits go on); prints every
acknowledged range and every checkpoint it wrote.
``memory PATH``: appends messages through ``eidetica.open``, runs ``Memory.housekeep()``
(the housekeeping thread's work), appends a tail, prints what it covered, then blocks.
"""

import json
import sys
import threading
import uuid

from eidetica.events import ArrowLog, NewEvent

NS = uuid.UUID("6f1c0a4e-0000-4000-8000-00000000beef")


def run_log(path: str) -> None:
    log = ArrowLog(path, segment_bytes=256 * 1024, checkpoint_events=200, fsync="batch")
    lock = threading.Lock()

    def housekeeping() -> None:
        idle = threading.Event()
        while True:
            idle.wait(0.001)  # a housekeeping tick, as the store's thread has (not an ordering)
            if log.maintain():
                with lock:
                    print(f"CKPT {log._covered[0]}", flush=True)

    threading.Thread(target=housekeeping, daemon=True).start()
    i = 0
    while True:
        n = 1 + i % 17
        evs = [NewEvent(type="Probe", payload=f"{i + k}".encode(), event_id=uuid.uuid5(NS, str(i + k))) for k in range(n)]
        first, last = log.append(f"stream{i % 3}", evs)
        with lock:
            print(f"ACK {i} {n} {first} {last}", flush=True)
        i += n


def run_memory(path: str) -> None:
    import eidetica
    from eidetica.actors import MemoryConfig
    from eidetica.providers import HashEmbedder

    log = ArrowLog(f"{path}/log", checkpoint_events=100)
    m = eidetica.Memory(path, embedder=HashEmbedder(dim=16), log=log,
                        config=MemoryConfig(snapshot_events=100, housekeeping_seconds=0))
    s = m.session("s1", user="u")
    for i in range(150):
        s.append("user", f"message number {i}")
    done = m.housekeep()
    covered = {"log": log._covered[0], "state": sum(m.views.state.snapshot_checkpoint.values())}
    for i in range(150, 180):
        s.append("user", f"message number {i}")
    print(json.dumps({**covered, "head": log.head(0), "done": done}), flush=True)
    sys.stdin.read()  # killed here, without close: no checkpoint or snapshot on the way out


if __name__ == "__main__":
    {"log": run_log, "memory": run_memory}[sys.argv[1]](sys.argv[2])
