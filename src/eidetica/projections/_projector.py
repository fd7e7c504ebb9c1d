"""Projector: tails the log and applies batches of events to projections.

For each projection it keeps the next offset to apply per partition, starting from the
projection's saved checkpoint. A batch is applied first, then the projection's
checkpoint is saved (output before checkpoint), so a crash in between replays the batch
on restart, which the projections' idempotent writes make harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import InvalidInput
from ..events import EventLog, RecordedEvent
from ..events.envelope import events_from_batch
from ._base import Projection

__all__ = ["Projector", "BULK_EVENTS"]

# a catch-up of this many events or more is a bulk load: every projection is maintained after it
BULK_EVENTS = 5_000

log = logging.getLogger(__name__)


class Projector:
    """Feeds projections from a log: on demand (``catch_up``) or from a background thread."""

    def __init__(self, log: EventLog, projections: Sequence[Projection], *, batch_size: int = 1000) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput("batch_size", "must be an int >= 1", batch_size)
        names = [p.name for p in projections]
        if len(set(names)) != len(names):
            raise InvalidInput("projections", f"names must be unique, got {names}")
        self.log = log
        self.projections = list(projections)
        self.batch_size = batch_size
        self._by_name = {p.name: p for p in self.projections}
        self._pos: dict[str, dict[int, int]] = {p.name: dict(p.checkpoint()) for p in self.projections}
        self._apply_lock = threading.RLock()  # one applier at a time (thread, caller, rebuild)
        self._cond = threading.Condition()
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dirty: set[str] = set()
        self.last_error: BaseException | None = None

    # -- applying ----------------------------------------------------------------------
    def _partitions(self) -> range:
        return range(self.log.partitions)

    def catch_up(self) -> int:
        """Apply everything committed now; returns the number of log events consumed."""
        with self._apply_lock:
            # a projection that starts empty with a long log behind it replays in bulk, as a rebuild
            # does (a store's first open, an index deleted, a read-only or past view folding its copy)
            backlog = sum(self.log.head(part) for part in self._partitions())
            fresh = [p for p in self.projections if not self._pos[p.name]] if backlog >= BULK_EVENTS else []
            return self._replay(fresh, lambda: sum(self._catch_up_partition(part, self.projections, None)
                                                   for part in self._partitions()))

    def _catch_up_partition(
        self,
        part: int,
        projections: Sequence[Projection],
        progress: Callable[[int], None] | None,
    ) -> int:
        """Apply one partition's new events to the given projections; returns events consumed."""
        head = self.log.head(part)
        starts = {p.name: self._pos[p.name].get(part, 0) for p in projections}
        behind = [p for p in projections if starts[p.name] < head]
        if not behind:
            return 0
        lo = min(starts[p.name] for p in behind)
        consumed = 0

        def flush(buf: list[RecordedEvent]) -> None:
            nonlocal consumed
            if not buf:
                return
            last = buf[-1].offset
            for p in behind:
                pos = self._pos[p.name].get(part, 0)
                if last < pos:
                    continue
                evs = buf if buf[0].offset >= pos else [e for e in buf if e.offset >= pos]
                p.apply(evs)
                ck = dict(self._pos[p.name])
                ck[part] = last + 1
                p.save_checkpoint(ck)  # after the output: a crash before this replays the batch
                with self._cond:
                    self._pos[p.name] = ck
                self._dirty.add(p.name)
            consumed += len(buf)
            if progress is not None:
                progress(len(buf))
            with self._cond:
                self._cond.notify_all()

        buf: list[RecordedEvent] = []
        for batch in self.log.read_batches(lo, partition=part):
            if batch.num_rows == 0:
                continue
            start = batch.column(0)[0].as_py()
            if start >= head:
                break
            if start + batch.num_rows > head:
                batch = batch.slice(0, head - start)
            for i in range(0, batch.num_rows, self.batch_size):
                buf.extend(events_from_batch(batch.slice(i, self.batch_size)))
                while len(buf) >= self.batch_size:
                    flush(buf[: self.batch_size])
                    buf = buf[self.batch_size :]
        flush(buf)
        return consumed

    def refresh(self) -> int:
        """``catch_up``, then ``maintain`` what changed (everything after ``BULK_EVENTS`` or more); returns events applied."""
        applied = self.catch_up()
        if applied:
            # a bulk load: fold the new rows into the ANN and scalar indexes before answering,
            # or scoped queries scan hundreds of unindexed fragments
            self.maintain(force=applied >= BULK_EVENTS)
        return applied

    def maintain(self, force: bool = False) -> None:
        """Run the projections' housekeeping (ANN build, optimize) for those that changed."""
        with self._apply_lock:
            for p in self.projections:
                if p.name in self._dirty or force:
                    p.maintain(force=force)
            self._dirty.clear()

    def snapshot(self, closing: bool = False) -> list[str]:
        """Have the projections that hold state in memory snapshot it (between batches); returns the paths."""
        with self._apply_lock:
            return [p for p in (proj.write_snapshot(closing=closing) for proj in self.projections) if p]

    # -- background --------------------------------------------------------------------
    def start(self, poll_seconds: float = 0.05) -> None:
        """Tail the log from a background thread until ``stop()``."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(poll_seconds,), name="eidetica-projector", daemon=True)
        self._thread.start()

    def _run(self, poll_seconds: float) -> None:
        backoff = poll_seconds
        while not self._stop.is_set():
            try:
                n = self.catch_up()
                if n == 0:
                    self.maintain()
                self.last_error = None
                backoff = poll_seconds
            except Exception as e:  # noqa: BLE001 - keep tailing; the batch is retried
                self.last_error = e
                log.exception("projector: applying failed; retrying")
                backoff = min(max(backoff * 2, poll_seconds), 5.0)
                n = 0
            if n == 0:
                self._kick.wait(backoff)
                self._kick.clear()

    def stop(self) -> None:
        """Stop the background thread and wait for it."""
        self._stop.set()
        self._kick.set()
        t = self._thread
        if t is not None:
            t.join()
        self._thread = None

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # -- waiting -----------------------------------------------------------------------
    def applied(self, partition: int, name: str | None = None) -> int:
        """Next offset to apply in a partition: the minimum over projections (or one projection's)."""
        with self._cond:
            names = [name] if name is not None else list(self._pos)
            return min((self._pos[n].get(partition, 0) for n in names), default=0)

    def _satisfied(self, offsets: dict[int, int]) -> bool:
        return all(self.applied(p) > o for p, o in offsets.items())

    def wait_for(self, offsets: dict[int, int], timeout: float = 10.0) -> bool:
        """Block until every projection applied each partition's offset; False on timeout.

        Without a background thread the caller's thread applies the log itself (the
        embedded mode reads its own writes).
        """
        for p, o in offsets.items():
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < self.log.partitions:
                raise InvalidInput("offsets", f"partition {p!r} is not in [0, {self.log.partitions})")
            if isinstance(o, bool) or not isinstance(o, int):
                raise InvalidInput("offsets", f"offset {o!r} is not an int")
        deadline = time.monotonic() + max(0.0, float(timeout))
        while not self._satisfied(offsets):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.running:
                self._kick.set()
                with self._cond:
                    if not self._satisfied(offsets):
                        self._cond.wait(min(remaining, 0.05))
            else:
                if self.catch_up() == 0:
                    pending = [(p, o) for p, o in offsets.items() if self.log.head(p) <= o]
                    if pending:
                        p, o = pending[0]
                        self.log.wait_for(o, partition=p, timeout=min(remaining, 0.05))
        return True

    def lag(self) -> dict[str, int]:
        """Projection name -> committed events it has not applied yet."""
        heads = {p: self.log.head(p) for p in self._partitions()}
        with self._cond:
            return {n: sum(max(0, h - pos.get(p, 0)) for p, h in heads.items()) for n, pos in self._pos.items()}

    # -- rebuild -----------------------------------------------------------------------
    def _replay(self, targets: Sequence[Projection], run: Callable[[], int]) -> int:
        """``run()`` (a replay) with ``targets`` in bulk mode (``begin_rebuild``/``end_rebuild``); returns what it returns."""
        for p in targets:
            p.begin_rebuild()
        completed = False
        try:
            done = run()
            completed = True
        finally:
            errors: list[BaseException] = []
            for p in targets:
                try:
                    p.end_rebuild(completed)
                except BaseException as e:  # noqa: BLE001 - every target must leave bulk mode
                    errors.append(e)
                    if not completed:
                        log.exception("projector: %s could not discard its rebuild", p.name)
            if errors or not completed:  # go on from what the projections actually saved
                with self._cond:
                    for p in targets:
                        self._pos[p.name] = dict(p.checkpoint())
            if errors and completed:
                raise errors[0]
        return done

    def rebuild(self, name: str | None = None, progress: Callable[[int, int], None] | None = None) -> int:
        """Reset one projection (or all) and replay the log from offset 0; returns events replayed.

        ``progress(done, total)`` is called after each applied batch (total = events in the
        log when the rebuild started). Projections replay in bulk mode (``begin_rebuild`` /
        ``end_rebuild``); housekeeping (ANN index, optimize) runs at the end.
        """
        if name is not None and name not in self._by_name:
            raise InvalidInput("name", f"no projection named {name!r}; have {sorted(self._by_name)}")
        targets = [self._by_name[name]] if name is not None else list(self.projections)
        with self._apply_lock:
            for p in targets:
                p.reset()
                with self._cond:
                    self._pos[p.name] = {}
            total = sum(self.log.head(part) for part in self._partitions())
            done = 0

            def tick(n: int) -> None:
                nonlocal done
                done += n
                if progress is not None:
                    progress(done, total)

            self._replay(targets, lambda: sum(self._catch_up_partition(part, targets, tick)
                                              for part in self._partitions()))
            for p in targets:
                p.maintain(force=True)
                self._dirty.discard(p.name)
            if progress is not None and done == 0:
                progress(0, total)
            return done
