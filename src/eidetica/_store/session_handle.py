"""``SessionHandle``: one conversation of a user, as ``Memory.session`` hands it out.

Appends go to the session's actor (buffered when asked: up to ``buffer`` messages, or
``flush_seconds``, written in one call), then to the facade's after-append work
(extraction, summaries); reads flush first, so a handle reads its own writes. The memory
is a ``Store`` (``_store/store.py``): the facade imports this module, not the reverse.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from ..actors import STRATEGIES, Message, SessionActor
from ..actors._text import check_id, check_text
from ..errors import InvalidInput
from .erasure import forget_message, forget_session
from .store import Store
from .upkeep import after_append

__all__ = ["SessionHandle", "open_session"]


def open_session(m: Store, session_id: str, user: str, strategy: str | None, buffer: int, flush_seconds: float) -> SessionHandle:
    """``Memory.session``: the arguments checked, the session's actor found, and the handle on it."""
    m.gate.check_open()
    check_id("session_id", session_id)
    check_id("user", user)
    if strategy is not None and strategy not in STRATEGIES:
        raise InvalidInput("strategy", f"must be one of {', '.join(STRATEGIES)}", strategy)
    actor = m.runtime.session(m.tenant, session_id, user)
    if actor.owner is not None and actor.owner != user and actor.started:
        raise InvalidInput("user", f"session {session_id!r} belongs to another user")
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0:
        raise InvalidInput("buffer", "must be an int >= 0", buffer)
    return SessionHandle(m, actor, strategy, buffer, flush_seconds)


class SessionHandle:
    """One conversation: append messages, read history for the LLM."""

    def __init__(self, memory: Store, actor: SessionActor, strategy: str | None, buffer: int = 0, flush_seconds: float = 0.05) -> None:
        self._m = memory
        self._actor = actor
        self.strategy = strategy
        self.session_id = actor.session_id
        self.user = actor.user_id
        self.system_prompt: str | None = None
        self._run_start = actor.last_sequence
        self.buffer_size = buffer
        self.flush_seconds = flush_seconds
        self._buffer: list[dict[str, Any]] = []
        self._buf_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._flush_error: BaseException | None = None

    def append(
        self,
        role: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        *,
        time: dt.datetime | None = None,
        sequence: int | None = None,
        event_id: uuid.UUID | None = None,
    ) -> int:
        """Append a message; returns its log offset (-1 while buffered). System prompts stay on the handle.

        ``event_id`` (caller-chosen) makes a retried append idempotent (``eidetica.connect`` sets one).
        """
        if role == "system":
            self.system_prompt = check_text("content", content)
            return self._m.log.head(self._m.log.partition_of(self._actor.stream)) - 1
        if event_id is not None and not isinstance(event_id, uuid.UUID):
            raise InvalidInput("event_id", "must be a uuid.UUID", event_id)
        item = {"role": role, "content": content, "metadata": metadata, "time": time, "sequence": sequence,
                "event_id": event_id}
        if not self.buffer_size:
            return self.extend([item])
        from ..actors import ROLES

        if role not in ROLES:
            raise InvalidInput("role", "must be one of user, assistant, tool", role)
        check_text("content", content)
        with self._buf_lock:
            self._raise_flush_error()
            self._buffer.append(item)
            full = len(self._buffer) >= self.buffer_size
            if not full and self._timer is None:
                self._timer = threading.Timer(self.flush_seconds, self._flush_quietly)
                self._timer.daemon = True
                self._timer.start()
        return self.flush() if full else -1

    def _raise_flush_error(self) -> None:
        if self._flush_error is not None:
            e, self._flush_error = self._flush_error, None
            raise e

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except BaseException as e:  # noqa: BLE001 - surfaced on the caller's next call
            self._flush_error = e

    def flush(self) -> int:
        """Write buffered messages now (one call); returns the last offset, -1 when nothing was buffered."""
        with self._buf_lock:
            items, self._buffer = self._buffer, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not items:
                self._raise_flush_error()
                return -1
            return self.extend(items)

    def extend(self, messages: Sequence[dict[str, Any]]) -> int:
        """Append many messages in one atomic write (one embedding batch); returns the last offset."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
            raise InvalidInput("messages", "must be a non-empty list of dicts")
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                raise InvalidInput(f"messages[{i}]", "must be a dict")
        # event ids are chosen here, by the caller: a retried call is then idempotent
        items = [dict(m, metadata=m.get("metadata") or {}, event_id=m.get("event_id") or uuid.uuid4()) for m in messages]
        return self._m.gate.write("append", lambda: self._extend(items), -1)

    def _extend(self, items: list[dict[str, Any]]) -> int:
        first_seq = self._actor.last_sequence
        offset = self._actor.append_many(items)
        written = self._actor.since(first_seq)
        stored = [
            {"role": m.role, "content": m.content, "metadata": m.metadata, "sequence": m.sequence, "time": m.time}
            for m in written
        ]
        after_append(self._m, self._actor, stored, self.strategy or self._m.config.strategy)
        return offset

    def read(self, *, strategy: str | None = None, window: int | None = None, token_budget: int | None = None) -> list[Message]:
        """Messages for the LLM: system prompt, rolling summary, then recent turns within the budget."""
        self.flush()
        msgs = self._actor.read(strategy=strategy or self.strategy, window=window, token_budget=token_budget)
        if self.system_prompt:
            msgs = [Message(role="system", content=self.system_prompt, time=self._m.clock(), sequence=-1)] + msgs
        return msgs

    def appended(self) -> list[Message]:
        """Only the messages this handle (this run) appended."""
        self.flush()
        return [m for m in self._actor.history() if m.sequence > self._run_start]

    def history(self, limit: int | None = None) -> list[Message]:
        """Stored messages, oldest first (the last ``limit``)."""
        self.flush()
        return self._actor.history(limit)

    def summary(self) -> str | None:
        """The latest rolling summary's text, if any."""
        return self._actor.summary()[1]

    def summarize(self, *, force: bool = True) -> bool:
        """Roll old turns into the summary now; True when a summary was committed."""
        return self._m.runtime.summarizer().summarize(self._actor, force=force).committed

    def restore(self, token_budget: int | None = None) -> list[Message]:
        """Resume: the last messages that fit ``token_budget``."""
        self.flush()
        return self._actor.restore(token_budget)

    def pop(self) -> Message | None:
        """Take back the last message (an event: ``MessageRetracted``); returns it, None when empty."""
        self.flush()
        msg = self._actor.retract_last()
        self._m.gate.sync()
        return msg

    def forget(self) -> None:
        """Forget this session and what was derived from its messages alone."""
        forget_session(self._m, self.session_id, self._actor.user_id)

    def forget_message(self, sequence: int) -> dict[str, Any]:
        """Forget one message and what was derived from it alone (facts, its part of the summary); ``compact`` erases it."""
        self.flush()
        return forget_message(self._m, self._actor, sequence)

    def __len__(self) -> int:
        self.flush()
        return len(self._actor)
