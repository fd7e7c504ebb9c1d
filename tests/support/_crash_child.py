"""Crash-test child: append forever, printing every acknowledged range."""

import random
import sys
import uuid

from eidetica.events import ArrowLog, NewEvent

NS = uuid.UUID("6f1c0a4e-0000-4000-8000-000000000000")


def event(rnd: int, i: int) -> NewEvent:
    """The deterministic event number ``i`` of round ``rnd``."""
    rng = random.Random(rnd * 1_000_003 + i)
    return NewEvent(
        type="CrashProbe",
        payload=f"{rnd}:{i}:".encode() + rng.randbytes(rng.randrange(10, 400)),
        event_id=uuid.uuid5(NS, f"{rnd}:{i}"),
    )


def main() -> None:
    path, rnd = sys.argv[1], int(sys.argv[2])
    log = ArrowLog(path, segment_bytes=64 * 1024)
    rng = random.Random(rnd)
    i = 0
    while True:
        n = rng.randrange(1, 40)
        evs = [event(rnd, i + k) for k in range(n)]
        first, last = log.append(f"stream{rng.randrange(5)}", evs)
        print(f"ACK {rnd} {i} {n} {first} {last}", flush=True)
        i += n


if __name__ == "__main__":
    main()
