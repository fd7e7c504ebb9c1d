"""eidetica: long-term memory for LLM agents, as an event-sourced log with rebuildable indices.

The curated public API lives here; ``tests/test_public_api.py`` pins it.
"""

from __future__ import annotations

from .errors import (
    CorruptLog,
    DimensionMismatch,
    EideticaError,
    EmbeddingModelChanged,
    InvalidInput,
    NotFound,
    ProviderError,
    StoreLocked,
    UnknownEventType,
    WrongExpectedVersion,
)
from .events import ANY, NO_STREAM, STREAM_EXISTS, ArrowLog, EventLog, InMemoryLog, NewEvent, RecordedEvent

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # the log
    "EventLog",
    "ArrowLog",
    "InMemoryLog",
    "NewEvent",
    "RecordedEvent",
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    # errors
    "EideticaError",
    "InvalidInput",
    "WrongExpectedVersion",
    "CorruptLog",
    "UnknownEventType",
    "StoreLocked",
    "EmbeddingModelChanged",
    "DimensionMismatch",
    "NotFound",
    "ProviderError",
]
