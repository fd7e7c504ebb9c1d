"""Per-actor snapshots: an actor's fold of its own stream, so first use replays only the tail.

One directory per actor stream under ``<store>/snapshots/actors``, written with the
projections' ``SnapshotStore`` (Arrow IPC files, a sha256-checked manifest, written to a
temporary directory then renamed). Besides the checksum and schema version, a load checks
the snapshot against the log: the stream must still hold the event the snapshot ends with
(same version, same event id), so a snapshot of another store, of a rewritten stream or one
ahead of the log is refused with a warning and the actor replays its whole stream. The log
stays the truth; ``compact`` removes every actor snapshot (they may hold forgotten text).
"""

from __future__ import annotations

import bisect
import datetime as dt
import gc
import hashlib
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..events import EventLog, RecordedEvent
from ..projections._snapshot import SnapshotStore, SnapshotWarning

__all__ = ["ActorSnapshots", "ActorSnapshot", "IdSet", "column", "times", "no_gc", "restore_actor", "save_actor", "start_actor"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_US = dt.timedelta(microseconds=1)


@contextmanager
def no_gc() -> Iterator[None]:
    """Hold the cyclic GC off while a restore allocates its objects.

    Restoring tens of thousands of objects triggers collections that walk the whole heap
    (the state projection's too): measured, two thirds of a curator's restore was GC.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def column(table: pa.Table, name: str) -> list[Any]:
    """A column as Python values, through NumPy (``to_pylist`` costs several times more per value)."""
    return table.column(name).to_numpy(zero_copy_only=False).tolist()


def times(table: pa.Table, name: str) -> list[dt.datetime]:
    """A UTC timestamp column as aware datetimes (5x cheaper than ``to_pylist``, which goes through zoneinfo)."""
    return [_EPOCH + _US * u for u in table.column(name).cast(pa.int64()).to_numpy().tolist()]


class IdSet:
    """A set of ids: those restored from a snapshot stay in its sorted Arrow column, looked up by bisection.

    A start from a snapshot then builds no Python object per id (20,000 ids cost ~4 ms to
    materialise, more than the rest of a notes actor's start); a lookup costs ~15 Arrow reads.
    Changes since the restore are kept beside it (added, gone).
    """

    def __init__(self, restored: pa.Array | None = None) -> None:
        if restored is not None and len(restored) > 1 and not pc.all(pc.less(restored[:-1], restored[1:])).as_py():
            raise ValueError("its ids are not sorted and unique")  # bisection would miss some: refused, replayed
        self._sorted = restored if restored is not None else pa.array([], pa.string())  # written by ``sorted_ids``
        self._added: set[str] = set()
        self._gone: set[str] = set()

    @staticmethod
    def sorted_ids(ids: Iterable[str]) -> pa.Array:
        """The column a snapshot stores (Python's code point order is UTF-8 byte order, Arrow's)."""
        return pa.array(sorted(ids), pa.string())

    def _restored(self, x: str) -> bool:
        a = self._sorted
        i = bisect.bisect_left(a, x, key=lambda v: v.as_py())  # the stdlib's bisection over the Arrow column
        return i < len(a) and a[i].as_py() == x

    def __contains__(self, x: object) -> bool:
        return isinstance(x, str) and (x in self._added or (x not in self._gone and self._restored(x)))

    def add(self, x: str) -> None:
        """Add an id."""
        self._added.add(x)
        self._gone.discard(x)

    def discard(self, x: str) -> None:
        """Remove an id if present."""
        self._added.discard(x)
        self._gone.add(x)

    def clear(self) -> None:
        """Remove every id."""
        self._sorted = pa.array([], pa.string())
        self._added.clear()
        self._gone.clear()

    def __iter__(self) -> Iterator[str]:
        restored = (x for x in self._sorted.to_pylist() if x not in self._gone and x not in self._added)
        return iter([*restored, *self._added])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ActorSnapshot:
    """A verified actor snapshot: its tables, meta, the stream version it covers, and the events after it."""

    def __init__(self, tables: dict[str, pa.Table], meta: dict[str, Any], version: int, tail: list[RecordedEvent]) -> None:
        self.tables = tables
        self.meta = meta
        self.version = version
        self.tail = tail


class ActorSnapshots:
    """Where a store's actor snapshots live; an actor writes one after folding ``every`` events from the log."""

    def __init__(self, directory: str | os.PathLike[str], every: int = 1_000) -> None:
        self.dir = Path(directory)
        self.every = every

    def _store(self, kind: str, stream: str, schema_version: int) -> SnapshotStore:
        key = hashlib.sha256(stream.encode()).hexdigest()[:32]  # stream names hold user ids: not a path
        return SnapshotStore(self.dir / kind / key, kind, schema_version)

    def load(self, kind: str, stream: str, schema_version: int, log: EventLog) -> ActorSnapshot | None:
        """The actor's verified snapshot with the stream's events after it, or None (warned when refused)."""
        snap = self._store(kind, stream, schema_version).load()
        if snap is None:
            return None
        meta = snap.meta
        try:
            if meta.get("stream") != stream:
                raise ValueError("it belongs to another stream")
            version = int(meta["version"])
            gone = ValueError(f"the log no longer ends its version {version} with event {meta['event_id']}")
            find = getattr(log, "event_offset", None)  # the log's id index: no batch read to check one event
            if find is not None and "offset" in meta and "tenant" in meta:
                # a tenant's event ids are unique and never move: the recorded event still at its offset is the same history
                at = find(uuid.UUID(hex=meta["event_id"]), stream, meta["tenant"])
                if at != int(meta["offset"]) or log.stream_version(stream) < version:
                    raise gone
                tail = log.read_stream(stream, version + 1)
            else:  # a log without the index (a remote proxy): read the covered event back
                recs = log.read_stream(stream, version)
                if not recs or recs[0].version != version or recs[0].event_id.hex != meta["event_id"]:
                    raise gone
                tail = recs[1:]
        except Exception as e:  # noqa: BLE001 - any mismatch: the log is the truth
            warnings.warn(f"eidetica: ignoring actor snapshot {snap.path}: {e}; replaying the stream instead",
                          SnapshotWarning, stacklevel=3)
            return None
        return ActorSnapshot(snap.tables, meta, version, tail)

    def write(self, kind: str, stream: str, schema_version: int, tables: Mapping[str, pa.Table], meta: dict[str, Any],
              log: EventLog, version: int) -> None:
        """Write a snapshot covering the stream up to ``version`` (its event id is read back from the log)."""
        if version < 0:
            return
        recs = log.read_stream(stream, version)
        if not recs or recs[0].version != version:
            return  # not (or no longer) in the log: nothing trustworthy to snapshot
        meta = dict(meta, stream=stream, version=version, event_id=recs[0].event_id.hex, offset=recs[0].offset,
                    tenant=recs[0].tenant)
        self._store(kind, stream, schema_version).write(tables, {log.partition_of(stream): recs[0].offset + 1}, meta)

    def drop(self, kind: str, stream: str) -> None:
        """Remove an actor's snapshots (its stream was forgotten)."""
        shutil.rmtree(self._store(kind, stream, 0).dir, ignore_errors=True)

    def clear(self) -> None:
        """Remove every actor snapshot (``compact``: they may hold forgotten text)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def restore_actor(actor: Any, kind: str, schema: int) -> ActorSnapshot | None:
    """Load ``actor``'s snapshot and fold it in with ``actor._restore``; ``None`` (actor reset) means replay the stream."""
    if actor.snapshots is None:
        return None
    snap = actor.snapshots.load(kind, actor.stream, schema, actor.log)
    if snap is None:
        return None
    try:
        with no_gc():
            actor._restore(snap)
    except Exception as e:  # noqa: BLE001 - passed its checksum but not our reader: replay
        warnings.warn(f"eidetica: ignoring the snapshot of {actor.stream}: {e}; replaying the stream instead",
                      SnapshotWarning, stacklevel=4)
        actor._reset()
        return None
    return snap


def start_actor(actor: Any, kind: str, schema: int, fold: Callable[[Sequence[RecordedEvent]], None]) -> None:
    """Rebuild ``actor``'s fold (its lock held): reset, its snapshot plus the stream's tail (or the whole stream), folded."""
    actor._reset()
    actor.version = actor.log.stream_version(actor.stream)
    snap = restore_actor(actor, kind, schema)
    recs = snap.tail if snap is not None else actor.log.read_stream(actor.stream)
    fold(recs)
    actor.replayed = len(recs)  # what this start folded: the tail after a snapshot, or the whole stream
    if recs:
        actor.version = max(actor.version, recs[-1].version)


def save_actor(actor: Any, kind: str, schema: int, contents: Any, force: bool = False) -> bool:
    """Write ``actor``'s snapshot (``contents()`` gives its tables and meta) when ``every`` events are not covered (any, forced)."""
    if actor.snapshots is None:
        return False
    with actor._lock:
        behind = actor.version - actor._covered
        if behind <= 0 or (behind < actor.snapshots.every and not force):
            return False
        tables, meta = contents()
        actor.snapshots.write(kind, actor.stream, schema, tables, meta, actor.log, actor.version)
        actor._covered = actor.version
        return True
