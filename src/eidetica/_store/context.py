"""The agent's memory block: what ``Memory.context`` puts in a system prompt, within a token budget.

One search (facts, notes, messages and summaries on one calibrated scale, ``search``'s
defaults and abstention) plus the user's standing facts; ``build`` returns it as data,
``render`` as the ``## Relevant Memory`` markdown block (format in the README):

- ``### Profile``: the user's current facts of standing kinds (health and diet, home, work,
  family, identity; preferences and general facts only when the question finds them) and those
  stored with ``remember`` (whatever their category),
  the most relevant to the question first, at most ``PROFILE_SHARE`` of the budget, shown for
  any question;
- ``### Facts`` / ``### Notes``: current facts and notes relevant to the question;
- ``### From past conversations``: the best-ranked messages with date, speaker and session,
  adjacent turns of one session merged into one line, a long turn by its passage that holds the
  question's words; a summary where it ranks above every message of its session.

A question about something never discussed gets the profile alone. Tokens are counted with
``providers.count_tokens``, headings included; a line that would pass ``max_tokens`` is left out.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from ..projections._ranking import FACT_MIN_SCORE, MIN_SCORE, default_options
from ..projections._tantivy import analyze, query_terms
from ..providers import count_tokens
from .searching import search_hits
from .store import Store

__all__ = ["CONTEXT_TOKENS", "PROFILE_CATEGORIES", "PROFILE_SHARE", "build", "render"]

CONTEXT_TOKENS = 800  # the default budget (BENCHMARKS.md: evidence delivered per budget)
PROFILE_SHARE = 0.25  # of the budget, at most, for the profile
PROFILE_CATEGORIES = frozenset({"health", "diet", "location", "work", "relationship", "identity", "preference", "preferences",
                                "general"})
# standing kinds shown for any question; a preference or a general fact only when the question finds it
# (a long chat history yields dozens of "I love ..." lines that would fill the profile's share with noise)
PROFILE_ALWAYS = frozenset({"health", "diet", "location", "work", "relationship", "identity"})
CANDIDATES = 40  # hits asked of the one search: more than a budget of <= 1,000 tokens holds
HEADING = "## Relevant Memory"
TITLES = {"profile": "### Profile", "facts": "### Facts", "notes": "### Notes",
          "conversations": "### From past conversations"}
EMPTY = "_No relevant memories._"
PASSAGE_CHARS = 150  # a turn longer than this shows its passage that holds the query's terms (0: whole)
PASSAGE_HARD = 2.0  # a passage's one best sentence is kept whole up to this many times the limit
SESSION_DECAY = 1.0  # weight of a session's n-th snippet: decay ** n (1: rank order)


def _line(kind: str, item: dict[str, Any], ids: bool = False) -> str:
    if kind == "conversations":
        return f"- [{item['date']}, {item['session_id']}] {item['text']}"
    when = f", {item['date']}" if item.get("date") else ""  # dated when the question is (``now``)
    if kind == "notes":
        return f"- {item['text']}" + (f" ({item['date']}" if when else "") + (
            (f"; id: {item['id']})" if when else f" (id: {item['id']})") if ids else (")" if when else ""))
    return f"- {item['text']} ({item['category']}{when}" + (f"; id: {item['id']})" if ids else ")")


def _speaker(meta: dict[str, Any]) -> str:
    name = meta.get("name")
    return name.strip() if isinstance(name, str) and name.strip() else str(meta.get("role") or "user")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def _passage(text: str, terms: frozenset[str], limit: int) -> str:
    """The run of whole sentences of ``text`` within ``limit`` characters that holds the most query
    terms (the first such run; ``text`` itself when it fits): a long turn shows where it answers,
    not its head. Its first sentence is whole even past ``limit``, up to ``PASSAGE_HARD`` times it;
    "..." marks a cut."""
    if limit <= 0 or len(text) <= limit or not terms:
        return text
    parts = [p for p in _SENTENCE_END.split(text) if p.strip()]
    hits = [len(terms.intersection(analyze(p))) for p in parts]
    best, best_span = -1, (0, 1)
    for i in range(len(parts)):
        size, got, j = 0, 0, i
        while j < len(parts) and (j == i or size + len(parts[j]) + 1 <= limit):
            size += len(parts[j]) + 1
            got += hits[j]
            j += 1
        if got > best:
            best, best_span = got, (i, j)
    i, j = best_span
    out = " ".join(p.strip() for p in parts[i:j])
    hard = int(PASSAGE_HARD * limit)
    if len(out) > hard:  # a sentence far past the limit (a list, a table): its words up to it
        out = out[:hard].rsplit(" ", 1)[0]
    return ("... " if i > 0 else "") + out + (" ..." if j < len(parts) or len(out) < len(parts[i]) else "")


def _diversify(snippets: list[dict[str, Any]], decay: float) -> list[dict[str, Any]]:
    """Snippets best first with the n-th of one session weighed ``decay ** n``: a question that
    gathers several sessions sees each one's best before a second passage of the first."""
    if decay >= 1.0:
        return snippets
    seen: dict[str, int] = {}
    keyed = []
    for i, s in enumerate(snippets):
        n = seen.get(s["session_id"], 0)
        seen[s["session_id"]] = n + 1
        keyed.append((-s["score"] * decay ** n, i, s))
    return [s for _, _, s in sorted(keyed, key=lambda x: (x[0], x[1]))]


def _conversations(hits: list[Any], terms: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Message and summary hits as snippets, best first; adjacent turns of a session in one snippet
    (``terms``: the query's, for the passage of a long turn)."""
    best_msg: dict[str, float] = {}
    for h in hits:
        if h.kind == "message":
            best_msg[h.session_id] = max(best_msg.get(h.session_id, 0.0), h.score)
    out: list[dict[str, Any]] = []
    at: dict[tuple[str, int], dict[str, Any]] = {}  # (session, sequence) -> its snippet
    for h in hits:
        meta = h.metadata or {}
        if h.kind == "summary":
            if h.score > best_msg.get(h.session_id, 0.0):  # it answers better than the session's messages
                out.append({"kind": "summary", "ids": [h.id], "session_id": h.session_id, "score": h.score,
                            "date": h.time.date().isoformat(), "text": f"(summary) {h.text}", "turns": []})
            continue
        seq = meta.get("sequence")
        turn = {"id": h.id, "speaker": _speaker(meta), "text": h.text, "sequence": seq,
                "time": h.time.isoformat(), "metadata": meta}
        snip = None
        if isinstance(seq, int):
            snip = at.get((h.session_id, seq - 1)) or at.get((h.session_id, seq + 1))
            if (h.session_id, seq) in at:  # another chunk of a turn already shown
                continue
        if snip is None:
            snip = {"kind": "message", "ids": [], "session_id": h.session_id, "score": h.score,
                    "date": h.time.date().isoformat(), "turns": []}
            out.append(snip)
        snip["ids"].append(h.id)
        snip["turns"].append(turn)
        snip["turns"].sort(key=lambda t: t["sequence"] if isinstance(t["sequence"], int) else 0)
        if isinstance(seq, int):
            at[(h.session_id, seq)] = snip
    for s in out:
        if s["kind"] == "message":
            s["text"] = " / ".join(f"{t['speaker']}: {_passage(t['text'], terms, PASSAGE_CHARS)}" for t in s["turns"])
    return _diversify(out, SESSION_DECAY)


def build(m: Store, query: str, *, user: str, max_facts: int, max_tokens: int,
          now: dt.datetime | None = None) -> dict[str, Any]:
    """The block's content as data (``m``: the ``Memory`` asking): ``profile``, ``facts``, ``notes``, ``conversations`` (lists of
    dicts, best first, already cut to ``max_tokens``) and ``tokens`` (the rendered block's count)."""
    hits = search_hits(m, query, top_k=CANDIDATES, user=user, kinds=["fact", "note", "message", "summary"],
                       names=True, min_score=FACT_MIN_SCORE, now=now, **default_options())
    relevance = {h.id: h.score for h in hits if h.kind == "fact"}
    profile_facts = sorted(  # standing kinds, and what the caller stated (remember: no session among its sources)
        (f for f in m.state.facts(m.tenant, user)
         if (f.category in PROFILE_ALWAYS or (f.category in PROFILE_CATEGORIES and f.fact_id in relevance))
         or not any(s.get("session_id") for s in f.sources)),
        key=lambda f: (-relevance.get(f.fact_id, 0.0), -f.confidence, -f.updated.timestamp(), f.fact_id),
    )
    facts = [h for h in hits if h.kind == "fact"]
    notes = [h for h in hits if h.kind == "note"][: max(3, max_facts // 2)]
    said = [h for h in hits if h.kind in ("message", "summary") and h.score >= MIN_SCORE]
    sections: dict[str, list[dict[str, Any]]] = {
        "profile": [{"id": f.fact_id, "text": f.content, "category": f.category, "confidence": f.confidence}
                    for f in profile_facts],
        "facts": [{"id": h.id, "text": h.text, "category": h.category, "score": h.score} for h in facts],
        "notes": [{"id": h.id, "text": h.text, "score": h.score} for h in notes],
        "conversations": _conversations(said, frozenset(query_terms(query))),
    }
    used = count_tokens(HEADING) + 1 + (count_tokens(_asked(now)) + 1 if now is not None else 0)
    if now is not None:  # a question asked at a time: every line says when it was said
        when = {f.fact_id: f.created for f in profile_facts} | {h.id: h.time for h in facts + notes}
        for kind in ("profile", "facts", "notes"):
            for item in sections[kind]:
                item["date"] = when[item["id"]].date().isoformat()
    kept: dict[str, list[dict[str, Any]]] = {k: [] for k in sections}
    for kind, items in sections.items():
        cap = int(max_tokens * PROFILE_SHARE) if kind == "profile" else max_tokens
        spent = count_tokens(TITLES[kind]) + 1
        if kind == "facts":  # a fact the profile shows is not repeated; one the profile had no room for is
            shown = {i["id"] for i in kept["profile"]}
            items = [i for i in items if i["id"] not in shown][:max_facts]
        for item in items:
            t = count_tokens(_line(kind, item))
            if used + spent + t > max_tokens or (kind == "profile" and spent + t > cap):
                continue  # a shorter line further down may still fit
            kept[kind].append(item)
            spent += t
        if kept[kind]:
            used += spent
    kept_out: dict[str, Any] = dict(kept)
    if now is not None:  # the question's own day: the agent computes "how many days ago" from it
        kept_out["now"] = now.isoformat()
    kept_out["tokens"] = count_tokens(render(kept_out))
    return kept_out


def _asked(now: dt.datetime) -> str:
    """The line that dates the question (``now``), weekday included ("last Saturday" needs it)."""
    return f"Asked on {now.date().isoformat()} ({now.strftime('%A')})."


def render(data: dict[str, Any], ids: bool = False) -> str:
    """The ``## Relevant Memory`` markdown block of ``build``'s data (``ids``: each fact's and note's id too, for an
    agent that may act on one; a few tokens more a line)."""
    lines = [HEADING, ""] + ([_asked(dt.datetime.fromisoformat(data["now"])), ""] if data.get("now") else [])
    for kind, title in TITLES.items():
        items = data.get(kind) or []
        if items:
            lines += [title] + [_line(kind, i, ids) for i in items] + [""]
    if not any(data.get(kind) for kind in TITLES):
        lines.append(EMPTY)
    return "\n".join(lines).rstrip() + "\n"
