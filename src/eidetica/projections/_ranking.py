"""Ranking: pure functions over candidate arrays, and the one ``SearchOptions`` struct.

The engines (``_lance``, ``_tantivy``) propose candidates and score them; everything that
turns those raw scores into an order lives here, free of I/O, so it can be tested and
measured on its own: fusion (``minmax`` or ``zscore`` + ``linear``), neighbour / session smoothing
(``smooth``), the speaker bonus (``speaker_bonus``), ``confidence``, ``recency``, the final
order (``order``) and maximal marginal relevance (``mmr``).

Arrays are parallel: index ``i`` is the same candidate in every array of one search.
``SearchOptions`` is built once by the caller (the facade) and passed down unchanged.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from ..errors import InvalidInput
from ._rows import Row, message_sequence, to_us

__all__ = [
    "SearchOptions", "SEARCH_DEFAULTS", "SEARCH_KINDS", "default_options", "MIN_SCORE", "FACT_MIN_SCORE", "SELF", "speaker_label", "speaker_of", "VECTOR_WEIGHT", "minmax", "linear", "smooth", "speaker_bonus", "confidence", "recency",
    "order", "mmr", "calibrate", "absolute_relevance", "text_share", "rrf", "time_windows", "in_windows", "zscore",
    "check_min_score", "AVOID", "RESTRICTION", "RESTRICTION_TERMS", "restriction_bonus", "Candidates", "fuse",
]

VECTOR_WEIGHT = 0.7
FUSIONS = ("minmax", "absolute", "rrf", "zscore")
RRF_K = 60  # the constant of Cormack et al. (2009), not fitted here


def _number(field: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
        raise InvalidInput(field, f"must be a number in [{lo:g}, {hi:g}]", value)
    return float(value)


def check_min_score(value: Any, lo: float = 0.0, hi: float = 1.0) -> float | None:
    """None (no threshold), or a number in [lo, hi] (never NaN); the API's scores are calibrated to [0, 1]."""
    return None if value is None else _number("min_score", value, lo, hi)


def _pair(field: str, value: Any) -> tuple[float, float]:
    """A weight for both sides, or a (previous, next) pair of weights, each in [0, 1]."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidInput(field, "must be a number or a (previous, next) pair", value)
        return (_number(field, value[0], 0.0, 1.0), _number(field, value[1], 0.0, 1.0))
    w = _number(field, value, 0.0, 1.0)
    return (w, w)


class SearchOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Every scoring option of one search, validated once (``SearchOptions.check``) and passed down.

    ``candidates``: rows asked of each engine; ``vector_weight``: share of the vector side in
    hybrid fusion; ``rescore``: score every candidate on both sides; ``stopwords``: drop
    question words from the BM25 query; ``neighbors`` (previous, next) / ``session_weight``:
    share of the adjacent messages' / the session's best score a message gains;
    ``speakers`` / ``speaker_weight``: bonus for messages spoken by one of those names;
    ``confidence_weight``, ``recency_half_life`` (+ ``now``) and ``mmr`` (lambda) re-rank.
    """

    candidates: int = 50
    vector_weight: float = VECTOR_WEIGHT
    rescore: bool = True
    stopwords: bool = True
    neighbors: tuple[float, float] = (0.0, 0.0)
    session_weight: float = 0.0
    speakers: frozenset[str] = frozenset()
    speaker_weight: float = 0.0
    mmr: float | None = None
    recency_half_life: dt.timedelta | None = None
    now: dt.datetime | None = None
    confidence_weight: float = 0.0
    fusion: str = "minmax"
    calibrate: bool = True
    windows: tuple[tuple[int, int, int, int, int], ...] = ()
    time_weight: float = 0.0
    restriction_weight: float = 0.0  # share of the most a row can score added to allergies for "what must I avoid"
    restrict: bool = False  # set by the query's plan: the question asks what the user must not eat or drink

    @classmethod
    def check(cls, **fields: Any) -> SearchOptions:
        """Validate raw option values (``InvalidInput`` names the field); unknown names raise too."""
        base = cls()
        unknown = sorted(set(fields) - set(cls.__struct_fields__))
        if unknown:
            raise InvalidInput(unknown[0], "is not a search option", fields[unknown[0]])

        def get(name: str) -> Any:
            return fields.get(name, getattr(base, name))

        speakers = get("speakers")
        if not isinstance(speakers, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in speakers):
            raise InvalidInput("speakers", "must be a collection of names (strings)", speakers)
        for name in ("rescore", "stopwords", "calibrate", "restrict"):
            if not isinstance(get(name), bool):
                raise InvalidInput(name, "must be True or False", get(name))
        cand = get("candidates")
        if isinstance(cand, bool) or not isinstance(cand, int) or cand < 1:
            raise InvalidInput("candidates", "must be an int >= 1", cand)
        hl = get("recency_half_life")
        if hl is not None and (not isinstance(hl, dt.timedelta) or hl <= dt.timedelta(0)):
            raise InvalidInput("recency_half_life", "must be a positive datetime.timedelta", hl)
        now = get("now")
        if now is not None and (not isinstance(now, dt.datetime) or now.utcoffset() is None):
            raise InvalidInput("now", "must be a timezone-aware datetime", now)
        mmr_ = get("mmr")
        if get("fusion") not in FUSIONS:
            raise InvalidInput("fusion", f"must be one of {', '.join(FUSIONS)}", get("fusion"))
        return cls(
            fusion=get("fusion"),
            calibrate=get("calibrate"),
            windows=tuple(tuple(int(x) for x in w) for w in get("windows")),  # type: ignore[misc]  # five ints each
            time_weight=_number("time_weight", get("time_weight"), 0.0, 1.0),
            restriction_weight=_number("restriction_weight", get("restriction_weight"), 0.0, 1.0),
            restrict=get("restrict"),
            candidates=cand,
            vector_weight=_number("vector_weight", get("vector_weight"), 0.0, 1.0),
            rescore=get("rescore"),
            stopwords=get("stopwords"),
            neighbors=_pair("neighbors", get("neighbors")),
            session_weight=_number("session_weight", get("session_weight"), 0.0, 1.0),
            speakers=frozenset(speakers),
            speaker_weight=_number("speaker_weight", get("speaker_weight"), 0.0, 1.0),
            mmr=None if mmr_ is None else _number("mmr", mmr_, 0.0, 1.0),
            recency_half_life=hl,
            now=now,
            confidence_weight=_number("confidence_weight", get("confidence_weight"), 0.0, 1.0),
        )


SELF = "\x00self"  # in ``speakers``: the query names the user whose memory it is
# "Melanie: ...", "Mary Ann: ...", "Dr. Watson: ...": one to three capitalised words, then ": ".
_LABEL = re.compile(r"\s*([A-Z][\w'.\-]*(?: [A-Z][\w'.\-]*){0,2}):\s+\S")


def speaker_label(text: str) -> str | None:
    """The speaker label a message's text starts with (``"Melanie: ..."`` -> ``"Melanie"``), or None."""
    m = _LABEL.match(text)
    return m.group(1) if m else None


def speaker_of(meta: dict[str, Any], text: str) -> str | None:
    """Who spoke a message: ``metadata["name"]``, else a leading ``"Name: "`` label of its text,
    else ``SELF`` for an unnamed message of role ``user`` (the user whose memory it is)."""
    name = meta.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    label = speaker_label(text)
    if label is not None:
        return label
    return SELF if meta.get("role") == "user" else None


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MON = r"(?P<mon>" + "|".join(m.capitalize() for m in _MONTHS) + r"|" + "|".join(
    m[:3].capitalize() for m in _MONTHS if len(m) > 3) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# most specific first: "May 23, 2023", "1 February, 2023", "July 2023", "June", "2023"
_DATES = [re.compile(p) for p in (
    rf"\b(?:on |in |during |of )?(?:the )?{_MON} {_DAY},? {_YEAR}\b",
    rf"\b(?:on |in |during |of )?(?:the )?{_DAY} (?:of )?{_MON},? {_YEAR}\b",
    rf"\b(?:on |in |during |of )?(?:the )?(?:(?:beginning|start|end|middle) of )?{_MON},? {_YEAR}\b",
    rf"\b(?:on |in |during |of )?(?:the )?(?:(?:beginning|start|end|middle) of )?{_MON}\b(?! \d)",
    rf"\b(?:in |during |of )?{_YEAR}\b",
)]
LATE = 8  # days after a period in which a message may still tell of it ("last Saturday", "last week")


def time_windows(query: str) -> tuple[tuple[tuple[int, int, int, int, int], ...], str]:
    """Dates a query names, and the query without them.

    Each window is ``(year, month, day, span, late)`` with 0 for "any" (a month without a
    year matches that month of every year; ``span`` > 0: that many days from the date, as
    ``_relative`` resolves "last week"); ``late`` extra days after the period also count:
    what happened on a day is often told in a message written a few days later. A bare
    "May" is taken as the month only when capitalised and not sentence-initial.
    """
    out: list[tuple[int, int, int, int, int]] = []
    rest = query
    for pat in _DATES:
        cut: list[tuple[int, int]] = []
        for m in pat.finditer(rest):
            g = m.groupdict()
            mon = g.get("mon")
            if mon is not None and m.start("mon") == 0:
                continue  # "May I ..." / "March on": a sentence-initial word, not a date
            month = (_MONTHS.index(next(x for x in _MONTHS if x.startswith(mon.lower()[:3]))) + 1) if mon else 0
            day = int(g["day"]) if g.get("day") else 0
            year = int(g["year"]) if g.get("year") else 0
            if day > 31:
                continue
            out.append((year, month, day, 0, LATE))
            cut.append(m.span())
        for a, b in reversed(cut):
            rest = rest[:a] + " " + rest[b:]
    rest = " ".join(rest.split())
    return tuple(out), (rest if re.search(r"\w", rest) else query)


def in_windows(ts_us: Sequence[int], windows: Sequence[tuple[int, int, int, int, int]]) -> np.ndarray:
    """Whether each time falls in one of the windows (see ``time_windows``), late days included."""
    out = np.zeros(len(ts_us), dtype=bool)
    if not windows:
        return out
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    for i, us in enumerate(ts_us):
        t = epoch + dt.timedelta(microseconds=int(us))
        for year, month, day, span, late in windows:
            if span and year and month and day:  # a day range (relative dates: ``_relative``)
                first = dt.date(year, month, day)
                if 0 <= (t.date() - first).days < span + late:
                    out[i] = True
                    break
                continue
            for back in range(late + 1):  # the message's day, or up to ``late`` days before it
                d = t - dt.timedelta(days=back)
                if (not year or d.year == year) and (not month or d.month == month) and (not day or d.day == day):
                    out[i] = True
                    break
            if out[i]:
                break
    return out


# What ``Memory.search`` does with no options: the best configuration measured on the LoCoMo dev
# split (BENCHMARKS.md; leave-one-conversation-out there too). ``SearchOptions()`` itself stays
# the plain hybrid the index tests pin.
# z-score fusion (each side standardised over the candidates, no weight of its own): a side whose
# best candidate stands out from the rest counts for more than under min-max, which maps every
# query's best to 1 on both sides.
SEARCH_DEFAULTS = SearchOptions(vector_weight=0.5, neighbors=(0.2, 0.2), session_weight=0.3, speaker_weight=0.15,
                                time_weight=1.0, fusion="zscore", restriction_weight=1.0)
# Calibrated scores: below it a hit is taken for "nothing relevant". 0.30 keeps 0.77 of the LoCoMo
# dev evidence in the top 10 (0.40 kept 0.67); what was never discussed is told apart first by
# the names it asks about (``_views.LocalViews.query``: a name no document holds returns nothing).
MIN_SCORE = 0.30
# What ``Memory.search`` covers with no ``kinds``: a fact the user was told to ``remember`` is found too.
SEARCH_KINDS = ("message", "summary", "fact", "note")


def default_options() -> dict[str, Any]:
    """``SEARCH_DEFAULTS``'s ranking fields as keyword options (what ``recall`` and ``context`` rank with)."""
    d = SEARCH_DEFAULTS
    return {"vector_weight": d.vector_weight, "neighbors": d.neighbors, "session_weight": d.session_weight,
            "speaker_weight": d.speaker_weight, "time_weight": d.time_weight, "fusion": d.fusion,
            "restriction_weight": d.restriction_weight}
# The same for a user's few facts and notes (``context``, ``recall``'s fallback): with few rows a
# stray match is rarer, and a paraphrase's cosine alone (0.25-0.4 with MiniLM) has to pass.
FACT_MIN_SCORE = 0.20


def minmax(x: np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1]; all-equal (or single) scores map to 1."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 1e-12:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def zscore(x: np.ndarray) -> np.ndarray:
    """Standardise to mean 0, standard deviation 1 over the candidates; all-equal scores map to 0."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    sd = float(x.std())
    return (x - float(x.mean())) / sd if sd > 1e-12 else np.zeros_like(x)


def text_share(bm25: np.ndarray, idf_sum: float) -> np.ndarray:
    """BM25 as a share of the query's total idf, clipped to [0, 1]: comparable across queries.

    A short document matching a term once scores about that term's idf, so the share is about
    the idf-weighted fraction of the query's terms the document contains.
    """
    b = np.asarray(bm25, dtype=np.float64)
    return np.clip(b / idf_sum, 0.0, 1.0) if idf_sum > 0 else np.zeros_like(b)


def rrf(*scores: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion: sum over the score arrays of ``1 / (k + rank)`` (rank 1 = best)."""
    out = np.zeros(len(scores[0]), dtype=np.float64)
    for s in scores:
        s = np.asarray(s, dtype=np.float64)
        ranks = np.empty(len(s), dtype=np.float64)
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
        out += 1.0 / (k + ranks)
    return out


def absolute_relevance(cosine: np.ndarray, share: np.ndarray) -> np.ndarray:
    """How relevant each candidate is on a scale shared by every query, in [0, 1]:
    ``max(cosine, (cosine + share) / 2)`` with the cosine clipped at 0 and ``share`` from
    ``text_share``. A word match can raise a paraphrase's cosine, never lower it."""
    c = np.clip(np.asarray(cosine, dtype=np.float64), 0.0, 1.0)
    return np.maximum(c, 0.5 * (c + np.asarray(share, dtype=np.float64)))


def calibrate(score: np.ndarray, relevance: np.ndarray) -> np.ndarray:
    """Rescale a query's ranking scores so the best is the best candidate's absolute relevance.

    The order is kept; ``score / max(score)`` says how a hit compares with the query's best,
    ``max(relevance)`` how relevant that best is on a scale shared by every query, so a
    threshold means the same for every query (nothing relevant: every score is low).
    """
    s = np.asarray(score, dtype=np.float64)
    top = float(s.max()) if s.size else 0.0
    best = float(np.max(relevance)) if len(relevance) else 0.0
    if top <= 1e-12:
        return np.zeros_like(s)
    return np.clip(s, 0.0, None) / top * max(0.0, best)


def linear(v: np.ndarray, t: np.ndarray, w: float) -> np.ndarray:
    """``w * v + (1 - w) * t``: the weighted sum of two already normalised score arrays."""
    return w * np.asarray(v, dtype=np.float64) + (1.0 - w) * np.asarray(t, dtype=np.float64)


def smooth(score: np.ndarray, session: Sequence[str], sequence: Sequence[int | None],
           neighbors: tuple[float, float], session_weight: float) -> np.ndarray:
    """Add ``neighbors`` x the previous / next messages' scores and ``session_weight`` x the session's best.

    ``session[i]`` is candidate i's session id ("" for rows without one: they keep their
    score); ``sequence[i]`` its message sequence (None for non-messages). A message's score is
    its best chunk's; a session's best counts every candidate of it (summaries too) and is
    never below 0. Only candidates take part.
    """
    best: dict[str, float] = {}
    msg: dict[tuple[str, int], float] = {}
    for s, sid, q in zip(score, session, sequence):
        if not sid:
            continue
        best[sid] = max(best.get(sid, 0.0), float(s))
        if q is not None:
            msg[(sid, q)] = max(msg.get((sid, q), 0.0), float(s))
    out = np.array(score, dtype=np.float64)
    for i, (sid, q) in enumerate(zip(session, sequence)):
        if not sid:
            continue
        add = session_weight * best.get(sid, 0.0)
        if q is not None:
            add += neighbors[0] * msg.get((sid, q - 1), 0.0) + neighbors[1] * msg.get((sid, q + 1), 0.0)
        out[i] += add
    return out


# "What food must I avoid?", "Is there anything I can't eat?": what the user must not have (an
# allergy, an intolerance) comes before what they choose not to (a diet), whatever the cosine says
# (MiniLM puts "I'm vegetarian" at 0.36 and "I have a peanut allergy" at 0.27 for that question).
_FOOD = r"\b(?:eat|eating|food|foods|drink|drinks|meal|meals|dish|dishes|ingredients?|diet\w*|cook\w*|recipes?|snacks?|menu|restaurants?|bak(?:e|ing)|dinner|lunch|breakfast)\b"
AVOID = re.compile(rf"(?=.*{_FOOD})(?:.*\b(?:avoid\w*|can'?t|cannot|shouldn'?t|should not|must not|not allowed|safe|restrict\w*|stay away)\b)",
                   re.IGNORECASE | re.DOTALL)
RESTRICTION = re.compile(r"\b(?:allerg\w*|intoleran\w*|anaphyla\w*|celiac|coeliac|epi-?pens?)\b", re.IGNORECASE)
RESTRICTION_TERMS = "allergy allergic intolerant intolerance"  # added to such a query: BM25 proposes them


def restriction_bonus(score: np.ndarray, texts: Sequence[str], opts: SearchOptions) -> np.ndarray:
    """Add ``restriction_weight`` x the most a row can score otherwise to rows naming an allergy or
    intolerance, when the query asks what to avoid (``opts.restrict``): at 1 they come first."""
    if not (opts.restrict and opts.restriction_weight):
        return score
    most = 1.0 + opts.session_weight + sum(opts.neighbors) + opts.speaker_weight
    hit = np.array([bool(RESTRICTION.search(t)) for t in texts], dtype=np.float64)
    return np.asarray(score, dtype=np.float64) + opts.restriction_weight * most * hit


def speaker_bonus(score: np.ndarray, is_speaker: np.ndarray, weight: float) -> np.ndarray:
    """Add ``weight`` to the candidates spoken by a person the query names."""
    return np.asarray(score, dtype=np.float64) + weight * np.asarray(is_speaker, dtype=np.float64)


def confidence(score: np.ndarray, conf: np.ndarray, weight: float) -> np.ndarray:
    """Multiply by ``1 - weight + weight * confidence`` (confidence clipped to [0, 1])."""
    c = np.clip(np.asarray(conf, dtype=np.float64), 0.0, 1.0)
    return np.asarray(score, dtype=np.float64) * (1.0 - weight + weight * c)


def recency(score: np.ndarray, ts_us: np.ndarray, now_us: int, half_life_us: float) -> np.ndarray:
    """Multiply by ``0.5 ** (age / half_life)`` (age at ``now``, never negative)."""
    age = np.maximum(0, now_us - np.asarray(ts_us, dtype=np.int64)).astype(np.float64)
    return np.asarray(score, dtype=np.float64) * 0.5 ** (age / half_life_us)


def order(score: np.ndarray, ts_us: Sequence[int], keys: Sequence[str]) -> list[int]:
    """Candidate indices best first; ties broken by recency (newer first), then key."""
    s = np.asarray(score, dtype=np.float64).tolist()  # the same floats, without a numpy scalar per comparison key
    return sorted(range(len(keys)), key=lambda i: (-s[i], -int(ts_us[i]), keys[i]))


def mmr(rel: np.ndarray, vecs: np.ndarray, lam: float, top_k: int) -> list[int]:
    """Maximal marginal relevance: greedy picks of ``lam * rel - (1 - lam) * max cosine to the picked``.

    ``rel`` (in rank order) is divided by its largest magnitude, so the best relevance is 1;
    returns up to ``top_k`` indices into ``rel``, in pick order (ties keep rank order).
    """
    mat = np.asarray(vecs, dtype=np.float32).copy()
    mat /= np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
    sims = mat @ mat.T
    rel = np.asarray(rel, dtype=np.float64)
    top = float(np.abs(rel).max()) if rel.size else 0.0
    rel = rel / top if top > 1e-12 else np.ones_like(rel)
    chosen: list[int] = []
    best_sim = np.full(len(rel), -np.inf)
    left = list(range(len(rel)))
    while left and len(chosen) < top_k:
        red = np.where(np.isfinite(best_sim[left]), best_sim[left], 0.0)
        val = lam * rel[left] - (1.0 - lam) * red
        i = left[int(np.argmax(val))]  # first maximum: ties keep the relevance order
        chosen.append(i)
        left.remove(i)
        best_sim = np.maximum(best_sim, sims[i])
    return chosen


@dataclass
class Candidates:
    """One search's candidates as the engines gave them (``ChunkIndex`` gathers them; ``fuse`` ranks them)."""

    rows: dict[str, Row]  # key -> row, of the query's tenant only
    vsim: dict[str, float] = field(default_factory=dict)  # key -> cosine to the query vector
    bm25: dict[str, float] = field(default_factory=dict)  # key -> exact BM25 of the query terms
    idf_sum: float = 0.0  # the query terms' summed idf: the scale of ``text_share`` (hybrid)


def _fused(mode: str, c: Candidates, opts: SearchOptions) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """The candidates' keys, their fused scores and (hybrid) absolute relevance, before any bonus."""
    vsim, bm25, rows = c.vsim, c.bm25, c.rows
    relevance: np.ndarray | None = None
    sc: np.ndarray
    if mode == "hybrid":
        # (a set's order: RRF's ranks of tied scores follow it)
        keys = [k for k in (vsim.keys() | bm25.keys()) if k in rows]
        v = np.array([vsim.get(k, 0.0) for k in keys])
        t = text_share(np.array([bm25.get(k, 0.0) for k in keys]), c.idf_sum)
        # absolute relevance, on one scale for every query: what ``calibrate`` scales to
        relevance = absolute_relevance(v, t)
        if opts.fusion == "minmax":
            nv = dict(zip(vsim, minmax(np.fromiter(vsim.values(), np.float64, len(vsim)))))
            nt = dict(zip(bm25, minmax(np.fromiter(bm25.values(), np.float64, len(bm25)))))
            sc = linear(np.array([nv.get(k, 0.0) for k in keys]), np.array([nt.get(k, 0.0) for k in keys]),
                        opts.vector_weight)
        elif opts.fusion == "zscore":
            # each side standardised over the candidates, the fused score back on [0, 1]
            sc = minmax(linear(zscore(v), zscore(np.array([bm25.get(k, 0.0) for k in keys])), opts.vector_weight))
        else:
            sc = linear(np.clip(v, 0.0, 1.0), t, opts.vector_weight) if opts.fusion == "absolute" else rrf(v, t)
    elif mode == "vector":
        keys = [k for k in vsim if k in rows]
        sc = np.array([vsim[k] for k in keys], dtype=np.float64)
    else:
        best = max(bm25.values(), default=1.0) or 1.0
        keys = [k for k in bm25 if k in rows]
        sc = np.array([bm25[k] / best for k in keys], dtype=np.float64)
    return keys, sc, relevance


def fuse(mode: str, c: Candidates, opts: SearchOptions,
         min_score: float | None = None) -> tuple[list[str], dict[str, float]]:
    """Rank the candidates: (keys best first, those under ``min_score`` dropped; key -> score). No I/O.

    ``mode`` is ``hybrid`` (both sides fused by ``opts.fusion``), ``vector`` (cosine) or ``text``
    (BM25 over the best); then smoothing, the speaker, time-window, restriction, confidence and
    recency terms, ``calibrate`` (hybrid), the order of ``order``. ``mmr`` is not applied here: it
    needs the rows' vectors (``ChunkIndex`` re-orders what this returns).
    """
    keys, sc, relevance = _fused(mode, c, opts)
    cand = [c.rows[k] for k in keys]
    ts = np.array([r.ts for r in cand], dtype=np.int64)
    if any(opts.neighbors) or opts.session_weight:
        sc = smooth(sc, [r.session_id for r in cand], [message_sequence(r) for r in cand], opts.neighbors,
                    opts.session_weight)
    if opts.speaker_weight and opts.speakers:
        names = opts.speakers
        sc = speaker_bonus(sc, np.array([r.kind == "message" and speaker_of(r.meta_dict(), r.text) in names
                                         for r in cand]),
                           opts.speaker_weight)
    sc = restriction_bonus(sc, [r.text for r in cand], opts)
    if opts.time_weight and opts.windows:
        # in units of the most a message can score without it (fused 1, its session's best,
        # both neighbours, the speaker bonus): at 1.0 a message of the named period ranks
        # above every other, whatever the fusion's scale
        tw = opts.time_weight * (1.0 + opts.session_weight + sum(opts.neighbors) + opts.speaker_weight)
        sc = speaker_bonus(sc, in_windows(ts.tolist(), opts.windows) & np.array([r.kind == "message" for r in cand],
                                                                               dtype=bool), tw)
    if opts.confidence_weight:
        sc = confidence(sc, np.array([float(r.confidence) for r in cand]), opts.confidence_weight)
    if opts.recency_half_life is not None:
        now_us = to_us(opts.now) if opts.now is not None else to_us(dt.datetime.now(dt.timezone.utc))
        sc = recency(sc, ts, now_us, opts.recency_half_life.total_seconds() * 1e6)
    if mode == "hybrid" and opts.calibrate and relevance is not None:
        sc = calibrate(sc, relevance)
    score = dict(zip(keys, sc.tolist()))
    ranked = [keys[i] for i in order(sc, ts.tolist(), keys)]
    if min_score is not None:
        ranked = [k for k in ranked if score[k] >= min_score]
    return ranked, score
