"""The embedder on Ray: copies of the model for the fleet's writes (``EmbedderActor``; one, or replicas
placed over the nodes, ``EmbedderReplicas``), its port (``RemoteEmbedder``), and a node's own copy for
its views (``_node_embedder``)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray

from ..providers import Embedder, default_embedder
from .calls import _get, _listed

__all__ = ["EmbedderActor", "EmbedderReplicas", "RemoteEmbedder"]


# -- the embedder ------------------------------------------------------------------------
@ray.remote(max_concurrency=8)
class EmbedderActor:
    """One copy of the embedding model (the fleet's, or one replica of it): loaded once, in the constructor."""

    def __init__(self, embedder: Embedder | None, name: str = "embedder") -> None:
        self.embedder = embedder or default_embedder()
        self.name = name
        self.served = self.texts = 0  # calls and texts embedded since this process started
        self.seconds = 0.0  # time spent embedding (where a write's time goes)
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts."""
        t = time.perf_counter()
        out = self.embedder.embed(texts)
        with self._lock:
            self.served += 1
            self.texts += len(texts)
            self.seconds += time.perf_counter() - t
        return out

    def status(self) -> dict[str, Any]:
        """Which replica this is, its node and what it has served (since its process started)."""
        return {"replica": self.name, "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "served": self.served, "texts": self.texts, "embed_s": round(self.seconds, 3)}

    def info(self) -> tuple[str, int, int]:
        """(model_id, dim, max_tokens)."""
        return self.embedder.model_id, self.embedder.dim, getattr(self.embedder, "max_tokens", 256)

    def pid(self) -> int:
        """The process id (for benchmarks' CPU accounting)."""
        return os.getpid()


class EmbedderReplicas:
    """A store's embedder replicas as a writer process sees them: it embeds on its own node's replica.

    ``mode`` is an int (replicas named up front, placed like view replicas) or ``"node"`` (one per
    node that writes: a writer's first embed creates its node's replica, pinned there). A
    writer without a replica on its node sends each call to the replica with the fewest calls
    it has in flight. Picklable: the handles are looked up again in each process.
    """

    def __init__(self, key: str, mode: int | str, names: Sequence[str], model: Embedder | None) -> None:
        self.key, self.mode, self.names, self.model = key, mode, list(names), model
        self._init_local()

    def _init_local(self) -> None:
        self._lock = threading.Lock()
        self._handles: list[Any] | None = None
        self._nodes: list[str] = []
        self._busy: list[int] = []

    def __getstate__(self) -> tuple[Any, ...]:
        return self.key, self.mode, self.names, self.model

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.key, self.mode, self.names, self.model = state
        self._init_local()

    def _resolve(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .calls import ACTOR_OPTIONS

        here = ray.get_runtime_context().get_node_id()
        names = list(self.names)
        if self.mode == "node":
            mine = f"eidetica:{self.key}:embedder@{here[:16]}"
            EmbedderActor.options(  # this node's replica: created on its first writer's first embed
                name=mine, get_if_exists=True, lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False), **ACTOR_OPTIONS,
            ).remote(self.model, mine.split(":", 2)[2])
            names = [mine] + [n for n in ray.util.list_named_actors() if n.startswith(f"eidetica:{self.key}:embedder@")
                              and n != mine]
        handles, nodes = [], []
        for n in names:
            try:
                h = ray.get_actor(n)
                nodes.append(_get(h.status.remote())["node"])
                handles.append(h)
            except Exception:  # noqa: BLE001 - gone since it was listed: the others serve
                pass
        self._nodes, self._busy, self._handles = nodes, [0] * len(handles), handles

    def acquire(self) -> tuple[int, Any]:
        """(slot, handle) of the replica for this call: this node's, else the least busy; ``release`` after."""
        with self._lock:
            if self._handles is None:
                self._resolve()
            assert self._handles, "no embedder replica is alive"
            here = ray.get_runtime_context().get_node_id()
            local = [i for i, n in enumerate(self._nodes) if n == here]
            pool = local or range(len(self._handles))
            i = min(pool, key=lambda j: self._busy[j])
            self._busy[i] += 1
            return i, self._handles[i]

    def release(self, slot: int) -> None:
        """A call to replica ``slot`` ended."""
        with self._lock:
            self._busy[slot] -= 1

    def first(self) -> Any:
        """A replica's handle (for the model's description)."""
        slot, h = self.acquire()
        self.release(slot)
        return h


class RemoteEmbedder(Embedder):
    """The embedder port, served by an EmbedderActor (or by the replica ``EmbedderReplicas`` picks per call)."""

    def __init__(self, handle: Any) -> None:
        self.replicas = handle if isinstance(handle, EmbedderReplicas) else None
        self.handle = self.replicas.first() if self.replicas is not None else handle
        self.model_id, self.dim, self.max_tokens = _get(self.handle.info.remote())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed through the actor."""
        # a writable array of its own, as a local embedder returns (Ray hands back a read-only view)
        if self.replicas is None:
            return np.array(_get(self.handle.embed.remote(_listed(texts))))
        # a replica killed mid-call is restarted by Ray and the call retried (embedding is pure)
        slot, h = self.replicas.acquire()
        try:
            return np.array(_get(h.embed.remote(_listed(texts))))
        finally:
            self.replicas.release(slot)


def _node_embedder(embedder: Embedder | None, fleet: RemoteEmbedder) -> Embedder:
    """This process's own copy of the fleet's embedding model (one per node), or the fleet's actor if they differ."""
    try:
        local = embedder if embedder is not None else default_embedder()
    except Exception:  # noqa: BLE001 - no local model here: the fleet's embedder actor still answers
        return fleet
    return local if (local.model_id, local.dim) == (fleet.model_id, fleet.dim) else fleet

