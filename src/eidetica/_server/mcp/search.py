"""``search_memory``: everything kept about the user (conversations, facts, notes)."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from .common import Tools, _hits

__all__ = ["register"]


def register(server: MCPServer, tools: Tools) -> None:
    """Add this resource's tools to ``server``."""
    mem, run = tools.mem, tools.run

    @server.tool()
    async def search_memory(query: str, user: str, ctx: Context, top_k: int = 10,
                            exclude_session: str | None = None, now: str | None = None) -> str:
        """Search everything kept about the user: past conversations (messages and summaries), facts and notes.

        Use it for "what did I tell you about ...?" questions. `exclude_session` leaves out the
        current conversation. Lines are "[Kind | score | time]  text  (id: ...)". `now`: when the
        question is asked (ISO 8601; default now): "last week", "3 days ago" count from it.
        """
        m = mem(ctx)
        hits = await run(lambda: m.search(query, user=user, top_k=top_k, exclude_session=exclude_session, now=now))
        return _hits(hits, "Nothing relevant was said in past conversations.")
