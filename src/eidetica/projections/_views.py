"""The views a store serves: the state folds and the chunk index of its current model, fed by a projector.

Assembled here (not in the facade) so that both the facade and the Ray host can build them
without reaching above the projections layer.
"""

from __future__ import annotations

import abc
import re
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._util.fs import replace
from ..errors import CorruptIndex
from ..events import EventLog, RecordedEvent
from ..events.types import decode
from ..providers import Embedder
from ._base import Projection, SearchHit
from ._index import ChunkIndex
from ._names import name_pattern, named_words, names_in, strip_names
from ._projector import Projector
from ._ranking import AVOID, RESTRICTION_TERMS, SELF, SearchOptions
from ._relative import query_windows
from ._state import StateProjection

__all__ = ["LocalViews", "ModelView", "Views", "model_slug"]


def model_slug(model_id: str) -> str:
    """A model id as a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model_id)[:80]


class ModelView(Projection):
    """A ChunkIndex that only sees vectors of one embedding model (the store's current one)."""

    def __init__(self, index: ChunkIndex, model_id: str) -> None:
        self.index = index
        self.model_id = model_id
        self.name = index.name

    def apply(self, events: Sequence[RecordedEvent]) -> None:
        """Apply events, dropping vectors of other models."""
        keep = [
            e for e in events
            if e.type != "ChunksEmbedded" or decode(e.payload).model_id == self.model_id  # type: ignore[attr-defined]
        ]
        self.index.apply(keep)

    def checkpoint(self) -> dict[int, int]:
        """The wrapped index's checkpoint."""
        return self.index.checkpoint()

    def save_checkpoint(self, checkpoint: dict[int, int]) -> None:
        """Save the wrapped index's checkpoint."""
        self.index.save_checkpoint(checkpoint)

    def reset(self) -> None:
        """Drop the wrapped index."""
        self.index.reset()

    def maintain(self, force: bool = False) -> None:
        """Optimize the wrapped index (ANN build, fragment compaction) when due, or now."""
        self.index.maintain(force)

    def begin_rebuild(self) -> None:
        """Put the wrapped index in bulk mode for a rebuild."""
        self.index.begin_rebuild()

    def end_rebuild(self, completed: bool = True) -> None:
        """Finish (or discard) the wrapped index's bulk rebuild."""
        self.index.end_rebuild(completed)

    def close(self) -> None:
        """Close the wrapped index."""
        self.index.close()


class Views(abc.ABC):
    """Port: what the store reads from its projections, wherever they live (this process, a Ray actor,
    view replicas, a past moment's copy). ``state``, ``index`` and ``projector`` are the folds, the chunk
    index and the projector feeding them (or proxies to them)."""

    state: Any
    index: Any
    projector: Any
    replicated: bool = False  # reads carry their ``min_offset`` to the replica that serves them, which waits for it

    @abc.abstractmethod
    def query(self, embedder: Embedder, tenant: str, query: str, *, user: str | None, **search: Any) -> list[SearchHit]:
        """One search from the user's words (names and dates planned, the query embedded where the index lives)."""

    @abc.abstractmethod
    def participant_names(self, tenant: str, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations."""

    @abc.abstractmethod
    def fresh(self, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> None:
        """Build the projections afresh from the log (for ``embedder``'s model) and swap them in."""

    def housekeep(self) -> str | None:
        """Snapshot the state when due; returns its path (None: nothing due, or views that keep their own)."""
        return None

    def status(self) -> list[dict[str, Any]]:
        """Per replica: node, applied offsets, lag, searches served (empty: not replicated)."""
        return []

    def local(self) -> LocalViews | None:
        """These views when they live in this process (their files and index at hand), else None."""
        return None

    def close(self) -> None:  # noqa: B027 - views held elsewhere hold nothing here
        """Release what this process holds of the views."""


class LocalViews(Views):
    """The projections of a store in this process: state folds, the chunk index, the projector."""

    index: ChunkIndex  # None only while (re)opening

    def __init__(
        self, path: Path, log: EventLog, embedder: Embedder, *, snapshot_events: int = 50_000,
        snapshot_seconds: float = 300.0,
    ) -> None:
        self.snapshot_policy: dict[str, Any] = {"snapshot_events": snapshot_events, "snapshot_seconds": snapshot_seconds}
        self.path = path
        self.log = log
        self.model_id = embedder.model_id
        self.index_dir = path / "index" / model_slug(embedder.model_id)
        self.rebuilt_after_damage: str | None = None
        try:
            self._open(embedder)
            self.projector.catch_up()
        except CorruptIndex as e:  # damaged files (and only that): the log is the truth, rebuild from it
            self.rebuilt_after_damage = f"{type(e).__name__}: {e}"
            warnings.warn(f"eidetica: the index at {self.index_dir} was damaged ({e}); rebuilding it from the log", stacklevel=2)
            if self.index is not None:
                try:
                    self.index.close()
                except Exception:  # noqa: BLE001 - it is being thrown away
                    pass
            shutil.rmtree(self.index_dir, ignore_errors=True)
            self._open(embedder)
            self.projector.catch_up()

    def _state(self) -> StateProjection:
        """The state folds, starting from the newest valid snapshot in ``<store>/snapshots``."""
        return StateProjection(log=self.log, snapshots=self.path / "snapshots", **self.snapshot_policy)

    def _open(self, embedder: Embedder) -> None:
        self.index = None  # type: ignore[assignment]
        self.state = self._state()
        self.index = ChunkIndex(self.index_dir, dim=embedder.dim)
        self.projector = Projector(self.log, [self.state, ModelView(self.index, embedder.model_id)])

    def fresh(self, embedder: Embedder, progress: Callable[[int, int], None] | None = None) -> None:
        """Build the projections in a new directory from the log, then swap them in."""
        final = self.path / "index" / model_slug(embedder.model_id)
        staging = final.with_name(final.name + ".new")
        shutil.rmtree(staging, ignore_errors=True)
        index = ChunkIndex(staging, dim=embedder.dim)
        # the new state's rebuild drops every snapshot first (they may hold forgotten text) and
        # writes a fresh one at the end; the old state is dropped without writing one
        Projector(self.log, [self._state(), ModelView(index, embedder.model_id)]).rebuild(None, progress)
        index.close()
        self.index.close()
        old = self.index_dir.with_name(self.index_dir.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if self.index_dir.exists():
            replace(self.index_dir, old)
        replace(staging, final)
        shutil.rmtree(old, ignore_errors=True)  # old LanceDB versions and tantivy segments go with it
        self.index_dir = final
        self.model_id = embedder.model_id
        self._open(embedder)
        self.projector.catch_up()

    def housekeep(self) -> str | None:
        """Snapshot the state once the log has run ``snapshot_events`` events (or ``snapshot_seconds`` with
        any event) past its snapshot, catching the projections up first; returns the snapshot's path.

        The state's own rule counts only events it applied, and a process that only appends
        (a server nobody reads from) applies none: this counts the log's head instead.
        """
        st = self.state
        heads = sum(self.log.head(p) for p in range(self.log.partitions))
        if not st.snapshot_due(heads - sum(st.snapshot_checkpoint.values())):
            return None
        self.projector.catch_up()
        written = self.projector.snapshot()
        return written[0] if written else None

    def local(self) -> LocalViews:
        """These views: they live in this process."""
        return self

    def participant_names(self, tenant: str, user: str) -> frozenset[str]:
        """Names of the participants of a user's conversations, from the folded state (no log read).

        A message's ``metadata["name"]``, or, when it has none, the ``"Name: "`` label its
        content starts with (a label counts once it starts at least two messages, so a lone
        "Note: ..." is not taken for a person).
        """
        names, labels = self.state.participants(tenant, user)
        return frozenset(names | {n for n, c in labels.items() if c >= 2})

    def query(
        self, embedder: Embedder, tenant: str, query: str, *, user: str | None, mode: str = "hybrid",
        names: bool = False, options: dict[str, Any] | None = None, **search: Any,
    ) -> list[SearchHit]:
        """One search from the user's words: names and dates out of the text, the query embedded, the index asked.

        Here rather than in the facade so that a views replica (Ray) answers a search in one
        call, embedding with its own embedder. ``search``: the index's filters and ``top_k``.
        """
        options = dict(options or {})
        # At most one lookup of the participants per search
        people: frozenset[str] | None = None
        q = query
        # The user's own name ("Where does Ada live?" in Ada's memory): what she said is in the
        # first person, so the name only matches every fact that names her. It leaves the query
        # and counts as a speaker (her own unnamed messages, see ``speaker_of``).
        own = user is not None and bool(re.search(name_pattern(user), query, re.IGNORECASE))
        if own:
            q = strip_names(q, [user], re.IGNORECASE)  # type: ignore[list-item]
        if names and user is not None:
            people = self.participant_names(tenant, user)
            q = strip_names(q, people)
        if options.get("restriction_weight") and AVOID.match(query):
            options["restrict"] = True  # "what food must I avoid?": allergies and intolerances first
            q = f"{q} {RESTRICTION_TERMS}"
        if options.get("time_weight"):
            # "in July 2023", "last week", "3 days ago" (against ``now``): matched against message times, not as words
            options["windows"], q = query_windows(q, options.get("now"))
        if options.get("speaker_weight") and user is not None:
            if people is None:
                people = self.participant_names(tenant, user)
            options["speakers"] = names_in(query, people) | ({SELF} if own else frozenset())
        opts = SearchOptions.check(**options)
        floor = search.get("min_score")
        if floor is not None and floor > 0 and user is not None:
            # A question naming someone or something this memory never held ("What did Caroline
            # research?" of a store that never heard of her) is about what was never discussed:
            # no relevance number says that as surely as the name's absence from every document.
            if people is None:
                people = self.participant_names(tenant, user)
            if self.index.unseen(tenant, named_words(strip_names(q, people))):
                return []
        # a callable: the index embeds the query while its BM25 side runs (the index is local here,
        # in the facade's process or in the views replica that answers)
        vector = (lambda: embedder.embed([q])[0]) if mode != "text" else None
        return self.index.search(tenant=tenant, text=q, vector=vector, mode=mode, user_id=user, options=opts, **search)

    def close(self) -> None:
        """Snapshot the state when enough is unsaved, then close the index."""
        try:
            self.projector.snapshot(closing=True)
        finally:
            self.index.close()
