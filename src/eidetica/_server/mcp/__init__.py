"""The memory as MCP tools (official ``mcp`` SDK 2.x), for stdio and for /mcp on the server.

Tool arguments carry the Python API's parameter names; results are plain text a model
reads. Over HTTP the tenant comes from the request's API key (checked before the MCP app
sees the request); over stdio it is the store's tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server import MCPServer

from ...memory import Memory
from . import facts, notes, search, sessions
from .common import Tools, _Server

__all__ = ["build_mcp"]

INSTRUCTIONS = (
    "Long-term memory for this conversation's user. Call `get_context` (or `recall`) before answering "
    "questions that may depend on what you were told before; call `remember` when the user states a lasting "
    "fact or preference; `search_memory` finds what was said in earlier conversations."
)


def build_mcp(memory_for: Callable[[dict[str, Any] | None], Memory]) -> MCPServer:
    """An MCP server whose tools act on ``memory_for(scope)`` (scope: the HTTP request's, or None on stdio)."""
    from ... import __version__

    server: MCPServer = _Server(name="eidetica", instructions=INSTRUCTIONS, version=__version__)
    tools = Tools(memory_for)
    for resource in (facts, search, sessions, notes):
        resource.register(server, tools)
    return server
