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
import threading
from typing import Any, Callable, Iterable

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
from langgraph.store.base.embed import get_text_at_path, tokenize_path

# LangGraph's reference semantics for namespace match conditions (the function its InMemoryStore
# runs), so the two stores agree by construction. Filters travel as data to ``Memory.items``
# (they cross the server); a test checks its matcher against LangGraph's on the same cases.
from langgraph.store.memory import _does_match

from .._items import ItemInfo
from ..errors import InvalidInput

__all__ = ["EideticaStore"]

log = logging.getLogger(__name__)


def _default_user(namespace: tuple[str, ...]) -> str:
    return namespace[0]


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
        self.index_config = self._check_index(memory, index)
        self._fields = [(f, tokenize_path(f) if f != "$" else "$") for f in (self.index_config or {}).get("fields") or ["$"]]
        self.ttl_config = ttl
        if isinstance(user, str):
            fixed = user
            self._user: Callable[[tuple[str, ...]], str] = lambda ns: fixed
        else:
            self._user = user or _default_user
        self._ttl_stop = threading.Event()
        self._ttl_thread: threading.Thread | None = None

    @staticmethod
    def _check_index(memory: Any, index: IndexConfig | None) -> IndexConfig | None:
        if index is None:
            return None
        if not isinstance(index, dict):
            raise InvalidInput("index", "must be a dict with dims / embed / fields", index)
        model_id, dim = memory.items.embedder()
        if index.get("dims") not in (None, dim):
            raise InvalidInput("index.dims", f"must be the store's embedding dimension {dim}", index.get("dims"))
        if index.get("embed") not in (None, "eidetica"):
            # vectors are recorded in the log and replayed, never recomputed: one model per store
            raise InvalidInput("index.embed", f"eidetica embeds with the store's model ({model_id}); leave it out")
        fields = index.get("fields")
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) for f in fields)):
            raise InvalidInput("index.fields", "must be a list of JSON paths", fields)
        return index

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
        ops = list(ops)
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
                self._put(puts)
                puts = []
            if isinstance(op, GetOp):
                results[i] = self._get(op)
            elif isinstance(op, SearchOp):
                results[i] = self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._list_namespaces(op)
            else:
                raise InvalidInput("ops", f"unknown operation {type(op).__name__}")
        if puts:
            self._put(puts)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` on a worker thread (the memory's calls block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _put(self, puts: list[PutOp]) -> None:
        self.memory.items.put([
            {"namespace": op.namespace, "key": op.key, "value": None if op.value is None else dict(op.value),
             "texts": None if op.value is None else self._texts(dict(op.value), op.index),
             "user": self._user(op.namespace), "ttl": op.ttl}
            for op in puts
        ])

    def _omit_expired(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("omit_expired", False))

    def _get(self, op: GetOp) -> Item | None:
        it = self.memory.items.get(op.namespace, op.key, refresh_ttl=op.refresh_ttl, omit_expired=self._omit_expired())
        return None if it is None else _item(it)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        found = self.memory.items.search(
            op.namespace_prefix, query=op.query, filter=dict(op.filter) if op.filter else None, limit=op.limit,
            offset=op.offset,
            refresh_ttl=op.refresh_ttl, omit_expired=self._omit_expired(),
        )
        return [_search_item(it, score) for it, score in found]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = self.memory.items.namespaces()
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
                    self.sweep_ttl()
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
