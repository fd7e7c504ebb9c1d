"""View replicas: ``ReplicatedViews`` serves reads from a replica on this node, at the handle's read
floor; replicas are placed, started (copied or replayed) and found by name here."""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray

from ..projections import Views
from ..providers import Embedder
from .calls import ACTOR_OPTIONS, Written, _get, _raise_to, store_key
from .embedder import EmbedderActor, RemoteEmbedder
from .log import RemoteLog
from .views import ViewsActor

__all__ = ["ReplicatedViews", "replica_layout"]


_GONE = (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError)


class _ReplicaTarget:
    """Method calls on one attribute of the serving replica, each carrying the handle's read floor."""

    def __init__(self, views: ReplicatedViews, target: str) -> None:
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


class ReplicatedViews(Views):
    """Views served by N replicas: reads go to a replica on this process's node when there is one.

    Read-your-writes: a read's floor is the last offset per partition this handle's writes
    reached (``Written``), raised by an explicit ``min_offset``; the serving replica applies the
    log up to it, or raises ``ReplicaBehind`` after ``timeout`` seconds rather than answer stale.
    A read asks nothing of the log: a search is one call to one replica, which follows the log's
    tail on its own besides. A replica that dies is restarted by Ray (``max_restarts``) and
    refolds from its own checkpoint; meanwhile reads go to another replica.
    """

    replicated = True  # each read carries its floor to its replica

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
