"""A synchronous test face over an async one (``connect_async`` or ``AsyncMemory``), so sync test bodies run on it.

Every awaited call runs on one event loop in a background thread (``run_coroutine_threadsafe``): the
async face is used as an application would use it, from one loop, and a handle a call returns
(session, schedules, items, another tenant) comes back wrapped the same way.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable
from typing import Any

from eidetica._remote.aio import AsyncFace


class Loop:
    """One event loop on its own thread; ``run`` waits for a coroutine's result there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="synced-loop", daemon=True)
        self.thread.start()

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """The awaitable's result (or its exception), awaited on the loop."""
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self.loop).result()

    def synced(self, value: Any) -> Any:
        """``value`` with any async face wrapped as a ``Synced``."""
        return Synced(value, self) if isinstance(value, AsyncFace) else value

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class Synced:
    """An async face's methods called synchronously; attributes read through; ``len()`` is ``await length()``."""

    def __init__(self, face: AsyncFace, loop: Loop) -> None:
        self.face = face
        self.loop = loop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.face, name)
        if not inspect.iscoroutinefunction(value):
            # a method the face reads through unmirrored would run synchronously (or outside its portal)
            assert not inspect.ismethod(value), f"{name} is not mirrored as a coroutine on {self.face!r}"
            return self.loop.synced(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.loop.synced(self.loop.run(value(*args, **kwargs)))

        return call

    def __len__(self) -> int:
        return self.loop.run(self.face.length())

    def __enter__(self) -> Synced:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<synced {self.face!r}>"
