"""``Guard``: the ASGI wrapper around the API (body-size limits, the lean append path, the MCP mount at /mcp, lifespans)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from .._remote.wire import MAX_BODY_BYTES, MAX_IMPORT_BYTES
from ..errors import EideticaError
from ._limits import _limited, _send, _too_large, _TooLarge
from .routes.append import _APPEND_PATH
from .routes.common import _err

__all__ = ["Guard"]


class Guard:
    """ASGI wrapper: body-size limits, the MCP mount at /mcp (same keys), and both lifespans."""

    def __init__(self, app: FastAPI, mcp_app: Any = None, mcp_server: Any = None, *,
                 max_body_bytes: int = MAX_BODY_BYTES, max_import_bytes: int = MAX_IMPORT_BYTES) -> None:
        self.app = app
        self.mcp_app = mcp_app
        self.mcp_server = mcp_server
        self.append_lean = getattr(app.state, "append_lean", None)
        self.max_body_bytes = max_body_bytes
        self.max_import_bytes = max_import_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Route a request (or the lifespan) to the API or the MCP app."""
        if scope["type"] == "lifespan":
            return await self._lifespan(scope, receive, send)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_import_bytes if scope["path"] == "/v1/import" else self.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return await _send(send, _too_large(limit))
        receive = _limited(receive, limit, scope)
        if self.mcp_app is not None and (scope["path"] == "/mcp" or scope["path"].startswith("/mcp/")):
            from starlette.requests import Request as _Req

            try:
                tenant = self.app.state.authenticate(_Req(scope))
            except EideticaError as e:
                return await _send(send, _err(e))
            scope = dict(scope, eidetica_tenant=tenant)
            return await self.mcp_app(scope, receive, send)
        try:
            lean = _APPEND_PATH.fullmatch(scope["path"]) if scope["method"] == "POST" and self.append_lean else None
            if lean is not None:
                await self.append_lean(scope, receive, send, lean.group(1), lean.group(2))
            else:
                await self.app(scope, receive, send)
        except _TooLarge:
            await _send(send, _too_large(limit))

    async def _lifespan(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        if self.mcp_server is not None:
            async with self.mcp_server.session_manager.run():
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
        else:
            await send({"type": "lifespan.startup.complete"})
            await receive()
        await send({"type": "lifespan.shutdown.complete"})
