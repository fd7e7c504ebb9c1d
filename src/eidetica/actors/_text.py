"""Text helpers shared by the actors: chunking, hashing, categories, token counts."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec
import numpy as np

from ..errors import InvalidInput

_CATEGORY_BAD = re.compile(r"[^a-z0-9_-]")
MAX_CONTENT_CHARS = 1_000_000
MAX_ID_CHARS = 256


def chunk_text(text: str, size: int, overlap: int) -> list[str]:
    """Split text into windows of ``size`` characters overlapping by ``overlap``, on word boundaries."""
    text = text.strip()
    if len(text) <= size:
        return [text] if text else []
    chunks, start = [], 0
    step = size - overlap
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            cut = text.rfind(" ", start + step, end)
            end = cut if cut > start else end
        chunks.append(text[start:end].strip())
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return [c for c in chunks if c]


def _arg_text(value: Any) -> str:
    """The words of a tool call's arguments: values (and keys) of a JSON document, flattened."""
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return value
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_arg_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_arg_text(v) for v in value)
    return "" if value is None else str(value)


def indexed_text(content: str, metadata: dict[str, Any]) -> str:
    """What a message's chunks hold: its content, then one line per tool call (name and arguments) in
    ``metadata["tool_calls"]`` (OpenAI ``function.arguments`` or ``name``/``args``/``input``), so a value the
    agent passed to a tool is found with its message."""
    calls = metadata.get("tool_calls") if metadata else None
    if not isinstance(calls, list):
        return content
    lines = [content] if content.strip() else []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else call
        args = next((fn[k] for k in ("arguments", "args", "input") if k in fn), None)
        name, words = str(fn.get("name") or "tool"), _arg_text(args)
        lines.append(f"[{name}: {words}]" if words else f"[{name}]")
    return "\n".join(lines)


def content_hash(text: str) -> str:
    """A stable short hash of normalised text (dedup key)."""
    return hashlib.blake2b(" ".join(text.lower().split()).encode(), digest_size=12).hexdigest()


def sanitize_category(category: Any) -> str:
    """The caller's category, lower-cased, other characters than ``[a-z0-9_-]`` made ``_``, cut to 64; ``general`` when empty."""
    if not isinstance(category, str) or not category.strip():
        return "general"
    return _CATEGORY_BAD.sub("_", category.strip().lower())[:64]


def _utf8(field: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(field, "is not valid Unicode (lone surrogate characters)") from None


def check_id(field: str, value: Any) -> str:
    """Validate an id-like argument (user, session, tenant) and return it."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, "must be a non-empty string", value)
    if len(value) > MAX_ID_CHARS or any(ord(ch) < 32 for ch in value):
        raise InvalidInput(field, f"must be at most {MAX_ID_CHARS} printable characters", value)
    _utf8(field, value)
    return value


def check_metadata(field: str, value: Any) -> dict[str, Any]:
    """Validate caller metadata: a dict that msgpack can store (str keys, plain values)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(field, f"must be a dict, not {type(value).__name__}")
    try:
        msgspec.msgpack.encode(value)
    except (TypeError, ValueError, UnicodeEncodeError, OverflowError) as e:
        raise InvalidInput(field, f"cannot be stored: {e}") from None
    return value


def check_text(field: str, value: Any, *, allow_empty: bool = False) -> str:
    """Validate free text (message content, fact, note, query) and return it."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, not {type(value).__name__}", value)
    if not allow_empty and not value.strip():
        raise InvalidInput(field, "must not be empty", value)
    if len(value) > MAX_CONTENT_CHARS:
        raise InvalidInput(field, f"is {len(value)} characters, over {MAX_CONTENT_CHARS}")
    if "\x00" in value:
        raise InvalidInput(field, "must not contain NUL characters")
    _utf8(field, value)
    return value


def vectors_to_bytes(vectors: np.ndarray) -> bytes:
    """float32 little-endian bytes of a [n, dim] array (what ChunksEmbedded stores)."""
    return np.ascontiguousarray(vectors, dtype="<f4").tobytes()


def vectors_from_bytes(data: bytes, dim: int) -> np.ndarray:
    """The [n, dim] float32 array stored in a ChunksEmbedded event."""
    return np.frombuffer(data, dtype="<f4").reshape(-1, dim)
