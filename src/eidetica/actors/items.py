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

The actor's fold (live items with their TTLs, and the puts still waiting for their vectors)
starts from its snapshot plus the stream's tail (``_snapshots``); the snapshot records the
waiting puts, so a put a crash left without vectors is embedded on the next start whether
the snapshot covers it or not. Appends carry the fold's expected version.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import pyarrow as pa

from ..errors import InvalidInput
from ..events import (
    ChunksEmbedded,
    EventLog,
    ItemDeleted,
    ItemPut,
    ItemTouched,
    NewEvent,
    RecordedEvent,
    UserForgotten,
    utcnow,
)
from ..events.streams import items_stream
from ..providers import Embedder
from ._owner import StreamOwner
from ._snapshots import ActorSnapshot, ActorSnapshots, IdSet, column, save_actor, start_actor
from ._text import vectors_to_bytes
from ._writer import append_expecting

__all__ = ["ItemsActor", "WriteBehind", "item_id", "namespace_key"]

log = logging.getLogger(__name__)

_ITEM_NS = uuid.UUID("6f1b3c9e-8d0a-4f57-9a35-2c1d7e4b5a60")
SNAPSHOT_SCHEMA = 1  # of the items actor's snapshot tables; bump on any change (older ones are then refused)
_TS = pa.timestamp("us", tz="UTC")


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
        self._jobs: list[tuple[ItemsActor, _Job]] = []
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, actor: ItemsActor, jobs: Sequence[_Job]) -> None:
        """Queue jobs of an actor (the worker starts on first use)."""
        with self._cond:
            self._jobs.extend((actor, j) for j in jobs)
            if threading.current_thread() is not self._thread:
                # a submit from the worker itself (an actor refolding after a race, during close) must
                # not reopen the queue: close would wait forever for a worker that waits for work
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


class ItemsActor(StreamOwner):
    """The single writer of one user's items: puts, deletes, TTL refreshes and sweeps."""

    def __init__(self, log: EventLog, tenant: str, user_id: str, embedder: Embedder, clock: Callable[[], dt.datetime],
                 behind: WriteBehind | None = None, snapshots: ActorSnapshots | None = None) -> None:
        self.log = log
        self.behind = behind
        self.snapshots = snapshots
        self._seq = 0  # never reset: a job numbered before a reload never matches one numbered after
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.clock = clock
        self.stream = items_stream(tenant, user_id)
        self._lock = threading.RLock()
        self.reload()

    # -- state -----------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the fold (snapshot + tail, or the whole stream), then embed the puts still waiting for vectors."""
        with self._lock:
            start_actor(self, "items", SNAPSHOT_SCHEMA, self._fold_records)
            self.save_snapshot()  # a long replay is paid once, not on every start
            if self.unembedded:  # a crash came between a put and its vectors: embed them now
                self._queue(list(self.unembedded.values()))

    def _fold_records(self, recs: Sequence[RecordedEvent]) -> None:
        for rec in recs:
            self._fold(rec.decode(), rec.time)

    def _reset(self) -> None:
        self.live = IdSet()  # the user's live item ids: what deletes decide on
        # item id -> (ttl minutes, expires_at) of the live items with a TTL: what refreshes and sweeps decide on
        self.ttl: dict[str, tuple[float, dt.datetime | None]] = {}
        # item id -> its latest put whose vectors are not in the log (written behind, or lost to a crash)
        self.unembedded: dict[str, _Job] = {}
        self._waiting: dict[str, int] = {}  # item id -> the queued put whose vectors are still to come
        self._covered = -1  # the stream version the snapshot on disk covers

    def _restore(self, snap: ActorSnapshot) -> None:
        t = snap.tables
        self.live = IdSet(t["live"].column("item_id").combine_chunks())
        ttl = t["ttl"]
        self.ttl = dict(zip(column(ttl, "item_id"), zip(column(ttl, "ttl_minutes"), ttl.column("expires_at").to_pylist())))
        jobs = msgspec.msgpack.decode(t["unembedded"].column("all")[0].as_py(), type=list[_Job])
        self.unembedded = {j.item_id: j for j in jobs}
        self.version = max(self.version, snap.version)
        self._covered = snap.version

    def _tables(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The fold as Arrow tables (lock held): what the actor's snapshot holds."""
        timed = list(self.ttl.items())
        return {
            "live": pa.table({"item_id": IdSet.sorted_ids(self.live)}),
            "ttl": pa.table({"item_id": pa.array([k for k, _ in timed], pa.string()),
                             "ttl_minutes": pa.array([v[0] for _, v in timed], pa.float64()),
                             "expires_at": pa.array([v[1] for _, v in timed], _TS)}),
            # the puts still waiting for their vectors, with their texts: the next start embeds them (usually none)
            "unembedded": pa.table({"all": pa.array([msgspec.msgpack.encode(list(self.unembedded.values()))], pa.binary())}),
        }, {}

    def save_snapshot(self, force: bool = False) -> bool:
        """Write the actor's snapshot when ``snapshots.every`` events are not covered by it (any, when forced)."""
        return save_actor(self, "items", SNAPSHOT_SCHEMA, self._tables, force)

    def _append(self, build: Callable[[], list[Any]], time: dt.datetime | None = None) -> tuple[list[Any], int]:
        """Append the events ``build`` decides on the fold, with its version expected (lock held); refold and redo on a race.

        Returns the events appended (to fold) and the last offset (-1: nothing to append).
        """
        decided: list[Any] = []

        def news() -> list[NewEvent]:
            decided[:] = build()
            return [NewEvent.of(e, tenant=self.tenant, time=time) for e in decided]

        appended, _, last = append_expecting(self, news)
        return (decided, last) if appended else ([], -1)

    def _fold(self, e: Any, time: dt.datetime) -> None:
        if isinstance(e, ItemPut):
            self.live.add(e.item_id)
            if e.ttl_minutes is None:
                self.ttl.pop(e.item_id, None)
            else:
                self.ttl[e.item_id] = (e.ttl_minutes, e.expires_at)
            self._waiting.pop(e.item_id, None)  # an earlier put's vectors, if still to come, are stale now
            if e.texts:
                self.unembedded[e.item_id] = _Job(item_id=e.item_id, seq=0, namespace=list(e.namespace), key=e.key,
                                                  texts=list(e.texts), time=time)
            else:
                self.unembedded.pop(e.item_id, None)
        elif isinstance(e, ChunksEmbedded):
            self.unembedded.pop(e.source_id, None)
        elif isinstance(e, ItemTouched):
            if e.item_id in self.ttl:
                self.ttl[e.item_id] = (self.ttl[e.item_id][0], e.expires_at)
        elif isinstance(e, ItemDeleted):
            self.live.discard(e.item_id)
            self.ttl.pop(e.item_id, None)
            self._waiting.pop(e.item_id, None)
            self.unembedded.pop(e.item_id, None)
        elif isinstance(e, UserForgotten):
            self.live.clear()
            self.ttl.clear()
            self._waiting.clear()
            self.unembedded.clear()

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
            def build() -> list[Any]:  # decided on the fold: a refold after a race decides again
                return [self._chunks(j, v) for j, v in done if self._waiting.get(j.item_id) == j.seq]

            evs, last = self._append(build)
            for e in evs:
                self._fold(e, e.time)
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
            def build() -> list[Any]:
                # a delete of an item that does not exist writes nothing (LangGraph's delete is a no-op then)
                # one event per item (deduplicated above): a delete is kept when the item lives now
                return [e for e in events if not isinstance(e, ItemDeleted) or e.item_id in self.live]

            # stamped here as the log would at its commit (wall time, not the clock), so the fold knows
            # the time a replay reads: a put still waiting for its vectors is the same job either way
            stamp = utcnow()
            kept, last = self._append(build, stamp)
            if not kept:
                return -1
            for e in kept:  # folded only once the append succeeded
                self._fold(e, stamp)
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
            def build() -> list[Any]:
                return [ItemTouched(item_id=iid, expires_at=now + dt.timedelta(minutes=ttl)) for iid in dict.fromkeys(item_ids)
                        if (ttl := self.ttl.get(iid, (None, None))[0]) is not None]

            evs, last = self._append(build)
            for e in evs:
                self._fold(e, now)
        return last

    def sweep(self, now: dt.datetime | None = None) -> int:
        """Delete every item whose TTL has passed; returns how many."""
        now = now or self.clock()
        with self._lock:
            def build() -> list[Any]:
                return [ItemDeleted(item_id=i, reason="expired") for i, (_, exp) in self.ttl.items()
                        if exp is not None and exp <= now]

            evs, _ = self._append(build)
            for e in evs:
                self._fold(e, now)
        return len(evs)

    def forget_user(self) -> None:
        """Append the user tombstone to the items stream."""
        with self._lock:
            self._append(lambda: [UserForgotten(user_id=self.user_id)])
            self._fold(UserForgotten(user_id=self.user_id), self.clock())
            if self.snapshots is not None:
                self.snapshots.drop("items", self.stream)  # it holds the forgotten items' texts
                self._covered = -1
