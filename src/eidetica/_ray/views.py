"""The views on Ray: ``ViewsActor`` holds the projections (LanceDB lives there) and answers a whole
search in one call; ``RemoteViews`` is its local face, shaped like ``LocalViews``."""

from __future__ import annotations

import os
import pickle
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from .._util.fs import replace
from ..projections import Views
from ..projections._projector import BULK_EVENTS
from ..providers import Embedder
from .calls import _get
from .embedder import EmbedderActor, RemoteEmbedder, _node_embedder
from .log import RemoteLog

__all__ = ["ViewsActor", "RemoteViews"]


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
        from ..projections import LocalViews  # lazily: LanceDB is imported inside this worker only

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
        from ..errors import ReplicaBehind

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
                    replace(staging / sub, dst / sub)
            shutil.rmtree(staging, ignore_errors=True)
        else:
            replace(staging, dst)

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


class RemoteViews(Views):
    """The local face of a ViewsActor: the views port, served by one actor."""

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
