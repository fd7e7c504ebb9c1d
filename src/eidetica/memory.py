"""The agent-facing facade: ``eidetica.open(path)`` and the handles it gives out."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._store import asof as _asof
from ._store import audit as _audit
from ._store import context as _context
from ._store import reembed as _reembed
from ._store import reextract as _reextract
from ._store import revert as _revert
from ._store.context import CONTEXT_TOKENS
from ._store.erasure import compact, forget_session
from ._store.floor import floor_from_json
from ._store.items import Items
from ._store.options import SEARCH_OPTIONS, SearchKw, SearchOptions, ranking_kw, takes_options
from ._store.owners import append_through_owner
from ._store.pending import WRITE_ERROR_MODES, PendingWrites
from ._store.searching import check_k, holds, search_hits, shown, to_hit
from ._store.session_handle import SessionHandle
from ._store.transfer import export_events, import_events, tenant_events
from .actors import (
    STRATEGIES,
    ActorSnapshots,
    EmbedderRecord,
    Hit,
    LocalRuntime,
    MemoryConfig,
    Runtime,
    Schedules,
    SessionActor,
    _usage,
)
from .actors._text import check_id, check_metadata, check_text, sanitize_category
from .errors import InvalidInput, ProviderError, ReplicaBehind
from .events import ArrowLog, EventLog, RecordedEvent
from .events.streams import parse_stream
from .projections import LocalViews, NoteInfo, SearchHit
from .projections._names import names_in, strip_names
from .projections._ranking import (
    FACT_MIN_SCORE,
    default_options,
)
from .projections._relative import check_now
from .providers import LLM, Embedder, OfflineLLM, default_embedder

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

__all__ = ["open", "Memory", "SessionHandle", "names_in", "strip_names"]  # SessionHandle: _store/session_handle.py


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _no_ray() -> Callable[..., Any]:
    """Until the package wires in the Ray host: refuse (the facade never imports it)."""
    raise InvalidInput("runtime", "the Ray runtime is not wired in (import eidetica)", "ray")


# The Ray host sits above the facade (it builds the parts a Memory is made of), so this module never
# imports it: the package (eidetica/__init__.py) wires in a function that imports it when asked for.
ray_opener: Callable[[], Callable[..., Any]] = _no_ray


def open(  # noqa: A001 - the contract's name
    path: str | os.PathLike[str],
    *,
    tenant: str = "default",
    runtime: str = "local",
    embedder: Embedder | None = None,
    llm: LLM | None = None,
    config: MemoryConfig | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    fsync: str = "always",
    on_write_error: str = "raise",
    read_only: bool = False,
    **options: Any,
) -> Memory:
    """Open (or create) a memory store at ``path`` for one tenant.

    ``on_write_error="queue"``: best effort, a write the disk refuses never raises into the
    agent; it is queued in memory, retried and logged (see ``eidetica._store.pending``).
    ``read_only=True``: read an existing store beside the process writing it (a server),
    as of now, writing nothing there (see ``eidetica._store.readonly``).
    """
    if read_only is True:
        from ._store.readonly import open_read_only

        if runtime != "local" or options:
            raise InvalidInput("read_only", "works with the local runtime and no other options", read_only)
        return open_read_only(Memory, path, tenant=tenant, embedder=embedder, llm=llm, config=config, clock=clock)
    if read_only is not False:
        raise InvalidInput("read_only", "must be True or False", read_only)
    if runtime not in ("local", "ray"):
        raise InvalidInput("runtime", "must be 'local' or 'ray'", runtime)
    if on_write_error not in WRITE_ERROR_MODES:
        raise InvalidInput("on_write_error", f"must be one of {', '.join(WRITE_ERROR_MODES)}", on_write_error)
    if runtime == "ray":
        parts = ray_opener()(path, embedder=embedder, llm=llm, config=config, clock=clock, **options)
        return Memory(
            parts.path, tenant=tenant, embedder=parts.embedder, llm=parts.llm, config=parts.config, clock=clock,
            log=parts.log, runtime=parts.runtime, views=parts.views, on_write_error=on_write_error,
        )
    replica_timeout = options.pop("replica_timeout", 30.0)  # as on Ray: how long a read waits for its min_offset
    if options:
        raise InvalidInput(sorted(options)[0], "is not an option of the local runtime")
    return Memory(path, tenant=tenant, embedder=embedder, llm=llm, config=config, clock=clock, fsync=fsync,
                  on_write_error=on_write_error, replica_timeout=replica_timeout)


class Memory:
    """Long-term memory for one tenant: sessions, facts, notes, schedules, search."""

    read_only = False  # True for a handle of open(..., read_only=True): it writes nothing to the store

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        tenant: str = "default",
        embedder: Embedder | None = None,
        llm: LLM | None = None,
        config: MemoryConfig | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        fsync: str = "always",
        log: EventLog | None = None,
        runtime: Runtime | None = None,
        views: Any = None,
        on_write_error: str = "raise",
        replica_timeout: float = 30.0,
    ) -> None:
        self.tenant = check_id("tenant", tenant)
        if isinstance(replica_timeout, bool) or not isinstance(replica_timeout, (int, float)) or replica_timeout < 0:
            raise InvalidInput("replica_timeout", "must be a number of seconds >= 0", replica_timeout)
        self.replica_timeout = float(replica_timeout)
        if on_write_error not in WRITE_ERROR_MODES:
            raise InvalidInput("on_write_error", f"must be one of {', '.join(WRITE_ERROR_MODES)}", on_write_error)
        self._pending: PendingWrites | None = PendingWrites() if on_write_error == "queue" else None
        if config is not None and not isinstance(config, MemoryConfig):
            raise InvalidInput("config", "must be a MemoryConfig", config)
        self.config = config or MemoryConfig()
        self.clock = clock or _utcnow
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.embedder = embedder or default_embedder()
        self.llm = llm or OfflineLLM()
        self.log = log or ArrowLog(self.path / "log", fsync=fsync)  # type: ignore[arg-type]
        self._closed = False
        try:
            self._check_embedder()
            self.views = views or LocalViews(self.path, self.log, self.embedder,
                                             snapshot_events=self.config.snapshot_events,
                                             snapshot_seconds=self.config.snapshot_seconds)
            self._qlock = threading.RLock()
            self.actor_snapshots = ActorSnapshots(self.path / "snapshots" / "actors", self.config.actor_snapshot_events)
            self.runtime = runtime or LocalRuntime(self.log, self.embedder, self.llm, self.config, self.clock,
                                                   self.actor_snapshots)
            self.schedules = self._schedules_face()
            self.items = Items(self)
        except BaseException:
            self.log.close()
            raise
        self._hk_stop = threading.Event()
        self._hk: threading.Thread | None = None
        # embedded stores only: on Ray the log and the views live in their own actors
        if self.config.housekeeping_seconds > 0 and isinstance(self.log, ArrowLog) and isinstance(self.views, LocalViews):
            self._hk = threading.Thread(target=self._housekeeping, name="eidetica-housekeeping", daemon=True)
            self._hk.start()
        self.extraction_failures = 0
        if self.config.auto_extract:
            self._resume_extraction()

    def for_tenant(self, tenant: str) -> Memory:
        """The same store seen as another tenant (shares the log, indices and actors)."""
        import copy

        view = copy.copy(self)
        view.tenant = check_id("tenant", tenant)
        view._owner = False  # closing a view leaves the store open
        view.schedules = view._schedules_face()
        view.items = Items(view)
        return view

    def _schedules_face(self) -> Schedules:
        """Schedules of this tenant: writes through the users' actors, reads from the caught-up state."""
        def state() -> Any:
            self._sync()
            return self.state

        return Schedules(self.tenant, self.config, self.clock, lambda u: self.runtime.schedules(self.tenant, u), state)

    # -- lifecycle -------------------------------------------------------------------
    def _check_embedder(self) -> None:
        EmbedderRecord(self.log).check(self.embedder.model_id, self.embedder.dim, str(self.path))

    def housekeep(self) -> dict[str, Any]:
        """Write what is due now: the log's recovery checkpoints and the state snapshot (the housekeeping thread's work)."""
        out: dict[str, Any] = {"log_checkpoints": 0, "state_snapshot": None}
        if isinstance(self.log, ArrowLog):
            out["log_checkpoints"] = self.log.maintain()
        if isinstance(self.views, LocalViews):
            with self._qlock:
                if not self._closed:
                    out["state_snapshot"] = self.views.housekeep()
        return out

    def _housekeeping(self) -> None:
        """Off the appends' path: checkpoints and snapshots of a long-running process (a server) while it writes."""
        while not self._hk_stop.wait(self.config.housekeeping_seconds):
            try:
                self.housekeep()
            except Exception:  # noqa: BLE001 - an optimisation only: the next open replays more
                logging.getLogger("eidetica").warning("housekeeping failed", exc_info=True)

    def close(self) -> None:
        """Flush and release the store."""
        if self._closed:
            return
        if not getattr(self, "_owner", True):
            self._closed = True
            return
        self._hk_stop.set()
        if self._hk is not None and self._hk is not threading.current_thread():
            self._hk.join()
        self._closed = True
        try:
            if self._pending is not None:
                self._pending.close()  # one last try; what still fails is logged as lost
            self.runtime.close()
            self.views.close()
        finally:
            self.log.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _write(self, what: str, write: Callable[[], Any], placeholder: Any) -> Any:
        """Do a write; in best-effort mode a storage failure queues it and returns ``placeholder``."""
        if self._pending is None:
            return write()
        return self._pending.run(what, write, placeholder)

    def retry_pending(self) -> int:
        """Retry queued writes now (best-effort mode); returns how many still wait for the disk."""
        return self._pending.retry() if self._pending is not None else 0

    @property
    def pending_writes(self) -> int:
        """Writes waiting for the disk (always 0 unless opened with ``on_write_error="queue"``)."""
        return len(self._pending) if self._pending is not None else 0

    @property
    def state(self) -> Any:
        """The state folds (sessions, facts, notes, schedules)."""
        return self.views.state

    @property
    def index(self) -> Any:
        """The chunk index (LanceDB vectors + Tantivy text)."""
        return self.views.index

    @property
    def projector(self) -> Any:
        """The projector that feeds the views from the log."""
        return self.views.projector

    def _drain_items(self) -> None:
        """Wait for item vectors written behind their puts (part of "your writes")."""
        behind = getattr(self.runtime, "items_behind", None)
        if behind is not None:
            behind.drain()

    @property
    def written(self) -> dict[int, int]:
        """The last log offset per partition this handle wrote (or, on Ray, found committed when it opened): pass it as another handle's ``min_offset``."""
        tracked = getattr(self.runtime, "written", None)
        if tracked is not None:  # Ray: the offsets this handle's writes reached
            return tracked.floor()
        # embedded: one writer in this process, so every committed event counts
        return {p: h - 1 for p in range(self.log.partitions) if (h := self.log.head(p)) > 0}

    def _min_floor(self, min_offset: int | Mapping[int, int] | None) -> dict[int, int]:
        """``min_offset`` as partition -> offset, checked (an int names partition 0 of a one-partition log; keys may be
        ``Eidetica-Written``'s strings)."""
        if min_offset is None:
            return {}
        parts = self.log.partitions
        if isinstance(min_offset, Mapping):
            items = floor_from_json(dict(min_offset))  # the header's own form, {"0": 5}, too
        elif isinstance(min_offset, int) and not isinstance(min_offset, bool):
            if parts != 1:
                raise InvalidInput("min_offset", f"the log has {parts} partitions: pass {{partition: offset}}",
                                   min_offset)
            items = {0: min_offset}
        else:
            raise InvalidInput("min_offset", "must be an offset (int) or {partition: offset}", min_offset)
        for p, o in items.items():
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < parts:
                raise InvalidInput("min_offset", f"partition {p!r} is not in [0, {parts})", min_offset)
            if isinstance(o, bool) or not isinstance(o, int):
                raise InvalidInput("min_offset", f"offset {o!r} is not an int", min_offset)
        return {p: o for p, o in items.items() if o >= 0}  # -1: nothing written (a buffered append)

    def _await_floor(self, floor: dict[int, int]) -> None:
        """Wait up to ``replica_timeout`` for the log to commit ``floor``, else ``ReplicaBehind`` (never a stale answer)."""
        deadline = time.monotonic() + self.replica_timeout
        for p, o in floor.items():
            if not self.log.wait_for(o, partition=p, timeout=max(0.0, deadline - time.monotonic())):
                heads = {q: self.log.head(q) for q in floor}
                raise ReplicaBehind("embedded", {q: x + 1 for q, x in floor.items()}, heads, self.replica_timeout)

    def _sync(self) -> None:
        """Read your own writes: apply everything committed before answering."""
        if self._closed:
            raise InvalidInput("memory", "is closed")
        self._drain_items()
        with self._qlock:
            self.projector.refresh()

    # -- sessions --------------------------------------------------------------------
    def session(
        self, session_id: str, *, user: str, strategy: str | None = None, buffer: int = 0, flush_seconds: float = 0.05
    ) -> SessionHandle:
        """A handle on one conversation of a user (created on first append).

        ``buffer=N`` keeps up to N appends locally and writes them in one call (one round
        trip on Ray) when full, after ``flush_seconds``, or before any read.
        """
        if self._closed:
            raise InvalidInput("memory", "is closed")
        check_id("session_id", session_id)
        check_id("user", user)
        if strategy is not None and strategy not in STRATEGIES:
            raise InvalidInput("strategy", f"must be one of {', '.join(STRATEGIES)}", strategy)
        actor = self.runtime.session(self.tenant, session_id, user)
        if actor.owner is not None and actor.owner != user and actor.started:
            raise InvalidInput("user", f"session {session_id!r} belongs to another user")
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0:
            raise InvalidInput("buffer", "must be an int >= 0", buffer)
        return SessionHandle(self, actor, strategy, buffer, flush_seconds)

    def list_sessions(self, *, user: str | None = None) -> list[Any]:
        """Sessions of the tenant (or a user), most recently updated first."""
        self._sync()
        return self.state.sessions(self.tenant, user)

    def forget_session(self, session_id: str) -> None:
        """Forget a session: messages, summaries and their chunks."""
        forget_session(self, check_id("session_id", session_id))  # and what was derived from its messages alone

    def _after_append(self, actor: SessionActor, items: list[dict[str, Any]], strategy: str) -> None:
        if self.config.auto_extract:
            users = [dict(i, session_id=actor.session_id) for i in items if i["role"] == "user"]
            if users:
                try:
                    self.runtime.curator(self.tenant, actor.user_id).extract(users)
                except ProviderError:
                    self.extraction_failures += 1  # the messages are logged; sweep() retries them
        if strategy == "summarizing" and actor.needs_summary():
            try:
                self.runtime.summarizer().summarize(actor)
            except ProviderError:
                pass  # the history is intact; the next append tries again
        if self.config.max_sessions is not None and actor.version <= len(items) + 1:
            self._prune_sessions()

    def _resume_extraction(self, tenant: str | None = None) -> int:
        """Extract the user messages (of ``tenant``, else every tenant) committed without an ``ExtractionCompleted``
        (a crash between the append and its extraction, a provider failure); at open and in sweep(); returns the facts written."""
        self._sync()
        found = 0
        pending: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for t, m in self.state.pending_extractions():
            if tenant is not None and t != tenant:
                continue
            pending.setdefault((t, m.user_id), []).append(
                {"session_id": m.session_id, "sequence": m.sequence, "content": m.content, "metadata": m.metadata,
                 "time": m.time})
        for (t, user), msgs in pending.items():
            try:
                found += len(self.runtime.curator(t, user).extract(msgs))
            except ProviderError:
                self.extraction_failures += 1  # still pending: sweep() or the next open retries
        return found

    def _prune_sessions(self) -> None:
        self._sync()
        sessions = [s for s in self.state.sessions(self.tenant)]
        for s in sessions[self.config.max_sessions :]:
            self.runtime.session(self.tenant, s.session_id, s.user_id).forget()

    # -- facts -----------------------------------------------------------------------
    def remember(self, content: str, category: str = "general", *, user: str, request_id: str | None = None,
                 metadata: dict[str, Any] | None = None) -> str:
        """Store a fact about a user; returns its id (an existing id when it reinforced one).

        ``request_id`` (caller-chosen) makes a retry return the first call's id, writing nothing.

        A user keeps at most ``MemoryConfig.max_memories`` (default 1,000) active facts: beyond
        that every new fact prunes the weakest one (lowest confidence, then least recently
        reinforced) in the same commit; ``stats()["facts"]`` counts pruned facts.

        ``metadata``: the caller's (JSON-like) for a new fact; ``recall`` and ``list_memories`` filter on it and
        hits show it beside ``sources``. A restatement reinforces the existing fact and keeps its metadata.
        """
        check_id("user", user)
        check_text("content", content)
        metadata = check_metadata("metadata", metadata)
        if request_id is not None:
            check_id("request_id", request_id)
        rid = request_id or uuid.uuid4().hex  # the request id makes a retried (queued) call exactly-once
        return self._write(
            "remember", lambda: self.runtime.curator(self.tenant, user).remember(content, category, request_id=rid,
                                                                                       metadata=metadata),
            f"pending:{rid}",
        )

    def remember_many(self, items: Sequence[Any], *, user: str, request_id: str | None = None) -> list[str]:
        """Store many facts about a user with one embedding batch and one log commit; returns their ids.

        ``items``: strings, ``(content, category)`` pairs or ``{"content", "category"}`` dicts,
        curated in order as ``remember`` would (a repeat reinforces; beyond ``max_memories``
        the weakest facts are pruned in the same commit).
        """
        check_id("user", user)
        return self.runtime.curator(self.tenant, user).remember_many(items, request_id=request_id or uuid.uuid4().hex)

    def recall(
        self,
        query: str,
        top_k: int = 5,
        *,
        user: str,
        category: str | None = None,
        mmr: float | None = None,
        recency_half_life: dt.timedelta | None = None,
        now: dt.datetime | str | None = None,
        confidence_weight: float = 0.0,
        min_offset: int | Mapping[int, int] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[Hit]:
        """The user's facts most relevant to ``query`` (re-ranking options and ``min_offset`` as in ``search``).

        Facts and what the user said in their own messages (role ``user``; a message whose
        text is already a fact left out) on one calibrated scale, ranked as ``search`` ranks
        (its defaults): a fact does not outrank a message that answers better. The offline
        extractor keeps only common kinds of statements: a question about anything else is
        still answered from what the user said. With a ``category`` or ``metadata`` (facts whose
        metadata holds every given key with that value), facts only.
        """
        check_id("user", user)
        want = check_metadata("metadata", metadata)
        if category is not None or want:
            category = None if category is None else sanitize_category(category)  # the form it was stored in
            facts = self._search_hits(query, top_k=min(10_000, 4 * top_k if want else top_k), user=user, kinds=["fact"],
                                      category=category, mmr=mmr, recency_half_life=recency_half_life, now=now,
                                      confidence_weight=confidence_weight, min_offset=min_offset, **default_options())
            return [to_hit(h) for h in facts if holds(h.metadata, want)][:top_k]
        # One search over facts and messages: calibrated scores rank both on one scale.
        hits = self._search_hits(query, top_k=min(10_000, 4 * top_k), user=user, kinds=["fact", "message"],
                                 names=True, mmr=mmr, recency_half_life=recency_half_life, now=now,
                                 confidence_weight=confidence_weight, min_offset=min_offset, **default_options())
        seen = {h.text for h in hits if h.kind == "fact"}
        out = [h for h in hits
               if h.kind == "fact" or ((h.metadata or {}).get("role", "user") == "user" and h.text not in seen)]
        return [to_hit(h) for h in out[:top_k]]  # only those returned are made into Hits

    def list_memories(self, *, user: str, category: str | None = None, limit: int = 20,
                      metadata: dict[str, Any] | None = None) -> list[Hit]:
        """The user's active facts, strongest first (``metadata``: those holding every given key and value)."""
        check_id("user", user)
        check_k("limit", limit)
        want = check_metadata("metadata", metadata)
        self._sync()
        facts = [f for f in self.state.facts(self.tenant, user) if holds(f.metadata, want)]
        if category is not None:
            cat = sanitize_category(category)
            facts = [f for f in facts if f.category == cat]
        facts = sorted(facts, key=lambda f: (-f.confidence, -f.updated.timestamp(), f.fact_id))[:limit]
        return [
            Hit(id=f.fact_id, kind="fact", text=f.content, score=shown(f.confidence), time=f.created,
                category=f.category, user_id=user, confidence=f.confidence, source_id=f.fact_id,
                metadata={**f.metadata, "sources": f.sources})
            for f in facts
        ]

    def forget(self, fact_id: str, *, user: str, request_id: str | None = None) -> None:
        """Forget one fact (``request_id`` and, on a server, the API key's name are recorded: ``explain``)."""
        from ._store.audit import who

        check_id("user", user)
        if not isinstance(fact_id, str):
            raise InvalidInput("fact_id", "must be a string", fact_id)
        by, rid = who(request_id)
        self.runtime.curator(self.tenant, user).forget(fact_id, rid or "", by)

    def forget_matching(self, query: str, threshold: float = 0.85, *, user: str) -> list[str]:
        """Forget every fact of a user close to ``query``; returns their ids."""
        check_id("user", user)
        return self.runtime.curator(self.tenant, user).forget_matching(query, threshold)

    def forget_user(self, user: str) -> None:
        """Forget everything about a user: facts, notes, schedules, sessions."""
        check_id("user", user)
        self._sync()
        for s in self.state.sessions(self.tenant, user):
            self.runtime.session(self.tenant, s.session_id, user).forget()
        self.runtime.curator(self.tenant, user).forget_user()
        self.runtime.notes(self.tenant, user).forget_user()
        self.runtime.items(self.tenant, user).forget_user()
        self.runtime.schedules(self.tenant, user).forget_user()
        self._sync()

    # -- notes -----------------------------------------------------------------------
    def store_note(self, text: str, *, user: str, session_id: str | None = None) -> str:
        """Store a note (``session_id``: the session it is written during, whose revert deletes it); returns its id."""
        check_id("user", user)
        check_text("text", text)
        _revert.check_link(self, user, session_id)
        note_id = f"note-{uuid.uuid4()}"  # chosen here: a queued note already has its id
        return self._write("store_note", lambda: self.runtime.notes(self.tenant, user).store(
            text, note_id=note_id, session_id=session_id), note_id)

    def list_notes(self, *, user: str, limit: int = 20) -> list[NoteInfo]:
        """The user's notes, newest first."""
        check_id("user", user)
        check_k("limit", limit)
        self._sync()
        return self.state.notes(self.tenant, user)[:limit]

    def update_note(self, note_id: str, text: str, *, user: str) -> None:
        """Replace a note's text, keeping its id (the old text stays in the log until the note is deleted and compacted)."""
        check_id("user", user)
        if not isinstance(note_id, str):
            raise InvalidInput("note_id", "must be a string", note_id)
        self.runtime.notes(self.tenant, user).update(note_id, text)

    def delete_note(self, note_id: str, *, user: str) -> None:
        """Delete a note."""
        check_id("user", user)
        self.runtime.notes(self.tenant, user).delete(note_id)

    # -- search ----------------------------------------------------------------------
    def participant_names(self, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations.

        A message's ``metadata["name"]``, or, when it has none, the ``"Name: "`` label its
        content starts with (a label counts once it starts at least two messages, so a lone
        "Note: ..." is not taken for a person).
        """
        check_id("user", user)
        self._sync()
        return self.views.participant_names(self.tenant, user)

    def _search(self, query: str, **kw: Any) -> list[Hit]:
        """``_search_hits`` as the facade's ``Hit`` values."""
        return [to_hit(h) for h in self._search_hits(query, **kw)]

    def _search_hits(self, query: str, **kw: Any) -> list[SearchHit]:
        """A search's raw hits (``_searching.search_hits``)."""
        return search_hits(self, query, **kw)

    @takes_options
    def search(self, query: str, *, user: str, top_k: int = 10, exclude_session: str | None = None,
               session_id: str | None = None, min_offset: int | Mapping[int, int] | None = None,
               now: dt.datetime | str | None = None, options: SearchOptions | None = None, **ranking: Unpack[SearchKw],
               ) -> list[Hit]:
        """Search a user's conversations across sessions (optionally excluding the current one, or only one: ``session_id``).

        With no options this is the best configuration measured (BENCHMARKS.md): hybrid
        vector + BM25 (each side z-scored over the candidates, fused 0.5 each and scaled to
        [0, 1]), a message gains 0.2 of each adjacent message's
        score and 0.3 of its session's best, messages of a person the query names gain 0.15,
        and messages from a period the query names ("in July 2023", "on May 3, 2023") rank
        first. Scores are calibrated (comparable across queries): ``min_score`` (0.30) drops
        what is probably not relevant; with a positive ``min_score``, a query naming a person,
        place or thing no document of this store holds returns nothing (never discussed).
        ``kinds``: messages, summaries, facts and notes by default (facts and notes pass at 0.20).

        ``names``: drop participants' names (see ``participant_names``) and the user's own
        name from the query: they say who spoke, not what about. ``candidates``: rows asked of
        each engine. ``vector_weight``: share of the vector side in hybrid scores. ``neighbors``
        / ``session_weight``: add that share of the adjacent messages' / the session's best
        score to a message. ``speaker_weight``: added to messages whose speaker the query names
        ("what does Ana paint?" is answered by Ana). ``time_weight``: the share of the most a message
        can score otherwise that is added to messages from a period the query names (1: they
        rank first; the dates leave the query text). ``fusion``: ``zscore``
        (default), ``minmax``, ``absolute`` or ``rrf``. Re-ranking: ``mmr`` (lambda, 1 = relevance only),
        ``recency_half_life`` (scores halve per half-life of age at ``now``),
        ``confidence_weight`` (0 = ignore confidence, 1 = multiply by it). ``options``: these
        options as one ``eidetica.SearchOptions`` (its defaults are the ones above); keyword
        options override it.

        ``min_offset``: answer only from views that applied the log up to this offset (an
        offset a write returned; with a partitioned log, ``{partition: offset}`` such as another
        handle's ``written``): read-your-writes across handles and view replicas. A handle's own
        writes need no offset.
        """
        check_id("user", user)
        if session_id is not None:
            check_id("session_id", session_id)
        o = options or SEARCH_OPTIONS  # resolved by @takes_options: keywords over ``options``, validated
        kinds, min_score = o.kinds, o.min_score
        # Facts and notes pass at FACT_MIN_SCORE when the cut is higher: a user's few distilled rows
        # rarely match by chance, and a paraphrase's cosine alone ("what does Ada eat" -> "Ada is
        # vegetarian": 0.26 with MiniLM) has to pass.
        distilled = bool({"fact", "note"} & set(kinds)) if isinstance(kinds, tuple) else False
        low = distilled and min_score is not None and min_score > FACT_MIN_SCORE
        hits = self._search(
            query, top_k=2 * top_k if low else top_k, user=user, exclude_session=exclude_session,
            session_id=session_id, now=now, min_offset=min_offset,
            **dict(ranking_kw(o), min_score=FACT_MIN_SCORE if low else min_score),
        )
        return [h for h in hits if not low or h.kind in ("fact", "note") or h.score >= min_score][:top_k]  # type: ignore[operator]

    def context(self, query: str, *, user: str, max_facts: int = 10, max_tokens: int = CONTEXT_TOKENS,
                as_data: bool = False, now: dt.datetime | str | None = None) -> Any:
        """The agent's "## Relevant Memory" block for a system prompt (format: README, ``_context``):
        the user's profile, then the facts, notes and past messages relevant to ``query``, within
        ``max_tokens`` (``providers.count_tokens``). ``as_data``: the same content as a dict.
        ``now``: when the question is asked (default the wall clock): "last week" or "3 days ago"
        resolve against it, and the block says that date."""
        check_id("user", user)
        check_k("max_facts", max_facts)
        check_k("max_tokens", max_tokens)
        if not isinstance(as_data, bool):
            raise InvalidInput("as_data", "must be True or False", as_data)
        now = check_now(now)
        self._sync()
        data = _context.build(self, query, user=user, max_facts=max_facts, max_tokens=max_tokens, now=now)
        return data if as_data else _context.render(data)

    # -- maintenance -----------------------------------------------------------------
    def sweep(self, now: dt.datetime | None = None) -> dict[str, int]:
        """Decay and prune facts of every user, and retry pending extractions."""
        self._sync()
        users = {s.user_id for s in self.state.sessions(self.tenant)}
        users |= {parse_stream(s)[2] for s in self.log.streams() if s.startswith("facts:")}  # type: ignore[attr-defined]
        totals = {"decayed": 0, "pruned": 0, "extracted": 0}
        for user in sorted(users):
            cur = self.runtime.curator(self.tenant, user)
            r = cur.sweep(now or self.clock())
            totals["decayed"] += r["decayed"]
            totals["pruned"] += r["pruned"]
        if self.config.auto_extract:
            totals["extracted"] = self._resume_extraction(self.tenant)
        return totals

    def usage(self, user: str | None = None, since: dt.datetime | None = None,
              until: dt.datetime | None = None) -> dict[str, Any]:
        """What the LLM cost this tenant: calls and tokens recorded in the ledger (``LlmCalled``), by model, purpose, user, day.

        ``since`` inclusive, ``until`` exclusive (aware datetimes); ``fallbacks``: extractions past
        ``llm_tokens_per_day`` that ran the offline extractor instead (no call, no tokens).
        """
        if user is not None:
            check_id("user", user)
        for name, v in (("since", since), ("until", until)):
            if v is not None and (not isinstance(v, dt.datetime) or v.tzinfo is None):
                raise InvalidInput(name, "must be a timezone-aware datetime", v)
        self._drain_items()
        return _usage.usage(self.log, self.tenant, user, since, until)

    def stats(self) -> dict[str, Any]:
        """Counts and sizes: events, streams, log bytes, index rows, projection lag."""
        self._sync()
        out = {
            "tenant": self.tenant,
            "events": sum(self.log.head(p) for p in range(self.log.partitions)),
            "streams": len(self.log.streams()),  # type: ignore[attr-defined]
            "log_bytes": self.log.disk_bytes() if hasattr(self.log, "disk_bytes") else 0,  # type: ignore[attr-defined]
            "index": self.index.stats(),
            "lag": self.projector.lag(),
            "sessions": len(self.state.sessions(self.tenant)),
            "summaries_committed": self.runtime.summarizer().committed,
            "summaries_stale": self.runtime.summarizer().stale,
            "extraction_failures": self.extraction_failures,
            "embedder": self.embedder.model_id,
            "snapshot": self._snapshot_stats(),
            # beyond max_memories a user's weakest facts are pruned on every remember: say so
            "facts": {**self.state.fact_counts(self.tenant, self.config.max_memories),
                      "max_memories": self.config.max_memories},
        }
        if hasattr(self.views, "status"):  # view replicas (Ray): applied offsets and lag of each
            out["replicas"] = self.views.status()
        return out

    def _snapshot_stats(self) -> dict[str, Any]:
        """The state snapshot's age and the tail a start would replay after it."""
        info = self.state.snapshot_info()
        ck, created = info["checkpoint"], info["created"]
        heads = {p: self.log.head(p) for p in range(self.log.partitions)}
        return {
            "age_s": None if created is None else round((_utcnow() - created).total_seconds(), 1),
            "tail_events": sum(h - ck.get(p, 0) for p, h in heads.items()),
            "path": info["path"],
        }

    def snapshot(self) -> str | None:
        """Write a snapshot of the in-memory state now; returns its directory (None when the store is empty)."""
        self._sync()
        with self._qlock:
            paths = self.projector.snapshot()
        return paths[0] if paths else None

    def _tenant_events(self) -> Iterator[RecordedEvent]:
        """This tenant's events in log order (what ``export`` writes; the server streams them)."""
        return tenant_events(self.log, self.tenant)

    def export(self, path: str | os.PathLike[str]) -> int:
        """Write this tenant's events (JSONL, or Parquet for ``.parquet``); returns how many."""
        self._drain_items()
        return export_events(self.log, self.tenant, path)

    def import_(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """Append events exported by ``export`` into this tenant; returns ``{"written", "skipped", "conflicts": [ids]}``."""
        n = import_events(self.log, self.tenant, path, lambda stream, evs: append_through_owner(self.runtime, stream, evs))
        self.items._recovered = False  # imported puts may still want their vectors (written behind)
        if isinstance(self.runtime, LocalRuntime):
            self.runtime.close()  # actors refold from the log on next use
        self._sync()
        return n

    def clear(self, sessions: bool = True, memories: bool = True) -> None:
        """Forget every session and/or every fact and note of this tenant."""
        self._sync()
        if sessions:
            for s in self.state.sessions(self.tenant):
                self.runtime.session(self.tenant, s.session_id, s.user_id).forget()
        if memories:
            users = {parse_stream(s)[2] for s in self.log.streams() if s.split(":")[0] in ("facts", "notes", "items")  # type: ignore[attr-defined]
                     and parse_stream(s)[1] == self.tenant}
            for u in sorted(users):
                self.runtime.curator(self.tenant, u).forget_user()
                self.runtime.notes(self.tenant, u).forget_user()
                self.runtime.items(self.tenant, u).forget_user()
        self._sync()

    # -- deletion for real, model switches ----------------------------------------------
    def compact(self) -> dict[str, Any]:
        """Erase forgotten content from disk (log redacted, indices rebuilt afresh); returns the erasure receipt."""
        return compact(self)

    def reembed(self, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every live text again with ``embedder``, record the switch, and move to it (resumable)."""
        return _reembed.reembed(self, embedder, progress)

    # -- audit and rewind (provenance, revert: _audit.py, _revert.py) -------------------
    def explain(self, fact_id: str, *, user: str) -> dict[str, Any]:
        """A fact's life: source messages, extractor, reinforcements, supersession, decay, pruning, deletion."""
        return _audit.explain(self, fact_id, user)

    def as_of(self, when: Any) -> Memory:
        """The store as it was at ``when`` (aware datetime or log offset), read-only: writes raise ``ReadOnly``."""
        return _asof.as_of(self, when)

    def reextract(self, user: str | None = None, llm: LLM | None = None) -> dict[str, int]:
        """Run the current (or given) extractor over the stored user messages and bring the facts in line (resumable)."""
        return _reextract.reextract(self, user, llm)

    def revert(self, *, user: str, session_id: str, since: dt.datetime | None = None, messages: bool = False) -> dict[str, Any]:
        """Retract, as events, the facts and notes a session wrote (since ``since``); idempotent; messages kept unless asked."""
        return _revert.revert(self, user, session_id, since, messages)

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop the projections and replay the log into them; returns events replayed."""
        with self._qlock:
            return self.projector.rebuild(None, progress)
