"""Searching for the facade: argument checks, read-your-writes, the query, and hits as ``Hit``s.

``search_hits`` is the one path every search of the facade takes (``search``, ``recall``,
``context``, ``items.search``): it validates before any work (bad input changes nothing),
waits for ``min_offset`` (embedded: the log's commit; on Ray the serving replica waits),
folds what is committed, and asks the views, which plan the query (names, dates) and embed
it where the index lives. Damaged index files, and only that, rebuild it from the log once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..actors import Hit
from ..actors._text import check_text
from ..errors import CorruptIndex, InvalidInput
from ..projections import SearchHit
from ..projections._ranking import SearchOptions, check_min_score
from ..projections._relative import check_now
from ..projections._rows import check_kinds
from .store import Store

__all__ = ["check_k", "holds", "search_hits", "shown", "to_hit"]


def search_hits(
    m: Store,
    query: str,
    *,
    top_k: int,
    user: str | None,
    kinds: Sequence[str],
    category: str | None = None,
    exclude_session: str | None = None,
    session_id: str | None = None,
    min_score: float | None = None,
    mode: str = "hybrid",
    names: bool = False,
    min_offset: int | Mapping[int, int] | None = None,
    **options: Any,
) -> list[SearchHit]:
    """Check a search's arguments, bring the views up to date (and to ``min_offset``), and query them."""
    check_text("query", query)
    floor = m.gate.min_floor(min_offset)
    check_k("top_k", top_k)
    if not isinstance(names, bool):
        raise InvalidInput("names", "must be True or False", names)
    if options.get("now") is not None:  # naive = UTC, ISO strings from the wire: one form from here down
        options["now"] = check_now(options["now"])
    SearchOptions.check(**options)  # validated before any work: bad input changes nothing
    check_kinds(kinds)
    check_min_score(min_score)
    if floor and not m.views.replicated:  # embedded: wait for the log to commit it, as a replica would
        m.gate.await_floor(floor)
    m.gate.sync()
    # the views plan the query (names, dates) and embed it: on Ray, one call to one replica
    kw: dict[str, Any] = dict(
        user=user, mode=mode, names=names, options=options, top_k=top_k, kinds=kinds, category=category,
        exclude_session=exclude_session, session_id=session_id, min_score=min_score,
    )
    if floor and m.views.replicated:  # view replicas: the serving one waits for it
        kw["min_offset"] = floor
    try:
        hits = m.views.query(m.embedder, m.tenant, query, **kw)
    except CorruptIndex as e:  # damaged files, and only that: the log is the truth
        import warnings

        warnings.warn(f"eidetica: {e}; rebuilding it from the log", stacklevel=2)
        with m.gate.lock:
            m.views.fresh(m.embedder)
        hits = m.views.query(m.embedder, m.tenant, query, **kw)
    return hits


def check_k(field: str, value: Any) -> None:
    """Check a count (``top_k``, ``limit``, ...): an int in [1, 10000]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 10_000:
        raise InvalidInput(field, "must be an int in [1, 10000]", value)


def holds(meta: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether ``meta`` has every key of ``want`` with the same value (a metadata filter)."""
    meta = meta or {}
    return all(k in meta and meta[k] == v for k, v in want.items())


def shown(score: float) -> float:
    """A score as a ``Hit`` shows it (4 decimals): ``recall``'s ordering decides on the same figure."""
    return round(float(score), 4)


def to_hit(h: SearchHit) -> Hit:
    """A view's hit as the facade's ``Hit`` (scores as shown)."""
    return Hit(
        id=h.id, kind=h.kind, text=h.text, score=shown(h.score), time=h.time, category=h.category,
        session_id=h.session_id, user_id=h.user_id, confidence=h.confidence, source_id=h.source_id,
        metadata=dict(h.metadata or {}), vector_score=shown(h.vector_score), text_score=shown(h.text_score),
    )
