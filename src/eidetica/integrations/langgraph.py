"""``EideticaStore``: a LangGraph ``BaseStore`` over an eidetica memory (``pip install eidetica[langgraph]``).

Items are events in the log (``Memory.items``), so replay, export / import, ``forget_user`` +
``compact`` and tenant isolation cover them. A ``query`` search is eidetica's hybrid search
(vectors + BM25) over the item's indexed texts; ``filter``, namespace prefixes, ``limit`` and
``offset`` follow LangGraph's own stores (their matchers are used, not re-implemented).

Ownership: each item belongs to a user (its stream, and what ``forget_user`` erases). By
default the user is the namespace's first label (``("alice", "memories")``); pass
``user="alice"`` or ``user=lambda ns: ns[1]`` (LangMem's ``("memories", "{user_id}")``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

# LangGraph's reference semantics for namespace match conditions (the function its InMemoryStore
# runs), so the two stores agree by construction. Filters travel as data to ``Memory.items``
# (they cross the server); a test checks its matcher against LangGraph's on the same cases.
from langgraph.store.memory import _does_match

from .._remote.aclient import aio
from .._store.items import ItemInfo
from ..errors import InvalidInput
from ..providers import check_vectors, normalize_rows
from ..providers._base import CachedEmbedder

__all__ = ["EideticaStore", "LangChainEmbedder"]

log = logging.getLogger(__name__)


def _default_user(namespace: tuple[str, ...]) -> str:
    return namespace[0]


# LangGraph's distance types and each one's score from a cosine similarity ``c`` of unit vectors
# (eidetica stores every vector normalised): Postgres reports the inner product and minus the
# L2 distance, which for unit vectors are ``c`` and ``-sqrt(2 - 2c)``.
_DISTANCES: dict[str, Callable[[float], float]] = {
    "cosine": lambda c: c,
    "inner_product": lambda c: c,
    "l2": lambda c: -math.sqrt(max(0.0, 2.0 - 2.0 * c)),
}


def _index_fields(index: Any) -> Any:
    """The index's fields: LangGraph's documented ``fields``, or ``text_fields`` as SqliteStore names them."""
    index = index or {}
    return index.get("fields") if index.get("fields") is not None else index.get("text_fields")


def _model_id(embed: Any) -> str:
    """A stable name for a LangGraph ``embed``: the "provider:model" string itself, else the
    class (or function) and its ``model`` / ``model_name`` when it has one."""
    if isinstance(embed, str):
        return embed
    kind = "callable" if callable(embed) and not isinstance(embed, Embeddings) else "langchain"
    named = embed if kind == "callable" else type(embed)
    name = f"{kind}:{getattr(named, '__module__', '')}.{getattr(named, '__qualname__', type(embed).__name__)}"
    model = getattr(embed, "model", None) or getattr(embed, "model_name", None)
    return f"{name}:{model}" if isinstance(model, str) and model else name


class LangChainEmbedder(CachedEmbedder):
    """An eidetica embedder over a LangGraph ``embed`` (LangChain ``Embeddings``, a function of
    texts, or a "provider:model" string); rows are normalised, as every eidetica vector is."""

    def __init__(self, embed: Any, dim: int, *, cache_size: int = 10_000) -> None:
        super().__init__(cache_size)
        self.model_id = _model_id(embed)
        self.dim = dim
        self.max_tokens = 8192
        self._embeddings = ensure_embeddings(embed)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        lc = self._embeddings
        if getattr(lc, "func", True) is None:  # an async-only function: run it off any running loop
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                rows = pool.submit(asyncio.run, lc.aembed_documents(texts)).result()
        else:
            rows = lc.embed_documents(texts)
        return normalize_rows(check_vectors(rows, self.dim).copy())


def _embedder(memory: Any, embed: Any, dims: int | None) -> LangChainEmbedder:
    if dims is None:
        raise InvalidInput("index.dims", "is required with index.embed (the embedding dimension)")
    try:
        return LangChainEmbedder(embed, dims)
    except Exception as e:  # noqa: BLE001 - an unknown provider, its package or its key missing: say which store model stands
        model_id, dim = memory.items.embedder()
        raise InvalidInput("index.embed", f"cannot load {_model_id(embed)} ({e}); this store embeds with "
                           f"{model_id} ({dim}-d): leave index.embed out to use it") from e


def _adopt(memory: Any, embedder: LangChainEmbedder) -> None:
    """Make ``embedder`` the store's: nothing to do when the store uses that model already; a
    store with nothing written yet switches to it; any other store is refused (its vectors
    are in the log, recorded with its model)."""
    model_id, dim = memory.items.embedder()
    if (model_id, dim) == (embedder.model_id, embedder.dim):
        return
    if not memory.items.adopt_embedder(embedder):
        raise InvalidInput(
            "index.embed",
            f"this store embeds with {model_id} ({dim}-d), not {embedder.model_id} ({embedder.dim}-d): "
            "leave index.embed out to use the store's model, or open a new store for this one",
        )


class EideticaStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are eidetica events, searched by eidetica's hybrid search."""

    supports_ttl: bool = True

    def __init__(
        self,
        memory: Any,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        user: str | Callable[[tuple[str, ...]], str] | None = None,
    ) -> None:
        self.memory = memory
        self.index_config, embedder = self._check_index(memory, index)
        # the LangChain embeddings of ``index["embed"]``, as LangGraph's stores expose them (None: the store's model)
        self.embeddings: Embeddings | None = embedder._embeddings if embedder is not None else None
        self._fields = [(f, tokenize_path(f) if f != "$" else "$") for f in _index_fields(self.index_config) or ["$"]]
        self.ttl_config = ttl
        if isinstance(user, str):
            fixed = user
            self._user: Callable[[tuple[str, ...]], str] = lambda ns: fixed
        else:
            self._user = user or _default_user
        self._ttl_stop = threading.Event()
        self._ttl_thread: threading.Thread | None = None

    @staticmethod
    def _check_index(memory: Any, index: IndexConfig | None) -> tuple[IndexConfig | None, LangChainEmbedder | None]:
        if index is None:
            return None, None
        if not isinstance(index, dict):
            raise InvalidInput("index", "must be a dict with dims / embed / fields", index)
        fields = _index_fields(index)
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
            raise InvalidInput("index.fields", "must be a list of JSON paths", fields)
        distance = index.get("distance_type", "cosine")
        if distance not in _DISTANCES:
            raise InvalidInput("index.distance_type", f"must be one of {', '.join(_DISTANCES)}", distance)
        dims = index.get("dims")
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
            raise InvalidInput("index.dims", "must be an int >= 1", dims)
        embedder = None
        if index.get("embed") not in (None, "eidetica"):
            embedder = _embedder(memory, index["embed"], dims)
            _adopt(memory, embedder)
        model_id, dim = memory.items.embedder()
        if dims not in (None, dim):
            raise InvalidInput("index.dims", f"must be the store's embedding dimension {dim} ({model_id})", dims)
        return index, embedder

    # -- texts to index -------------------------------------------------------------------
    def _texts(self, value: dict[str, Any], index: Any) -> list[str] | None:
        """The texts of a value to embed and index; None when the item is not indexed."""
        if index is False:
            return None
        if index is None or index is True:
            fields = self._fields
        else:
            fields = [(f, tokenize_path(f) if f != "$" else "$") for f in index]
        out: list[str] = []
        for _, path in fields:
            out.extend(get_text_at_path(value, path))
        return out

    # -- the port ---------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops in order (consecutive puts in one write); results in the order of the ops."""
        return self._batch(self.memory.items, list(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` through the memory's async face (``eidetica._remote.aio``): served, its requests await
        on this loop (no thread); embedded, it runs on the face's bounded pool."""
        face = await aio(self.memory)
        return await face.run_sync(self._batch, face.sync_object.items, list(ops))

    def _batch(self, items: Any, ops: list[Op]) -> list[Result]:
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, PutOp) and not op.namespace:
                raise InvalidNamespaceError("Namespace cannot be empty.")
        results: list[Result] = [None] * len(ops)
        puts: list[PutOp] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                puts.append(op)
                continue
            if puts:
                self._put(items, puts)
                puts = []
            if isinstance(op, GetOp):
                results[i] = self._get(items, op)
            elif isinstance(op, SearchOp):
                results[i] = self._search(items, op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(items, op)
            else:
                raise InvalidInput("ops", f"unknown operation {type(op).__name__}")
        if puts:
            self._put(items, puts)
        return results

    def _put(self, items: Any, puts: list[PutOp]) -> None:
        items.put([
            {"namespace": op.namespace, "key": op.key, "value": None if op.value is None else dict(op.value),
             "texts": None if op.value is None else self._texts(dict(op.value), op.index),
             "user": self._user(op.namespace), "ttl": op.ttl}
            for op in puts
        ])

    def _omit_expired(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("omit_expired", False))

    def _get(self, items: Any, op: GetOp) -> Item | None:
        it = items.get(op.namespace, op.key, refresh_ttl=op.refresh_ttl, omit_expired=self._omit_expired())
        return None if it is None else _item(it)

    def _search(self, items: Any, op: SearchOp) -> list[SearchItem]:
        found = items.search(
            op.namespace_prefix, query=op.query, filter=dict(op.filter) if op.filter else None, limit=op.limit,
            offset=op.offset,
            refresh_ttl=op.refresh_ttl, omit_expired=self._omit_expired(),
        )
        to_score = _DISTANCES[(self.index_config or {}).get("distance_type", "cosine")]
        return [_search_item(it, None if score is None else to_score(score)) for it, score in found]

    def _list_namespaces(self, items: Any, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = items.namespaces(omit_expired=self._omit_expired())
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        return namespaces[op.offset : op.offset + op.limit]

    # -- TTL ----------------------------------------------------------------------------
    def sweep_ttl(self) -> int:
        """Delete expired items now (each an ``ItemDeleted`` event); returns how many."""
        return int(self.memory.items.sweep())

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (or the TTL config's, default 5) on a thread."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._ttl_thread is not None and self._ttl_thread.is_alive():
            future.add_done_callback(lambda f: self._ttl_stop.set() if f.cancelled() else None)
            return future
        interval = float(sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5)
        self._ttl_stop.clear()

        def loop() -> None:
            while not self._ttl_stop.wait(interval * 60):
                try:
                    EideticaStore.sweep_ttl(self)  # this class's sweep, whatever a subclass names so
                except Exception:  # noqa: BLE001 - one failed sweep must not end the sweeper
                    log.exception("eidetica: TTL sweep failed")
            future.set_result(None)

        self._ttl_thread = threading.Thread(target=loop, name="eidetica-ttl-sweeper", daemon=True)
        self._ttl_thread.start()
        future.add_done_callback(lambda f: self._ttl_stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; True when it stopped (or was not running)."""
        if self._ttl_thread is None or not self._ttl_thread.is_alive():
            return True
        self._ttl_stop.set()
        self._ttl_thread.join(timeout)
        stopped = not self._ttl_thread.is_alive()
        if stopped:
            self._ttl_thread = None
        return stopped


def _item(it: ItemInfo) -> Item:
    return Item(value=dict(it.value), key=it.key, namespace=tuple(it.namespace),
                created_at=it.created_at, updated_at=it.updated_at)


def _search_item(it: ItemInfo, score: float | None) -> SearchItem:
    return SearchItem(namespace=tuple(it.namespace), key=it.key, value=dict(it.value),
                      created_at=it.created_at, updated_at=it.updated_at, score=score)
