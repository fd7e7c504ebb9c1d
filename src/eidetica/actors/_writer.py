"""The one way an actor appends to the stream it owns: with its fold's version expected.

Every actor is the single writer of its stream, but a second writer can still appear (an
import, a restarted actor on Ray, a revert or re-extraction racing a live write). So each
append expects the version the actor's fold has reached; on ``WrongExpectedVersion`` the
actor refolds its stream (``reload``) and decides again on the fresh fold (``build`` is
called again), up to ``tries`` times. The decision is always made on the fold it appends
after: a stale decision is never written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import WrongExpectedVersion
from ..events import NewEvent

__all__ = ["append_expecting"]


def append_expecting(actor: Any, build: Callable[[], Sequence[NewEvent]], tries: int = 3) -> tuple[list[NewEvent], int, int]:
    """Append what ``build()`` decides on ``actor``'s fold, expecting ``actor.version``; refold and redecide on a race.

    ``actor`` has ``log``, ``stream``, ``version`` and ``reload()`` (its lock is held by the
    caller). Returns the events appended with their first and last offsets (``[], -1, -1``
    when ``build`` decided on nothing); ``actor.version`` is bumped past them.
    """
    for attempt in range(tries):
        news = list(build())
        if not news:
            return [], -1, -1
        try:
            first, last = actor.log.append(actor.stream, news, actor.version)
        except WrongExpectedVersion:
            if attempt == tries - 1:
                raise
            actor.reload()  # another writer got there first: decide again on the refolded stream
            continue
        actor.version += len(news)
        return news, first, last
    raise AssertionError("unreachable")
