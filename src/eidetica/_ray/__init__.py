"""The Ray host: the same actors, the log, the embedder and the views, placed by Ray for fleets.

It sits beside the facade, above the layers (it hosts parts of every one of them):
``open_ray`` (``open``) returns the parts and the facade builds ``Memory`` from them.

Topology (all named, so every client of a store finds the same actors):

- ``LogActor`` (``log``): owns the store's ``ArrowLog`` (the single writer). Threaded, so concurrent
  Ray calls become concurrent appenders and share fsyncs through the log's group commit.
- ``EmbedderActor`` (``embedder``): holds the embedding model once for the fleet's writes (sessions, curators).
- ``ViewsActor`` (``views``): the projections (state folds, LanceDB + Tantivy), the projector and its own copy
  of the embedding model: a search is one call, planned, embedded and answered in the replica.
  With ``views_replicas`` there is one per replica (``replicas``; ``"node"``: one per node that reads).
- one ``ActorHost`` (``hosts``) per active session (a ``SessionActor``), per user (``FactCurator`` and
  ``NotesActor``), and summarizers, handed out by ``RayRuntime`` (``runtime``). Each rebuilds its state
  from the log in its constructor, so ``max_restarts`` brings it back intact; retried calls are safe
  because event ids make appends idempotent.

Ray is imported only by this package, which ``eidetica.open(..., runtime="ray")`` imports.
LanceDB is imported lazily inside the ViewsActor (never before Ray forks workers).
"""

from __future__ import annotations

from .calls import ACTOR_OPTIONS, Written, _collect, _noted, _unwrap, _Wrote, store_key
from .embedder import EmbedderActor, RemoteEmbedder
from .hosts import ActorHost, RemoteActor
from .log import LogActor, RemoteLog
from .open import FleetParts, join_cluster, open_ray, shutdown_store
from .replicas import ReplicatedViews, _least_used, _serving_order, replica_layout
from .runtime import RayRuntime
from .views import RemoteViews, ViewsActor

__all__ = [
    "RayRuntime", "RemoteLog", "RemoteEmbedder", "ReplicatedViews", "RemoteViews", "FleetParts", "open_ray",
    "shutdown_store", "replica_layout", "join_cluster", "ACTOR_OPTIONS", "Written", "store_key", "LogActor",
    "EmbedderActor", "ViewsActor", "ActorHost", "RemoteActor",
    # for the tests of the written-offsets plumbing and of replica placement
    "_collect", "_noted", "_unwrap", "_Wrote", "_least_used", "_serving_order",
]
