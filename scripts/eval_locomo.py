"""Retrieval quality of eidetica on LoCoMo-format conversations (turns as retrieval units).

Each conversation is its own tenant with one user; every LoCoMo session becomes a memory
session ingested in order through the public API (``eidetica.open`` / ``SessionHandle.extend``),
with the session date as the message time and shared photos as their captions. For every
question with evidence, each mode retrieves, maps hits back to dialog turns (message hits by
their ``dia_id`` metadata; fact and summary hits through ``metadata["sources"]``) and scores
recall@k, any@k and all@k per category and overall (definitions in the data README).

Modes (all through ``Memory.search``; the evaluation chooses options, the product does all
query handling and fusion):

- ``bm25``, ``vector``: message chunks only, ``mode="text"`` / ``mode="vector"`` (participants'
  names and question words out of the query).
- ``seed``: message chunks only, the seed's plain hybrid: ``vector_weight=0.7``, ``neighbors=0``,
  ``session_weight=0``, ``speaker_weight=0``, ``time_weight=0``, ``fusion="minmax"`` (``SEED``): the baseline.
- ``hybrid``: ``Memory.search`` with no options at all (only ``top_k`` and ``min_score=0``): the
  product's defaults, the headline row.
- ``derived``: the defaults over derived keys too (``kinds`` message, summary, fact): a fact hit
  stands for its source turn, a summary lifts its session's turns (through ``session_weight``).

Turns are written the README's way (what was said, the speaker in ``metadata["name"]``), or
with ``--speaker-style label`` as ``"Speaker: text"`` without the name in the metadata.
Turn vectors are cached on disk by text hash (``--embed-cache``) so re-runs skip re-embedding.

``--agent`` adds what the agent receives with no options (``agent_conversation``): the share of
evidence turns ``context()``, ``recall()`` and ``search()`` deliver, from a second tenant per
conversation ingested one ``append`` per turn; abstention on 40 questions of the next conversation
(as asked, and with its speakers renamed); ``context()`` latency. ``--modes`` with no mode runs
only those rows.

``--holdout`` adds a leave-one-conversation-out check of the defaults (``GRID``: for each
conversation the grid point best on the other four is scored on it).

Progress and tables go to stdout; the last line is one JSON object led by the defaults row
(``recall_at_10`` etc. of ``hybrid``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo-dev"
DEFAULT_KS = (5, 10, 25)
ALL_MODES = ("bm25", "vector", "seed", "hybrid", "derived")
HEADLINE = "hybrid"  # the row the JSON line and BENCHMARKS.md lead with: ``Memory.search`` defaults
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TURN_STEP = dt.timedelta(seconds=30)  # per-turn offset inside a session: keeps turn order in time

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_ID = re.compile(r"^D:?(\d+):(\d+)$")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")


# -- data ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    """One dialog turn as it is ingested: its LoCoMo id, speaker, text and time."""

    dia_id: str
    speaker: str
    text: str
    time: dt.datetime
    plain: str = ""  # the text without the speaker label, as a README-following user appends it


@dataclass(frozen=True)
class LocomoSession:
    """One LoCoMo session: its number, start time and turns in order."""

    number: int
    time: dt.datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One QA item with its normalised, valid evidence turn ids."""

    question: str
    category: int
    evidence: tuple[str, ...]
    answer: str = ""
    dropped: int = 0  # evidence ids that named no turn of the conversation


@dataclass
class Conversation:
    """A LoCoMo conversation: speakers, sessions in order, questions."""

    conv_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[LocomoSession]
    questions: list[Question]

    @property
    def turn_ids(self) -> set[str]:
        """Every dia_id of the conversation."""
        return {t.dia_id for s in self.sessions for t in s.turns}

    @property
    def n_turns(self) -> int:
        """How many turns the conversation has."""
        return sum(len(s.turns) for s in self.sessions)

    @property
    def dropped_evidence(self) -> int:
        """Evidence ids of all questions that named no turn."""
        return sum(q.dropped for q in self.questions)


def parse_session_date(text: str) -> dt.datetime:
    """Parse a LoCoMo session date like "1:56 pm on 8 May, 2023" into an aware UTC datetime."""
    s = " ".join(str(text).replace("\u202f", " ").split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%I:%M%p on %d %B, %Y"):
        try:
            return dt.datetime.strptime(s, fmt).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
    raise ValueError(f"unrecognised LoCoMo session date: {text!r}")


def plain_text(turn: Mapping[str, Any]) -> str:
    """What the speaker said: the turn's text plus ``" [image: <caption>]"`` for a shared photo."""
    text = str(turn.get("text", "")).strip()
    caption = str(turn.get("blip_caption") or "").strip()
    if caption:
        text += f" [image: {caption}]"
    return text


def turn_text(turn: Mapping[str, Any]) -> str:
    """The turn written with its speaker label: ``"<speaker>: <text>"`` plus ``" [image: <caption>]"``."""
    return f"{turn.get('speaker', '').strip()}: {plain_text(turn)}"


def normalize_evidence(raw: Iterable[Any], valid: set[str]) -> tuple[tuple[str, ...], int]:
    """Normalise evidence ids ("D10:19 D10:20", "D:11:26", "D8:6; D9:17"); return (valid ids in order, dropped count)."""
    out: list[str] = []
    dropped = 0
    for item in raw or ():
        for token in _EVIDENCE_SPLIT.split(str(item).strip()):
            if not token:
                continue
            m = _EVIDENCE_ID.match(token)
            ident = f"D{int(m.group(1))}:{int(m.group(2))}" if m else token
            if ident not in valid:
                dropped += 1
            elif ident not in out:
                out.append(ident)
    return tuple(out), dropped


def load_conversation(path: str | os.PathLike[str]) -> Conversation:
    """Load one LoCoMo ``<id>.json`` into a Conversation (sessions in order, evidence normalised)."""
    p = Path(path)
    raw = json.loads(p.read_text(encoding="utf-8"))
    if "conversation" in raw and isinstance(raw["conversation"], dict):  # the upstream locomo10.json layout
        raw = dict(raw["conversation"], qa=raw.get("qa", []))
    numbers = sorted(int(m.group(1)) for k in raw if (m := _SESSION_KEY.match(k)) and raw[k])
    sessions: list[LocomoSession] = []
    for n in numbers:
        start = parse_session_date(raw[f"session_{n}_date_time"])
        turns = tuple(
            Turn(dia_id=str(t["dia_id"]), speaker=str(t.get("speaker", "")), text=turn_text(t), time=start + i * TURN_STEP,
                 plain=plain_text(t))
            for i, t in enumerate(raw[f"session_{n}"])
        )
        sessions.append(LocomoSession(number=n, time=start, turns=turns))
    valid = {t.dia_id for s in sessions for t in s.turns}
    questions = []
    for q in raw.get("qa", []):
        ev, dropped = normalize_evidence(q.get("evidence", []), valid)
        questions.append(
            Question(question=str(q["question"]), category=int(q.get("category", 0)), evidence=ev,
                     answer=str(q.get("answer", q.get("adversarial_answer", ""))), dropped=dropped)
        )
    return Conversation(
        conv_id=p.stem, speaker_a=str(raw.get("speaker_a", "")), speaker_b=str(raw.get("speaker_b", "")),
        sessions=sessions, questions=questions,
    )


def load_dataset(data_dir: str | os.PathLike[str], limit: int | None = None) -> list[Conversation]:
    """Load every ``*.json`` conversation of a directory, sorted by id (the first ``limit``)."""
    files = sorted(Path(data_dir).glob("*.json"), key=lambda f: (len(f.stem), f.stem))
    if limit is not None:
        files = files[:limit]
    return [load_conversation(f) for f in files]


# -- hits -> turns --------------------------------------------------------------------------
def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


def hit_turns(hit: Any) -> list[str]:
    """The dialog turn ids a hit stands for: its own ``dia_id``, or its sources' ids in order."""
    meta = _get(hit, "metadata") or {}
    out: list[str] = []
    if meta.get("dia_id"):
        out.append(str(meta["dia_id"]))
    for src in meta.get("sources") or ():
        ident = src.get("dia_id") if isinstance(src, Mapping) else None
        if ident:
            out.append(str(ident))
    return out


def hits_to_turns(hits: Iterable[Any]) -> list[str]:
    """Expand hits to their turn ids in rank order, keeping each turn's first occurrence."""
    seen: set[str] = set()
    out: list[str] = []
    for h in hits:
        for t in hit_turns(h):
            if t not in seen:
                seen.add(t)
                out.append(t)
    return out


# -- metrics --------------------------------------------------------------------------------
def score_question(ranked: Sequence[str], evidence: Sequence[str], ks: Sequence[int]) -> dict[int, tuple[float, bool, bool]]:
    """(recall, any, all) of one question at each k, for a ranked list of unique turn ids."""
    ev = set(evidence)
    if not ev:
        raise ValueError("a question without evidence cannot be scored")
    out = {}
    for k in ks:
        found = len(ev.intersection(ranked[:k]))
        out[k] = (found / len(ev), found > 0, found == len(ev))
    return out


@dataclass
class Scores:
    """Accumulates per-question scores and reports means per category and overall."""

    ks: tuple[int, ...]
    rows: list[tuple[int, dict[int, tuple[float, bool, bool]]]] = field(default_factory=list)

    def add(self, category: int, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        """Score one question and remember it under its category."""
        self.rows.append((category, score_question(ranked, evidence, self.ks)))

    def summary(self, category: int | None = None) -> dict[str, float | int]:
        """Means of recall@k, any@k, all@k (``questions`` = how many) overall or for one category."""
        rows = [r for c, r in self.rows if category is None or c == category]
        out: dict[str, float | int] = {"questions": len(rows)}
        for k in self.ks:
            for j, name in enumerate(("recall", "any", "all")):
                out[f"{name}_at_{k}"] = round(sum(float(r[k][j]) for r in rows) / len(rows), 4) if rows else 0.0
        return out

    def by_category(self) -> dict[str, dict[str, float | int]]:
        """``summary`` for each category present, keyed by category number as a string."""
        return {str(c): self.summary(c) for c in sorted({c for c, _ in self.rows})}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of values, linear interpolation; 0.0 for none."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# -- search options --------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchParams:
    """``Memory.search`` options a grid point passes (defaults: the product's own defaults)."""

    vector_weight: float = 0.5  # share of the vector side in the hybrid score
    neighbors: float = 0.2  # share of the previous / next message's score a message gains
    session_weight: float = 0.3  # share of the best score of the same session
    speaker_weight: float = 0.15  # added to turns spoken by a participant the question names
    time_weight: float = 1.0  # added to turns from a period the question names
    fusion: str = "zscore"  # how the vector and BM25 sides are fused

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``Memory.search``."""
        return asdict(self)


# The seed's plain hybrid (0.7 vector + 0.3 BM25, min-max, no context): the baseline row.
SEED = SearchParams(vector_weight=0.7, neighbors=0.0, session_weight=0.0, speaker_weight=0.0, time_weight=0.0,
                    fusion="minmax")
# ``--holdout``: a small grid around the defaults (every free weight is a way to fit five
# conversations); for each conversation the point best on the other four is scored on it.
GRID = tuple(
    SearchParams(vector_weight=w, session_weight=s, time_weight=t)
    for w in (0.5, 0.6) for s in (0.3, 0.4) for t in (0.5, 1.0)
)


# -- the memory system under test -------------------------------------------------------------
USER = "locomo"  # one user per conversation: both speakers' turns are its messages


def make_embedder(name: str) -> Any:
    """The embedder by name: ``local`` (all-MiniLM-L6-v2, the default) or ``hash`` (tests only)."""
    from eidetica.providers import HashEmbedder, default_embedder

    if name == "local":
        return default_embedder()
    if name == "hash":
        return HashEmbedder(dim=256)
    raise ValueError(f"unknown embedder {name!r}")


DEFAULT_EMBED_CACHE = Path.home() / ".cache" / "eidetica-eval"


def cached_embedder(inner: Any, cache_dir: Path, shards: bool = False) -> Any:
    """``inner`` behind a disk cache of its vectors by text hash (``<cache_dir>/<model>.npz``).

    The LoCoMo turns are the same from run to run: a grid or a ranking change re-runs the
    evaluation without re-embedding 2,760 turns on a shared machine. The cache is used while
    ``use_disk`` is True (ingest, grid scoring); timed queries turn it off so their latency
    includes the query's embedding. ``save()`` writes new vectors (atomic rename).

    ``shards``: several processes share the directory (``eval_longmemeval --jobs``): every
    ``<model>*.npz`` is read, and ``save()`` writes only this process's new vectors to a file
    of its own (``<model>.<pid>-<start>-<n>.npz``), so no process overwrites another's.
    """
    import hashlib

    import numpy as np

    from eidetica.providers._base import CachedEmbedder

    class DiskCached(CachedEmbedder):
        def __init__(self) -> None:
            super().__init__(cache_size=0)
            self.inner = inner
            self.model_id, self.dim = inner.model_id, inner.dim
            self.max_tokens = getattr(inner, "max_tokens", 256)
            # int8 and float32 products give vectors 1e-3 cosine apart: each keeps its own file
            kind = "-int8" if getattr(inner, "int8", False) else ""
            self.path = Path(cache_dir) / (re.sub(r"[^\w.-]+", "_", inner.model_id) + kind + ".npz")
            self.use_disk = True
            self.vectors: dict[bytes, np.ndarray] = {}
            self.dirty = False
            self.fresh: set[bytes] = set()  # computed by this process (what a shard saves)
            self.saves = 0
            self.started = time.time_ns()  # a later process with the same pid writes other files
            self.loaded: set[str] = set()
            self.load()

        def load(self) -> None:
            """Read the cache files not read yet (with shards, other processes' new ones too)."""
            found = sorted(self.path.parent.glob(self.path.stem + "*.npz")) if shards else [self.path]
            for f in found:
                if f.exists() and not f.name.endswith(".tmp.npz") and f.name not in self.loaded:
                    self.loaded.add(f.name)
                    with np.load(f) as z:
                        self.vectors.update(zip((bytes(k) for k in z["keys"]), z["vectors"]))

        def _embed_uncached(self, texts: list[str]) -> np.ndarray:
            if not self.use_disk:
                return self.inner.embed(texts)
            keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in texts]
            todo = [i for i, k in enumerate(keys) if k not in self.vectors]
            if todo and shards:  # another process may have embedded them meanwhile
                self.load()
                todo = [i for i, k in enumerate(keys) if k not in self.vectors]
            if todo:
                fresh = self.inner.embed([texts[i] for i in todo])
                for i, v in zip(todo, fresh):
                    self.vectors[keys[i]] = v
                    self.fresh.add(keys[i])
                self.dirty = True
            return np.stack([self.vectors[k] for k in keys]).astype(np.float32)

        def cache_clear(self) -> None:
            super().cache_clear()
            getattr(self.inner, "cache_clear", lambda: None)()

        def save(self) -> None:
            if not self.dirty:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target = self.path
            keys = list(self.vectors)
            if shards:
                self.saves += 1
                target = self.path.with_name(f"{self.path.stem}.{os.getpid()}-{self.started}-{self.saves}.npz")
                self.loaded.add(target.name)
                keys = list(self.fresh)
            tmp = target.with_suffix(".tmp.npz")
            np.savez(tmp, keys=np.array(keys, dtype="S16"), vectors=np.stack([self.vectors[k] for k in keys]))
            os.replace(tmp, target)
            self.fresh.clear()
            self.dirty = False

    return DiskCached()


def make_llm(base_url: str | None, model: str, api_key_env: str) -> Any:
    """``OpenAILLM`` when a base URL is given, else ``OfflineLLM`` (heuristic extractor, extractive summaries)."""
    from eidetica.providers import OfflineLLM, OpenAILLM

    if base_url:
        return OpenAILLM(model, base_url=base_url, api_key_env=api_key_env)
    return OfflineLLM()


def open_memory(store: Path, tenant: str, embedder: Any, llm: Any, config: Any = None) -> Any:
    """Open the store for one tenant through the public API."""
    import eidetica

    opener = getattr(eidetica, "open", None)
    if opener is None:  # the facade's own module, before the package re-exports it
        from eidetica.memory import open as opener
    return opener(store, tenant=tenant, embedder=embedder, llm=llm, config=config)


SPEAKER_STYLES = ("name", "label")


def turn_message(t: Turn, style: str = "name") -> dict[str, Any]:
    """A turn as a message: ``name`` = the README's way (what was said, the speaker in
    ``metadata["name"]``); ``label`` = ``"Speaker: text"`` and no name in the metadata."""
    if style == "name":
        return {"role": "user", "content": t.plain or t.text, "time": t.time,
                "metadata": {"dia_id": t.dia_id, "name": t.speaker}}
    if style == "label":
        return {"role": "user", "content": t.text, "time": t.time, "metadata": {"dia_id": t.dia_id}}
    raise ValueError(f"unknown speaker style {style!r}")


def ingest(m: Any, conv: Conversation, *, summarize: bool, advance: Callable[[int], None] = lambda n: None,
           style: str = "name") -> None:
    """Append every session in order (one ``extend`` each); optionally roll each into its summary."""
    for s in conv.sessions:
        h = m.session(f"session-{s.number}", user=USER)
        h.extend([turn_message(t, style) for t in s.turns])
        if summarize:
            h.summarize(force=True)
        advance(len(s.turns))
    if getattr(m, "extraction_failures", 0):
        m.sweep(now=conv.sessions[-1].turns[-1].time)  # retries pending extractions; facts do not decay


def retrieve(m: Any, conv: Conversation, question: str, mode: str, k: int, params: SearchParams | None = None) -> list[str]:
    """Ranked turn ids for a question in one mode (``Memory.search`` only; no fusion here).

    ``hybrid`` is ``Memory.search`` with no option but ``top_k`` and ``min_score=0`` (every
    hit, for recall@k); a ``params`` grid point passes its options on top. Summary hits stand
    for a whole session (10-30 turns), not a turn: they are skipped when hits become turns; a
    fact hit stands for its source turn.
    """
    ask = k + 10  # a long turn may come back as several chunks
    if mode in ("bm25", "vector"):
        hits = m.search(question, user=USER, top_k=ask, min_score=0.0, kinds=["message"],
                        mode={"bm25": "text", "vector": "vector"}[mode])
        return hits_to_turns(hits)[:k]
    opts = params.options() if params is not None else {}
    if mode == "seed":
        hits = m.search(question, user=USER, top_k=ask, min_score=0.0, kinds=["message"], **(opts or SEED.options()))
    elif mode == "hybrid":
        hits = m.search(question, user=USER, top_k=ask, min_score=0.0, **opts)
    elif mode == "derived":
        hits = m.search(question, user=USER, top_k=ask + 20, min_score=0.0, kinds=["message", "summary", "fact"], **opts)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return hits_to_turns([h for h in hits if _get(h, "kind") != "summary"])[:k]


# -- what the agent receives (context, recall, search with no options) -------------------------
AGENT_TENANT = "locomo-agent-{}"
FOREIGN_QUESTIONS = 40  # another conversation's questions asked of each store (abstention)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def turn_sentences(text: str) -> list[str]:
    """A turn's sentences of at least four words (the whole text when it has none): the units a
    block must quote for the turn to count as delivered (a lone "Wow!" matches anything)."""
    parts = [" ".join(p.split()) for p in _SENTENCE.split(text)]
    long = [p for p in parts if len(p.split()) >= 4]
    return long or [" ".join(text.split())]


def delivered(evidence: Sequence[str], texts: str, turn_ids: set[str], sentences: Mapping[str, list[str]]) -> float:
    """Share of evidence turns delivered: named by a hit (its ``dia_id`` or a fact's source) or
    quoted (one of its sentences appears in the returned text)."""
    flat = " ".join(texts.split())
    got = sum(1 for t in evidence if t in turn_ids or any(s in flat for s in sentences.get(t, ())))
    return got / len(evidence)


def ingest_appends(m: Any, conv: Conversation, style: str = "name", advance: Callable[[int], None] = lambda n: None) -> None:
    """The README's way: one ``append`` per turn, defaults only (summaries roll when the session's budget says)."""
    for s in conv.sessions:
        h = m.session(f"session-{s.number}", user=USER)
        for t in s.turns:
            msg = turn_message(t, style)
            h.append(msg["role"], msg["content"], msg["metadata"], time=msg["time"])
        advance(len(s.turns))
    if getattr(m, "extraction_failures", 0):
        m.sweep(now=conv.sessions[-1].turns[-1].time)


def context_sections(block: str) -> dict[str, list[str]]:
    """The lines of a ``context()`` block under each ``###`` heading (non-empty lines only)."""
    out: dict[str, list[str]] = {}
    cur = ""
    for line in block.splitlines():
        if line.startswith("### "):
            cur = line[4:].strip()
            out.setdefault(cur, [])
        elif line.startswith("## ") or not line.strip():
            continue
        elif cur:
            out[cur].append(line)
    return out


def foreign_questions(conv: Conversation, others: Sequence[Conversation], n: int = FOREIGN_QUESTIONS,
                      swap: bool = False) -> list[str]:
    """``n`` questions (evenly spaced, with evidence) of the conversation after ``conv`` in ``others``;
    ``swap``: with that conversation's speakers renamed to ``conv``'s (a never-discussed topic
    about people this memory knows: the names no longer give it away)."""
    ids = [c.conv_id for c in others]
    if len(others) < 2 or conv.conv_id not in ids:
        return []
    nxt = others[(ids.index(conv.conv_id) + 1) % len(others)]
    qs = [q.question for q in nxt.questions if q.evidence]
    step = max(1, len(qs) // n)
    qs = qs[::step][:n]
    if swap:
        for a, b in ((nxt.speaker_a, conv.speaker_a), (nxt.speaker_b, conv.speaker_b)):
            if a and b:
                qs = [re.sub(rf"\b{re.escape(a)}\b", b, q) for q in qs]
    return qs


def agent_conversation(m: Any, conv: Conversation, foreign: Sequence[str], emb: Any,
                       swapped: Sequence[str] = (), budgets: Sequence[int] = ()) -> dict[str, list[float]]:
    """Per question: what ``context()``, ``recall()`` and ``search()`` (no options) deliver of its evidence,
    ``context()``'s latency (query embedding included); per foreign question: whether search answers
    and whether the block shows anything outside ``### Profile`` (``swapped``: the same with the
    speakers renamed, ``foreign_swapped_*``)."""
    sentences = {t.dia_id: turn_sentences(t.plain or t.text) for s in conv.sessions for t in s.turns}
    fact_turns = {f.text: set(hit_turns(f)) for f in m.list_memories(user=USER, limit=10_000)}
    clear = getattr(emb, "cache_clear", lambda: None)
    out: dict[str, list[float]] = {"context": [], "recall": [], "search": [], "context_ms": [], "context_tokens": [],
                                   "foreign_search": [], "foreign_context": [], "foreign_swapped_search": [],
                                   "foreign_swapped_context": [], **{f"context_at_{b}": [] for b in budgets}}
    from eidetica.providers import count_tokens

    for q in conv.questions:
        if not q.evidence:
            continue
        clear()
        t0 = time.perf_counter()
        block = m.context(q.question, user=USER)
        out["context_ms"].append((time.perf_counter() - t0) * 1000)
        out["context_tokens"].append(count_tokens(block))
        named = {t for text, ts in fact_turns.items() if text in block for t in ts}
        out["context"].append(delivered(q.evidence, block, named, sentences))
        for b in budgets:  # the curve: the same question at each budget
            other = m.context(q.question, user=USER, max_tokens=b)
            out[f"context_at_{b}"].append(delivered(q.evidence, other, {t for text, ts in fact_turns.items()
                                                                          if text in other for t in ts}, sentences))
        for name, hits in (("recall", m.recall(q.question, user=USER)), ("search", m.search(q.question, user=USER))):
            turns = set(hits_to_turns([h for h in hits if _get(h, "kind") != "summary"]))
            out[name].append(delivered(q.evidence, " ".join(_get(h, "text") for h in hits), turns, sentences))
    for key, questions in (("foreign", foreign), ("foreign_swapped", swapped)):
        for question in questions:
            out[f"{key}_search"].append(float(bool(m.search(question, user=USER))))
            secs = context_sections(m.context(question, user=USER))
            out[f"{key}_context"].append(float(any(lines for name, lines in secs.items() if name != "Profile")))
    return out


def agent_summary(rows: Mapping[str, Mapping[str, list[float]]]) -> dict[str, Any]:
    """Means over every question (and per conversation) of ``agent_conversation``'s rows."""
    def mean(v: Sequence[float]) -> float:
        return round(sum(v) / len(v), 4) if v else 0.0

    curve = sorted({k for r in rows.values() for k in r if k.startswith("context_at_")}, key=lambda k: int(k[11:]))
    keys = ("context", "recall", "search", "foreign_search", "foreign_context", "foreign_swapped_search",
            "foreign_swapped_context", *curve)
    allv = {k: [x for r in rows.values() for x in r[k]] for k in (*keys, "context_ms", "context_tokens")}
    return {
        **{k: mean(allv[k]) for k in keys},
        "context_ms_p50": round(percentile(allv["context_ms"], 50), 2),
        "context_ms_p95": round(percentile(allv["context_ms"], 95), 2),
        "context_tokens_p50": round(percentile(allv["context_tokens"], 50), 1),
        "questions": len(allv["context"]),
        "foreign_questions": len(allv["foreign_search"]),
        "by_conversation": {c: {k: mean(r[k]) for k in keys} for c, r in rows.items()},
        "curve": {k[11:]: mean(allv[k]) for k in curve},
    }


@dataclass
class ModeResult:
    """Scores and per-question latencies of one mode."""

    scores: Scores
    latencies_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # process CPU time per query: holds under load
    curve: list[float] = field(default_factory=list)  # summed recall at k = 1..max k


def evaluate_conversation(
    m: Any, conv: Conversation, modes: Sequence[str], ks: Sequence[int], results: dict[str, ModeResult],
    params: Mapping[str, SearchParams] | None = None,
) -> int:
    """Score every question with evidence in every mode into ``results``; returns questions skipped."""
    kmax = max(ks)
    skipped = 0
    # Every mode pays for its own query embedding: without this, the first mode that embeds a
    # question fills the embedder's cache and the later ones look faster than they are.
    clear_cache = getattr(getattr(m, "embedder", None), "cache_clear", lambda: None)
    for q in conv.questions:
        if not q.evidence:
            skipped += 1
            continue
        for mode in modes:
            r = results[mode]
            clear_cache()
            t0, c0 = time.perf_counter(), time.process_time()
            ranked = retrieve(m, conv, q.question, mode, kmax, (params or {}).get(mode))
            r.latencies_ms.append((time.perf_counter() - t0) * 1000)
            r.cpu_ms.append((time.process_time() - c0) * 1000)
            r.scores.add(q.category, ranked, q.evidence)
            ev = set(q.evidence)
            if not r.curve:
                r.curve = [0.0] * kmax
            found = 0
            for i in range(kmax):
                if i < len(ranked) and ranked[i] in ev:
                    found += 1
                r.curve[i] += found / len(ev)
    return skipped


def run_eval(
    conversations: Sequence[Conversation],
    *,
    modes: Sequence[str] = ALL_MODES,
    ks: Sequence[int] = DEFAULT_KS,
    store: Path | None = None,
    embedder: str = "local",
    llm: Any = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    params: Mapping[str, SearchParams] | None = None,
    holdout: bool = False,
    config: Any = None,
    style: str = "name",
    embed_cache: Path | None = None,
    agent: bool = False,
    others: Sequence[Conversation] | None = None,
    budgets: Sequence[int] = (),
) -> dict[str, Any]:
    """Ingest each conversation as its own tenant, evaluate every mode, return the results dict.

    ``agent``: also what the agent receives with no options (``agent_conversation``), from a
    second tenant per conversation ingested one ``append`` at a time; ``others``: the
    conversations whose questions are asked of each store for abstention (default: these).

    ``style``: how turns are written (``turn_message``); ``embed_cache``: a directory for the
    disk cache of turn vectors (``cached_embedder``), None for none.
    """
    ks = tuple(sorted(set(ks)))
    emb = make_embedder(embedder)
    if embed_cache is not None:
        emb = cached_embedder(emb, embed_cache)
    llm = llm or make_llm(None, "", "")
    owned = store is None
    root = Path(tempfile.mkdtemp(prefix="eidetica-locomo-")) if owned else Path(store)  # type: ignore[arg-type]
    results = {mode: ModeResult(Scores(ks)) for mode in modes}
    skipped = 0
    grid_scores: dict[str, list[list[float]]] = {}
    per_conv: dict[str, dict[str, float]] = {}  # mode -> conversation -> recall@10
    agent_rows: dict[str, dict[str, list[float]]] = {}
    ingest_s = 0.0
    total_turns = sum(c.n_turns for c in conversations)
    bar = _progress(progress, total_turns)
    try:
        for conv in conversations:
            m = open_memory(root, f"locomo-{conv.conv_id}", emb, llm, config) if modes else None
            try:
                if m is None:
                    raise _NoModes
                t0 = time.perf_counter()
                _use_disk(emb, True)
                # every session rolled into its summary whatever modes run: the defaults search
                # summaries too (a summary lifts its session), so every row needs the same store
                ingest(m, conv, summarize=True, advance=bar.advance, style=style)
                _use_disk(emb, False)  # timed queries pay for their own embedding
                ingest_s += time.perf_counter() - t0
                before = {mode: len(r.scores.rows) for mode, r in results.items()}
                skipped += evaluate_conversation(m, conv, modes, ks, results, params)
                kc = 10 if 10 in ks else ks[0]
                for mode, r in results.items():
                    rows = r.scores.rows[before[mode]:]
                    per_conv.setdefault(mode, {})[conv.conv_id] = (
                        round(sum(x[kc][0] for _, x in rows) / len(rows), 4) if rows else 0.0)
                if holdout:
                    _use_disk(emb, True)
                    grid_scores[conv.conv_id] = grid_recall(m, conv, HOLDOUT_MODE, GRID, 10, max(ks))
                stats = m.stats()
                facts = len(m.list_memories(user=USER, limit=10_000))
                log(f"conversation {conv.conv_id}: {conv.n_turns} turns, {len(conv.questions)} questions, "
                    f"{facts} facts, {stats.get('summaries_committed', 0)} summaries, {stats['index']['rows']} index rows")
            except _NoModes:
                pass
            finally:
                if m is not None:
                    m.close()
            if agent:
                m = open_memory(root, AGENT_TENANT.format(conv.conv_id), emb, llm, config)
                try:
                    _use_disk(emb, True)
                    ingest_appends(m, conv, style)
                    _use_disk(emb, False)
                    agent_rows[conv.conv_id] = agent_conversation(
                        m, conv, foreign_questions(conv, others or conversations), emb,
                        foreign_questions(conv, others or conversations, swap=True), budgets)
                    log(f"conversation {conv.conv_id} (agent): " + json.dumps(agent_summary({conv.conv_id: agent_rows[conv.conv_id]})["by_conversation"][conv.conv_id]))
                finally:
                    m.close()
    finally:
        bar.close()
        getattr(emb, "save", lambda: None)()
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    n_questions = len(next(iter(results.values())).scores.rows) if results else 0
    by_mode: dict[str, Any] = {}
    for mode, r in results.items():
        entry: dict[str, Any] = dict(r.scores.summary())
        entry["by_category"] = r.scores.by_category()
        entry["query_ms_p50"] = round(percentile(r.latencies_ms, 50), 2)
        entry["query_ms_p95"] = round(percentile(r.latencies_ms, 95), 2)
        entry["query_cpu_ms_p50"] = round(percentile(r.cpu_ms, 50), 2) if r.cpu_ms else None
        entry["recall_curve"] = [round(v / max(1, len(r.scores.rows)), 4) for v in r.curve]
        entry["by_conversation"] = per_conv.get(mode, {})
        by_mode[mode] = entry
    out: dict[str, Any] = {
        "by_mode": by_mode,
        "questions": n_questions,
        "skipped_questions": skipped,
        "dropped_evidence": sum(c.dropped_evidence for c in conversations),
        "conversations": [c.conv_id for c in conversations],
        "turns": total_turns,
        "ingest_s": round(ingest_s, 2),
        "ingest_turns_per_s": round(total_turns / ingest_s, 1) if ingest_s else 0.0,
        "embedder": emb.model_id,
        "llm": type(llm).__name__,
        "ks": list(ks),
    }
    if holdout:
        out["holdout"] = leave_one_out(grid_scores, GRID)
    if agent:
        out["agent"] = agent_summary(agent_rows)
    return out


class _NoModes(Exception):
    """No retrieval mode asked for: only the agent rows run."""


def _use_disk(emb: Any, on: bool) -> None:
    if hasattr(emb, "use_disk"):
        emb.use_disk = on


HOLDOUT_MODE = "hybrid"


def grid_recall(
    m: Any, conv: Conversation, mode: str, grid: Sequence[SearchParams], k: int = 10, kmax: int = 25
) -> list[list[float]]:
    """recall@k of every question with evidence (inner lists) under every parameter set of the grid (outer).

    Retrieves ``kmax`` like the tables do and cuts to ``k``: the search's candidate pool grows
    with ``top_k``, so asking for fewer would score a slightly different search.
    """
    out = []
    for p in grid:
        out.append([score_question(retrieve(m, conv, q.question, mode, kmax, p)[:k], q.evidence, (k,))[k][0]
                    for q in conv.questions if q.evidence])
    return out


def leave_one_out(scores: Mapping[str, list[list[float]]], grid: Sequence[SearchParams]) -> dict[str, Any]:
    """Per conversation: choose the grid point with the best recall@10 on the others, score it on this one.

    ``recall_at_10`` is the mean over every held-out question (each conversation scored with
    parameters it did not help choose); ``tuned_on_all`` is the best grid point on all of them.
    """
    def mean(convs: Iterable[str], i: int) -> float:
        vals = [v for c in convs for v in scores[c][i]]
        return sum(vals) / len(vals) if vals else 0.0

    folds = []
    held: list[float] = []
    for c in scores:
        rest = [o for o in scores if o != c]
        best = max(range(len(grid)), key=lambda i: (round(mean(rest, i), 9), -i))
        held.extend(scores[c][best])
        folds.append({"held_out": c, "chosen": vars(grid[best]), "recall_at_10": round(mean([c], best), 4),
                      "questions": len(scores[c][best])})
    best_all = max(range(len(grid)), key=lambda i: (round(mean(scores, i), 9), -i))
    return {
        "mode": HOLDOUT_MODE,
        "grid": [vars(g) for g in grid],
        "folds": folds,
        "recall_at_10": round(sum(held) / len(held), 4) if held else 0.0,
        "tuned_on_all": {"params": vars(grid[best_all]), "recall_at_10": round(mean(scores, best_all), 4)},
    }


class _Bar:
    def __init__(self, progress: Any = None, task: Any = None) -> None:
        self.progress, self.task = progress, task

    def advance(self, n: int) -> None:
        """Move the bar on by ``n`` turns."""
        if self.progress is not None:
            self.progress.advance(self.task, n)

    def close(self) -> None:
        """Stop the bar."""
        if self.progress is not None:
            self.progress.stop()


def _progress(enabled: bool, total: int) -> _Bar:
    if not enabled:
        return _Bar()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(), TextColumn("turns"),
                 TimeElapsedColumn(), console=Console(stderr=True))
    p.start()
    return _Bar(p, p.add_task("turns", total=total))


# -- report ---------------------------------------------------------------------------------
def best_mode(results: Mapping[str, Any]) -> str:
    """The mode with the highest recall@10 (first k when 10 is not measured)."""
    by_mode = results["by_mode"]
    key = "recall_at_10" if "recall_at_10" in next(iter(by_mode.values())) else f"recall_at_{results['ks'][0]}"
    return max(by_mode, key=lambda m: (by_mode[m][key], -list(by_mode).index(m)))


def summary_line(results: Mapping[str, Any]) -> dict[str, Any]:
    """The last-line JSON object: headline metrics of the defaults row (``hybrid``; the best mode
    when it was not run) plus every mode's numbers."""
    best = best_mode(results) if results["by_mode"] else None
    head = HEADLINE if HEADLINE in results["by_mode"] else best
    b = results["by_mode"][head] if head else {}
    out: dict[str, Any] = {}
    for key in ("recall_at_10", "recall_at_5", "recall_at_25", "any_at_10", "all_at_10", "query_ms_p50",
                "query_cpu_ms_p50"):
        if key in b:
            out[key] = b[key]
    out.update({
        "mode": head,
        "best_mode": best,
        "by_mode": results["by_mode"],
        "questions": results["questions"],
        "skipped_questions": results["skipped_questions"],
        "dropped_evidence": results["dropped_evidence"],
        "ingest_s": results["ingest_s"],
        "ingest_turns_per_s": results["ingest_turns_per_s"],
        "turns": results["turns"],
        "conversations": len(results["conversations"]),
        "embedder": results["embedder"],
        "llm": results["llm"],
        "offline": results["llm"] != "OpenAILLM",
    })
    if "holdout" in results:
        out["holdout"] = results["holdout"]
    if "agent" in results:
        out["agent"] = results["agent"]
    return out


def format_tables(results: Mapping[str, Any]) -> str:
    """Plain-text tables: overall per mode, then recall@k per category per mode."""
    ks = results["ks"]
    by_mode = results["by_mode"]
    mid = 10 if 10 in ks else ks[0]
    head = ["mode"] + [f"recall@{k}" for k in ks] + [f"any@{mid}", f"all@{mid}", "p50 ms", "p95 ms"]
    rows = [head]
    for mode, r in by_mode.items():
        rows.append([mode] + [f"{r[f'recall_at_{k}']:.3f}" for k in ks]
                    + [f"{r[f'any_at_{mid}']:.3f}", f"{r[f'all_at_{mid}']:.3f}", f"{r['query_ms_p50']:.1f}", f"{r['query_ms_p95']:.1f}"])
    out = [_table(rows), ""]
    cats = sorted({c for r in by_mode.values() for c in r["by_category"]}, key=int)
    for k in ks:
        rows = [[f"recall@{k}"] + [f"{c} {CATEGORIES.get(int(c), '?')} (n={by_mode[next(iter(by_mode))]['by_category'][c]['questions']})" for c in cats]]
        for mode, r in by_mode.items():
            rows.append([mode] + [f"{r['by_category'][c][f'recall_at_{k}']:.3f}" for c in cats])
        out += [_table(rows), ""]
    out.append(
        f"questions {results['questions']} (skipped without evidence: {results['skipped_questions']}), "
        f"dropped evidence ids {results['dropped_evidence']}, turns {results['turns']}, "
        f"ingest {results['ingest_s']:.1f} s ({results['ingest_turns_per_s']:.1f} turns/s), "
        f"embedder {results['embedder']}, llm {results['llm']}"
    )
    return "\n".join(out)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; prints tables and the JSON line (see ``--help``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="directory of LoCoMo <id>.json files (default: %(default)s)")
    ap.add_argument("--modes", nargs="*", default=list(ALL_MODES), choices=ALL_MODES,
                    help="retrieval modes (default: %(default)s)")
    ap.add_argument("--k", nargs="+", type=int, default=list(DEFAULT_KS), help="cut-offs (default: 5 10 25)")
    ap.add_argument("--limit-conversations", type=int, default=None, help="only the first N conversations")
    ap.add_argument("--json", action="store_true", help="print only the JSON line (no tables, no progress bar)")
    ap.add_argument("--out", default=None, help="also write the full results JSON to this file")
    ap.add_argument("--store", default=None, help="store directory to keep (default: a temporary one, removed)")
    ap.add_argument("--embedder", default="local", choices=("local", "hash"), help="local MiniLM (default) or hash (tests)")
    ap.add_argument("--llm-base-url", default=None, help="OpenAI-compatible endpoint for extraction and summaries")
    ap.add_argument("--llm-model", default="gpt-4o-mini", help="model name for --llm-base-url")
    ap.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    ap.add_argument("--agent", action="store_true",
                    help="also what the agent receives with no options: context(), recall(), search() evidence "
                         "shares, abstention on another conversation's questions, context() latency "
                         "(a second tenant per conversation, one append per turn)")
    ap.add_argument("--budgets", default="",
                    help="with --agent: comma-separated context() budgets for the curve, e.g. 400,800,1000,2000,4000")
    ap.add_argument("--holdout", action="store_true",
                    help="also leave-one-conversation-out: choose the hybrid mode's parameters from GRID on the "
                         "other conversations, score the held-out one (adds about 6 s per grid point per conversation)")
    ap.add_argument("--embed-context", type=int, default=None,
                    help="MemoryConfig.embed_context: previous turns that lead a turn's embedding input "
                         "(default: the product's default)")
    ap.add_argument("--speaker-style", default="name", choices=SPEAKER_STYLES,
                    help="name: what was said, speaker in metadata['name'] (the README's way, default); "
                         "label: 'Speaker: text' and no name in the metadata")
    ap.add_argument("--embed-cache", default=str(DEFAULT_EMBED_CACHE),
                    help="directory of the turn-vector disk cache (default: %(default)s); 'none' turns it off")
    args = ap.parse_args(argv)
    if any(k < 1 for k in args.k):
        ap.error("--k values must be >= 1")
    data = Path(args.data)
    if not data.is_dir() or not any(data.glob("*.json")):
        print(f"no LoCoMo data at {data}", file=sys.stderr)
        return 2
    convs = load_dataset(data, args.limit_conversations)
    llm = make_llm(args.llm_base_url, args.llm_model, args.llm_api_key_env)
    modes = list(dict.fromkeys(args.modes))
    config = None
    if args.embed_context is not None:
        from eidetica import MemoryConfig

        config = MemoryConfig(embed_context=args.embed_context)
    log = (lambda s: print(s, file=sys.stderr)) if args.json else (lambda s: print(s, flush=True))
    results = run_eval(convs, modes=modes, ks=args.k, store=Path(args.store) if args.store else None,
                       embedder=args.embedder, llm=llm, progress=not args.json, log=log, holdout=args.holdout,
                       config=config, style=args.speaker_style,
                       embed_cache=None if args.embed_cache == "none" else Path(args.embed_cache),
                       agent=args.agent, others=load_dataset(data) if args.agent else None,
                       budgets=[int(b) for b in args.budgets.split(",") if b.strip()])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if not args.json and results["by_mode"]:
        print(format_tables(results), flush=True)
        print("recall@10 per conversation: " + "; ".join(
            f"{mode} " + " ".join(f"{c}: {v:.3f}" for c, v in r["by_conversation"].items())
            for mode, r in results["by_mode"].items()), flush=True)
        if "agent" in results:
            a = results["agent"]
            print(f"agent (no options): context {a['context']:.3f}, recall {a['recall']:.3f}, search {a['search']:.3f} "
                  f"of evidence turns; other conversation's questions: search answers {a['foreign_search']:.3f}, "
                  f"context shows more than the profile {a['foreign_context']:.3f} (speakers renamed: "
                  f"{a['foreign_swapped_search']:.3f} / {a['foreign_swapped_context']:.3f}); context p50 "
                  f"{a['context_ms_p50']:.1f} ms, {a['context_tokens_p50']:.0f} tokens", flush=True)
        if "holdout" in results:
            h = results["holdout"]
            print(f"leave-one-conversation-out ({h['mode']}): recall@10 {h['recall_at_10']:.3f} held out; "
                  f"{h['tuned_on_all']['recall_at_10']:.3f} tuned on all ({h['tuned_on_all']['params']}); folds: "
                  + ", ".join(f"{f['held_out']} {f['recall_at_10']:.3f} {f['chosen']}" for f in h["folds"]), flush=True)
    print(json.dumps(summary_line(results)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
