"""The memory as MCP tools (official ``mcp`` SDK 2.x), for stdio and for /mcp on the server.

Tool arguments carry the Python API's parameter names; results are plain text a model
reads. Over HTTP the tenant comes from the request's API key (checked before the MCP app
sees the request); over stdio it is the store's tenant.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from ..errors import EideticaError
from ..memory import Memory
from .._context import CONTEXT_TOKENS, render

__all__ = ["build_mcp"]

INSTRUCTIONS = (
    "Long-term memory for this conversation's user. Call `get_context` (or `recall`) before answering "
    "questions that may depend on what you were told before; call `remember` when the user states a lasting "
    "fact or preference; `search_memory` finds what was said in earlier conversations."
)


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


def build_mcp(memory_for: Callable[[Optional[dict[str, Any]]], Memory]) -> MCPServer:
    """An MCP server whose tools act on ``memory_for(scope)`` (scope: the HTTP request's, or None on stdio)."""
    from .. import __version__

    server: MCPServer = _Server(name="eidetica", instructions=INSTRUCTIONS, version=__version__)

    def mem(ctx: Context) -> Memory:
        request = getattr(ctx.request_context, "request", None) if ctx is not None else None
        return memory_for(getattr(request, "scope", None))

    async def run(fn: Callable[[], Any]) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn)  # fsync, embedding and index queries block
        except EideticaError as e:  # the model reads this and can correct its call
            raise ToolError(f"{type(e).__name__}: {e}") from None

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
    async def recall(query: str, user: str, ctx: Context, top_k: int = 5, category: Optional[str] = None,
                     now: Optional[str] = None) -> str:
        """Find the user's stored facts most relevant to `query` (a question or topic in plain words).

        Each line is "[Category | score | time]  fact  (id: ...)"; higher scores are more relevant.
        `now`: when the question is asked (ISO 8601; default now): "last week" counts from it.
        """
        m = mem(ctx)
        hits = await run(lambda: m.recall(query, top_k, user=user, category=category, now=now))
        return _hits(hits, "No stored facts match.")

    @server.tool()
    async def search_memory(query: str, user: str, ctx: Context, top_k: int = 10,
                            exclude_session: Optional[str] = None, now: Optional[str] = None) -> str:
        """Search everything kept about the user: past conversations (messages and summaries), facts and notes.

        Use it for "what did I tell you about ...?" questions. `exclude_session` leaves out the
        current conversation. Lines are "[Kind | score | time]  text  (id: ...)". `now`: when the
        question is asked (ISO 8601; default now): "last week", "3 days ago" count from it.
        """
        m = mem(ctx)
        hits = await run(lambda: m.search(query, user=user, top_k=top_k, exclude_session=exclude_session, now=now))
        return _hits(hits, "Nothing relevant was said in past conversations.")

    @server.tool()
    async def list_memories(user: str, ctx: Context, category: Optional[str] = None, limit: int = 20) -> str:
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
                          now: Optional[str] = None) -> str:
        """A "## Relevant Memory" markdown block of the user's facts and notes relevant to `query`, each with its id.

        Put it in your working context before answering; it is short (about `max_tokens`, plus the ids).
        `now`: when the question is asked (ISO 8601; default now): relative dates count from it.
        """
        m = mem(ctx)
        data = await run(lambda: m.context(query, user=user, max_facts=max_facts, max_tokens=max_tokens, as_data=True,
                                           now=now))
        return render(data, ids=True)

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
    async def read_session(session_id: str, user: str, ctx: Context, token_budget: Optional[int] = None) -> str:
        """Read a conversation back: its rolling summary first, then the recent turns (within `token_budget`)."""
        m = mem(ctx)
        msgs = await run(lambda: m.session(session_id, user=user).read(token_budget=token_budget))
        return "\n".join(f"{x.role}: {x.content}" for x in msgs) if msgs else "The session is empty."

    @server.tool()
    async def store_note(text: str, user: str, ctx: Context, session_id: Optional[str] = None) -> str:
        """Keep a free-form note for the user (an arrangement, a reminder, a detail to keep); returns its id.

        Give the conversation's `session_id` (as in `append_messages`): reverting that session takes the note back too.
        """
        m = mem(ctx)
        nid = await run(lambda: m.store_note(text, user=user, session_id=session_id))
        return f"Stored note {nid}."

    return server
