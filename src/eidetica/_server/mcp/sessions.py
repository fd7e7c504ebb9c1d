"""The sessions' tools: append turns, read a conversation back."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from .common import Tools

__all__ = ["register"]


def register(server: MCPServer, tools: Tools) -> None:
    """Add this resource's tools to ``server``."""
    mem, run = tools.mem, tools.run

    @server.tool()
    async def append_messages(session_id: str, user: str, messages: list[dict[str, Any]], ctx: Context) -> str:
        """Save conversation turns to session `session_id`: a list of {"role": "user"|"assistant"|"tool", "content": "..."}.

        Facts the user states are extracted and remembered automatically.
        """
        m = mem(ctx)
        items = [{"role": x.get("role"), "content": x.get("content"), "metadata": x.get("metadata")} for x in messages]
        await run(lambda: m.session(session_id, user=user).extend(items))
        return f"Saved {len(items)} message(s) to {session_id}."

    @server.tool()
    async def read_session(session_id: str, user: str, ctx: Context, token_budget: int | None = None) -> str:
        """Read a conversation back: its rolling summary first, then the recent turns (within `token_budget`)."""
        m = mem(ctx)
        msgs = await run(lambda: m.session(session_id, user=user).read(token_budget=token_budget))
        return "\n".join(f"{x.role}: {x.content}" for x in msgs) if msgs else "The session is empty."
