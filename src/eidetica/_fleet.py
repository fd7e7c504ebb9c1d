"""The Ray host: the same actors, the log, the embedder and the views, placed by Ray for fleets.

It sits beside the facade, above the layers (it hosts parts of every one of them):
``open_ray`` returns the parts and the facade builds ``Memory`` from them.

Topology (all named, so every client of a store finds the same actors):

- ``LogActor``: owns the store's ``ArrowLog`` (the single writer). Threaded, so concurrent
  Ray calls become concurrent appenders and share fsyncs through the log's group commit.
- ``EmbedderActor``: holds the embedding model once for the fleet's writes (sessions, curators).
- ``ViewsActor``: the projections (state folds, LanceDB + Tantivy), the projector and its own copy
  of the embedding model: a search is one call, planned, embedded and answered in the replica.
  With ``views_replicas`` there is one per replica (``"node"``: one per node that reads).
- one ``ActorHost`` per active session (a ``SessionActor``), per user (``FactCurator`` and
  ``NotesActor``), and summarizers. Each rebuilds its state from the log in its
  constructor, so ``max_restarts`` brings it back intact; retried calls are safe because
  event ids make appends idempotent.

Ray is imported only by this module, which ``eidetica.open(..., runtime="ray")`` imports.
LanceDB is imported lazily inside the ViewsActor (never before Ray forks workers).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import pickle
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import ray

from .actors import FactCurator, ItemsActor, MemoryConfig, NotesActor, Runtime, SchedulesActor, SessionActor, Summarizer
from .actors import ActorSnapshots
from .actors.runtime import make_actor
from .events import ANY, ArrowLog, EventLog, NewEvent, RecordedEvent
from .providers import LLM, Embedder, OfflineLLM, default_embedder
from .projections._projector import BULK_EVENTS

__all__ = [
    "RayRuntime", "RemoteLog", "RemoteEmbedder", "ReplicatedViews", "FleetParts", "open_ray", "shutdown_store",
    "replica_layout", "join_cluster", "ACTOR_OPTIONS", "Written",
]

ACTOR_OPTIONS: dict[str, Any] = {"max_restarts": -1, "max_task_retries": -1, "num_cpus": 0}


def _get(ref: Any) -> Any:
    """ray.get, re-raising the original exception (its type and fields intact)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if e.cause is not None:
            raise e.cause from None
        raise


def _listed(items: Any) -> Any:
    """Iterables as a list (generators cannot cross processes); anything else as given, for the far side's checks."""
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Iterable):
        return items
    return list(items)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _raise_to(floor: dict[int, int], offsets: dict[int, int]) -> None:
    """Raise ``floor`` (partition -> last offset) in place to cover ``offsets``."""
    for p, o in offsets.items():
        if o > floor.get(p, -1):
            floor[p] = o


class Written:
    """The last log offset per partition that a handle's writes reached (from the log's heads when it
    opened on): its reads' floor (issue #20).

    A read through a view replica waits until the replica applied these offsets and no others,
    so a handle that wrote nothing (or whose writes its replica already holds) reads with no
    call to the log; another handle's writes are read through an explicit ``min_offset``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, int] = {}

    def note(self, offsets: dict[int, int]) -> None:
        """Raise the floor to cover these offsets (partition -> last offset written)."""
        with self._lock:
            _raise_to(self._last, offsets)

    def floor(self) -> dict[int, int]:
        """A copy of the floor: partition -> last offset written through this handle."""
        with self._lock:
            return dict(self._last)


# offsets written by the ActorHost call running on this thread (returned to the caller with its result)
_CALL = threading.local()


class _Wrote:
    """An ActorHost call's result with the log offsets its writes reached (unwrapped by ``RemoteActor``)."""

    __slots__ = ("result", "offsets")

    def __init__(self, result: Any, offsets: dict[int, int]) -> None:
        self.result = result
        self.offsets = offsets

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Wrote, (self.result, self.offsets))


def _collect(into: dict[int, int] | None) -> dict[int, int] | None:
    """Collect this thread's written offsets into ``into`` from now on; returns what collected them until now.

    (A function, so that Ray pickles a reference to it, not the thread-local, with the actor classes.)
    """
    before = getattr(_CALL, "offsets", None)
    _CALL.offsets = into
    return before


def _noted(offsets: dict[int, int], sink: "Written | None") -> None:
    """Record written offsets: into the ActorHost call on this thread (if any) and into ``sink``."""
    mine = getattr(_CALL, "offsets", None)
    if mine is not None:
        _raise_to(mine, offsets)
    if sink is not None:
        sink.note(offsets)


def _unwrap(value: Any, sink: "Written | None") -> Any:
    """A hosted actor's result, its written offsets noted (see ``_Wrote``)."""
    if isinstance(value, _Wrote):
        _noted(value.offsets, sink)
        return value.result
    return value


# -- the log -----------------------------------------------------------------------------
@ray.remote(max_concurrency=64)
class LogActor:
    """Owns the store's ArrowLog in one process."""

    def __init__(self, path: str, fsync: str = "always", **options: Any) -> None:
        self.log = ArrowLog(path, fsync=fsync, **options)  # type: ignore[arg-type]

    def call(self, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method of the log."""
        return getattr(self.log, method)(*args, **kw)

    def read_batches(self, from_offset: int, partition: int) -> list[Any]:
        """Committed batches from an offset (materialised: they cross the Ray boundary)."""
        return list(self.log.read_batches(from_offset, partition=partition))

    def partitions(self) -> int:
        """The log's partition count."""
        return self.log.partitions

    def heads(self) -> list[int]:
        """Every partition's next offset, in one call."""
        return [self.log.head(p) for p in range(self.log.partitions)]

    def wait_past(self, nexts: list[int], timeout: float) -> list[int]:
        """Every partition's next offset, once one passes ``nexts`` or after ``timeout`` seconds (a long poll)."""
        deadline = time.monotonic() + timeout
        parts = self.log.partitions
        while True:
            heads = [self.log.head(p) for p in range(parts)]
            remaining = deadline - time.monotonic()
            if any(h > n for h, n in zip(heads, nexts)) or remaining <= 0:
                return heads
            # one partition: block on its next commit; several: look again every 50 ms
            self.log.wait_for(nexts[0], partition=0, timeout=remaining if parts == 1 else min(remaining, 0.05))

    def pid(self) -> int:
        """The process id (for fault-injection tests)."""
        return os.getpid()


class RemoteLog(EventLog):
    """The log port, served by a LogActor."""

    def __init__(self, handle: Any, written: Written | None = None) -> None:
        self.handle = handle
        self.partitions = _get(handle.partitions.remote())
        self.closed = False
        self.written = written  # the handle's read floor, raised by every append made here

    def append(self, stream: str, events: Sequence[NewEvent], expected_version: int = ANY) -> tuple[int, int]:
        """Append through the LogActor (one remote call for the whole batch)."""
        first, last = _get(self.handle.call.remote("append", stream, _listed(events), expected_version))
        if last >= 0:
            _noted({self.partition_of(stream): last}, self.written)
        return first, last

    def read_batches(self, from_offset: int = 0, *, partition: int = 0) -> Iterator[Any]:
        """Committed batches, fetched in one call."""
        return iter(_get(self.handle.read_batches.remote(from_offset, partition)))

    def read_stream(self, stream: str, from_version: int = 0) -> list[RecordedEvent]:
        """A stream's events."""
        return _get(self.handle.call.remote("read_stream", stream, from_version))

    def read_offsets(self, offsets: Sequence[int], *, partition: int = 0) -> list[RecordedEvent]:
        """The events at these offsets (message bodies the views read on demand)."""
        return _get(self.handle.call.remote("read_offsets", list(offsets), partition=partition))

    def head(self, partition: int = 0) -> int:
        """Next offset of a partition."""
        return _get(self.handle.call.remote("head", partition))

    def stream_version(self, stream: str) -> int:
        """A stream's last version."""
        return _get(self.handle.call.remote("stream_version", stream))

    def wait_for(self, offset: int, *, partition: int = 0, timeout: float | None = None) -> bool:
        """Wait (in the actor) until an offset is committed."""
        return _get(self.handle.call.remote("wait_for", offset, partition=partition, timeout=timeout))

    def streams(self) -> list[str]:
        """Every stream with an event."""
        return _get(self.handle.call.remote("streams"))

    def event_offsets(self, event_ids: Sequence[uuid.UUID], stream: str, tenant: str) -> list[int | None]:
        """Where a tenant's event ids were logged in a stream's partition (one call)."""
        return _get(self.handle.call.remote("event_offsets", list(event_ids), stream, tenant))

    def disk_bytes(self) -> int:
        """Bytes of the log on disk."""
        return _get(self.handle.call.remote("disk_bytes"))

    def redact(self, offsets: dict[int, set[int]]) -> dict[str, int]:
        """Compaction, done by the owner of the log."""
        return _get(self.handle.call.remote("redact", offsets))

    def close(self) -> None:
        """The actor keeps the log open for other clients; nothing to release here."""
        self.closed = True


# -- the embedder ------------------------------------------------------------------------
@ray.remote(max_concurrency=8)
class EmbedderActor:
    """One copy of the embedding model for the fleet."""

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder or default_embedder()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts."""
        return self.embedder.embed(texts)

    def info(self) -> tuple[str, int, int]:
        """(model_id, dim, max_tokens)."""
        return self.embedder.model_id, self.embedder.dim, getattr(self.embedder, "max_tokens", 256)

    def pid(self) -> int:
        """The process id (for benchmarks' CPU accounting)."""
        return os.getpid()


class RemoteEmbedder(Embedder):
    """The embedder port, served by an EmbedderActor."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.model_id, self.dim, self.max_tokens = _get(handle.info.remote())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed through the actor."""
        # a writable array of its own, as a local embedder returns (Ray hands back a read-only view)
        return np.array(_get(self.handle.embed.remote(_listed(texts))))


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


class _Target:
    """Method calls on one attribute (state, index, projector) of the ViewsActor."""

    def __init__(self, handle: Any, target: str) -> None:
        self.handle = handle
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            kw.pop("progress", None)
            args = tuple(a for a in args if not callable(a))  # callbacks cannot cross processes
            return _get(self.handle.call.remote(self.target, name, *args, **kw))

        return call


def _node_embedder(embedder: Embedder | None, fleet: "RemoteEmbedder") -> Embedder:
    """This process's own copy of the fleet's embedding model (one per node), or the fleet's actor if they differ."""
    try:
        local = embedder if embedder is not None else default_embedder()
    except Exception:  # noqa: BLE001 - no local model here: the fleet's embedder actor still answers
        return fleet
    return local if (local.model_id, local.dim) == (fleet.model_id, fleet.dim) else fleet


@ray.remote(max_concurrency=8)
class ViewsActor:
    """The projections of a store: state folds, chunk index, projector (LanceDB lives here).

    One per store, or one per replica (each with its own directory, checkpoint and counters).
    Each holds its own copy of the embedding model, so a search (query embedding included) is
    one call answered on one node.
    """

    def __init__(
        self, path: str, log: Any, embedder: Any, name: str = "views", model: Embedder | None = None, seed: Any = None,
        follow: float = 0.2,
    ) -> None:
        from .projections import LocalViews  # lazily: LanceDB is imported inside this worker only

        t = time.perf_counter()
        self.name = name
        self.embedder = _node_embedder(model, RemoteEmbedder(embedder))
        new = not (Path(path) / "index").exists()
        how = "replay" if new else "checkpoint"
        if new and seed is not None:
            try:  # a copy of another replica's checkpointed views: only the tail is replayed here
                _get(seed.copy_to.remote(path))
                how = "copy"
            except Exception:  # noqa: BLE001 - no usable seed: the log is the truth, replay it
                shutil.rmtree(Path(path) / "index", ignore_errors=True)
        self.views = LocalViews(Path(path), RemoteLog(log), self.embedder)
        if how == "replay" and sum(self.views.projector.applied(p) for p in range(self.views.log.partitions)) >= BULK_EVENTS:
            self.views.projector.maintain(force=True)  # a bulk fold: ANN and scalar indexes before serving
        self.started = {"how": how, "seconds": round(time.perf_counter() - t, 3)}
        self._lock = threading.Lock()
        self.served = 0  # searches answered (the tests check which replica served an agent)
        self.follows = 0  # catch-ups its follower made (the log's tail, applied in the background)
        # seconds summed over served searches, per stage: where a search's wall time goes (issue #20)
        self.timings = {"lock_wait": 0.0, "reach": 0.0, "query": 0.0, "query_cpu": 0.0}
        self.follow = follow
        if follow > 0:  # reads carry their own floor: the replica follows the log's tail on its own
            threading.Thread(target=self._follow, args=(log, follow), name="eidetica-follow", daemon=True).start()

    def _follow(self, log: Any, every: float) -> None:
        """Apply the log's tail as it grows, at most once per ``every`` seconds (a long poll on the log).

        Reads from handles that wrote nothing carry no floor: this bounds how stale they are
        without a call to the log per read. A read whose floor is ahead still catches up at once.
        """
        proj = self.views.projector
        parts = self.views.log.partitions
        while True:
            try:
                nexts = [proj.applied(p) for p in range(parts)]
                heads = _get(log.wait_past.remote(nexts, 10.0))
                if any(h > n for h, n in zip(heads, nexts)):
                    with self._lock:
                        if proj.refresh():
                            self.follows += 1
                    time.sleep(every)  # coalesce: a busy log is applied in batches, not per commit
            except Exception:  # noqa: BLE001 - the log restarting, or our own fold failing: reads still catch up
                time.sleep(1.0)

    def _target(self, target: str) -> Any:
        return self.views if target == "views" else getattr(self.views, target)

    def call(self, target: str, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method of state, index or projector (or of the views themselves: ``"views"``)."""
        with self._lock:
            return getattr(self._target(target), method)(*args, **kw)

    def _reach(self, floor: dict[int, int], timeout: float) -> None:
        """Apply the log up to ``floor`` (under the lock), or raise ``ReplicaBehind`` after ``timeout``."""
        from .errors import ReplicaBehind

        proj = self.views.projector
        if floor and timeout > 0 and not all(proj.applied(p) > o for p, o in floor.items()):
            proj.refresh()  # this replica folds the log itself, up to the head, as the embedded mode does
        if floor and not proj.wait_for(floor, timeout=timeout):
            applied = {p: proj.applied(p) for p in floor}
            raise ReplicaBehind(self.name, dict(floor), applied, timeout)

    def read(self, floor: dict[int, int], timeout: float, target: str, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method once this replica applied every partition's offset in ``floor`` (the reader's writes)."""
        with self._lock:
            self._reach(floor, timeout)
            if target == "index" and method == "search":
                self.served += 1
            return getattr(self._target(target), method)(*args, **kw)

    def query(self, floor: dict[int, int], timeout: float, tenant: str, text: str, **kw: Any) -> Any:
        """A whole search from the user's words (``LocalViews.query``), embedded here, at the floor."""
        t1 = time.perf_counter()
        with self._lock:
            t2 = time.perf_counter()
            self._reach(floor, timeout)
            t3, c3 = time.perf_counter(), time.thread_time()
            self.served += 1
            try:
                return self.views.query(self.embedder, tenant, text, **kw)
            finally:
                tm = self.timings
                tm["lock_wait"] += t2 - t1
                tm["reach"] += t3 - t2
                tm["query"] += time.perf_counter() - t3
                tm["query_cpu"] += time.thread_time() - c3

    def search(self, request: bytes) -> bytes:
        """``query`` with its arguments and its hits pickled in one blob each (issue #20).

        Ray serialises every argument of a call on its own (a search has a dozen): one blob
        each way cut the reader's CPU per search.
        """
        floor, timeout, tenant, text, kw = pickle.loads(request)
        return pickle.dumps(self.query(floor, timeout, tenant, text, **kw), protocol=pickle.HIGHEST_PROTOCOL)

    def copy_to(self, path: str) -> None:
        """Copy this replica's views, as of its checkpoint, into a new replica's (empty) directory.

        Under the lock, so nothing is applied meanwhile; the state gets a fresh snapshot first
        (the copy's start replays only the log's tail). Every node mounts the store path.
        """
        src, dst = Path(self.views.path), Path(path)
        staging = dst.with_name(dst.name + ".seed")
        shutil.rmtree(staging, ignore_errors=True)
        with self._lock:
            self.views.projector.snapshot()
            skip = shutil.ignore_patterns("*.lock", "*.new", "*.old")
            for sub in ("index", "snapshots"):
                if (src / sub).is_dir():
                    shutil.copytree(src / sub, staging / sub, ignore=skip)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            for sub in ("index", "snapshots"):
                shutil.rmtree(dst / sub, ignore_errors=True)
                if (staging / sub).exists():
                    os.replace(staging / sub, dst / sub)
            shutil.rmtree(staging, ignore_errors=True)
        else:
            os.replace(staging, dst)

    def status(self) -> dict[str, Any]:
        """This replica's node, applied offsets (next offset per partition), lag behind the head and counters."""
        proj = self.views.projector
        parts = range(self.views.log.partitions)
        applied = {p: proj.applied(p) for p in parts}
        heads = {p: self.views.log.head(p) for p in parts}
        return {
            "replica": self.name, "node": ray.get_runtime_context().get_node_id(), "path": str(self.views.index_dir),
            "applied": applied, "lag": sum(max(0, heads[p] - applied[p]) for p in parts), "served": self.served,
            "follows": self.follows, "started": self.started,
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
        }

    def node(self) -> str:
        """The Ray node this replica runs on."""
        return ray.get_runtime_context().get_node_id()

    def fresh(self, embedder: Any) -> None:
        """Rebuild the views from the log into a fresh directory and swap them in."""
        with self._lock:
            fleet = RemoteEmbedder(embedder)
            if (fleet.model_id, fleet.dim) != (self.embedder.model_id, self.embedder.dim):
                self.embedder = fleet  # a new model (reembed): queries go to the fleet's embedder
            self.views.fresh(self.embedder)

    def pid(self) -> int:
        """The process id (for fault-injection tests and benchmarks)."""
        return os.getpid()


class RemoteViews:
    """The local face of a ViewsActor, shaped like ``LocalViews``."""

    def __init__(self, handle: Any, embedder_handle: Any) -> None:
        self.handle = handle
        self.embedder_handle = embedder_handle
        self.state = _Target(handle, "state")
        self.index = _Target(handle, "index")
        self.projector = _Target(handle, "projector")

    def query(self, embedder: Embedder, tenant: str, text: str, **kw: Any) -> Any:
        """A whole search in one call (the actor embeds the query with its own model)."""
        return _get(self.handle.query.remote({}, 0.0, tenant, text, **kw))

    def participant_names(self, tenant: str, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations (cached in the actor)."""
        return _get(self.handle.call.remote("views", "participant_names", tenant, user))

    def fresh(self, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> None:
        """Rebuild remotely (progress is not reported across processes)."""
        handle = embedder.handle if isinstance(embedder, RemoteEmbedder) else EmbedderActor.remote(embedder)
        _get(self.handle.fresh.remote(handle))

    def close(self) -> None:
        """The actor stays up for other clients."""


_GONE = (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError)


class _ReplicaTarget:
    """Method calls on one attribute of the serving replica, each carrying the handle's read floor."""

    def __init__(self, views: "ReplicatedViews", target: str) -> None:
        self.views = views
        self.target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.target == "projector" and name in ("catch_up", "refresh"):
            return self.views.sync  # each read carries its floor to its replica
        if self.target == "projector" and name == "lag":
            return lambda: {"max_replica_lag": max((r["lag"] for r in self.views.status()), default=0)}

        def call(*args: Any, **kw: Any) -> Any:
            kw.pop("progress", None)
            args = tuple(a for a in args if not callable(a))  # callbacks cannot cross processes
            return self.views.read(self.target, name, *args, **kw)

        return call


def _serving_order(nodes: Sequence[str], here: str, spread: int) -> list[int]:
    """Replica indexes to try, first choice first: one on this node when there is one, else any, chosen by ``spread``.

    Without a replica here the first choice still varies with ``spread`` (the process id): a node
    with no replica sends its readers over every replica, not all of them to replica 0 (issue #20).
    """
    local = [i for i, n in enumerate(nodes) if n == here]
    pool = local or list(range(len(nodes)))
    first = pool[spread % len(pool)] if pool else None
    return ([first] if first is not None else []) + [i for i in range(len(nodes)) if i != first]


class ReplicatedViews:
    """Views served by N replicas: reads go to a replica on this process's node when there is one.

    Read-your-writes: a read's floor is the last offset per partition this handle's writes
    reached (``Written``), raised by an explicit ``min_offset``; the serving replica applies the
    log up to it, or raises ``ReplicaBehind`` after ``timeout`` seconds rather than answer stale.
    A read asks nothing of the log: a search is one call to one replica, which follows the log's
    tail on its own besides. A replica that dies is restarted by Ray (``max_restarts``) and
    refolds from its own checkpoint; meanwhile reads go to another replica.
    """

    def __init__(
        self, log: RemoteLog, handles: list[Any], names: list[str], embedder_handle: Any, timeout: float,
        written: Written | None = None,
    ) -> None:
        self.log = log
        self.handles = handles
        self.names = names
        self.embedder_handle = embedder_handle
        self.timeout = timeout
        self.written = written if written is not None else Written()
        nodes = [_get(h.node.remote()) for h in handles]
        here = ray.get_runtime_context().get_node_id()
        self.order = _serving_order(nodes, here, os.getpid())
        self.state = _ReplicaTarget(self, "state")
        self.index = _ReplicaTarget(self, "index")
        self.projector = _ReplicaTarget(self, "projector")

    def sync(self) -> int:
        """Nothing to do here: every read carries this handle's floor (its writes) to its replica."""
        return 0

    def _serve(self, call: Callable[[Any, dict[int, int]], Any], at_least: dict[int, int] | None = None) -> Any:
        """Call the serving replica at this handle's floor; on a dead one, the next replica (Ray restarts the dead one)."""
        floor = self.written.floor()
        _raise_to(floor, at_least or {})
        last: BaseException | None = None
        for attempt in range(3):
            for i in self.order:
                try:
                    return _get(call(self.handles[i], floor))
                except _GONE as e:
                    last = e
            time.sleep(0.2 * (attempt + 1))  # every replica down at once: give Ray a moment to restart them
        raise last  # type: ignore[misc]

    def read(self, target: str, method: str, *args: Any, **kw: Any) -> Any:
        """Call a method of the serving replica's state, index or projector, at this handle's floor."""
        return self._serve(lambda h, floor: h.read.remote(floor, self.timeout, target, method, *args, **kw))

    def query(self, embedder: Embedder, tenant: str, text: str, *, min_offset: dict[int, int] | None = None, **kw: Any) -> Any:
        """A whole search, answered (and embedded) by the serving replica in one call, at least at ``min_offset``."""
        def ask(h: Any, floor: dict[int, int]) -> Any:
            return h.search.remote(pickle.dumps((floor, self.timeout, tenant, text, kw), protocol=pickle.HIGHEST_PROTOCOL))

        return pickle.loads(self._serve(ask, min_offset))

    def participant_names(self, tenant: str, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations, from the serving replica."""
        return self.read("views", "participant_names", tenant, user)

    def status(self) -> list[dict[str, Any]]:
        """Per replica: node, applied offsets, lag behind the log head, searches served."""
        out = []
        for h, name in zip(self.handles, self.names):
            try:
                out.append(_get(h.status.remote()))
            except _GONE:
                out.append({"replica": name, "node": None, "applied": {}, "lag": None, "served": None, "down": True})
        return out

    def fresh(self, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> None:
        """Rebuild every replica from the log (each into its own directory)."""
        handle = embedder.handle if isinstance(embedder, RemoteEmbedder) else EmbedderActor.remote(embedder)
        _get([h.fresh.remote(handle) for h in self.handles])

    def close(self) -> None:
        """The replicas stay up for other clients."""


def _existing_replicas(key: str) -> list[str]:
    """Names of the store's view replicas alive now (any layout), replica 0 first."""
    prefix = f"eidetica:{key}:views"
    return sorted((n for n in ray.util.list_named_actors() if n == prefix or n.startswith((prefix + ":", prefix + "@"))),
                  key=lambda n: (n != prefix, n))


def replica_layout(path: str | os.PathLike[str]) -> int | str | None:
    """How a running store's views are replicated: ``"node"``, a count, or None (one views actor); Ray must be up.

    For a reader that joins a store (``eidetica stats --address``) without adding replicas of its own.
    """
    names = _existing_replicas(store_key(Path(path)))
    if any("@" in n for n in names):
        return "node"
    numbered = [n for n in names if n.rsplit(":", 1)[-1].isdigit()]
    return len(numbered) + 1 if numbered else None


def _node_replicas(
    root: Path, key: str, log_h: Any, emb_h: Any, model: Embedder | None, seed: bool, follow: float = 0.2,
) -> tuple[list[Any], list[str]]:
    """``views_replicas="node"``: the replica of this node (created, pinned here, on the node's first use) and every other one.

    A new replica starts from a copy of an existing replica's checkpointed views when ``seed``.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    mine = f"eidetica:{key}:views@{here[:16]}"
    others = [n for n in _existing_replicas(key) if n != mine]
    donor = ray.get_actor(others[0]) if (seed and others) else None
    handle = ViewsActor.options(
        name=mine, get_if_exists=True, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        lifetime="detached", **ACTOR_OPTIONS,
    ).remote(str(root / "replicas" / f"node-{here[:16]}"), log_h, emb_h, mine.split(":", 2)[2], model, donor, follow)
    handles, names = [handle], [mine]
    for n in others:
        try:
            handles.append(ray.get_actor(n))
            names.append(n)
        except ValueError:  # gone since it was listed
            pass
    return handles, names


def _least_used(nodes: Sequence[str], placed: Sequence[str], i: int) -> str:
    """The node for replica ``i``: one holding the fewest replicas so far, node ``i`` mod N among equals.

    Replica 0 may predate the replicas (a single views actor, placed by Ray anywhere): pinning
    replica i to node i mod N regardless put both of 2 replicas on one node in measured runs.
    """
    return min(nodes, key=lambda n: (placed.count(n), (nodes.index(n) - i) % len(nodes)))


def _start_replicas(
    root: Path, key: str, log_h: Any, emb_h: Any, count: int, model: Embedder | None = None, seed: bool = True,
    follow: float = 0.2,
) -> tuple[list[Any], list[str]]:
    """Replica i lives in its own directory (replica 0 in the store's, as a single views actor does),
    pinned when first created to an alive node holding the fewest replicas so far (``_least_used``)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    handles: list[Any] = []
    names: list[str] = []
    placed: list[str] = []  # the node of each replica so far (an existing one stays where it runs)
    for i in range(count):
        name = f"eidetica:{key}:views" if i == 0 else f"eidetica:{key}:views:{i}"
        path = root if i == 0 else root / "replicas" / str(i)
        if handles:
            try:
                placed.append(_get(handles[-1].node.remote()))
            except _GONE:  # down for now: Ray restarts it where it was pinned, so count it nowhere
                pass
        # hard affinity: a soft one was seen spilling a replica onto a busy head node under load
        strategy = NodeAffinitySchedulingStrategy(_least_used(nodes, placed, i), soft=False) if nodes else "SPREAD"
        donor = handles[0] if (seed and handles) else None  # replica 0 folds the log; the others may copy it
        # detached: a replica an agent created must outlive that agent (shutdown_store ends it)
        handles.append(ViewsActor.options(name=name, get_if_exists=True, scheduling_strategy=strategy, lifetime="detached",
                                          **ACTOR_OPTIONS)
                       .remote(str(path), log_h, emb_h, name.split(":", 2)[2], model, donor, follow))
        names.append(name)
    return handles, names


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


def store_key(path: str | os.PathLike[str]) -> str:
    """A short stable name for a store, shared by every client that opens the same path."""
    return hashlib.blake2b(os.path.abspath(os.fspath(path)).encode(), digest_size=6).hexdigest()


@dataclasses.dataclass(frozen=True)
class FleetParts:
    """What a store on Ray is made of; the facade builds ``Memory`` from it."""

    path: Path
    log: RemoteLog
    embedder: RemoteEmbedder
    llm: LLM
    config: MemoryConfig
    runtime: RayRuntime
    views: "RemoteViews | ReplicatedViews"


def join_cluster(address: str | None = None) -> None:
    """Connect this process to Ray in the stores' namespace, once (``address=None``: a local cluster)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not ray.is_initialized():
        ray.init(address=address, namespace="eidetica", include_dashboard=False, log_to_driver=False)


def open_ray(
    path: str | os.PathLike[str],
    *,
    embedder: Embedder | None = None,
    llm: LLM | None = None,
    config: MemoryConfig | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    address: str | None = None,
    fsync: str = "always",
    idle_seconds: float = 300.0,
    views_replicas: int | str | None = None,
    replica_timeout: float = 30.0,
    replica_start: str = "copy",
    replica_follow: float = 0.2,
) -> FleetParts:
    """Start (or join) a store's actors on a Ray cluster (``address="auto"`` joins a running one).

    ``views_replicas``: N view replicas (or ``"node"``: one per node that reads, created on the
    node's first use), each folding the log into its own directory; reads wait at most
    ``replica_timeout`` seconds for their replica. ``replica_start``: a new replica starts from a
    ``"copy"`` of another replica's checkpointed views (the default: measured faster) or a full
    ``"replay"`` of the log. ``replica_follow``: a replica applies the log's tail on its own at
    most every so many seconds (how stale a read that passes no offset may be; 0: only when a
    read's floor is ahead), set by whoever starts it.
    """
    if replica_start not in ("copy", "replay"):
        from .errors import InvalidInput

        raise InvalidInput("replica_start", "must be 'copy' or 'replay'", replica_start)
    if views_replicas is not None and views_replicas != "node" and (
        isinstance(views_replicas, bool) or not isinstance(views_replicas, int) or views_replicas < 1
    ):  # checked before any actor starts: bad input changes nothing
        from .errors import InvalidInput

        raise InvalidInput("views_replicas", "must be an int >= 1 or 'node' (one per node)", views_replicas)
    if isinstance(replica_timeout, bool) or not isinstance(replica_timeout, (int, float)) or replica_timeout < 0:
        from .errors import InvalidInput

        raise InvalidInput("replica_timeout", "must be a number of seconds >= 0", replica_timeout)
    if isinstance(replica_follow, bool) or not isinstance(replica_follow, (int, float)) or replica_follow < 0:
        from .errors import InvalidInput

        raise InvalidInput("replica_follow", "must be a number of seconds >= 0", replica_follow)
    join_cluster(address)
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = store_key(root)
    log_h = LogActor.options(name=f"eidetica:{key}:log", get_if_exists=True, **ACTOR_OPTIONS).remote(str(root / "log"), fsync)
    emb_h = EmbedderActor.options(name=f"eidetica:{key}:embedder", get_if_exists=True, **ACTOR_OPTIONS).remote(embedder)
    written = Written()  # this handle's writes, through any of its parts: its reads' floor
    # and what was committed before it opened: one call to the log per handle, none per read
    written.note({p: h - 1 for p, h in enumerate(_get(log_h.heads.remote())) if h > 0})
    if views_replicas == "node":
        handles, names = _node_replicas(root, key, log_h, emb_h, embedder, replica_start == "copy", float(replica_follow))
        views: Any = ReplicatedViews(RemoteLog(log_h), handles, names, emb_h, float(replica_timeout), written)
    elif views_replicas is not None:
        handles, names = _start_replicas(root, key, log_h, emb_h, int(views_replicas), embedder, replica_start == "copy",
                                         float(replica_follow))
        views: Any = ReplicatedViews(RemoteLog(log_h), handles, names, emb_h, float(replica_timeout), written)
    else:
        # it follows the log too: it becomes replica 0 when a later client opens the store with replicas
        views_h = ViewsActor.options(name=f"eidetica:{key}:views", get_if_exists=True, **ACTOR_OPTIONS).remote(
            str(root), log_h, emb_h, "views", embedder, None, float(replica_follow))
        views = RemoteViews(views_h, emb_h)
    config = config or MemoryConfig()
    llm = llm or OfflineLLM()
    runtime = RayRuntime(key, log_h, emb_h, llm, config, idle_seconds, clock, written, str(root / "snapshots" / "actors"))
    return FleetParts(root, RemoteLog(log_h, written), RemoteEmbedder(emb_h), llm, config, runtime, views)


def shutdown_store(path: str | os.PathLike[str]) -> None:
    """Kill a store's named actors (the log closes; data stays on disk)."""
    key = store_key(path)
    # the log last: a replica's follower long-polls it until the replica is gone
    for name in sorted(ray.util.list_named_actors(all_namespaces=False), key=lambda n: n.endswith(":log")):
        if name.startswith(f"eidetica:{key}:"):
            try:
                ray.kill(ray.get_actor(name), no_restart=True)
            except ValueError:
                pass
