"""What every aggregate of ``StateProjection`` shares: the lock, the log, the tombstones (issue 41).

A forget leaves a tombstone (the forget event's log time) per scope: ``_dead`` tells whether an
event of that user or session is covered by a later forget, so the folds do not depend on how the
Projector interleaves partitions (see ``_state``).
"""

from __future__ import annotations

import datetime as dt
import threading

from ..events import EventLog
from ..events import types as ev


class StateBase:
    """The shared part of the state's aggregates (``_state_sessions``, ``_facts``, ``_notes``, ``_schedules``, ``_items``)."""

    _lock: threading.RLock
    _log: EventLog | None
    # without a log to read them back from, bodies are kept here (tests, tools)
    _bodies: dict[tuple[str, str, int], ev.MessageAppended] | None
    _session_user: dict[tuple[str, str], str]  # survives forgetting: ids only
    _user_tomb: dict[tuple[str, str, str], dt.datetime]  # (tenant, user, scope) -> time
    _session_tomb: dict[tuple[str, str], dt.datetime]

    def _reset_tombs(self) -> None:
        """Forget the tombstones and which user each session belongs to."""
        self._session_user = {}
        self._user_tomb = {}
        self._session_tomb = {}

    def _user_dead(self, tenant: str, user_id: str, scope: str, time: dt.datetime) -> bool:
        """Whether a user forget of this scope (or of everything) covers an event at ``time``."""
        for sc in (scope, "all"):
            t = self._user_tomb.get((tenant, user_id, sc))
            if t is not None and time <= t:
                return True
        return False

    def _dead(self, tenant: str, user_id: str | None, session_id: str | None, time: dt.datetime,
              scope: str = "sessions") -> bool:
        """Whether an event of this user/session is covered by a later forget."""
        if user_id is not None and self._user_dead(tenant, user_id, scope, time):
            return True
        if session_id is not None:
            t = self._session_tomb.get((tenant, session_id))
            if t is not None and time <= t:
                return True
            u = self._session_user.get((tenant, session_id))
            if u is not None and user_id is None and self._user_dead(tenant, u, "sessions", time):
                return True
        return False
