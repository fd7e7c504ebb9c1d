"""The events layer: event types, the envelope, the log port and its implementations."""

from .arrow_log import ArrowLog
from .envelope import ANY, LOG_SCHEMA, NO_STREAM, STREAM_EXISTS, NewEvent, RecordedEvent, utcnow
from .log import BatchLog, EventLog
from .memory_log import InMemoryLog
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__all__ = [
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    "LOG_SCHEMA",
    "NewEvent",
    "RecordedEvent",
    "EventLog",
    "BatchLog",
    "InMemoryLog",
    "ArrowLog",
    "utcnow",
    *_types_all,
]
