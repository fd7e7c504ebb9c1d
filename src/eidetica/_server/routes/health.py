"""``/healthz`` and ``/readyz``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from .common import Api, _json

__all__ = ["router"]


def router(api: Api) -> APIRouter:
    """Liveness and readiness."""
    r = APIRouter()

    @r.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @r.get("/readyz", tags=["health"])
    def readyz() -> Response:
        """The store is open and its indices have applied every committed event."""
        try:
            api.memory.gate.sync()
            lag = api.memory.projector.lag() if hasattr(api.memory.projector, "lag") else {}
        except Exception as e:  # noqa: BLE001 - not ready is an answer, not a crash
            return _json({"status": "not ready", "problem": type(e).__name__}, 503)
        behind = sum(lag.values()) if isinstance(lag, dict) else 0
        return _json({"status": "ready" if not behind else "catching up", "lag": lag}, 200 if not behind else 503)
    return r
