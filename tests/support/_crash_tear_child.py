"""Crash-test child that tears a batch for real: it appends whole batches, then writes part of one and SIGKILLs itself.

Usage: ``_crash_tear_child.py PATH ROUND WHOLE FRACTION``: ``WHOLE`` acknowledged appends,
then the next append's bytes are cut at ``FRACTION`` (0..1) of their length, written to the
segment file (the page cache keeps them), and the process is killed before it can do
anything else: no undo, no fsync, no close.
"""

import os
import signal
import sys

from _crash_child import event  # noqa: E402 - run as a script from tests/support/

from eidetica.events import ArrowLog
from eidetica.events import _segments as arrow_log  # the segment writes (_write_all) live there


def main() -> None:
    path, rnd, whole, fraction = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    log = ArrowLog(path, segment_bytes=64 * 1024)
    i = 0
    for k in range(whole + 1):
        n = 1 + (rnd * 7 + k * 3) % 25
        evs = [event(rnd, i + j) for j in range(n)]
        if k == whole:
            real = arrow_log._write_all

            def torn(fd: int, data: bytes | memoryview) -> None:
                cut = max(1, min(len(data) - 1, int(len(data) * fraction)))
                print(f"TEAR {rnd} {i} {n} {cut} {len(data)}", flush=True)  # noqa: B023 (the child dies within the iteration)
                real(fd, memoryview(data)[:cut])  # noqa: B023
                os.kill(os.getpid(), signal.SIGKILL)

            arrow_log._write_all = torn
        first, last = log.append(f"stream{k % 3}", evs)
        print(f"ACK {rnd} {i} {n} {first} {last}", flush=True)
        i += n


if __name__ == "__main__":
    main()
