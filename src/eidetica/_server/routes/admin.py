"""Maintenance: sweep, usage, stats, clear, compact, rebuild, snapshot, housekeep, export and import."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response, StreamingResponse

from ..._store.transfer import event_row, tenant_events
from ...errors import InvalidInput
from ...events.streams import parse_stream
from ...memory import Memory
from .._limits import TOO_LARGE, _too_large, _TooLarge
from .common import Api, SweepIn, _Body, _json, _wrote

__all__ = ["router"]


class ClearIn(_Body):
    """What ``clear`` forgets."""

    sessions: bool = True
    memories: bool = True


_TENANT_STATS = ("tenant", "sessions", "facts", "embedder")  # of Memory.stats(): the figures that are the tenant's own


def _tenant_stats(m: Memory) -> dict[str, Any]:
    """What a tenant's key may see of ``stats``: its own events and streams, sessions and facts.

    The store-wide figures (every tenant's events, log bytes, index rows, lag, snapshots,
    process counters) are the operator's: they tell one tenant how much the others write.
    """
    full = m.stats()
    streams = [s for s in m.log.streams() if parse_stream(s)[1] == m.tenant]  # type: ignore[attr-defined]
    return {**{k: full[k] for k in _TENANT_STATS}, "events": sum(m.log.stream_version(s) + 1 for s in streams),
            "streams": len(streams)}


def router(api: Api) -> APIRouter:
    """The maintenance routes."""
    r = APIRouter()
    M = api.M

    @r.post("/v1/sweep", tags=["maintenance"])
    def sweep(body: SweepIn = Body(SweepIn()), m: Memory = M) -> Response:
        """Decay and prune facts, retry pending extractions."""
        return _wrote(m, m.sweep(body.now))

    @r.get("/v1/usage", tags=["maintenance"])
    def usage(user: str | None = None, since: dt.datetime | None = None, until: dt.datetime | None = None,
              m: Memory = M) -> Response:
        """What the LLM cost this tenant: calls and tokens by model, purpose, user and day (``until`` exclusive)."""
        return _json(m.usage(user=user, since=since, until=until))

    @r.get("/v1/stats", tags=["maintenance"])
    def stats(request: Request, m: Memory = M) -> Response:
        """This tenant's counts (events, streams, sessions, facts); the whole store's only without keys (loopback)."""
        if api.keys is not None and api.keys.active():
            return _json(_tenant_stats(m))
        return _json(m.stats())

    @r.post("/v1/clear", tags=["maintenance"])
    def clear(body: ClearIn = Body(ClearIn()), m: Memory = M) -> Response:
        """Forget every session and/or every fact and note of this tenant."""
        m.clear(sessions=body.sessions, memories=body.memories)
        return _wrote(m, {"cleared": True})

    @r.post("/v1/compact", tags=["maintenance"])
    def compact(m: Memory = M) -> Response:
        """Erase forgotten content from disk (the whole store's: redacted log, fresh indices); returns the report."""
        return _wrote(m, m.compact())

    @r.post("/v1/rebuild", tags=["maintenance"])
    def rebuild(m: Memory = M) -> Response:
        """Drop the projections and replay the log into them; returns how many events were replayed."""
        return _json({"replayed": m.rebuild()})

    @r.post("/v1/snapshot", tags=["maintenance"])
    def snapshot(m: Memory = M) -> Response:
        """Write a snapshot of the in-memory state now; returns its directory (null when the store is empty)."""
        return _json({"path": m.snapshot()})

    @r.post("/v1/housekeep", tags=["maintenance"])
    def housekeep(m: Memory = M) -> Response:
        """Write what is due now: the log's recovery checkpoints and the state snapshot."""
        return _json(m.housekeep())

    @r.get("/v1/export", tags=["maintenance"])
    def export(m: Memory = M) -> StreamingResponse:
        """This tenant's events as a JSONL stream (the format ``POST /v1/import`` reads)."""

        def rows() -> Iterator[bytes]:
            for e in tenant_events(m.log, m.tenant):
                yield (json.dumps(event_row(e), ensure_ascii=False) + "\n").encode()

        return StreamingResponse(rows(), media_type="application/x-ndjson")

    @r.post("/v1/import", tags=["maintenance"])
    async def import_(request: Request, m: Memory = M) -> Response:
        """Append exported events (JSONL body, or Parquet with ``Content-Type: application/vnd.apache.parquet``)."""
        import anyio

        parquet = "parquet" in request.headers.get("content-type", "")
        with tempfile.TemporaryDirectory() as d:
            target = Path(d) / ("import.parquet" if parquet else "import.jsonl")
            with target.open("wb") as f:
                try:
                    async for chunk in request.stream():
                        f.write(chunk)
                except _TooLarge:  # a chunked body past the limit: stop reading, refuse
                    return _too_large(request.scope[TOO_LARGE])
            try:
                n = await anyio.to_thread.run_sync(m.import_, target)
            except InvalidInput as e:
                if e.field != "path":
                    raise
                raise InvalidInput("body", e.problem) from None  # the temporary file is no concern of the client's
        return _wrote(m, n)  # {"written": ..., "skipped": ..., "conflicts": [...]}
    return r
