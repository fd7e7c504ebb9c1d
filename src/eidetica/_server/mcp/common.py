"""What the MCP tools share: the memory of the call (``Tools.mem``), running blocking calls in a thread
with errors a model can read (``Tools.run``), hits as lines, and argument errors in plain words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from ...errors import EideticaError
from ...memory import Memory

__all__ = ["Tools"]


def _hits(hits: list[Any], empty: str, *, scored: bool = True) -> str:
    """One line a hit with its id; a ranked hit shown as 0.00 is left out (it is no answer, and a model would read it as one)."""
    shown = [h for h in hits if not scored or round(h.score, 2) > 0]
    return "\n".join(f"{h}  (id: {h.id})" for h in shown) if shown else empty


def _plain(tool: str, e: ValidationError) -> str:
    """A tool's rejected arguments as one sentence a model can act on (pydantic's text carries URLs and its types)."""
    parts = []
    for err in e.errors():
        field = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        problem = "is required" if err.get("type") == "missing" else str(err.get("msg", "is invalid")).lower()
        problem = problem.removeprefix("input ")
        parts.append(f"`{field}` {problem}")
    return f"{tool} was not called: " + "; ".join(parts) + ". Fix the arguments and call it again."


class _Server(MCPServer):
    """``MCPServer`` whose argument errors read as plain sentences."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Call a tool; a schema error of its arguments becomes a ``ToolError`` in plain words."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(_plain(name, e.__cause__)) from None
            raise


class Tools:
    """The memory a tool acts on (``memory_for(scope)``: the HTTP request's scope, or None on stdio)."""

    def __init__(self, memory_for: Callable[[dict[str, Any] | None], Memory]) -> None:
        self.memory_for = memory_for

    def mem(self, ctx: Context) -> Memory:
        """The memory of this call's tenant."""
        request = getattr(ctx.request_context, "request", None) if ctx is not None else None
        return self.memory_for(getattr(request, "scope", None))

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run a blocking call in a thread; an eidetica error becomes a ``ToolError`` the model reads."""
        try:
            return await anyio.to_thread.run_sync(fn)  # fsync, embedding and index queries block
        except EideticaError as e:  # the model reads this and can correct its call
            raise ToolError(f"{type(e).__name__}: {e}") from None
