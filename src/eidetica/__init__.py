"""eidetica: long-term memory for LLM agents, as an event-sourced log with rebuildable indices.

The curated public API lives here; ``tests/test_public_api.py`` pins it.
"""

from __future__ import annotations

from typing import Any

from . import memory as _memory
from ._remote.aclient import connect_async
from ._remote.aio import AsyncMemory
from ._remote.client import connect
from ._store.options import SearchOptions
from .actors import Hit, MemoryConfig, Message
from .errors import *  # noqa: F403 - the whole flat error tree is public
from .errors import __all__ as _errors_all
from .events import ANY, NO_STREAM, STREAM_EXISTS, ArrowLog, EventLog, InMemoryLog, NewEvent, RecordedEvent
from .memory import Memory, SessionHandle, open


def _ray_opener() -> Any:
    """``open_ray``, imported only when a store is opened with ``runtime="ray"`` (Ray is heavy)."""
    from ._ray import open_ray

    return open_ray


_memory.ray_opener = _ray_opener  # the facade sits below the Ray host and never imports it

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # the agent-facing API
    "open",
    "connect",
    "connect_async",
    "AsyncMemory",
    "Memory",
    "SessionHandle",
    "MemoryConfig",
    "SearchOptions",
    "Hit",
    "Message",
    # the log
    "EventLog",
    "ArrowLog",
    "InMemoryLog",
    "NewEvent",
    "RecordedEvent",
    "ANY",
    "NO_STREAM",
    "STREAM_EXISTS",
    # errors: the flat tree of errors.py
    *_errors_all,
]
