"""``eidetica.connect_async(url, api_key=...)``: the ``connect()`` API, awaitable, on ``httpx.AsyncClient``.

Every method is ``RemoteMemory``'s own code (request building, retries, error mapping, the
``written`` floor): ``_AsyncRemote`` only replaces its three I/O hooks with httpx's async
transport, and ``_aio`` runs each call in a greenback portal, so the sync code's I/O awaits on
the caller's event loop. No thread per request: 100 concurrent calls are 100 tasks on one loop.
A method added to ``RemoteMemory`` (or its sessions, items, schedules) is mirrored without a line here.

``aio(memory)`` gives the framework adapters the async face of any memory: ``AsyncMemory`` for an
embedded one, a ``connect_async`` twin (per event loop) for a ``connect()`` client.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from pathlib import Path
from typing import Any

import greenback
import httpx

from .._store.transfer import write_export
from .aio import AsyncFace, AsyncMemory, portal
from .client import POOL, RemoteMemory

__all__ = ["connect_async", "aio"]


_IN_FLIGHT = 16  # requests on the wire at once per client (the connection pool's size)


class _AsyncRemote(RemoteMemory):
    """``RemoteMemory`` whose I/O awaits httpx's async transport (run only inside a greenback portal)."""

    def _connection(self, headers: dict[str, str]) -> tuple[Any, Any]:
        # httpcore's pool scans every connection and every queued request on each state change
        # (quadratic in calls in flight: 100 at once cost ~10 ms CPU each, measured); calls beyond
        # its size wait on a semaphore instead, an O(1) queue
        self._gate = asyncio.Semaphore(_IN_FLIGHT)
        transport = httpx.AsyncHTTPTransport(**{**POOL, "limits": httpx.Limits(max_keepalive_connections=_IN_FLIGHT,
                                                                              max_connections=_IN_FLIGHT)})
        return transport, httpx.AsyncClient(base_url=self.url, headers=headers, timeout=self._timeout,
                                            transport=transport)

    async def _aexchange(self, request: httpx.Request) -> httpx.Response:
        async with self._gate:
            r = await self._transport.handle_async_request(request)
            try:
                await r.aread()
            finally:
                await r.aclose()
        return r

    def _exchange(self, request: httpx.Request) -> httpx.Response:
        return greenback.await_(self._aexchange(request))

    def _pause(self, seconds: float) -> None:
        greenback.await_(asyncio.sleep(seconds))

    def close(self) -> None:
        """Close the connections (the served store stays open)."""
        if not self._closed:
            self._closed = True
            greenback.await_(self._http.aclose())

    def export(self, path: str | Path) -> int:
        """This tenant's events (JSONL, or Parquet for ``.parquet``, as ``connect()``'s); returns how many (read whole)."""
        body = self._send("GET", "/v1/export").content
        return write_export((json.loads(ln) for ln in body.splitlines() if ln.strip()), path)


async def connect_async(url: str, api_key: str | None = None, *, timeout: float = 60.0, retries: int = 3) -> Any:
    """An awaitable client for the store served at ``url``: ``connect()``'s methods as coroutines.

    Use it from one event loop (its connections belong to the loop that opened them).
    """
    core = await portal(_AsyncRemote, url, api_key=api_key, timeout=timeout, retries=retries)
    return AsyncFace.of(core, portal)


_faces: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


async def aio(memory: Any) -> Any:
    """The async face the framework adapters use for ``memory`` (a face is returned as it is).

    Embedded: one ``AsyncMemory`` per memory, kept for its life. Served (``connect()``): a
    ``connect_async`` twin per event loop (an async client's connections belong to one loop),
    opened on first use and kept for the loop's life.
    """
    if isinstance(memory, AsyncFace):
        return memory
    face = _faces.get(memory)
    if face is None:
        face = _faces[memory] = _LoopTwin(memory) if isinstance(memory, RemoteMemory) else AsyncMemory(memory)
    return await face.face() if isinstance(face, _LoopTwin) else face


class _LoopTwin:
    """``aio`` of a sync client: per running loop, a ``connect_async`` client to the same URL and key."""

    def __init__(self, remote: RemoteMemory) -> None:
        self._remote = remote
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()

    async def face(self) -> Any:
        """This loop's async client."""
        loop = asyncio.get_running_loop()
        twin = self._by_loop.get(loop)
        if twin is None:
            r = self._remote
            twin = self._by_loop[loop] = await connect_async(r.url, r.api_key, timeout=r._timeout.read or 60.0,
                                                             retries=r.retries)
        return twin
