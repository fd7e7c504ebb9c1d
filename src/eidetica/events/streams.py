"""Stream names: one place that knows how tenants and ids map onto streams."""

from __future__ import annotations

from urllib.parse import quote, unquote

__all__ = [
    "session_stream",
    "summary_stream",
    "facts_stream",
    "notes_stream",
    "schedules_stream",
    "items_stream",
    "meta_stream",
    "parse_stream",
]


def _c(part: str) -> str:
    # ':' separates the parts, so it (and '%') is escaped inside them: tenant "a:b" with
    # session "c" must never name the same stream as tenant "a" with session "b:c".
    return quote(part, safe="")


def session_stream(tenant: str, session_id: str) -> str:
    """The stream of a session's messages."""
    return f"session:{_c(tenant)}:{_c(session_id)}"


def summary_stream(tenant: str, session_id: str) -> str:
    """The stream of a session's rolling summaries; its version is the summary epoch."""
    return f"summary:{_c(tenant)}:{_c(session_id)}"


def facts_stream(tenant: str, user_id: str) -> str:
    """The stream of a user's facts (one writer: the user's FactCurator)."""
    return f"facts:{_c(tenant)}:{_c(user_id)}"


def notes_stream(tenant: str, user_id: str) -> str:
    """The stream of a user's notes."""
    return f"notes:{_c(tenant)}:{_c(user_id)}"


def schedules_stream(tenant: str, user_id: str) -> str:
    """The stream of a user's schedules."""
    return f"schedules:{_c(tenant)}:{_c(user_id)}"


def items_stream(tenant: str, user_id: str) -> str:
    """The stream of a user's framework store items (one writer: the user's ItemsActor)."""
    return f"items:{_c(tenant)}:{_c(user_id)}"


def meta_stream(name: str) -> str:
    """A store-wide stream (e.g. the embedder identity)."""
    return f"meta:{_c(name)}"


def parse_stream(stream: str) -> tuple[str, str, str]:
    """Split a stream name into (kind, tenant, id); meta streams give (kind, "", name)."""
    parts = stream.split(":")
    if len(parts) == 2:
        return parts[0], "", unquote(parts[1])
    kind, tenant, ident = parts
    return kind, unquote(tenant), unquote(ident)
