"""The FactCurator: the single writer of one user's facts."""

from __future__ import annotations

import datetime as dt
import heapq
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import pyarrow as pa

from .._util import observe as _observe
from ..errors import InvalidInput, NotFound, ProviderError, WrongExpectedVersion
from ..events import (
    ChunksEmbedded,
    EventLog,
    ExtractionCompleted,
    FactAsserted,
    FactDecayed,
    FactDeleted,
    FactPruned,
    FactReinforced,
    FactSuperseded,
    LlmCalled,
    NewEvent,
    RecordedEvent,
    UserForgotten,
)
from ..events.streams import facts_stream
from ..events.types import Event, decode
from ..providers import LLM, Embedder, _ledger, extractor_id
from ..providers._base import Coalescer
from ..providers._offline import OfflineLLM, fact_attribute
from . import _usage
from ._config import MemoryConfig
from ._curator_state import _FactState, _VectorSet, curator_tables, parse_remember_items, restore_curator, trivial
from ._owner import StreamOwner
from ._snapshots import ActorSnapshot, ActorSnapshots, save_actor, start_actor
from ._text import check_metadata, check_text, sanitize_category, vectors_from_bytes, vectors_to_bytes
from ._writer import append_expecting

__all__ = ["FactCurator", "RememberItem"]

SNAPSHOT_SCHEMA = 2  # of the curator's snapshot tables; bump on any change (older ones are then refused)
RememberItem = Union[str, tuple, dict]  # noqa: UP007 (a runtime alias)  # "text" | (text, category) | {"content": ..., "category": ...}
RELATED_FACTS = 5  # existing facts an LLM sees when it decides what a new fact does (mem0's add/update/delete/none)
SAME_VALUE = 0.97  # cosine at which a fact of the same attribute restates the old one (reinforced, not superseded)

class FactCurator(StreamOwner):
    """Remembers, reinforces, supersedes, decays and prunes a user's facts."""

    def __init__(
        self,
        log: EventLog,
        tenant: str,
        user_id: str,
        embedder: Embedder,
        llm: LLM,
        config: MemoryConfig,
        clock: Callable[[], dt.datetime],
        snapshots: ActorSnapshots | None = None,
    ) -> None:
        self.log = log
        self.snapshots = snapshots
        self.tenant = tenant
        self.user_id = user_id
        self.embedder = embedder
        self.llm = llm
        self.config = config
        self.clock = clock
        self.stream = facts_stream(tenant, user_id)
        self._lock = threading.RLock()
        # concurrent remember() calls of this user share one embedding call and one commit; the
        # next group's embedding runs while this group commits (two stages, commits in order)
        self._offline_now = False  # an extraction past llm_tokens_per_day: _decide asks no model either
        self._remembers = Coalescer(self._embed_items, then=lambda items, embedded: self._write(embedded))
        self.reload()

    # -- state -----------------------------------------------------------------------
    def reload(self) -> None:
        """Rebuild the fold: from the curator's snapshot and the stream's tail after it, or the whole stream."""
        with self._lock:
            start_actor(self, "curator", SNAPSHOT_SCHEMA, self._fold_records)
            self.save_snapshot()  # a long replay is paid once, not on every start

    def _reset(self) -> None:
        self.facts: dict[str, _FactState] = {}
        self.extracted: set[tuple[str, int]] = set()
        self.requests: dict[str, str] = {}  # request id -> fact id (retried calls are no-ops)
        self._vectors = _VectorSet(self.embedder.dim)
        self._active: set[str] = set()
        self._by_attribute: dict[str, set[str]] = {}  # attribute -> its active facts (one, unless written before attributes)
        self._order: dict[str, int] = {}  # fact id -> assertion order (ties in the cap's choice)
        # (confidence, reinforced, fact_id) pushed on every change; stale entries are
        # skipped when popped, so finding the weakest facts for the cap costs O(log n)
        self._weak: list[tuple[float, float, int, str]] = []
        self._covered = -1  # the stream version the snapshot on disk covers

    # -- snapshots -------------------------------------------------------------------
    def _fold_records(self, recs: Sequence[RecordedEvent]) -> None:
        for rec in recs:
            self._fold(rec.decode(), rec.time)

    def _restore(self, snap: ActorSnapshot) -> None:
        restore_curator(self, snap)

    def _tables(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The fold as Arrow tables (lock held): what the curator's snapshot holds (``_curator_state``)."""
        return curator_tables(self)

    def save_snapshot(self, force: bool = False) -> bool:
        """Write the curator's snapshot when ``snapshots.every`` events are not covered by it (any, when forced)."""
        return save_actor(self, "curator", SNAPSHOT_SCHEMA, self._tables, force)

    def _fold(self, ev: Event, time: dt.datetime) -> None:
        f = self.facts.get(getattr(ev, "fact_id", ""))
        if getattr(ev, "request_id", ""):
            self.requests[ev.request_id] = ev.fact_id  # type: ignore[attr-defined]
        if isinstance(ev, FactAsserted):
            self.facts[ev.fact_id] = f = _FactState(
                ev.fact_id, ev.content, ev.category, ev.confidence, "active", time, time, time, sources=list(ev.sources),
                attribute=ev.attribute,
            )
            self._active.add(f.fact_id)
            if f.attribute:
                self._by_attribute.setdefault(f.attribute, set()).add(f.fact_id)
            self._order.setdefault(f.fact_id, len(self._order))
            self._push(f)
        elif isinstance(ev, ChunksEmbedded) and ev.kind == "fact":
            fs = self.facts.get(ev.source_id)
            if fs is not None and ev.model_id == self.embedder.model_id:
                fs.vector = vectors_from_bytes(ev.vectors, ev.dim)[0]
                if fs.status == "active":
                    self._vectors.add(fs.fact_id, fs.vector)
        elif isinstance(ev, FactReinforced) and f:
            f.confidence, f.reinforced, f.decayed = ev.confidence, time, time
            f.sources.extend(ev.sources)
            self._push(f)
        elif isinstance(ev, FactDecayed) and f:
            f.confidence, f.decayed = ev.confidence, time
            self._push(f)
        elif isinstance(ev, (FactSuperseded, FactDeleted, FactPruned)) and f:
            if isinstance(ev, FactSuperseded):
                f.status, f.superseded_by = "superseded", ev.by
            else:
                f.status = "deleted" if isinstance(ev, FactDeleted) else "pruned"
            self._active.discard(f.fact_id)
            self._by_attribute.get(f.attribute, set()).discard(f.fact_id)
            self._vectors.remove(f.fact_id)
        elif isinstance(ev, ExtractionCompleted):
            self.extracted.update((ev.session_id, s) for s in ev.sequences)
        elif isinstance(ev, UserForgotten):
            self.facts.clear()
            self.extracted.clear()
            self._vectors = _VectorSet(self.embedder.dim)
            self._active.clear()
            self._by_attribute.clear()
            self._weak.clear()
            self._order.clear()

    def _push(self, f: _FactState) -> None:
        heapq.heappush(self._weak, (f.confidence, f.reinforced.timestamp(), self._order[f.fact_id], f.fact_id))
        if len(self._weak) > 4 * len(self._active) + 64:
            # mostly stale entries: rebuild from the live facts (amortised O(1) per push)
            facts = [self.facts[i] for i in self._active]
            self._weak = [(f.confidence, f.reinforced.timestamp(), self._order[f.fact_id], f.fact_id) for f in facts]
            heapq.heapify(self._weak)

    def _weakest(self, n: int) -> list[_FactState]:
        """The ``n`` weakest active facts (lowest confidence, then least recently reinforced)."""
        out: list[_FactState] = []
        keep: list[tuple[float, float, int, str]] = []
        while self._weak and len(out) < n:
            item = heapq.heappop(self._weak)
            conf, ts, _, fid = item
            f = self.facts.get(fid)
            if f is None or f.status != "active" or f.confidence != conf or f.reinforced.timestamp() != ts:
                continue  # stale: a newer entry for this fact is in the heap (or it is gone)
            keep.append(item)
            out.append(f)
        for item in keep:
            heapq.heappush(self._weak, item)
        return out

    def _commit(self, events: list[tuple[Event, dt.datetime | None]], folded: bool = False,
                now: dt.datetime | None = None) -> int:
        """Append events with the curator's version as the expectation, then fold them.

        ``folded``: the events were folded already (a plan that later items of the same call
        had to see); a failed append then refolds the log, so no unwritten event stays in state.
        ``now``: the time they were folded with, so the log records what the state holds.
        """
        now = now or self.clock()
        calls = _ledger.take()  # the LLM calls whose result this append writes: in the same append, exactly once
        ledger = [LlmCalled(**c, user_id=self.user_id) for c in calls]
        news = [NewEvent.of(e, tenant=self.tenant, time=t or now) for e, t in events]
        news += [NewEvent.of(e, tenant=self.tenant, time=now) for e in ledger]
        try:
            _, last = self.log.append(self.stream, news, self.version)
        except WrongExpectedVersion:
            _ledger.restore(calls)
            self.reload()  # another writer appeared (a restarted actor): refold, let the caller retry
            raise
        except BaseException:
            _ledger.restore(calls)
            if folded:
                self.reload()
            raise
        if ledger:
            _usage.add(self.log, self.tenant, now, sum(e.input_tokens + e.output_tokens for e in ledger))
        self.version += len(news)
        if not folded:
            for e, t in events:
                self._fold(e, t or now)
        return last

    def active(self, category: str | None = None) -> list[_FactState]:
        """Active facts, strongest first."""
        with self._lock:
            facts = [self.facts[i] for i in self._active]
        if category is not None:
            facts = [f for f in facts if f.category == sanitize_category(category)]
        return sorted(facts, key=lambda f: (-f.confidence, -f.reinforced.timestamp(), self._order[f.fact_id]))

    def _related(self, vector: np.ndarray, k: int = RELATED_FACTS) -> list[tuple[_FactState, float]]:
        """The ``k`` active facts closest to ``vector``, closest first (whatever their similarity)."""
        vs = self._vectors
        if not vs.slot:
            return []
        rows, sims = vs.top(vector, k)
        found = [(vs.keys[i], float(x)) for i, x in zip(rows.tolist(), sims.tolist()) if vs.keys[i] is not None]
        found.sort(key=lambda r: (-r[1], vs.slot[r[0]]))  # ties: the lower row, as best_above
        return [(self.facts[fid], sim) for fid, sim in found]

    def _decide(self, content: str, attribute: str, related: list[tuple[_FactState, float]]) -> tuple[str, list[str], str]:
        """(event, target fact ids, text) for a new fact: the LLM's decision when it has one, else the offline rules.

        Offline: a near-duplicate that does not contradict reinforces ("none"); a fact of the same
        attribute ("diet", "residence", ...) is updated, whatever the wording, unless it says the same
        (cosine >= ``SAME_VALUE``); else a near-duplicate that contradicts (cosine >= ``supersede_threshold``)
        is updated; else the fact is added.
        """
        llm = _OFFLINE if self._offline_now else self.llm  # past the day's token budget: the offline rules
        if related:
            d = llm.decide(content, [(f.fact_id, f.content) for f, _ in related])
            if d is not None:
                target = [d.target] if d.target in {f.fact_id for f, _ in related} else []
                if d.event == "none":
                    return "none", target or [related[0][0].fact_id], content  # known: the closest one holds it
                if d.event != "add" and not target:
                    return "add", [], content  # a target it was not shown: keep the fact rather than lose it
                return d.event, target, d.content or content
        same = sorted(self._by_attribute.get(attribute, ()), key=self._order.__getitem__) if attribute else []
        best, sim = related[0] if related else (None, 0.0)
        if same:
            if best is not None and best.fact_id in same and sim >= SAME_VALUE:
                return "none", [best.fact_id], content
            return "update", same, content
        conflict = best is not None and sim >= self.config.supersede_threshold and llm.contradicts(best.content, content)
        if best is not None and sim >= self.config.reinforce_threshold and not conflict:
            return "none", [best.fact_id], content
        return ("update", [best.fact_id], content) if conflict else ("add", [], content)  # type: ignore[union-attr]

    # -- writing ---------------------------------------------------------------------
    def remember(
        self,
        content: str,
        category: str = "general",
        *,
        sources: Sequence[dict[str, Any]] = (),
        time: dt.datetime | None = None,
        vector: np.ndarray | None = None,
        request_id: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Store a fact, or reinforce / supersede a near-duplicate; returns the fact id that holds it.

        ``metadata`` (JSON-like, the caller's) goes with a new fact; a restatement keeps the first one's.

        A ``request_id`` makes the call exactly-once: a retry (say, after an actor restart)
        returns the fact id the first attempt produced. One log commit (one fsync) per call,
        the ``max_memories`` pruning included.
        """
        if request_id and request_id in self.requests:
            return self.requests[request_id]
        content = check_text("content", content).strip()
        category = sanitize_category(category)
        metadata = check_metadata("metadata", metadata)
        return self._remembers([(content, category, list(sources), time, vector, request_id, metadata)])[0]

    def _embed_items(self, items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The items with their vectors filled in (one model call for those without)."""
        todo = [i for i, it in enumerate(items) if it[4] is None]
        if todo:
            vecs = self.embedder.embed([items[i][0] for i in todo])
            items = list(items)
            for i, v in zip(todo, vecs):
                items[i] = (*items[i][:4], v, *items[i][5:])
        return items

    def _remember_batch(self, items: list[tuple[Any, ...]]) -> list[str]:
        return self._write(self._embed_items(items))

    def remember_many(self, items: Sequence[RememberItem], *, request_id: str = "") -> list[str]:
        """Store many facts with one embedding batch and one log commit; returns their ids in order.

        ``items``: strings, ``(content, category)`` pairs or ``{"content", "category"}`` dicts.
        Each item is curated as ``remember`` would, in order (a later item can reinforce an
        earlier one). Any invalid item raises ``InvalidInput`` naming it and stores nothing.
        """
        parsed = parse_remember_items(items)
        rids = [f"{request_id}:{i}" if request_id else "" for i in range(len(parsed))]
        if request_id and parsed and all(r in self.requests for r in rids):
            return [self.requests[r] for r in rids]
        if not parsed:
            return []
        vectors = self.embedder.embed([c for c, _ in parsed])
        return self._write([(c, cat, [], None, v, r, {}) for (c, cat), v, r in zip(parsed, vectors, rids)])

    def _write(self, items: list[Any],
               tail: Callable[[list[str]], list[tuple[Event, dt.datetime | None]]] | None = None) -> list[str]:
        """``_write_items`` with the model's decisions (and contradiction checks) written into the facts' append
        (inside extraction's scope: its extraction calls too)."""
        with _ledger.scope(join=True):
            return self._write_items(items, tail)

    def _write_items(self, items: list[tuple[str, str, list[dict[str, Any]], dt.datetime | None, np.ndarray, str,
                                             dict[str, Any]]],
                     tail: Callable[[list[str]], list[tuple[Event, dt.datetime | None]]] | None = None) -> list[str]:
        """Curate items in order and commit them (with any cap pruning) as one append; ``tail``: more events
        for the same append, made from the fact ids (extraction's ``ExtractionCompleted``: atomic with its facts)."""
        with self._lock:
            for attempt in range(3):
                if all(r and r in self.requests for *_, r, _meta in items):
                    return [self.requests[r] for *_, r, _meta in items]
                now = self.clock()
                events: list[tuple[Event, dt.datetime | None]] = []
                ids: list[str] = []
                try:
                    for content, category, sources, time, vector, rid, metadata in items:
                        if rid and rid in self.requests:
                            ids.append(self.requests[rid])
                            continue
                        planned, fid = self._plan(content, category, sources, time, vector, rid, metadata)
                        for e, t in planned:  # later items of this call must see earlier ones
                            self._fold(e, t or now)
                        events += planned
                        ids.append(fid)
                    over = len(self._active) - self.config.max_memories
                    if over > 0:
                        pruned = [(FactPruned(fact_id=f.fact_id, reason="max_memories"), None) for f in self._weakest(over)]
                        for e, t in pruned:
                            self._fold(e, t or now)
                        events += pruned
                    if tail is not None:
                        more = tail(ids)
                        for e, t in more:
                            self._fold(e, t or now)
                        events += more
                    if events:
                        self._commit(events, folded=True, now=now)
                    return ids
                except WrongExpectedVersion:
                    if attempt == 2:
                        raise
                except BaseException:
                    self.reload()  # a provider error mid-plan: nothing was written, drop the folds
                    raise
            raise AssertionError("unreachable")

    def _plan(
        self, content: str, category: str, sources: list[dict[str, Any]], time: dt.datetime | None, vector: np.ndarray,
        request_id: str = "", metadata: dict[str, Any] | None = None,
    ) -> tuple[list[tuple[Event, dt.datetime | None]], str]:
        """The events that store one fact (assert, reinforce, supersede) and the id holding it."""
        attribute = fact_attribute(content)
        event, targets, text = self._decide(content, attribute, self._related(vector))
        if event == "none" and targets:
            best = self.facts[targets[0]]
            conf = min(1.0, round(best.confidence + self.config.reinforce_step, 6))
            return [(FactReinforced(fact_id=best.fact_id, confidence=conf, sources=sources, request_id=request_id), time)], best.fact_id
        if event == "delete":
            return [(FactSuperseded(fact_id=t, by=""), time) for t in targets], targets[0]
        if text != content:  # an LLM's merged wording: its own vector
            content, vector, attribute = text, self.embedder.embed([text])[0], fact_attribute(text)
        fact_id = f"fact-{uuid.uuid4()}"
        events: list[tuple[Event, dt.datetime | None]] = [
            (
                FactAsserted(
                    fact_id=fact_id, user_id=self.user_id, content=content, category=category, sources=sources,
                    request_id=request_id, metadata=dict(metadata or {}), attribute=attribute,
                ),
                time,
            ),
            (
                ChunksEmbedded(
                    model_id=self.embedder.model_id,
                    dim=self.embedder.dim,
                    chunk_ids=[fact_id],
                    vectors=vectors_to_bytes(vector[None, :]),
                    texts=[content],
                    source_id=fact_id,
                    kind="fact",
                    user_id=self.user_id,
                    category=category,
                    time=time,
                    metadata={**(metadata or {}), "sources": sources},  # a hit shows the caller's metadata
                ),
                time,
            ),
        ]
        events += [(FactSuperseded(fact_id=t, by=fact_id), time) for t in targets]  # update: the old value retires
        return events, fact_id

    def forget(self, fact_id: str, request_id: str = "", by: str = "") -> None:
        """Delete one fact (it stays in the log until the user or store is compacted); who asked is recorded."""
        with self._lock:
            f = self.facts.get(fact_id)
            if f is None or f.status in ("deleted", "pruned"):
                raise NotFound("fact", fact_id)
            self._commit([(FactDeleted(fact_id=fact_id, request=request_id, by=by), None)])

    def sourced_from(self, sources: Sequence[Sequence[Any]]) -> dict[str, list[tuple[str, int]]]:
        """The live (active or superseded) facts with a source among ``sources`` (session, sequence), with all their sources."""
        want = {(str(s), int(q)) for s, q in sources}
        with self._lock:
            out = {}
            for f in self.facts.values():
                pairs = [(x.get("session_id"), x.get("sequence")) for x in f.sources]
                if f.status in ("active", "superseded") and want.intersection(pairs):
                    out[f.fact_id] = pairs
            return out

    def retract_sourced(self, sources: Sequence[Sequence[Any]], reason: str, session_id: str = "", request_id: str = "",
                        by: str = "") -> list[str]:
        """Retract (``FactDeleted`` with ``reason``) every live fact whose every source message is one of ``sources``.

        ``sources``: (session id, sequence) pairs. A fact with a source outside them keeps it and
        stays; a fact with no source (``remember``) is never reached. Returns the facts retracted
        (none on a second call: it is idempotent).
        """
        gone_from = {(str(s), int(q)) for s, q in sources}
        return self._retract(lambda f: bool(f.sources) and all((x.get("session_id"), x.get("sequence")) in gone_from
                                                                for x in f.sources), reason, session_id, request_id, by)

    def record_calls(self, calls: Sequence[dict[str, Any]]) -> None:
        """Write LLM calls made for this user elsewhere (``reextract``'s extraction) into the ledger, as ``LlmCalled``."""
        if not calls:
            return
        with self._lock, _ledger.scope() as held:
            held.extend(dict(c) for c in calls)
            self._commit([])

    def retract(self, fact_ids: Sequence[str], reason: str, request_id: str = "", by: str = "") -> list[str]:
        """Retract these facts (those still live) with ``reason``; returns those retracted."""
        ids = set(fact_ids)
        return self._retract(lambda f: f.fact_id in ids, reason, "", request_id, by)

    def _retract(self, pick: Callable[[_FactState], bool], reason: str, session_id: str, request_id: str,
                 by: str) -> list[str]:
        now = self.clock()

        def build() -> list[NewEvent]:  # decided on the fold: a refold after a race decides again
            hit = [f.fact_id for f in self.facts.values() if f.status in ("active", "superseded") and pick(f)]
            return [NewEvent.of(FactDeleted(fact_id=i, reason=reason, session_id=session_id, request=request_id, by=by),
                                tenant=self.tenant, time=now) for i in hit]

        with self._lock:
            news, _, _ = append_expecting(self, build)
            for n in news:
                self._fold(decode(n.payload), now)
        return [decode(n.payload).fact_id for n in news]  # type: ignore[attr-defined]

    def forget_matching(self, query: str, threshold: float = 0.85) -> list[str]:
        """Delete every active fact whose cosine to ``query`` is at least ``threshold``."""
        check_text("query", query)
        if not 0 < threshold <= 1:
            raise InvalidInput("threshold", "must be in (0, 1]", threshold)
        vec = self.embedder.embed([query])[0]
        with self._lock:
            gone = [f.fact_id for f in self.active() if f.vector is not None and float(f.vector @ vec) >= threshold]
            if gone:
                self._commit([(FactDeleted(fact_id=i), None) for i in gone])
            return gone

    def forget_user(self) -> int:
        """Append the user tombstone to the facts stream; returns its offset."""
        with self._lock:
            last = self._commit([(UserForgotten(user_id=self.user_id), None)])
            if self.snapshots is not None:
                self.snapshots.drop("curator", self.stream)  # it holds the forgotten facts
                self._covered = -1
            return last

    def extract(self, messages: Sequence[dict[str, Any]]) -> list[str]:
        """Extract durable facts from user messages (dicts: session_id, sequence, content, metadata).

        Messages already extracted are skipped; a provider failure raises ``ProviderError``
        and leaves them pending (the messages themselves are already in the log).
        """
        todo = [
            m for m in messages
            if (m["session_id"], m["sequence"]) not in self.extracted
        ]
        if not todo:
            return []
        ids: list[str] = []
        _observe.add("extraction_queue", len(todo))  # waiting for the lock or the LLM, until done
        try:
            return self._extract(todo, ids)
        finally:
            _observe.add("extraction_queue", -len(todo))

    def _extract(self, todo: list[dict[str, Any]], ids: list[str]) -> list[str]:
        """``extract``'s work for messages not yet extracted, under the actor's lock: every message's facts
        embedded in one model call and committed with the messages' ``ExtractionCompleted`` in one append
        (a long history's ``extend`` paid a model call and two fsyncs per user message)."""
        with self._lock, _ledger.scope():  # the extraction calls are written with the facts' append
            llm = self.llm
            if self._over_budget():  # past the day's token budget: the offline rules, counted in the ledger
                llm = _OFFLINE
            items: list[tuple[Any, ...]] = []
            counts: list[int] = []
            failed: ProviderError | None = None
            for m in todo:
                text = m["content"].strip()
                try:
                    found = [] if trivial(text) else llm.extract_facts(text)
                except ProviderError as e:  # this one and later stay pending; earlier ones are committed
                    failed = e
                    break
                if llm is _OFFLINE and not trivial(text):
                    _ledger_fallback(self.llm)  # counted in the ledger, written with the facts
                source = dict(m.get("metadata") or {}, session_id=m["session_id"], sequence=m["sequence"])
                items += [(check_text("content", f.content).strip(), sanitize_category(f.category), [source],
                           m.get("time"), None, "", {}) for f in found]
                counts.append(len(found))
            done = todo[:len(counts)]

            def completed(got: list[str]) -> list[tuple[Event, dt.datetime | None]]:
                out, at = [], 0
                for m, n in zip(done, counts):
                    out.append((ExtractionCompleted(session_id=m["session_id"], sequences=[m["sequence"]],
                                                    facts=got[at:at + n], extractor=extractor_id(llm)), None))
                    at += n
                return out

            try:
                if done:
                    self._offline_now = llm is _OFFLINE  # past the budget: the facts' decisions ask no model either
                    # straight to the batch, not through the coalescer: this thread holds the lock a
                    # coalesced leader would wait for
                    ids += self._write(self._embed_items(items), tail=completed)
            finally:
                self._offline_now = False
            if failed is not None:
                raise failed
        return ids

    def _over_budget(self) -> bool:
        """The tenant's recorded LLM tokens today reached ``llm_tokens_per_day`` (never for the offline extractor)."""
        limit = self.config.llm_tokens_per_day
        if not limit or isinstance(self.llm, OfflineLLM):
            return False
        return _usage.spent_today(self.log, self.tenant, self.clock()) >= limit

    def sweep(self, now: dt.datetime | None = None) -> dict[str, int]:
        """Decay facts not reinforced for a while, prune weak old ones; returns counts."""
        now = now or self.clock()
        decay_after = dt.timedelta(days=self.config.decay_after_days)
        prune_after = dt.timedelta(days=self.config.prune_after_days)
        with self._lock:
            events: list[tuple[Event, dt.datetime | None]] = []
            decayed = pruned = 0
            for f in self.active():
                if now - f.reinforced >= prune_after and f.confidence < self.config.prune_below:
                    events.append((FactPruned(fact_id=f.fact_id, reason="decayed"), None))
                    pruned += 1
                elif now - f.reinforced >= decay_after and now - f.decayed >= decay_after:
                    conf = round(f.confidence * self.config.decay_factor, 6)
                    events.append((FactDecayed(fact_id=f.fact_id, confidence=conf), now))
                    decayed += 1
            if events:
                self._commit(events)
            return {"decayed": decayed, "pruned": pruned}


_OFFLINE = OfflineLLM()  # the extractor a tenant past its llm_tokens_per_day falls back to


def _ledger_fallback(llm: LLM) -> None:
    """Note, in the open ledger scope, that the offline extractor ran in place of ``llm`` (no call, no tokens)."""
    _ledger.note(model=str(getattr(llm, "model_id", type(llm).__name__)), purpose="extract", prompt="",
                 input_tokens=0, output_tokens=0, latency=0.0, outcome="fallback")
