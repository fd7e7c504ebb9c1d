"""What an agent receives from eidetica on LongMemEval-S (the dev split), through the public API.

Each question is its own store holding only its haystack: every session appended with one
``extend`` (turns with their role, the session's date as the time, ``metadata["dia_id"]`` =
``"<session_id>#<turn index>"`` so hits map back to turns), defaults only. Then, per question:

- session recall (the official retrieval metrics, abstention questions skipped): the distinct
  sessions of ``search(q, top_k=50, min_score=0)`` in rank order; ``recall_all@k`` = every
  evidence session among the first k, ``recall_any@5`` = at least one;
- turn recall@10 / @50 over LongMemEval's ``answer_turns`` (message hits of the same search);
- what the agent receives with no options: the share of evidence turns that ``context()``,
  ``recall()`` and ``search()`` deliver (a turn counts when one of its sentences of 20+
  characters, normalised, is in the returned text, or a returned hit names it), the block's
  tokens; ``--budgets`` adds ``context(max_tokens=b)`` for each budget (the curve);
- query latencies (query embedding included: the disk cache is off for timed queries);
- for the abstention questions (``_abs``): what the block shows (its sections' line counts).

Every figure is per question type and overall. Ingest speed is measured apart
(``--ingest-questions``, default 2): those questions' histories ingested again into fresh
stores with the real embedder (no cache), beside the embedder's own rate on the very chunks
the store embedded, in batches of ``--embed-batch``.

Embedding 98 histories costs about 25 min of CPU: turn vectors are cached on disk
(``--embed-cache``; a wrapper keyed by the model id and the text's hash that returns the
vectors the default embedder computed for that text, so every figure is the one the plain
embedder gives). ``--jobs`` runs questions in parallel processes.

``--split a|b``: only one half of the questions, by a hash of the question id (split-half
checks: tune on one half, measure on the other). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_locomo import (  # noqa: E402  (shared with the LoCoMo evaluation)
    DEFAULT_EMBED_CACHE,
    _get,
    _table,
    _use_disk,
    cached_embedder,
    context_sections,
    hit_turns,
    hits_to_turns,
    make_embedder,
    make_llm,
    open_memory,
    percentile,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "longmemeval-dev" / "longmemeval_s_dev.json.gz"
USER = "lme"
TENANT = "lme"
TURN_STEP = dt.timedelta(seconds=30)  # per-turn offset inside a session: keeps turn order in time
SESSION_KS = (5, 10)
TURN_KS = (10, 50)
DEFAULT_BUDGETS = (400, 800, 1000, 2000, 4000)
MIN_SENTENCE = 20  # characters of a normalised sentence that counts as quoting its turn
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NON_WORD = re.compile(r"[\W_]+")
NO_NOW = "EIDETICA_LME_NO_NOW"  # set: questions are asked without their date (``--no-now``)


# -- data --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LmeQuestion:
    """One LongMemEval question with its history (sessions oldest first)."""

    qid: str
    qtype: str
    question: str
    answer: str
    date: dt.datetime
    sessions: tuple[tuple[str, dt.datetime, tuple[tuple[str, str], ...]], ...]  # (id, date, ((role, text), ...))
    evidence_sessions: tuple[str, ...]
    evidence_turns: tuple[str, ...]  # "<session_id>#<turn index>"

    @property
    def abstention(self) -> bool:
        """An abstention question: what it asks was never said."""
        return self.qid.endswith("_abs")

    @property
    def n_turns(self) -> int:
        """Turns in the history."""
        return sum(len(t) for _, _, t in self.sessions)


def parse_date(text: str) -> dt.datetime:
    """A LongMemEval date like "2023/05/30 (Tue) 23:40" as an aware UTC datetime."""
    return dt.datetime.strptime(re.sub(r"\s*\(\w+\)\s*", " ", text).strip(), "%Y/%m/%d %H:%M").replace(
        tzinfo=dt.timezone.utc)


def turn_id(session_id: str, index: int) -> str:
    """The id a turn carries in ``metadata["dia_id"]``."""
    return f"{session_id}#{index}"


def load_questions(path: str | Path) -> list[LmeQuestion]:
    """Every question of the file with its sessions (in haystack order)."""
    raw = json.load(gzip.open(path, "rt", encoding="utf-8"))
    sessions = raw["sessions"]
    out = []
    for q in raw["questions"]:
        hist = tuple((sid, parse_date(date), tuple((str(r), str(c)) for r, c in sessions[sid]["turns"]))
                     for sid, date in q["haystack"])
        out.append(LmeQuestion(
            qid=q["question_id"], qtype=q["question_type"], question=q["question"], answer=str(q["answer"]),
            date=parse_date(q["question_date"]), sessions=hist,
            evidence_sessions=tuple(q["answer_session_ids"]),
            evidence_turns=tuple(dict.fromkeys(turn_id(s, int(i)) for s, i in q["answer_turns"]))))
    return out


def half(qid: str) -> str:
    """The split-half a question belongs to ("a" or "b"): a hash of its id, nothing learnt from it."""
    return "ab"[hashlib.blake2b(qid.encode("utf-8"), digest_size=8).digest()[0] & 1]


def select(questions: Sequence[LmeQuestion], *, types: Sequence[str] | None = None, split: str = "all",
           limit: int | None = None) -> list[LmeQuestion]:
    """The questions of the given types and split-half (the first ``limit`` of them)."""
    out = [q for q in questions if (not types or q.qtype in types) and (split == "all" or half(q.qid) == split)]
    return out[:limit] if limit is not None else out


# -- delivered evidence ------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lower case, every run of non-word characters one space (markdown and line breaks vanish)."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def turn_sentences(text: str) -> list[str]:
    """A turn's normalised sentences of 20+ characters (the whole text when it has none)."""
    parts = [normalise(p) for p in _SENTENCE.split(text)]
    long = [p for p in parts if len(p) >= MIN_SENTENCE]
    return long or [normalise(text)]


def delivered(evidence: Sequence[str], text: str, named: set[str], sentences: Mapping[str, list[str]]) -> float:
    """Share of evidence turns named by a hit or quoted (one sentence in the normalised text)."""
    flat = normalise(text)
    return sum(1 for t in evidence if t in named or any(s and s in flat for s in sentences.get(t, ()))) / len(evidence)


def ranked_sessions(hits: Iterable[Any]) -> list[str]:
    """Distinct session ids of hits in rank order (a fact stands for its sources' sessions)."""
    out: list[str] = []
    for h in hits:
        sids = [t.split("#", 1)[0] for t in hit_turns(h)] or [_get(h, "session_id") or ""]
        for s in sids:
            if s and s not in out:
                out.append(s)
    return out


# -- one question ------------------------------------------------------------------------------
def messages(session: tuple[str, dt.datetime, tuple[tuple[str, str], ...]]) -> list[dict[str, Any]]:
    """A session's turns as ``extend`` messages."""
    sid, start, turns = session
    return [{"role": role if role in ("user", "assistant") else "user", "content": text,
             "time": start + i * TURN_STEP, "metadata": {"dia_id": turn_id(sid, i)}}
            for i, (role, text) in enumerate(turns) if text.strip()]


def ingest(m: Any, q: LmeQuestion) -> None:
    """Every session of the history in order, one ``extend`` each, until it is searchable."""
    for s in q.sessions:
        m.session(s[0], user=USER).extend(messages(s))
    m.stats()  # waits for the views to apply the log: the first timed query must not pay for it


def _timed(fn: Any, clear: Any) -> tuple[Any, float]:
    clear()
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000


def evaluate_question(m: Any, q: LmeQuestion, emb: Any, budgets: Sequence[int]) -> dict[str, Any]:
    """Every figure of one question (see the module docstring) from a store holding its history."""
    from eidetica.providers import count_tokens

    clear = getattr(emb, "cache_clear", lambda: None)
    row: dict[str, Any] = {"qid": q.qid, "type": q.qtype, "abstention": q.abstention, "turns": q.n_turns}
    # the question's own time: "last week", "3 days ago" count from it (``--no-now``: the wall clock)
    at = {} if os.environ.get(NO_NOW) else {"now": q.date}
    block, row["context_ms"] = _timed(lambda: m.context(q.question, user=USER, **at), clear)
    row["context_tokens"] = count_tokens(block)
    secs = context_sections(block)
    row["sections"] = {k: len(v) for k, v in secs.items()}
    rec, row["recall_ms"] = _timed(lambda: m.recall(q.question, user=USER, **at), clear)
    hits, row["search_ms"] = _timed(lambda: m.search(q.question, user=USER, **at), clear)
    if q.abstention:
        row["block_beyond_profile"] = float(any(v for k, v in secs.items() if k != "Profile"))
        row["search_hits"] = len(hits)
        row["recall_hits"] = len(rec)
        row["block_head"] = [line[:160] for k, v in secs.items() for line in v][:3]
        return row
    wide = m.search(q.question, user=USER, top_k=60, min_score=0.0, **at)
    sessions = ranked_sessions(h for h in wide if _get(h, "kind") != "fact" or hit_turns(h))
    ev_s = set(q.evidence_sessions)
    for k in SESSION_KS:
        row[f"session_all_at_{k}"] = float(ev_s <= set(sessions[:k]))
    row["session_any_at_5"] = float(bool(ev_s & set(sessions[:5])))
    if not q.evidence_turns:
        return row
    ev = q.evidence_turns
    ranked = hits_to_turns(h for h in wide if _get(h, "kind") == "message")
    for k in TURN_KS:
        row[f"turn_recall_at_{k}"] = len(set(ev) & set(ranked[:k])) / len(ev)
    texts = {turn_id(sid, i): text for sid, _, turns in q.sessions for i, (_, text) in enumerate(turns)}
    sentences = {t: turn_sentences(texts.get(t, "")) for t in ev}
    facts = {f.text: set(hit_turns(f)) for f in m.list_memories(user=USER, limit=10_000)}

    def in_block(b: str) -> float:
        return delivered(ev, b, {t for text, ts in facts.items() if text in b for t in ts}, sentences)

    row["context"] = in_block(block)
    for name, hs in (("recall", rec), ("search", hits)):
        named = set(hits_to_turns([h for h in hs if _get(h, "kind") != "summary"]))
        row[name] = delivered(ev, " ".join(_get(h, "text") for h in hs), named, sentences)
    for b in budgets:
        row[f"context_at_{b}"] = in_block(m.context(q.question, user=USER, max_tokens=b, **at))
    return row


# -- running -----------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _worker_init(embedder: str, cache: str | None, stores: str | None = None) -> None:
    emb = make_embedder(embedder)
    emb.embed(["a first query loads the model"])  # not inside the first timed query
    getattr(emb, "cache_clear", lambda: None)()
    if cache:
        emb = cached_embedder(emb, Path(cache), shards=True)
    _WORKER.update(emb=emb, llm=make_llm(None, "", ""), stores=stores)


READY = "ingested"  # marker file of a kept store whose history is complete


def _run_one(args: tuple[LmeQuestion, tuple[int, ...]]) -> dict[str, Any]:
    q, budgets = args
    emb, llm, stores = _WORKER["emb"], _WORKER["llm"], _WORKER.get("stores")
    # ``--stores``: a question's store is kept and reused (query-side changes re-run without re-ingesting)
    root = Path(stores) / q.qid if stores else Path(tempfile.mkdtemp(prefix="eidetica-lme-"))
    reuse = bool(stores) and (root / READY).exists()
    if stores and not reuse:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    try:
        m = open_memory(root, TENANT, emb, llm)
        try:
            t0 = time.perf_counter()
            _use_disk(emb, True)
            if reuse:
                m.stats()
            else:
                ingest(m, q)
            _use_disk(emb, False)  # timed queries pay for their own embedding
            ingest_s = time.perf_counter() - t0
            row = evaluate_question(m, q, emb, budgets)
            row["ingest_s_cached"] = None if reuse else round(ingest_s, 2)
        finally:
            _use_disk(emb, True)
            m.close()
        if stores and not reuse:
            (root / READY).touch()
        return row
    finally:
        getattr(emb, "save", lambda: None)()
        if not stores:
            shutil.rmtree(root, ignore_errors=True)


def run_questions(questions: Sequence[LmeQuestion], *, budgets: Sequence[int], jobs: int, embedder: str,
                  cache: Path | None, log: Any, stores: Path | None = None) -> list[dict[str, Any]]:
    """Evaluate every question (``jobs`` processes); rows in question order."""
    work = [(q, tuple(budgets)) for q in questions]
    rows: list[dict[str, Any]] = []
    init = (embedder, str(cache) if cache else None, str(stores) if stores else None)
    if jobs <= 1:
        _worker_init(*init)
        for i, w in enumerate(work):
            rows.append(_run_one(w))
            log(f"[{i + 1}/{len(work)}] {_brief(rows[-1])}")
        return rows
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(jobs, _worker_init, init) as pool:
        for i, row in enumerate(pool.imap(_run_one, work)):
            rows.append(row)
            log(f"[{i + 1}/{len(work)}] {_brief(row)}")
    return rows


def _brief(row: Mapping[str, Any]) -> str:
    keys = ("context", "recall", "search", "turn_recall_at_10", "session_all_at_5", "context_tokens", "context_ms")
    return f"{row['qid']} {row['type']}: " + ", ".join(
        f"{k} {row[k]:.2f}" for k in keys if isinstance(row.get(k), (int, float)))


def measure_ingest(questions: Sequence[LmeQuestion], embedder: str, batch: int) -> dict[str, Any]:
    """Ingest with the real embedder (no cache) beside the embedder's batch rate on the chunks it embedded."""
    from eidetica.providers._base import CachedEmbedder

    inner = make_embedder(embedder)
    seen: list[str] = []

    class Recording(CachedEmbedder):  # the very embedder, noting the texts the store sends it
        def __init__(self) -> None:
            super().__init__(cache_size=0)
            self.model_id, self.dim = inner.model_id, inner.dim
            self.max_tokens = getattr(inner, "max_tokens", 256)

        def _embed_uncached(self, texts: list[str]) -> Any:
            seen.extend(texts)
            return inner.embed(texts)

    rec, llm = Recording(), make_llm(None, "", "")
    turns, ingest_s = 0, 0.0
    for q in questions:
        root = Path(tempfile.mkdtemp(prefix="eidetica-lme-ingest-"))
        try:
            getattr(inner, "cache_clear", lambda: None)()
            m = open_memory(root, TENANT, rec, llm)
            try:
                t0 = time.perf_counter()
                ingest(m, q)
                ingest_s += time.perf_counter() - t0
                turns += q.n_turns
            finally:
                m.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    chunks = list(dict.fromkeys(seen))
    getattr(inner, "cache_clear", lambda: None)()
    t0 = time.perf_counter()
    for i in range(0, len(chunks), batch):
        inner.embed(chunks[i:i + batch])
    embed_s = time.perf_counter() - t0
    return {"questions": len(questions), "turns": turns, "chunks": len(chunks), "ingest_s": round(ingest_s, 2),
            "ingest_turns_per_s": round(turns / ingest_s, 1) if ingest_s else 0.0,
            "embed_s": round(embed_s, 2), "embed_turns_per_s": round(turns / embed_s, 1) if embed_s else 0.0,
            "embed_chunks_per_s": round(len(chunks) / embed_s, 1) if embed_s else 0.0,
            "ingest_over_embed": round(ingest_s / embed_s, 2) if embed_s else None, "embed_batch": batch}


# -- summary -----------------------------------------------------------------------------------
METRICS = ("session_all_at_5", "session_all_at_10", "session_any_at_5", "turn_recall_at_10", "turn_recall_at_50",
           "context", "recall", "search")


def _mean(vals: Sequence[float]) -> float | None:
    return round(sum(vals) / len(vals), 4) if vals else None


def summarise(rows: Sequence[Mapping[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    """Means of every metric overall and per type, latencies, tokens, the budget curve, abstention."""
    answerable = [r for r in rows if not r["abstention"]]
    metrics = (*METRICS, *(f"context_at_{b}" for b in budgets))

    def block(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"questions": len(rs)}
        for k in metrics:
            out[k] = _mean([r[k] for r in rs if k in r])
        out["context_tokens_mean"] = _mean([r["context_tokens"] for r in rs])
        return out

    out = block(answerable)
    out["turn_questions"] = sum(1 for r in answerable if "turn_recall_at_10" in r)
    every = list(rows)
    for name in ("context", "recall", "search"):
        ms = [r[f"{name}_ms"] for r in every]
        out[f"{name}_ms_p50"] = round(percentile(ms, 50), 2)
        out[f"{name}_ms_p95"] = round(percentile(ms, 95), 2)
    out["context_tokens_p50"] = round(percentile([r["context_tokens"] for r in every], 50), 1)
    by_type: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in answerable:
        by_type[r["type"]].append(r)
    out["by_type"] = {t: block(rs) for t, rs in sorted(by_type.items())}
    out["curve"] = {str(b): out[f"context_at_{b}"] for b in budgets}
    abst = [r for r in rows if r["abstention"]]
    out["abstention"] = {
        "questions": len(abst),
        "block_beyond_profile": _mean([r["block_beyond_profile"] for r in abst]),
        "context_tokens_mean": _mean([r["context_tokens"] for r in abst]),
        "search_hits_mean": _mean([r["search_hits"] for r in abst]),
        "recall_hits_mean": _mean([r["recall_hits"] for r in abst]),
        "blocks": [{"qid": r["qid"], "sections": r["sections"], "head": r["block_head"]} for r in abst],
    }
    return out


def format_report(s: Mapping[str, Any], budgets: Sequence[int]) -> str:
    """Plain-text tables: metrics per type, the budget curve, abstention."""
    cols = ["session_all_at_5", "session_all_at_10", "session_any_at_5", "turn_recall_at_10", "turn_recall_at_50",
            "search", "recall", "context", "context_tokens_mean"]
    head = ["type (n)", "s_all@5", "s_all@10", "s_any@5", "turn@10", "turn@50", "search", "recall", "context", "tokens"]

    def fmt(v: Any) -> str:
        return "-" if v is None else (f"{v:.3f}" if v <= 1 else f"{v:.0f}")

    rows = [head] + [[f"{t} ({b['questions']})"] + [fmt(b[c]) for c in cols] for t, b in s["by_type"].items()]
    rows.append([f"all ({s['questions']})"] + [fmt(s[c]) for c in cols])
    out = [_table(rows), ""]
    if budgets:
        curve = [["budget"] + [str(b) for b in budgets], ["all"] + [fmt(s[f"context_at_{b}"]) for b in budgets]]
        curve += [[t] + [fmt(b[f"context_at_{x}"]) for x in budgets] for t, b in s["by_type"].items()]
        out += [_table(curve), ""]
    a = s["abstention"]
    out.append(f"abstention ({a['questions']}): block shows more than the profile {a['block_beyond_profile']}, "
               f"{a['context_tokens_mean']} tokens, search hits {a['search_hits_mean']}, recall hits {a['recall_hits_mean']}")
    out.append(f"latency p50/p95 ms: context {s['context_ms_p50']}/{s['context_ms_p95']}, recall "
               f"{s['recall_ms_p50']}/{s['recall_ms_p95']}, search {s['search_ms_p50']}/{s['search_ms_p95']}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; prints tables and the JSON line (see ``--help``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="longmemeval_s_dev.json.gz (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N selected questions")
    ap.add_argument("--types", default="", help="comma-separated question types (default: all)")
    ap.add_argument("--split", default="all", choices=("all", "a", "b"), help="split-half by a hash of the question id")
    ap.add_argument("--budgets", default="", help="comma-separated context() budgets for the curve, e.g. "
                                                  "400,800,1000,2000,4000 (default: none)")
    ap.add_argument("--jobs", type=int, default=1, help="questions evaluated in parallel processes")
    ap.add_argument("--ingest-questions", type=int, default=2,
                    help="questions ingested again with the real embedder to time ingest (0: skip)")
    ap.add_argument("--embed-batch", type=int, default=64, help="batch size of the embedder's own rate")
    ap.add_argument("--embedder", default="local", choices=("local", "hash"), help="local MiniLM (default) or hash")
    ap.add_argument("--embed-cache", default=str(DEFAULT_EMBED_CACHE / "longmemeval"),
                    help="directory of the turn-vector disk cache (default: %(default)s); 'none' turns it off")
    ap.add_argument("--stores", default=None,
                    help="keep each question's store in this directory and reuse it when complete (for query-side "
                         "changes only: a change to what ingest writes needs a fresh directory)")
    ap.add_argument("--no-now", action="store_true", help="ask without now=question_date (the wall clock)")
    ap.add_argument("--json", action="store_true", help="print only the JSON line (progress to stderr)")
    ap.add_argument("--out", default=None, help="also write every question's row and the summary to this file")
    args = ap.parse_args(argv)
    if args.no_now:  # through the environment: --jobs' spawned workers see it too
        os.environ[NO_NOW] = "1"
    data = Path(args.data)
    if not data.is_file():
        print(f"no LongMemEval data at {data}", file=sys.stderr)
        return 2
    try:
        budgets = tuple(int(b) for b in args.budgets.split(",") if b.strip())
    except ValueError:
        ap.error("--budgets: comma-separated integers")
    if any(b < 1 for b in budgets):
        ap.error("--budgets values must be >= 1")
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    questions = select(load_questions(data), types=types, split=args.split, limit=args.limit)
    if not questions:
        ap.error("no question selected")
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    cache = None if args.embed_cache == "none" else Path(args.embed_cache)
    t0 = time.perf_counter()
    rows = run_questions(questions, budgets=budgets, jobs=args.jobs, embedder=args.embedder, cache=cache, log=log,
                         stores=Path(args.stores) if args.stores else None)
    summary = summarise(rows, budgets)
    summary["eval_s"] = round(time.perf_counter() - t0, 1)
    answerable = [q for q in questions if not q.abstention]
    if args.ingest_questions > 0:
        summary["ingest"] = measure_ingest(answerable[:args.ingest_questions], args.embedder, args.embed_batch)
    summary.update(stores_reused=sum(1 for r in rows if r.get("ingest_s_cached") is None), split=args.split, now="wall clock" if args.no_now else "question_date", types=types or "all", budgets=list(budgets), jobs=args.jobs,
                   embedder=make_embedder(args.embedder).model_id,
                   embed_cache=("disk cache of the default embedder's own vectors (model id + text hash): "
                                "the same vectors, so the same figures" if cache else "none"))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    if not args.json:
        print(format_report(summary, budgets), flush=True)
        if "ingest" in summary:
            i = summary["ingest"]
            print(f"ingest (real embedder, {i['questions']} questions): {i['ingest_turns_per_s']} turns/s; the "
                  f"embedder alone on the same {i['chunks']} chunks: {i['embed_turns_per_s']} turns/s "
                  f"(ingest/embed {i['ingest_over_embed']}x)", flush=True)
        print(f"embedding cache: {summary['embed_cache']}", flush=True)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
