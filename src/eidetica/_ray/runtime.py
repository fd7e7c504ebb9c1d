"""``RayRuntime``: the runtime port over named Ray actors; idle session actors are retired and come back on demand."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from ..actors import (
    FactCurator,
    ItemsActor,
    MemoryConfig,
    NotesActor,
    Runtime,
    SchedulesActor,
    SessionActor,
    Summarizer,
)
from ..providers import LLM
from .calls import ACTOR_OPTIONS, Written
from .hosts import ActorHost, RemoteActor

__all__ = ["RayRuntime"]


# -- the runtime --------------------------------------------------------------------------
class RayRuntime(Runtime):
    """Hands out named Ray actors; idle session actors are retired and come back on demand."""

    def __init__(
        self, key: str, log: Any, embedder: Any, llm: LLM, config: MemoryConfig, idle_seconds: float = 300.0,
        clock: Callable[[], dt.datetime] | None = None, written: Written | None = None,
        snapshots_dir: str | None = None,
    ) -> None:
        self.key = key
        self.snapshots_dir = snapshots_dir  # where hosted actors keep their snapshots (None: replay on first use)
        self.written = written if written is not None else Written()  # offsets this handle's writes reached
        self.clock = clock
        self.log = log
        self.embedder = embedder
        self.llm = llm
        self.config = config
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._proxies: dict[tuple[str, ...], RemoteActor] = {}
        self._summarizer: RemoteActor | None = None
        self._stop = threading.Event()
        # idle session actors are retired in the background; they come back on demand
        self._janitor = threading.Thread(target=self._retire_loop, name="eidetica-retire", daemon=True)
        self._janitor.start()

    def _retire_loop(self) -> None:
        while not self._stop.wait(max(0.5, min(60.0, self.idle_seconds / 4))):
            try:
                self.retire_idle()
            except Exception:  # noqa: BLE001 - a cluster hiccup must not kill the janitor
                pass

    def _actor(self, kind: str, cls: type, ident: tuple[str, ...], args: tuple) -> Any:
        key = (kind, *ident)
        with self._lock:
            proxy = self._proxies.get(key)
            if proxy is None:
                name = ":".join(("eidetica", self.key, kind, *ident))

                def make() -> Any:
                    return ActorHost.options(name=name, get_if_exists=True, **ACTOR_OPTIONS).remote(
                        kind, self.log, self.embedder, self.llm, self.config, args, self.clock, self.snapshots_dir
                    )

                proxy = self._proxies[key] = RemoteActor(make(), cls, make, self.written)
            return proxy

    def session(self, tenant: str, session_id: str, user_id: str) -> Any:
        """The Session actor of a session (created on first use)."""
        return self._actor("session", SessionActor, (tenant, session_id), (tenant, session_id, user_id))

    def curator(self, tenant: str, user_id: str) -> Any:
        """The FactCurator of a user."""
        return self._actor("curator", FactCurator, (tenant, user_id), (tenant, user_id))

    def notes(self, tenant: str, user_id: str) -> Any:
        """The notes actor of a user."""
        return self._actor("notes", NotesActor, (tenant, user_id), (tenant, user_id))

    def schedules(self, tenant: str, user_id: str) -> Any:
        """The schedules actor of a user (one writer per user, named: shared by every client)."""
        return self._actor("schedules", SchedulesActor, (tenant, user_id), (tenant, user_id))

    def items(self, tenant: str, user_id: str) -> Any:
        """The items actor of a user."""
        return self._actor("items", ItemsActor, (tenant, user_id), (tenant, user_id))

    def summarizer(self) -> Any:
        """A Summarizer actor."""
        return self._actor("summarizer", Summarizer, ("0",), ())

    def written_floor(self) -> dict[int, int]:
        """The last offset per partition this handle's writes reached (or found committed when it opened)."""
        return self.written.floor()

    def retire_idle(self) -> int:
        """Kill session actors idle for longer than ``idle_seconds``; they come back on demand."""
        now = time.monotonic()
        with self._lock:
            idle = [
                p for k, p in self._proxies.items()
                if k[0] == "session" and not p._retired and not p._busy and now - p.last_used > self.idle_seconds
            ]
            for p in idle:
                try:  # its fold, so that coming back replays only the tail (best effort: the log is the truth)
                    ray.get(p._handle.call.remote("save_snapshot"), timeout=30)
                except Exception:  # noqa: BLE001
                    pass
                # the proxy stays: a SessionHandle may still hold it, and its next call
                # re-creates the actor by name (rebuilt from its snapshot and the log)
                ray.kill(p._handle, no_restart=True)
                object.__setattr__(p, "_retired", True)
        return len(idle)

    def drop_session(self, tenant: str, session_id: str) -> None:
        """Forget the proxy of a session (the actor is rebuilt from the log when needed)."""
        with self._lock:
            self._proxies.pop(("session", tenant, session_id), None)

    def close(self) -> None:
        """Stop the janitor and drop proxies; the named actors stay up for other clients of the store."""
        self._stop.set()
        with self._lock:
            self._proxies.clear()
