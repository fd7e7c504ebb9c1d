"""Ranking: pure functions over candidate arrays, and the one ``SearchOptions`` struct.

The engines (``_lance``, ``_tantivy``) propose candidates and score them; everything that
turns those raw scores into an order lives here, free of I/O, so it can be tested and
measured on its own: fusion (``minmax`` + ``linear``), neighbour / session smoothing
(``smooth``), the speaker bonus (``speaker_bonus``), ``confidence``, ``recency``, the final
order (``order``) and maximal marginal relevance (``mmr``).

Arrays are parallel: index ``i`` is the same candidate in every array of one search.
``SearchOptions`` is built once by the caller (the facade) and passed down unchanged.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence

import msgspec
import numpy as np

from ..errors import InvalidInput

__all__ = [
    "SearchOptions", "VECTOR_WEIGHT", "minmax", "linear", "smooth", "speaker_bonus", "confidence", "recency",
    "order", "mmr",
]

VECTOR_WEIGHT = 0.7


def _number(field: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
        raise InvalidInput(field, f"must be a number in [{lo:g}, {hi:g}]", value)
    return float(value)


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

    @classmethod
    def check(cls, **fields: Any) -> "SearchOptions":
        """Validate raw option values (``InvalidInput`` names the field); unknown names raise too."""
        base = cls()
        unknown = sorted(set(fields) - set(cls.__struct_fields__))
        if unknown:
            raise InvalidInput(unknown[0], "is not a search option", fields[unknown[0]])
        get = lambda name: fields.get(name, getattr(base, name))  # noqa: E731
        speakers = get("speakers")
        if not isinstance(speakers, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in speakers):
            raise InvalidInput("speakers", "must be a collection of names (strings)", speakers)
        for name in ("rescore", "stopwords"):
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
        return cls(
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


def minmax(x: np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1]; all-equal (or single) scores map to 1."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 1e-12:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


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
    return sorted(range(len(keys)), key=lambda i: (-float(score[i]), -int(ts_us[i]), keys[i]))


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
