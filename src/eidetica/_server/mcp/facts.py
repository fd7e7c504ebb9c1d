"""The facts' tools: remember, recall, list, forget, and the context block."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from ..._store.context import CONTEXT_TOKENS, render
from .common import Tools, _hits

__all__ = ["register"]


def register(server: MCPServer, tools: Tools) -> None:
    """Add this resource's tools to ``server``."""
    mem, run = tools.mem, tools.run

    @server.tool()
    async def remember(content: str, user: str, ctx: Context, category: str = "general") -> str:
        """Store a lasting fact about the user (a preference, a plan, something about their life).

        `content` is one self-contained sentence, e.g. "Ada is allergic to peanuts". `category` is a
        short lowercase label such as "health", "food" or "work". Restating a known fact strengthens it.
        Returns the fact's id.
        """
        m = mem(ctx)
        fid = await run(lambda: m.remember(content, category, user=user))
        return f"Remembered as {fid}."

    @server.tool()
    async def recall(query: str, user: str, ctx: Context, top_k: int = 5, category: str | None = None,
                     now: str | None = None) -> str:
        """Find the user's stored facts most relevant to `query` (a question or topic in plain words).

        Each line is "[Category | score | time]  fact  (id: ...)"; higher scores are more relevant.
        `now`: when the question is asked (ISO 8601; default now): "last week" counts from it.
        """
        m = mem(ctx)
        hits = await run(lambda: m.recall(query, top_k, user=user, category=category, now=now))
        return _hits(hits, "No stored facts match.")


    @server.tool()
    async def list_memories(user: str, ctx: Context, category: str | None = None, limit: int = 20) -> str:
        """List the user's stored facts, strongest first (optionally one `category`)."""
        m = mem(ctx)
        hits = await run(lambda: m.list_memories(user=user, category=category, limit=limit))
        return _hits(hits, "No facts are stored for this user.", scored=False)

    @server.tool()
    async def forget_memory(fact_id: str, user: str, ctx: Context) -> str:
        """Forget one stored fact by its id (ids are shown by `recall` and `list_memories`)."""
        m = mem(ctx)
        await run(lambda: m.forget(fact_id, user=user))
        return f"Forgot {fact_id}."

    @server.tool()
    async def forget_all_memories(user: str, ctx: Context) -> str:
        """Forget everything stored about the user: facts, notes, schedules and conversations. Cannot be undone."""
        m = mem(ctx)
        await run(lambda: m.forget_user(user))
        return f"Forgot everything about {user}."

    @server.tool()
    async def get_context(query: str, user: str, ctx: Context, max_facts: int = 10, max_tokens: int = CONTEXT_TOKENS,
                          now: str | None = None) -> str:
        """A "## Relevant Memory" markdown block of the user's facts and notes relevant to `query`, each with its id.

        Put it in your working context before answering; it is short (about `max_tokens`, plus the ids).
        `now`: when the question is asked (ISO 8601; default now): relative dates count from it.
        """
        m = mem(ctx)
        data = await run(lambda: m.context(query, user=user, max_facts=max_facts, max_tokens=max_tokens, as_data=True,
                                           now=now))
        return render(data, ids=True)
