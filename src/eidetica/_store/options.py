"""``eidetica.SearchOptions``: the ranking options of ``Memory.search`` and their defaults, written once.

``Memory.search``, ``RemoteMemory.search`` (and the async faces), the server's ``/v1/search``
model, the MCP ``search_memory`` tool and the /ui playground all build from this struct, so
every face shows and applies the same defaults. The defaults are the measured configuration
of ``projections._ranking`` (``SEARCH_DEFAULTS``, ``MIN_SCORE``, ``SEARCH_KINDS``).

A search's keyword options override the ``options`` it is given (``takes_options``): the
merge is validated by msgspec (``_util.validate``), so a bad value raises ``InvalidInput``
naming its field before any work. The per-call arguments (``user``, ``top_k``, ``session_id``,
``exclude_session``, ``now``, ``min_offset``) are not options: they say what to search, not how
to rank it.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict, TypeVar, cast

import msgspec

from .._util.validate import validated
from ..errors import InvalidInput
from ..projections._ranking import MIN_SCORE, SEARCH_DEFAULTS, SEARCH_KINDS

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SearchOptions", "SearchKw", "SEARCH_OPTIONS", "OPTION_FIELDS", "takes_options", "ranking_kw", "wire_options"]

Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]  # NaN fails both bounds: refused too
Kind = Literal["message", "summary", "fact", "note", "item"]  # projections._rows.KINDS (a test pins it)
# (previous, next): a fixed-length tuple in a union with a constrained float trips msgspec (see _util.validate)
Pair = Annotated[tuple[Unit, ...], msgspec.Meta(min_length=2, max_length=2)]


class _Fields(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The options' fields and types (``SearchOptions`` checks itself against them)."""

    min_score: Unit | None = MIN_SCORE
    kinds: tuple[Kind, ...] | Kind | None = SEARCH_KINDS
    mode: Literal["hybrid", "vector", "text"] = "hybrid"
    names: bool = True
    candidates: Annotated[int, msgspec.Meta(ge=1)] = SEARCH_DEFAULTS.candidates
    vector_weight: Unit = SEARCH_DEFAULTS.vector_weight
    neighbors: Unit | Pair = SEARCH_DEFAULTS.neighbors
    session_weight: Unit = SEARCH_DEFAULTS.session_weight
    mmr: Unit | None = None
    recency_half_life: dt.timedelta | None = None
    confidence_weight: Unit = 0.0
    speaker_weight: Unit = SEARCH_DEFAULTS.speaker_weight
    time_weight: Unit = SEARCH_DEFAULTS.time_weight
    fusion: Literal["zscore", "minmax", "absolute", "rrf"] = SEARCH_DEFAULTS.fusion  # type: ignore[assignment]


class SearchOptions(_Fields, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How ``search`` ranks: every option with the default ``Memory.search`` applies (see docs/search.md).

    ``min_score``: calibrated cut (None: none); ``kinds``: rows searched; ``mode``: ``hybrid``,
    ``vector`` or ``text``; ``names``: drop participants' names from the query; ``candidates``:
    rows asked of each engine; ``vector_weight``: the vector side's share in fusion;
    ``neighbors`` / ``session_weight``: share of the adjacent messages' / the session's best score
    a message gains; ``mmr`` (lambda), ``recency_half_life``, ``confidence_weight`` re-rank;
    ``speaker_weight`` / ``time_weight``: bonus for messages of a person / period the query
    names; ``fusion``: ``zscore``, ``minmax``, ``absolute`` or ``rrf``. Built with bad values it
    raises ``InvalidInput`` naming the field.
    """

    def __post_init__(self) -> None:
        # a direct construction is checked as a conversion is, and keeps the normalised values
        # (a list of kinds becomes a tuple): one form for every face
        checked = validated(_Fields, msgspec.structs.asdict(self))
        for name in _Fields.__struct_fields__:
            msgspec.structs.force_setattr(self, name, getattr(checked, name))
        hl = self.recency_half_life
        if hl is not None and hl <= dt.timedelta(0):  # a type cannot say "positive" of a timedelta
            raise InvalidInput("recency_half_life", "must be a positive datetime.timedelta", hl)


class SearchKw(TypedDict, total=False):
    """``SearchOptions``' fields as keyword arguments (the typed ``**ranking`` of ``search``)."""

    min_score: float | None
    kinds: Sequence[str] | str | None
    mode: str
    names: bool
    candidates: int
    vector_weight: float
    neighbors: float | tuple[float, float]
    session_weight: float
    mmr: float | None
    recency_half_life: dt.timedelta | None
    confidence_weight: float
    speaker_weight: float
    time_weight: float
    fusion: str


SEARCH_OPTIONS = SearchOptions()  # the defaults
OPTION_FIELDS: tuple[str, ...] = SearchOptions.__struct_fields__


def resolve(options: Any, overrides: dict[str, Any]) -> SearchOptions:
    """``options`` (or the defaults) with ``overrides`` applied, validated."""
    if options is not None and not isinstance(options, SearchOptions):
        raise InvalidInput("options", "must be an eidetica.SearchOptions", options)
    if not overrides:
        return options or SEARCH_OPTIONS
    base = msgspec.structs.asdict(options) if options is not None else {}
    return validated(SearchOptions, {**base, **overrides})


def ranking_kw(options: SearchOptions) -> dict[str, Any]:
    """The options as keyword arguments (what ``_store.searching.search_hits`` takes)."""
    return msgspec.structs.asdict(options)


F = TypeVar("F", bound=Callable[..., Any])


def takes_options(fn: F) -> F:
    """Give a ``search(..., options=None, **ranking)`` its keyword options: merged over ``options``, validated.

    The wrapped function is called with ``options`` resolved (a ``SearchOptions``, never None)
    and no ranking keywords; its signature (``inspect.signature``, ``help()``) lists every option
    with its default, as the keyword API always did.
    """

    @functools.wraps(fn)
    def call(*args: Any, options: SearchOptions | None = None, **kw: Any) -> Any:
        overrides = {k: kw.pop(k) for k in OPTION_FIELDS if k in kw}
        return fn(*args, options=resolve(options, overrides), **kw)

    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    hints = SearchKw.__annotations__
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(SEARCH_OPTIONS, name),
                                 annotation=hints.get(name, inspect.Parameter.empty)) for name in OPTION_FIELDS]
    call.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return cast(F, call)


def wire_options(options: SearchOptions) -> dict[str, Any]:
    """The options as ``/v1/search`` takes them in JSON (``recency_half_life`` in seconds)."""
    out = msgspec.structs.asdict(options)
    if out["recency_half_life"] is not None:
        out["recency_half_life"] = out["recency_half_life"].total_seconds()
    return out
