"""Hosting plain eidetica actors in Ray actors: ``ActorHost`` (rebuilt from the log on (re)start) and
``RemoteActor``, its local stand-in that re-creates a retired or dead actor by name."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from ..actors import ActorSnapshots, MemoryConfig
from ..actors.runtime import make_actor
from ..providers import LLM
from .calls import Written, _collect, _get, _unwrap, _utcnow, _Wrote
from .embedder import RemoteEmbedder
from .log import RemoteLog

__all__ = ["ActorHost", "RemoteActor"]


# -- actors that host our plain classes ----------------------------------------------------
@ray.remote(max_concurrency=4)
class ActorHost:
    """A Ray actor holding one plain eidetica actor; rebuilt from the log on (re)start."""

    def __init__(
        self, kind: str, log: Any, embedder: Any, llm: LLM, config: MemoryConfig, args: tuple,
        clock: Callable[[], dt.datetime] | None = None, snapshots_dir: str | None = None,
    ) -> None:
        rlog, remb = RemoteLog(log), RemoteEmbedder(embedder)
        clock = clock or _utcnow  # a custom clock arrives as a copy: it is frozen here
        # session actors and curators start from their snapshot (every node mounts the store path)
        snaps = ActorSnapshots(snapshots_dir, config.actor_snapshot_events) if snapshots_dir else None
        self.actor: Any = make_actor(kind, rlog, args, remb, llm, config, clock, snapshots=snaps)

    def call(self, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method of the hosted actor; with the log offsets it wrote, if any (``_Wrote``)."""
        outer = _collect({})
        try:
            result = getattr(self.actor, method)(*args, **kw)
        finally:
            offsets = _collect(outer)
        return _Wrote(result, offsets) if offsets else result

    def get(self, name: str) -> Any:
        """Read an attribute of the hosted actor."""
        return getattr(self.actor, name)

    def set(self, name: str, value: Any) -> None:
        """Set an attribute of the hosted actor (it lasts until the actor restarts and refolds)."""
        setattr(self.actor, name, value)

    def pid(self) -> int:
        """The process id (for fault-injection tests)."""
        return os.getpid()

    def node(self) -> str:
        """The Ray node this actor runs on (whose embedder replica embeds its writes)."""
        return ray.get_runtime_context().get_node_id()


class RemoteActor:
    """A local stand-in for a hosted actor: methods become remote calls, attributes remote reads.

    When its actor was retired (idle) or is gone for good, the next call re-creates it by
    name through ``factory`` (the new actor rebuilds its state from the log) and retries.
    """

    def __init__(
        self, handle: Any, cls: type, factory: Callable[[], Any] | None = None, written: Written | None = None,
    ) -> None:
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_factory", factory)
        object.__setattr__(self, "_written", written)  # the handle's read floor: raised by the offsets a call wrote
        object.__setattr__(self, "_retired", False)
        object.__setattr__(self, "_busy", 0)
        object.__setattr__(self, "_mu", threading.Lock())
        object.__setattr__(self, "last_used", time.monotonic())

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        if self._retired and self._factory is not None:
            object.__setattr__(self, "_handle", self._factory())
            object.__setattr__(self, "_retired", False)
        for attempt in range(40):
            object.__setattr__(self, "last_used", time.monotonic())  # busy: not idle
            with self._mu:
                object.__setattr__(self, "_busy", self._busy + 1)  # the janitor never retires an actor mid-call
            try:
                return fn(self._handle)
            except ray.exceptions.ActorDiedError:
                if self._factory is None or attempt == 39:
                    raise
                # a killed actor frees its name asynchronously: until then get_if_exists
                # may hand back the dying one, so back off and ask again
                time.sleep(min(0.05 * (attempt + 1), 0.5))
                object.__setattr__(self, "_handle", self._factory())
                object.__setattr__(self, "_retired", False)  # this one is alive: the janitor may retire it again
            finally:
                with self._mu:
                    object.__setattr__(self, "_busy", self._busy - 1)
                    object.__setattr__(self, "last_used", time.monotonic())
        raise AssertionError("unreachable")

    def __getattr__(self, name: str) -> Any:
        if callable(getattr(self._cls, name, None)):
            return lambda *a, **k: self._call(lambda h: _unwrap(_get(h.call.remote(name, *a, **k)), self._written))
        return self._call(lambda h: _get(h.get.remote(name)))

    def __setattr__(self, name: str, value: Any) -> None:
        """Set an attribute of the hosted actor (as on a local actor; never silently dropped)."""
        self._call(lambda h: _get(h.set.remote(name, value)))

    def __len__(self) -> int:
        return self._call(lambda h: _unwrap(_get(h.call.remote("__len__")), self._written))

    def __getstate__(self) -> tuple[Any, type]:
        return self._handle, self._cls  # so a proxy can be passed to another actor

    def __setstate__(self, state: tuple[Any, type]) -> None:
        object.__setattr__(self, "_handle", state[0])
        object.__setattr__(self, "_cls", state[1])
        object.__setattr__(self, "_factory", None)
        object.__setattr__(self, "_written", None)  # inside another actor: offsets go back with that actor's call
        object.__setattr__(self, "_retired", False)
        object.__setattr__(self, "_busy", 0)
        object.__setattr__(self, "_mu", threading.Lock())
        object.__setattr__(self, "last_used", time.monotonic())
