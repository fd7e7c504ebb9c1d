"""Items: the key-value documents of agent frameworks' stores (LangGraph ``BaseStore``).

An item is ``(namespace, key) -> value`` (a JSON object). Items live in the stream of the
user who owns them (``items:<tenant>:<user>``); this actor is that stream's one writer. A
put writes ``ItemPut`` plus, when the item is indexed, one ``ChunksEmbedded`` (kind
``item``) with the vectors of its texts, in one append; so replay never calls a model.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any, Callable, Sequence

from ..errors import InvalidInput
from ..events import ChunksEmbedded, EventLog, ItemDeleted, ItemPut, ItemTouched, NewEvent, UserForgotten
from ..events.streams import items_stream
from ..providers import Embedder
from ._text import vectors_to_bytes

__all__ = ["ItemsActor", "item_id", "namespace_key"]

_ITEM_NS = uuid.UUID("6f1b3c9e-8d0a-4f57-9a35-2c1d7e4b5a60")


def namespace_key(namespace: Sequence[str]) -> str:
    """The namespace as one string (labels never contain '.', as LangGraph validates)."""
    return ".".join(namespace)


def item_id(namespace: Sequence[str], key: str) -> str:
    """The deterministic id of the item at (namespace, key)."""
    return "item-" + uuid.uuid5(_ITEM_NS, namespace_key(namespace) + "\x00" + key).hex


class ItemsActor:
    """The single writer of one user's items: puts, deletes, TTL refreshes and sweeps."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, embedder: Embedder, clock: Callable[[], dt.datetime]) -> None:
        self.log = log
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.clock = clock
        self.stream = items_stream(tenant, user_id)
        self._lock = threading.Lock()
        # item id -> (ttl minutes, expires_at): what deletes, refreshes and sweeps decide on
        self.live: dict[str, tuple[float | None, dt.datetime | None]] = {}
        for rec in log.read_stream(self.stream):
            self._fold(rec.decode())

    def _fold(self, e: Any) -> None:
        if isinstance(e, ItemPut):
            self.live[e.item_id] = (e.ttl_minutes, e.expires_at)
        elif isinstance(e, ItemTouched):
            if e.item_id in self.live:
                self.live[e.item_id] = (self.live[e.item_id][0], e.expires_at)
        elif isinstance(e, ItemDeleted):
            self.live.pop(e.item_id, None)
        elif isinstance(e, UserForgotten):
            self.live.clear()

    def put_many(self, items: Sequence[dict[str, Any]]) -> int:
        """Write items (``namespace``, ``key``, ``value``, ``texts`` or None, ``ttl`` minutes); returns the last offset.

        ``value=None`` deletes. The texts of every item are embedded in one call.
        """
        if not items:
            raise InvalidInput("items", "must be a non-empty list")
        # the last write of a (namespace, key) wins, as in LangGraph's stores; two events of one
        # item in one append would share a log time, and the index orders an item's rows by it
        latest = {(tuple(it["namespace"]), it["key"]): it for it in items}
        items = list(latest.values())
        now = self.clock()
        texts = [t for it in items if it.get("value") is not None for t in (it.get("texts") or [])]
        vectors = self.embedder.embed(texts) if texts else None
        events: list[Any] = []
        pos = 0
        for it in items:
            ns, key = list(it["namespace"]), it["key"]
            iid = item_id(ns, key)
            if it.get("value") is None:
                events.append(ItemDeleted(item_id=iid))
                continue
            ttl = it.get("ttl")
            item_texts = list(it.get("texts") or [])
            events.append(ItemPut(
                item_id=iid, user_id=self.user_id, namespace=ns, key=key, value=dict(it["value"]),
                indexed=it.get("texts") is not None, ttl_minutes=ttl,
                expires_at=None if ttl is None else now + dt.timedelta(minutes=ttl),
            ))
            if item_texts:
                n = len(item_texts)
                events.append(ChunksEmbedded(
                    model_id=self.embedder.model_id, dim=self.embedder.dim,
                    chunk_ids=[f"{iid}#{i}" for i in range(n)],
                    vectors=vectors_to_bytes(vectors[pos : pos + n]),  # type: ignore[index]
                    texts=item_texts, source_id=iid, kind="item", user_id=self.user_id,
                    session_id=namespace_key(ns), category="item", time=now,
                    metadata={"namespace": ns, "key": key},
                ))
                pos += n
        with self._lock:
            # a delete of an item that does not exist writes nothing (LangGraph's delete is a no-op then)
            # one event per item (deduplicated above): a delete is kept when the item lives now
            keep = [e for e in events if not isinstance(e, ItemDeleted) or e.item_id in self.live]
            if not keep:
                return -1
            _, last = self.log.append(self.stream, [NewEvent.of(e, tenant=self.tenant) for e in keep])
            for e in keep:  # folded only once the append succeeded
                self._fold(e)
        return last

    def touch(self, item_ids: Sequence[str]) -> int:
        """Refresh the TTL of these items (those that have one); returns the last offset or -1."""
        now = self.clock()
        with self._lock:
            evs = []
            for iid in dict.fromkeys(item_ids):
                ttl = self.live.get(iid, (None, None))[0]
                if ttl is not None:
                    evs.append(ItemTouched(item_id=iid, expires_at=now + dt.timedelta(minutes=ttl)))
            if not evs:
                return -1
            _, last = self.log.append(self.stream, [NewEvent.of(e, tenant=self.tenant) for e in evs])
            for e in evs:
                self.live[e.item_id] = (self.live[e.item_id][0], e.expires_at)
        return last

    def sweep(self, now: dt.datetime | None = None) -> int:
        """Delete every item whose TTL has passed; returns how many."""
        now = now or self.clock()
        with self._lock:
            dead = [iid for iid, (_, exp) in self.live.items() if exp is not None and exp <= now]
            if not dead:
                return 0
            self.log.append(self.stream, [NewEvent.of(ItemDeleted(item_id=i, reason="expired"), tenant=self.tenant)
                                          for i in dead])
            for i in dead:
                self.live.pop(i, None)
        return len(dead)

    def forget_user(self) -> None:
        """Append the user tombstone to the items stream."""
        with self._lock:
            self.log.append(self.stream, [NewEvent.of(UserForgotten(user_id=self.user_id), tenant=self.tenant)])
            self.live.clear()
