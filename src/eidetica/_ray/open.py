"""Opening a store on Ray: ``open_ray`` starts (or joins) its named actors and returns the parts the facade
builds ``Memory`` from; ``shutdown_store`` ends them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from ..actors import MemoryConfig
from ..providers import LLM, Embedder, OfflineLLM
from .calls import ACTOR_OPTIONS, Written, _get, store_key
from .embedder import EmbedderActor, EmbedderReplicas, RemoteEmbedder
from .log import LogActor, RemoteLog
from .replicas import ReplicatedViews, _least_used, _node_replicas, _start_replicas
from .runtime import RayRuntime
from .views import RemoteViews, ViewsActor

__all__ = ["FleetParts", "join_cluster", "open_ray", "shutdown_store"]


@dataclasses.dataclass(frozen=True)
class FleetParts:
    """What a store on Ray is made of; the facade builds ``Memory`` from it."""

    path: Path
    log: RemoteLog
    embedder: RemoteEmbedder
    llm: LLM
    config: MemoryConfig
    runtime: RayRuntime
    views: RemoteViews | ReplicatedViews


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
    embedder_replicas: int | str | None = None,
) -> FleetParts:
    """Start (or join) a store's actors on a Ray cluster (``address="auto"`` joins a running one).

    ``views_replicas``: N view replicas (or ``"node"``: one per node that reads, created on the
    node's first use), each folding the log into its own directory; reads wait at most
    ``replica_timeout`` seconds for their replica. ``replica_start``: a new replica starts from a
    ``"copy"`` of another replica's checkpointed views (the default: measured faster) or a full
    ``"replay"`` of the log. ``replica_follow``: a replica applies the log's tail on its own at
    most every so many seconds (how stale a read that passes no offset may be; 0: only when a
    read's floor is ahead), set by whoever starts it. ``embedder_replicas``: N copies of the model
    for writes, placed over the nodes like view replicas (or ``"node"``: one per node that writes,
    created by its first write there); a write is embedded by its node's replica, else by the one
    with the fewest calls in flight.
    """
    if replica_start not in ("copy", "replay"):
        from ..errors import InvalidInput

        raise InvalidInput("replica_start", "must be 'copy' or 'replay'", replica_start)
    if views_replicas is not None and views_replicas != "node" and (
        isinstance(views_replicas, bool) or not isinstance(views_replicas, int) or views_replicas < 1
    ):  # checked before any actor starts: bad input changes nothing
        from ..errors import InvalidInput

        raise InvalidInput("views_replicas", "must be an int >= 1 or 'node' (one per node)", views_replicas)
    if embedder_replicas is not None and embedder_replicas != "node" and (
        isinstance(embedder_replicas, bool) or not isinstance(embedder_replicas, int) or embedder_replicas < 1
    ):
        from ..errors import InvalidInput

        raise InvalidInput("embedder_replicas", "must be an int >= 1 or 'node' (one per node that writes)",
                           embedder_replicas)
    if isinstance(replica_timeout, bool) or not isinstance(replica_timeout, (int, float)) or replica_timeout < 0:
        from ..errors import InvalidInput

        raise InvalidInput("replica_timeout", "must be a number of seconds >= 0", replica_timeout)
    if isinstance(replica_follow, bool) or not isinstance(replica_follow, (int, float)) or replica_follow < 0:
        from ..errors import InvalidInput

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
    # the writers' embedder: the store's one, or replicas the writers pick from by node
    writes: Any = emb_h if embedder_replicas is None else start_embedders(key, embedder_replicas, embedder)
    runtime = RayRuntime(key, log_h, writes, llm, config, idle_seconds, clock, written, str(root / "snapshots" / "actors"))
    return FleetParts(root, RemoteLog(log_h, written), RemoteEmbedder(writes), llm, config, runtime, views)


def start_embedders(key: str, count: int | str, model: Embedder | None) -> EmbedderReplicas:
    """``embedder_replicas=N``: replica 0 is the store's embedder, replica i is pinned when first created
    to an alive node holding the fewest so far (as view replicas are); ``"node"``: created by writers."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if count == "node":
        return EmbedderReplicas(key, "node", [], model)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    names: list[str] = []
    placed: list[str] = []
    for i in range(int(count)):
        name = f"eidetica:{key}:embedder" if i == 0 else f"eidetica:{key}:embedder:{i}"
        if i == 0:  # the store's embedder: may predate the replicas, placed by Ray anywhere
            h = EmbedderActor.options(name=name, get_if_exists=True, **ACTOR_OPTIONS).remote(model)
        else:
            strategy = NodeAffinitySchedulingStrategy(_least_used(nodes, placed, i), soft=False) if nodes else "SPREAD"
            h = EmbedderActor.options(name=name, get_if_exists=True, scheduling_strategy=strategy, lifetime="detached",
                                      **ACTOR_OPTIONS).remote(model, name.split(":", 2)[2])
        placed.append(_get(h.status.remote())["node"])
        names.append(name)
    return EmbedderReplicas(key, int(count), names, model)


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
