"""Items: the key-value documents of agent frameworks' stores (LangGraph ``BaseStore``).

An item is ``(namespace, key) -> value`` (a JSON object). Items live in the stream of the
user who owns them (``items:<tenant>:<user>``); this actor is that stream's one writer. A
put writes ``ItemPut`` plus, when the item is indexed, one ``ChunksEmbedded`` (kind
``item``) with the vectors of its texts; so replay never calls a model.

Written behind (``WriteBehind``, the embedded runtime): the put appends ``ItemPut`` carrying
its texts and returns; one worker embeds the texts of every put queued meanwhile in one model
call and appends their ``ChunksEmbedded`` (a model embeds a batch several times faster than
its texts one by one). Reads wait for the queue (``Memory._sync``), so they still read their
own writes. An embedding whose item was put again or deleted meanwhile is dropped, never
appended; a ``ItemPut`` whose vectors never came (a crash) is embedded when its actor is
built. Without a ``WriteBehind`` (Ray) a put embeds and appends both events at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from typing import Any, Callable, Sequence

import msgspec

from ..errors import InvalidInput
from ..events import ChunksEmbedded, EventLog, ItemDeleted, ItemPut, ItemTouched, NewEvent, UserForgotten
from ..events.streams import items_stream
from ..providers import Embedder
from ._text import vectors_to_bytes

__all__ = ["ItemsActor", "WriteBehind", "item_id", "namespace_key"]

log = logging.getLogger(__name__)

_ITEM_NS = uuid.UUID("6f1b3c9e-8d0a-4f57-9a35-2c1d7e4b5a60")


def namespace_key(namespace: Sequence[str]) -> str:
    """The namespace as one string (labels never contain '.', as LangGraph validates)."""
    return ".".join(namespace)


def item_id(namespace: Sequence[str], key: str) -> str:
    """The deterministic id of the item at (namespace, key)."""
    return "item-" + uuid.uuid5(_ITEM_NS, namespace_key(namespace) + "\x00" + key).hex


class _Job(msgspec.Struct, frozen=True):
    """The texts of one put, waiting for their vectors."""

    item_id: str
    seq: int  # which put of the item (the actor's counter): a later put or a delete supersedes it
    namespace: list[str]
    key: str
    texts: list[str]
    time: dt.datetime


class WriteBehind:
    """One worker that embeds the texts of queued item puts in batches and appends their vectors."""

    def __init__(self, embedder: Embedder, batch: int = 256) -> None:
        self.embedder = embedder
        self.batch = batch
        self._cond = threading.Condition()
        self._jobs: list[tuple["ItemsActor", _Job]] = []
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, actor: "ItemsActor", jobs: Sequence[_Job]) -> None:
        """Queue jobs of an actor (the worker starts on first use)."""
        with self._cond:
            self._jobs.extend((actor, j) for j in jobs)
            self._closed = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="eidetica-items-embed", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every queued put has its vectors appended; raises the worker's error once."""
        with self._cond:
            self._cond.wait_for(lambda: (not self._jobs and not self._busy) or self._thread is None)
            err, self._error = self._error, None
        if err is not None:
            raise err

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._jobs) or self._closed)
                if not self._jobs:
                    self._thread = None  # a later submit starts a new worker
                    self._cond.notify_all()
                    return
                take, self._jobs = self._jobs[: self.batch], self._jobs[self.batch :]
                self._busy = True
            try:
                take = [(a, j) for a, j in take if a._waiting.get(j.item_id) == j.seq]  # superseded: not worth the model
                texts = [t for _, j in take for t in j.texts]
                vectors = self.embedder.embed(texts) if texts else None
                by_actor: dict[int, tuple[ItemsActor, list[tuple[_Job, Any]]]] = {}
                pos = 0
                for actor, j in take:
                    by_actor.setdefault(id(actor), (actor, []))[1].append((j, vectors[pos : pos + len(j.texts)]))
                    pos += len(j.texts)
                for actor, done in by_actor.values():
                    actor._embedded(done)
            except BaseException as e:  # noqa: BLE001 - the next read raises it; the puts stay recoverable
                log.exception("eidetica: embedding item texts failed")
                with self._cond:
                    self._error = e
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def close(self) -> None:
        """Finish the queue and stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            t = self._thread
        if t is not None:
            t.join()


class ItemsActor:
    """The single writer of one user's items: puts, deletes, TTL refreshes and sweeps."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, embedder: Embedder, clock: Callable[[], dt.datetime],
                 behind: WriteBehind | None = None) -> None:
        self.log = log
        self.behind = behind
        self._seq = 0
        self._waiting: dict[str, int] = {}  # item id -> the put whose vectors are still to come
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.clock = clock
        self.stream = items_stream(tenant, user_id)
        self._lock = threading.Lock()
        # item id -> (ttl minutes, expires_at): what deletes, refreshes and sweeps decide on
        self.live: dict[str, tuple[float | None, dt.datetime | None]] = {}
        unembedded: dict[str, _Job] = {}
        for rec in log.read_stream(self.stream):
            e = rec.decode()
            self._fold(e)
            if isinstance(e, ItemPut) and e.texts:
                unembedded[e.item_id] = _Job(item_id=e.item_id, seq=0, namespace=list(e.namespace), key=e.key,
                                             texts=list(e.texts), time=rec.time)
            elif isinstance(e, ChunksEmbedded) or isinstance(e, ItemPut):
                unembedded.pop(e.source_id if isinstance(e, ChunksEmbedded) else e.item_id, None)
            elif isinstance(e, ItemDeleted):
                unembedded.pop(e.item_id, None)
            elif isinstance(e, UserForgotten):
                unembedded.clear()
        if unembedded:  # a crash came between a put and its vectors: embed them now
            self._queue(list(unembedded.values()))

    def _fold(self, e: Any) -> None:
        if isinstance(e, ItemPut):
            self.live[e.item_id] = (e.ttl_minutes, e.expires_at)
            self._waiting.pop(e.item_id, None)  # an earlier put's vectors, if still to come, are stale now
        elif isinstance(e, ItemTouched):
            if e.item_id in self.live:
                self.live[e.item_id] = (self.live[e.item_id][0], e.expires_at)
        elif isinstance(e, ItemDeleted):
            self.live.pop(e.item_id, None)
            self._waiting.pop(e.item_id, None)
        elif isinstance(e, UserForgotten):
            self.live.clear()
            self._waiting.clear()

    def _number(self, jobs: Sequence[_Job]) -> list[_Job]:
        """Number jobs as the latest puts of their items (the caller holds the lock, in the append's critical section)."""
        out = []
        for j in jobs:
            self._seq += 1
            self._waiting[j.item_id] = self._seq
            out.append(msgspec.structs.replace(j, seq=self._seq))
        return out

    def _queue(self, jobs: list[_Job]) -> None:
        """Hand puts' texts to the write-behind worker, or embed them now when there is none."""
        with self._lock:
            numbered = self._number(jobs)
        if self.behind is not None:
            self.behind.submit(self, numbered)
            return
        vectors = self.embedder.embed([t for j in numbered for t in j.texts])
        pos, done = 0, []
        for j in numbered:
            done.append((j, vectors[pos : pos + len(j.texts)]))
            pos += len(j.texts)
        self._embedded(done)

    def _chunks(self, j: _Job, vectors: Any) -> ChunksEmbedded:
        n = len(j.texts)
        return ChunksEmbedded(
            model_id=self.embedder.model_id, dim=self.embedder.dim, chunk_ids=[f"{j.item_id}#{i}" for i in range(n)],
            vectors=vectors_to_bytes(vectors), texts=list(j.texts), source_id=j.item_id, kind="item",
            user_id=self.user_id, session_id=namespace_key(j.namespace), category="item", time=j.time,
            metadata={"namespace": list(j.namespace), "key": j.key},
        )

    def _embedded(self, done: Sequence[tuple[_Job, Any]]) -> int:
        """Append the vectors of puts that are still the latest of their item; returns the last offset or -1."""
        with self._lock:
            evs = [self._chunks(j, v) for j, v in done if self._waiting.get(j.item_id) == j.seq]
            if not evs:
                return -1
            _, last = self.log.append(self.stream, [NewEvent.of(e, tenant=self.tenant) for e in evs])
            for j, _ in done:
                if self._waiting.get(j.item_id) == j.seq:
                    del self._waiting[j.item_id]
        return last

    def put_many(self, items: Sequence[dict[str, Any]]) -> int:
        """Write items (``namespace``, ``key``, ``value``, ``texts`` or None, ``ttl`` minutes); returns the last offset.

        ``value=None`` deletes. The texts of every item are embedded in one call: written behind
        the put when the actor has a ``WriteBehind``, else before it, in the same append.
        """
        if not items:
            raise InvalidInput("items", "must be a non-empty list")
        # the last write of a (namespace, key) wins, as in LangGraph's stores; two events of one
        # item in one append would share a log time, and the index orders an item's rows by it
        latest = {(tuple(it["namespace"]), it["key"]): it for it in items}
        items = list(latest.values())
        now = self.clock()
        behind = self.behind is not None
        jobs: list[_Job] = []
        events: list[Any] = []
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
                texts=item_texts if (behind and item_texts) else None,
            ))
            if item_texts:
                jobs.append(_Job(item_id=iid, seq=0, namespace=ns, key=key, texts=item_texts, time=now))
        if not behind and jobs:
            vectors = self.embedder.embed([t for j in jobs for t in j.texts])
            pos, at = 0, {}
            for j in jobs:
                at[j.item_id] = self._chunks(j, vectors[pos : pos + len(j.texts)])
                pos += len(j.texts)
            events = [x for e in events for x in ([e, at[e.item_id]] if isinstance(e, ItemPut) and e.item_id in at else [e])]
        with self._lock:
            # a delete of an item that does not exist writes nothing (LangGraph's delete is a no-op then)
            # one event per item (deduplicated above): a delete is kept when the item lives now
            keep = [e for e in events if not isinstance(e, ItemDeleted) or e.item_id in self.live]
            if not keep:
                return -1
            _, last = self.log.append(self.stream, [NewEvent.of(e, tenant=self.tenant) for e in keep])
            for e in keep:  # folded only once the append succeeded
                self._fold(e)
            # numbered in the append's critical section: of two racing puts of one item, the one
            # appended last is the one whose vectors are kept, whatever order the worker sees them in
            numbered = self._number(jobs) if behind and jobs else []
        if numbered:
            self.behind.submit(self, numbered)  # type: ignore[union-attr]
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
