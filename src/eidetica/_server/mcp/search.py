"""``search_memory``: everything kept about the user (conversations, facts, notes)."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from ..._store.options import SEARCH_OPTIONS, Kind
from .common import Tools, _hits

__all__ = ["register"]

_KINDS: tuple[Kind, ...] = SEARCH_OPTIONS.kinds  # type: ignore[assignment]  # a tuple of kinds, the default


def register(server: MCPServer, tools: Tools) -> None:
    """Add this resource's tools to ``server``."""
    mem, run = tools.mem, tools.run

    @server.tool()
    async def search_memory(query: str, user: str, ctx: Context, top_k: int = 10,
                            exclude_session: str | None = None, now: str | None = None,
                            min_score: float | None = SEARCH_OPTIONS.min_score,
                            kinds: tuple[Kind, ...] = _KINDS) -> str:
        """Search everything kept about the user: past conversations (messages and summaries), facts and notes.

        Use it for "what did I tell you about ...?" questions. `exclude_session` leaves out the
        current conversation. Lines are "[Kind | score | time]  text  (id: ...)". `now`: when the
        question is asked (ISO 8601; default now): "last week", "3 days ago" count from it.
        `min_score`: the calibrated cut below which a hit is left out (lower it to see more);
        `kinds`: which of message, summary, fact, note to search (default all four).
        """
        m = mem(ctx)
        hits = await run(lambda: m.search(query, user=user, top_k=top_k, exclude_session=exclude_session, now=now,
                                          min_score=min_score, kinds=kinds))
        return _hits(hits, "Nothing relevant was said in past conversations.")
