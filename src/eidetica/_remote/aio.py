"""The async face of a memory: ``AsyncMemory`` (embedded) and what ``connect_async`` returns (served).

One wrapper for both, a mirror rather than a second API: every public method of the sync
object (``Memory``, ``SessionHandle``, ``Items``, ``Schedules`` or their ``Remote*`` twins)
becomes a coroutine with the same name and signature, run by a *runner*:

* embedded: on a bounded thread pool (``max_workers``, default 8). The engine is synchronous
  (an Arrow log with fsync, LanceDB, Tantivy, NumPy), so its calls run beside the event loop,
  never on it; a pool bounds how many threads they take, where ``asyncio.to_thread`` per call
  would share (and fill) the loop's default executor.
* served: in a greenback portal on the loop itself: ``RemoteMemory``'s code runs unchanged and
  its requests await httpx's async transport (see ``_aclient``), no thread at all.

Handles a call returns (a session, another tenant's memory) come back wrapped the same way, and
attributes that are not methods (``tenant``, ``session_id``, ``items``...) read through.
A session's ``len()`` is ``await s.length()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import greenback

from .._store.items import Items
from ..actors.schedules import Schedules
from ..errors import InvalidInput
from ..memory import Memory, SessionHandle
from .client import RemoteItems, RemoteMemory, RemoteSchedules, RemoteSession

__all__ = ["AsyncFace", "AsyncMemory", "portal"]

Runner = Callable[..., Awaitable[Any]]

# the sync types whose instances come back from a call as faces
_FACED: tuple[type, ...] = (Memory, SessionHandle, Items, Schedules, RemoteMemory, RemoteSession, RemoteItems,
                            RemoteSchedules)


async def portal(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run sync ``fn`` on this loop in a greenback portal: its ``greenback.await_`` calls await here."""
    return await greenback.with_portal_run_sync(fn, *args, **kwargs)


class AsyncFace:
    """An awaitable mirror of a sync eidetica object (see the module docstring)."""

    _classes: dict[type, type] = {}

    def __init__(self, target: Any, run: Runner) -> None:
        self._target = target
        self._run = run

    @classmethod
    def of(cls, target: Any, run: Runner) -> Any:
        """The face of ``target`` (its class's mirror, built once per class)."""
        kind = type(target)
        face = cls._classes.get(kind)
        if face is None:
            ns: dict[str, Any] = {"__doc__": f"``{kind.__name__}``'s methods as coroutines."}
            for name, fn in inspect.getmembers(kind, inspect.isfunction):
                if not name.startswith("_") and name not in vars(AsyncFace):
                    ns[name] = _mirror(name, fn)
            face = cls._classes[kind] = type(f"Async{kind.__name__}", (cls,), ns)
        return face(target, run)

    @property
    def sync_object(self) -> Any:
        """The sync object behind the face (served: a client whose calls work only inside ``run_sync``)."""
        return self._target

    async def run_sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run sync code that calls ``sync_object`` as this face runs its own methods (never on the loop's thread
        when embedded; served, its requests await on this loop)."""
        return await self._run(fn, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return _wrap(getattr(self._target, name), self._run)

    def __repr__(self) -> str:
        return f"<async {self._target!r}>"

    async def length(self) -> int:
        """``len()`` of the sync object (a session's message count)."""
        return int(await self._run(len, self._target))

    async def close(self) -> None:
        """Close the sync object (and, embedded, nothing else: the pool is the ``AsyncMemory``'s)."""
        await self._run(self._target.close)

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _wrap(value: Any, run: Runner) -> Any:
    return AsyncFace.of(value, run) if isinstance(value, _FACED) else value


def _mirror(name: str, fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def method(self: AsyncFace, *args: Any, **kwargs: Any) -> Any:
        return _wrap(await self._run(getattr(self._target, name), *args, **kwargs), self._run)

    return method


class _Pool:
    """The embedded runner: calls on a bounded thread pool, awaited from the loop."""

    def __init__(self, max_workers: int) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="eidetica-async")

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))


def AsyncMemory(memory: Memory, *, max_workers: int = 8) -> Any:  # noqa: N802 - a constructor, by its use
    """The async face of an embedded memory: ``Memory``'s methods as coroutines on a pool of ``max_workers`` threads.

    ``await AsyncMemory(m).recall("tea", user="ada")``; ``close()`` closes the memory and the pool.
    """
    if not isinstance(memory, Memory):
        raise InvalidInput("memory", "must be an eidetica.Memory (for a served store use connect_async)", memory)
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise InvalidInput("max_workers", "must be an int >= 1", max_workers)
    pool = _Pool(max_workers)
    face = AsyncFace.of(memory, pool)
    weakref.finalize(face, pool.executor.shutdown, wait=False)
    return face
