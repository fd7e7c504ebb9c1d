"""What every Ray module here shares: calls that re-raise the far side's error, the actors' options,
a store's key, and the written offsets a hosted actor's call carries back to its handle (``Written``)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import threading
from collections.abc import Iterable
from typing import Any

import ray

__all__ = ["ACTOR_OPTIONS", "Written", "store_key"]


ACTOR_OPTIONS: dict[str, Any] = {"max_restarts": -1, "max_task_retries": -1, "num_cpus": 0}


def _get(ref: Any) -> Any:
    """ray.get, re-raising the original exception (its type and fields intact)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if e.cause is not None:
            raise e.cause from None
        raise


def _listed(items: Any) -> Any:
    """Iterables as a list (generators cannot cross processes); anything else as given, for the far side's checks."""
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        return items
    return list(items)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _raise_to(floor: dict[int, int], offsets: dict[int, int]) -> None:
    """Raise ``floor`` (partition -> last offset) in place to cover ``offsets``."""
    for p, o in offsets.items():
        if o > floor.get(p, -1):
            floor[p] = o


class Written:
    """The last log offset per partition that a handle's writes reached (from the log's heads when it
    opened on): its reads' floor (issue #20).

    A read through a view replica waits until the replica applied these offsets and no others,
    so a handle that wrote nothing (or whose writes its replica already holds) reads with no
    call to the log; another handle's writes are read through an explicit ``min_offset``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, int] = {}

    def note(self, offsets: dict[int, int]) -> None:
        """Raise the floor to cover these offsets (partition -> last offset written)."""
        with self._lock:
            _raise_to(self._last, offsets)

    def floor(self) -> dict[int, int]:
        """A copy of the floor: partition -> last offset written through this handle."""
        with self._lock:
            return dict(self._last)


# offsets written by the ActorHost call running on this thread (returned to the caller with its result)
_CALL = threading.local()


class _Wrote:
    """An ActorHost call's result with the log offsets its writes reached (unwrapped by ``RemoteActor``)."""

    __slots__ = ("result", "offsets")

    def __init__(self, result: Any, offsets: dict[int, int]) -> None:
        self.result = result
        self.offsets = offsets

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Wrote, (self.result, self.offsets))


def _collect(into: dict[int, int] | None) -> dict[int, int] | None:
    """Collect this thread's written offsets into ``into`` from now on; returns what collected them until now.

    (A function, so that Ray pickles a reference to it, not the thread-local, with the actor classes.)
    """
    before = getattr(_CALL, "offsets", None)
    _CALL.offsets = into
    return before


def _noted(offsets: dict[int, int], sink: Written | None) -> None:
    """Record written offsets: into the ActorHost call on this thread (if any) and into ``sink``."""
    mine = getattr(_CALL, "offsets", None)
    if mine is not None:
        _raise_to(mine, offsets)
    if sink is not None:
        sink.note(offsets)


def _unwrap(value: Any, sink: Written | None) -> Any:
    """A hosted actor's result, its written offsets noted (see ``_Wrote``)."""
    if isinstance(value, _Wrote):
        _noted(value.offsets, sink)
        return value.result
    return value


def store_key(path: str | os.PathLike[str]) -> str:
    """A short stable name for a store, shared by every client that opens the same path."""
    return hashlib.blake2b(os.path.abspath(os.fspath(path)).encode(), digest_size=6).hexdigest()
