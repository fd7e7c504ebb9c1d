"""The embedder on Ray: one copy of the model for the fleet's writes (``EmbedderActor``), its port
(``RemoteEmbedder``), and a node's own copy for its views (``_node_embedder``)."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import ray

from ..providers import Embedder, default_embedder
from .calls import _get, _listed

__all__ = ["EmbedderActor", "RemoteEmbedder"]


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


def _node_embedder(embedder: Embedder | None, fleet: "RemoteEmbedder") -> Embedder:
    """This process's own copy of the fleet's embedding model (one per node), or the fleet's actor if they differ."""
    try:
        local = embedder if embedder is not None else default_embedder()
    except Exception:  # noqa: BLE001 - no local model here: the fleet's embedder actor still answers
        return fleet
    return local if (local.model_id, local.dim) == (fleet.model_id, fleet.dim) else fleet
