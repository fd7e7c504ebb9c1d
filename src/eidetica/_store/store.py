"""``Store``: what the facade's services are given (``Memory`` is one), and its ``Gate``.

The services in ``_store/`` are written against this protocol, not against ``Memory``: they read
the store's parts (log, views, runtime, config, ...) and go through its ``gate`` for what a handle
shares with its services: open or closed, the views' lock, read-your-writes, the write queue.
Nothing outside ``memory.py`` touches ``Memory``'s private members (tests/test_layers.py).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..actors import ActorSnapshots, MemoryConfig, Runtime
from ..errors import InvalidInput, ReplicaBehind
from ..events import EventLog
from ..projections import Views
from ..providers import LLM, Embedder
from .floor import floor_from_json
from .pending import PendingWrites

__all__ = ["Gate", "Store"]


class Store(Protocol):
    """An open store of one tenant, as the services see it."""

    tenant: str
    path: Path
    config: MemoryConfig
    clock: Callable[[], dt.datetime]
    embedder: Embedder
    llm: LLM
    log: EventLog
    views: Views
    runtime: Runtime
    actor_snapshots: ActorSnapshots
    replica_timeout: float
    extraction_failures: int
    gate: Gate

    @property
    def state(self) -> Any:
        """The state folds (sessions, facts, notes, schedules)."""


class Gate:
    """A handle's passage to its store: open or closed, the views' lock, read-your-writes, the write queue.

    ``for_tenant`` handles share the lock and the queue of the handle they came from, not its
    ``closed`` flag (closing a tenant's view leaves the store open).
    """

    def __init__(self, store: Store, pending: PendingWrites | None = None, lock: threading.RLock | None = None) -> None:
        self.store = store
        self.pending = pending
        self.lock = lock if lock is not None else threading.RLock()
        self.closed = False

    def beside(self, store: Store) -> Gate:
        """A gate for another handle on the same store (another tenant): same lock and queue, its own ``closed``."""
        return Gate(store, self.pending, self.lock)

    def check_open(self) -> None:
        """Refuse a closed handle."""
        if self.closed:
            raise InvalidInput("memory", "is closed")

    def drain(self) -> None:
        """Wait for writes done behind their calls (item vectors): part of "your writes"."""
        self.store.runtime.drain()

    def sync(self) -> None:
        """Read your own writes: apply everything committed before answering."""
        self.check_open()
        self.drain()
        with self.lock:
            self.store.views.projector.refresh()

    def write(self, what: str, write: Callable[[], Any], placeholder: Any) -> Any:
        """Do a write; in best-effort mode a storage failure queues it and returns ``placeholder``."""
        if self.pending is None:
            return write()
        return self.pending.run(what, write, placeholder)

    def min_floor(self, min_offset: int | Mapping[int, int] | None) -> dict[int, int]:
        """``min_offset`` as partition -> offset, checked (an int names partition 0 of a one-partition log; keys may be
        ``Eidetica-Written``'s strings)."""
        if min_offset is None:
            return {}
        parts = self.store.log.partitions
        if isinstance(min_offset, Mapping):
            items = floor_from_json(dict(min_offset))  # the header's own form, {"0": 5}, too
        elif isinstance(min_offset, int) and not isinstance(min_offset, bool):
            if parts != 1:
                raise InvalidInput("min_offset", f"the log has {parts} partitions: pass {{partition: offset}}",
                                   min_offset)
            items = {0: min_offset}
        else:
            raise InvalidInput("min_offset", "must be an offset (int) or {partition: offset}", min_offset)
        for p, o in items.items():
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < parts:
                raise InvalidInput("min_offset", f"partition {p!r} is not in [0, {parts})", min_offset)
            if isinstance(o, bool) or not isinstance(o, int):
                raise InvalidInput("min_offset", f"offset {o!r} is not an int", min_offset)
        return {p: o for p, o in items.items() if o >= 0}  # -1: nothing written (a buffered append)

    def await_floor(self, floor: dict[int, int]) -> None:
        """Wait up to ``replica_timeout`` for the log to commit ``floor``, else ``ReplicaBehind`` (never a stale answer)."""
        log, timeout = self.store.log, self.store.replica_timeout
        deadline = time.monotonic() + timeout
        for p, o in floor.items():
            if not log.wait_for(o, partition=p, timeout=max(0.0, deadline - time.monotonic())):
                heads = {q: log.head(q) for q in floor}
                raise ReplicaBehind("embedded", {q: x + 1 for q, x in floor.items()}, heads, timeout)
