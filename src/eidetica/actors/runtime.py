"""Runtimes decide where actors live: in this process (LocalRuntime) or on Ray (RayRuntime)."""

from __future__ import annotations

import abc
import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

from ..errors import InvalidInput
from ..events import EventLog
from ..providers import LLM, Embedder
from ._config import MemoryConfig
from ._snapshots import ActorSnapshots
from .curator import FactCurator
from .items import ItemsActor, WriteBehind
from .notes import NotesActor
from .schedules import SchedulesActor
from .session import SessionActor
from .summarizer import Summarizer

__all__ = ["Runtime", "LocalRuntime", "make_actor", "ACTOR_KINDS"]


ACTOR_KINDS = ("session", "curator", "notes", "schedules", "items", "summarizer")


def make_actor(
    kind: str, log: EventLog, args: tuple, embedder: Embedder, llm: LLM, config: MemoryConfig,
    clock: Callable[[], dt.datetime], behind: WriteBehind | None = None, snapshots: ActorSnapshots | None = None,
) -> Any:
    """A plain actor of ``kind`` over ``log`` (``args``: its tenant and ids); every runtime builds them here."""
    if kind == "session":
        return SessionActor(log, *args, embedder, config, clock, snapshots)
    if kind == "curator":
        return FactCurator(log, *args, embedder, llm, config, clock, snapshots)
    if kind == "notes":
        return NotesActor(log, *args, embedder, clock, snapshots)
    if kind == "schedules":
        return SchedulesActor(log, *args, config, clock, snapshots)
    if kind == "items":
        return ItemsActor(log, *args, embedder, clock, behind, snapshots)
    if kind == "summarizer":
        return Summarizer(log, llm, embedder, config)
    raise InvalidInput("kind", f"must be one of {', '.join(ACTOR_KINDS)}", kind)


class Runtime(abc.ABC):
    """Port: hands out the actor responsible for a session or a user."""

    @abc.abstractmethod
    def session(self, tenant: str, session_id: str, user_id: str) -> SessionActor:
        """The Session actor of a session (created on first use)."""

    @abc.abstractmethod
    def curator(self, tenant: str, user_id: str) -> FactCurator:
        """The FactCurator of a user (the single writer of the user's facts)."""

    @abc.abstractmethod
    def notes(self, tenant: str, user_id: str) -> NotesActor:
        """The notes actor of a user."""

    def items(self, tenant: str, user_id: str) -> ItemsActor:
        """The items actor of a user (the single writer of the user's framework store items)."""
        raise NotImplementedError

    @abc.abstractmethod
    def schedules(self, tenant: str, user_id: str) -> SchedulesActor:
        """The schedules actor of a user (the single writer of the user's schedules)."""

    @abc.abstractmethod
    def summarizer(self) -> Summarizer:
        """A Summarizer."""

    def close(self) -> None:
        """Release actors."""

    def drain(self) -> None:
        """Wait for the writes done behind their calls (item vectors), part of "your writes" (none by default)."""

    def written_floor(self) -> dict[int, int] | None:
        """The last offset per partition this handle's writes reached, when tracked (Ray); None: every commit counts."""
        return None

    def refold(self) -> None:
        """Drop the actors held in this process so they fold the log again (after a rewrite or an import)."""

    def with_embedder(self, embedder: Embedder) -> Runtime:
        """This runtime with its actors embedding with ``embedder`` (actors elsewhere use the store's embedder)."""
        return self


class LocalRuntime(Runtime):
    """Actors as plain objects in this process, one lock each; imports no Ray."""

    def __init__(
        self, log: EventLog, embedder: Embedder, llm: LLM, config: MemoryConfig, clock: Callable[[], dt.datetime],
        snapshots: ActorSnapshots | None = None,
    ) -> None:
        self.log = log
        self.snapshots = snapshots  # where the actors of long streams keep their folds (None: replay on first use)
        self.embedder = embedder
        self.llm = llm
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._actors: dict[tuple[str, ...], Any] = {}
        # item puts' vectors are embedded in batches behind the puts; Memory._sync waits for them
        self.items_behind = WriteBehind(embedder)
        self._summarizer = self._make("summarizer", ())

    def _make(self, kind: str, args: tuple) -> Any:
        return make_actor(kind, self.log, args, self.embedder, self.llm, self.config, self.clock, self.items_behind,
                          self.snapshots)

    def _get(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        with self._lock:
            actor = self._actors.get(key)
            if actor is None:
                actor = self._actors[key] = make()
            return actor

    def session(self, tenant: str, session_id: str, user_id: str) -> SessionActor:
        """The Session actor of a session (created on first use)."""
        actor = self._get(
            ("session", tenant, session_id),
            lambda: self._make("session", (tenant, session_id, user_id)),
        )
        if actor.user_id != user_id:
            actor.user_id = user_id  # ownership is checked against the log on append
        return actor

    def curator(self, tenant: str, user_id: str) -> FactCurator:
        """The FactCurator of a user (the single writer of the user's facts)."""
        return self._get(
            ("curator", tenant, user_id),
            lambda: self._make("curator", (tenant, user_id)),
        )

    def notes(self, tenant: str, user_id: str) -> NotesActor:
        """The notes actor of a user."""
        return self._get(("notes", tenant, user_id), lambda: self._make("notes", (tenant, user_id)))

    def schedules(self, tenant: str, user_id: str) -> SchedulesActor:
        """The schedules actor of a user."""
        return self._get(("schedules", tenant, user_id), lambda: self._make("schedules", (tenant, user_id)))

    def items(self, tenant: str, user_id: str) -> ItemsActor:
        """The items actor of a user."""
        return self._get(("items", tenant, user_id), lambda: self._make("items", (tenant, user_id)))

    def summarizer(self) -> Summarizer:
        """The process's Summarizer."""
        return self._summarizer

    def drop_session(self, tenant: str, session_id: str) -> None:
        """Forget the in-memory actor of a session (it is rebuilt from the log on next use)."""
        with self._lock:
            self._actors.pop(("session", tenant, session_id), None)

    def save_snapshots(self) -> int:
        """Write the snapshot of every actor with enough events not covered by one; returns how many."""
        with self._lock:
            actors = list(self._actors.values())
        return sum(bool(a.save_snapshot()) for a in actors if hasattr(a, "save_snapshot"))

    def drain(self) -> None:
        """Wait for item vectors embedded behind their puts."""
        self.items_behind.drain()

    def refold(self) -> None:
        """Close every actor: the next call folds the log again."""
        self.close()

    def with_embedder(self, embedder: Embedder) -> LocalRuntime:
        """A new runtime over the same log whose actors embed with ``embedder``."""
        return LocalRuntime(self.log, embedder, self.llm, self.config, self.clock, self.snapshots)

    def close(self) -> None:
        """Finish the items' write-behind queue, snapshot the long folds, then drop every actor."""
        self.items_behind.close()
        try:
            self.save_snapshots()
        finally:
            with self._lock:
                self._actors.clear()
