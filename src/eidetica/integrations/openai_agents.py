"""``EideticaSession``: the OpenAI Agents SDK ``Session`` protocol over an eidetica session
(``pip install eidetica[openai-agents]``).

Every item (messages, function calls and their outputs, reasoning) is one message of the
eidetica session: its text is the message content (searchable, summarised, forgettable like
any other message) and the item itself rides verbatim in the message's metadata, so
``get_items`` gives back exactly what ``add_items`` got. ``pop_item`` appends a
``MessageRetracted`` event; ``clear_session`` forgets the session (``SessionForgotten``).
"""

from __future__ import annotations

import json
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from .._remote.aclient import aio
from ..errors import InvalidInput

__all__ = ["EideticaSession"]

_ITEM = "agents_item"  # the metadata key the verbatim item lives under


def _text(item: dict[str, Any]) -> str:
    """The searchable text of an item: its message text, a call with its arguments, or a tool's output."""
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    elif item.get("type") == "function_call":
        text = f"{item.get('name', '')}({item.get('arguments', '')})"
    elif "output" in item:
        out = item["output"]
        text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
    else:
        text = ""
    return text if text.strip() else json.dumps(item, ensure_ascii=False, sort_keys=True)


def _role(item: dict[str, Any]) -> str:
    role = item.get("role")
    # eidetica keeps system prompts off the record; a system/developer item is kept verbatim as a tool-role message
    return role if role in ("user", "assistant") else "tool"


def _message(i: int, item: Any) -> dict[str, Any]:
    """The eidetica message that carries the ``i``-th item of an ``add_items`` call."""
    if not isinstance(item, dict):
        raise InvalidInput(f"items[{i}]", "must be a dict (a TResponseInputItem)")
    return {"role": _role(item), "content": _text(item), "metadata": {_ITEM: item}}


class EideticaSession(SessionABC):
    """An Agents SDK session whose items are messages of an eidetica session."""

    def __init__(self, session_id: str, memory: Any, *, user: str,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.session_id = session_id
        self.memory = memory
        self.user = user
        # a dict becomes SessionSettings as the SDK's own sessions coerce it (unknown keys: TypeError)
        self.session_settings = (coerce_session_settings(session_settings) if session_settings is not None
                                 else SessionSettings())
        self._handle = memory.session(session_id, user=user)
        self._face: Any = None
        self._async: Any = None

    async def _session(self) -> Any:
        """This session on the memory's async face (``eidetica._remote.aio``: served, requests await on the
        loop, no thread; embedded, a bounded pool), opened once per face."""
        face = await aio(self.memory)
        if face is not self._face:
            self._async, self._face = await face.session(self.session_id, user=self.user), face
        return self._async

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (all when None, or the settings' limit), oldest first."""
        n = resolve_session_limit(limit, self.session_settings)
        msgs = await (await self._session()).history(n)
        return [m.metadata[_ITEM] if _ITEM in (m.metadata or {}) else {"role": m.role, "content": m.content} for m in msgs]

    async def add_items(self, items: list[Any]) -> None:
        """Append the items in one write (one embedding batch)."""
        if not items:
            return
        msgs = [_message(i, item) for i, item in enumerate(items)]
        await (await self._session()).extend(msgs)

    async def pop_item(self) -> Any | None:
        """Take back the most recent item (a ``MessageRetracted`` event) and return it; None when empty."""
        msg = await (await self._session()).pop()
        if msg is None:
            return None
        return msg.metadata[_ITEM] if _ITEM in (msg.metadata or {}) else {"role": msg.role, "content": msg.content}

    async def clear_session(self) -> None:
        """Forget every item of the session (``SessionForgotten``; ``compact`` erases them from disk)."""
        s = await self._session()
        if await s.length():
            await s.forget()
