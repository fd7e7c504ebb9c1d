"""A search's candidates, asked of the engines: the I/O half of ``ChunkIndex``'s ranking (issue 41).

``gather`` turns the two engines' hits into ``_ranking.Candidates``: the rows (from the scan's
memory, else Tantivy; the query's tenant only), the cosines (the vector side's, and with
``rescore`` or ``neighbors`` the stored vectors' of rows only the text side or a neighbour brought),
the exact BM25 of every candidate (``rescore``) and the query terms' idf. ``_ranking.fuse`` ranks
them without I/O; ``mmr_order`` re-orders the ranked keys by maximal marginal relevance, fetching
the vectors it lacks.

Scores (``SearchHit.score``)
----------------------------
Ranking is not done here: ``_ranking`` holds it as pure functions over the candidates'
arrays, driven by one ``SearchOptions``. This module asks the engines for candidates
(``candidates`` of each), scores every candidate on both sides when ``rescore`` is on (a row
only one engine proposed gets its real cosine from its stored vector, or its exact BM25),
fetches the messages adjacent to the best candidates when ``neighbors`` is on, and hands the
arrays to ``_ranking``.

Query text: ``stopwords`` (default on) drops English question and function words from the
BM25 query (all terms are kept when nothing else is left). Then (``SearchOptions``; all off in
a bare ``SearchOptions()``, on in ``_ranking.SEARCH_DEFAULTS``, what ``Memory.search`` uses):
``neighbors`` (a weight, or a (previous, next) pair) adds that share of the adjacent
messages' scores (same session, ``sequence`` +-1; the neighbours of the 5 best candidates of
each engine join the candidates) and ``session_weight`` that share of the session's best score
(a summary counts for its session); ``speaker_weight`` adds that much to a message whose
speaker (``_ranking.speaker_of``: metadata ``"name"``, a ``"Name: "`` label, or the user
themself) is one of ``speakers``; ``time_weight`` adds that share of the most a message can score
without it (1 + ``session_weight`` + both neighbour shares + ``speaker_weight``) to a message
whose time is in one of ``windows`` (dates the query named): at 1 it ranks above every other; ``confidence_weight`` c multiplies by
``1 - c + c * confidence``; ``recency_half_life`` h multiplies by ``0.5 ** (age / h)`` (age at
``now``); ``calibrate`` (default on) rescales hybrid scores to the best candidate's absolute
relevance (``_ranking.calibrate``), so they compare across queries; ``min_score`` applies to
the result; ``mmr`` (lambda) re-orders the best ``4 x top_k`` by maximal marginal relevance.
Ties are broken by recency (newer ``time`` first), then key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._lance import LanceChunks
from ._ranking import Candidates, SearchOptions
from ._ranking import mmr as _mmr_pick
from ._rows import Filters, Row, message_sequence
from ._tantivy import TantivyChunks

__all__ = ["gather", "neighbours", "mmr_order"]

_SEEDS = 5  # best candidates per side whose adjacent messages join the candidates (neighbors > 0)


def gather(lance: LanceChunks, text: TantivyChunks, mode: str, f: Filters, vec_hits: list[tuple[str, float]],
           txt_hits: list[tuple[float, Row]], opts: SearchOptions, qvec: np.ndarray | None,
           terms: Sequence[str]) -> tuple[Candidates, dict[str, np.ndarray]]:
    """The candidates' rows and both sides' scores, asked of the engines; and the vectors fetched on the way."""
    vsim = {k: 1.0 - float(d) for k, d in vec_hits}
    rows: dict[str, Row] = {}
    bm25: dict[str, float] = {}
    for s, r in txt_hits:
        bm25[r.key] = s
        rows[r.key] = r
    missing = [k for k in vsim if k not in rows]
    if missing:
        # from the scan's memory when it answered the vector side (a Tantivy fetch by key costs
        # more than the rest of the fusion), the rest from Tantivy
        got = lance.scans.fetch(f.tenant, missing)
        rows.update(got)
        missing = [k for k in missing if k not in got]
    if missing:
        rows.update(text.fetch(f.tenant, missing))
    # (a key missing from Tantivy was written to LanceDB mid-apply: dropped)
    rows = {k: r for k, r in rows.items() if r.tenant == f.tenant}
    vecs: dict[str, np.ndarray] = {}
    need: list[str] = []  # rows whose stored vectors this search needs
    if any(opts.neighbors):
        # The messages next to the best candidates join the candidates (an answer often
        # shares no word with the question it follows), scored like any other row.
        seeds = [k for k, _ in sorted(vsim.items(), key=lambda x: -x[1])[:_SEEDS]]
        seeds += [k for k, _ in sorted(bm25.items(), key=lambda x: -x[1])[:_SEEDS]]
        extra = neighbours(text, f, rows, list(dict.fromkeys(seeds)))
        if extra:
            if mode != "vector":
                for r, sc in zip(extra, text.score(f.tenant, terms, extra)):
                    bm25[r.key] = sc
            if mode != "text" and qvec is not None:
                need = [r.key for r in extra]
            rows.update((r.key, r) for r in extra)
    if mode == "hybrid" and opts.rescore:
        # Score the whole union on both sides: a row one engine missed gets its real
        # cosine / BM25 rather than 0 (its exact BM25 is usually 0: it matched no term).
        only_v = [k for k in vsim if k not in bm25 and k in rows]
        for k, sc in zip(only_v, text.score(f.tenant, terms, [rows[k] for k in only_v])):
            bm25[k] = sc
        if qvec is not None:
            need += [k for k in bm25 if k not in vsim]
    if need and qvec is not None:
        # the neighbours' and the text-only rows' vectors in one lookup (each costs a query)
        got_v = lance.vectors(f.tenant, need)
        qn = qvec / (float(np.linalg.norm(qvec)) or 1.0)
        sqrt = np.sqrt
        for k, v in got_v.items():
            # sqrt(v.dot(v)) is what np.linalg.norm computes for a vector, without its dispatch
            vsim[k] = float(qn.dot(v) / (float(sqrt(v.dot(v))) or 1.0))
        vecs.update(got_v)
    idf_sum = float(sum(text.idf(f.tenant, terms))) if mode == "hybrid" else 0.0
    return Candidates(rows=rows, vsim=vsim, bm25=bm25, idf_sum=idf_sum), vecs

def neighbours(text: TantivyChunks, f: Filters, rows: dict[str, Row], seeds: list[str]) -> list[Row]:
    """Message rows adjacent (sequence +-1, same session) to the seed rows that are not candidates yet."""
    have: set[tuple[str, int]] = set()
    for r in rows.values():
        q = message_sequence(r)
        if q is not None:
            have.add((r.session_id, q))
    out: dict[str, Row] = {}
    for k in seeds:
        seed = rows.get(k)
        q = message_sequence(seed) if seed is not None else None
        if seed is None or q is None:
            continue
        for after, want in ((False, q - 1), (True, q + 1)):
            if (seed.session_id, want) in have:
                continue
            have.add((seed.session_id, want))
            for n in text.adjacent(f, seed.session_id, seed.ts, after=after):
                if message_sequence(n) == want and n.key not in rows and n.tenant == f.tenant:
                    out[n.key] = n
    return list(out.values())

def mmr_order(lance: LanceChunks, f: Filters, order: list[str], score: dict[str, float], lam: float, top_k: int,
              vecs: dict[str, np.ndarray]) -> list[str]:
    """Maximal marginal relevance over the best ``4 x top_k`` rows.

    Greedy: next = argmax lam x relevance - (1 - lam) x (max cosine to the rows chosen so
    far), relevance = score / best score. The rows after the chosen ones keep their order.
    """
    pool = order[: max(4 * top_k, top_k + 10)]
    need = [k for k in pool if k not in vecs]
    if need:
        vecs = {**vecs, **lance.vectors(f.tenant, need)}
    pool = [k for k in pool if k in vecs]
    if len(pool) < 2:
        return order
    chosen = _mmr_pick(np.array([score[k] for k in pool]), np.stack([vecs[k] for k in pool]), lam, top_k)
    picked = [pool[i] for i in chosen]
    taken = set(picked)
    return picked + [k for k in order if k not in taken]
