"""``store_note``: a free-form note for the user."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from .common import Tools

__all__ = ["register"]


def register(server: MCPServer, tools: Tools) -> None:
    """Add this resource's tools to ``server``."""
    mem, run = tools.mem, tools.run

    @server.tool()
    async def store_note(text: str, user: str, ctx: Context, session_id: str | None = None) -> str:
        """Keep a free-form note for the user (an arrangement, a reminder, a detail to keep); returns its id.

        Give the conversation's `session_id` (as in `append_messages`): reverting that session takes the note back too.
        """
        m = mem(ctx)
        nid = await run(lambda: m.store_note(text, user=user, session_id=session_id))
        return f"Stored note {nid}."
