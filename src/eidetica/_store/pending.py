"""Best-effort writes: ``eidetica.open(path, on_write_error="queue")``.

Agent frameworks expect memory never to crash the agent. In this mode a write the disk
refuses (``StorageError``: full, read-only, I/O error) is kept in a bounded in-process
queue, a warning is logged, and the write is retried in order (a background thread, every
new write, ``Memory.retry_pending()`` and ``close()``), so nothing is lost once the disk
takes writes again. Every queued write keeps its event ids, so a retry whose first attempt
did land is a no-op. Writes made while the queue is not empty queue behind it (order holds).
What is still queued when the process ends is lost: the queue is in memory.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import InvalidInput, StorageError

__all__ = ["WRITE_ERROR_MODES", "PendingWrites"]

WRITE_ERROR_MODES = ("raise", "queue")
log = logging.getLogger("eidetica")


class PendingWrites:
    """A bounded FIFO of writes the disk refused, retried in order."""

    def __init__(self, limit: int = 10_000, retry_seconds: float = 1.0) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput("write_queue_limit", "must be an int >= 1", limit)
        self.limit = limit
        self.retry_seconds = retry_seconds
        self._q: collections.deque[tuple[str, Callable[[], Any]]] = collections.deque()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0  # writes that failed at least once (counted, for stats)

    def __len__(self) -> int:
        return len(self._q)

    def run(self, what: str, write: Callable[[], Any], placeholder: Any) -> Any:
        """Do a write now if nothing is queued; on a storage failure (or behind queued writes) queue it and return ``placeholder``."""
        with self._lock:
            if not self._q:
                try:
                    return write()
                except StorageError as e:
                    self._enqueue(what, write, e)
                    return placeholder
            self._enqueue(what, write, None)
        self.retry()
        return placeholder

    def _enqueue(self, what: str, write: Callable[[], Any], error: StorageError | None) -> None:
        if len(self._q) >= self.limit:
            # bounded: past the limit the caller hears about it rather than losing writes silently
            raise error or StorageError(None, f"{self.limit} writes already wait for the disk", "queue")
        self._q.append((what, write))
        self.failures += 1
        if error is not None:
            log.warning("eidetica: %s failed (%s); queued for retry (%d waiting)", what, error, len(self._q))
        self._start()

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="eidetica-pending", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        delay = self.retry_seconds
        while not self._stop.wait(delay):
            left = self.retry()
            if not left:
                return
            delay = min(delay * 2, 30.0)

    def retry(self) -> int:
        """Write queued items in order until one fails again; returns how many still wait."""
        with self._lock:
            while self._q:
                what, write = self._q[0]
                try:
                    write()
                except StorageError:
                    return len(self._q)
                except Exception as e:  # noqa: BLE001 - e.g. a queued write that is invalid: it can never succeed
                    log.error("eidetica: queued %s dropped: %s", what, e)
                self._q.popleft()
                if not self._q:
                    log.warning("eidetica: the disk takes writes again; every queued write is stored")
            return 0

    def close(self) -> int:
        """Stop retrying in the background after one last attempt; returns how many writes are lost."""
        self._stop.set()
        left = self.retry()
        if left:
            log.warning("eidetica: %d queued writes could not be stored before close and are lost", left)
        return left
