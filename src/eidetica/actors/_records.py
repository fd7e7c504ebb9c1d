"""What the agent-facing API returns: messages and search hits."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

__all__ = ["Message", "Hit"]


class Message(msgspec.Struct, kw_only=True, frozen=True):
    """One message of a session, as handed to an LLM."""

    role: str
    content: str
    time: dt.datetime
    sequence: int
    metadata: dict[str, Any] = {}

    def to_openai(self) -> dict[str, str]:
        """The message as an OpenAI chat message dict."""
        return {"role": self.role, "content": self.content}


class Hit(msgspec.Struct, kw_only=True, frozen=True):
    """One result of ``recall`` or ``search``."""

    id: str
    kind: str  # message | fact | note | summary
    text: str
    score: float
    time: dt.datetime
    category: str = ""
    session_id: str = ""
    user_id: str = ""
    confidence: float = 1.0
    source_id: str = ""
    metadata: dict[str, Any] = {}
    vector_score: float = 0.0  # cosine similarity to the query (0.0 when not computed)
    text_score: float = 0.0  # raw BM25 of the query (0.0 when no term matched or not computed)

    def __str__(self) -> str:
        label = (self.category or self.kind).replace("_", " ").title()
        return f"[{label} | {self.score:.2f} | {self.time:%Y-%m-%d %H:%M}]  {self.text}"
