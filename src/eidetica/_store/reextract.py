"""Re-extraction by replay: run an extractor again over the stored user messages (``Memory.reextract``).

No message is ingested again: the session streams hold every user message, so a better
extractor (or a fixed rule set) runs over them and the facts are brought in line with what
it finds. A fact it finds with the same text as a live extracted fact is kept as it is (id
and history: no reinforcement); a fact it finds that no live fact states is remembered
through the user's curator (so the usual curation applies: a near-duplicate is reinforced,
a contradiction supersedes), with a request id derived from the extractor, the message and
the fact's place in it; a live extracted fact it does not find is retracted
(``FactDeleted(reason="reextract")``). Facts stored with ``remember`` (no source) are never
touched.

Resumable and idempotent: the plan is a pure function of the messages and the extractor,
asserts are exactly-once by their request ids (the curator remembers them in the log), and
the retractions are one append after every assert. Killed at any point and run again, it
ends with the same facts as one uninterrupted run; a second run changes nothing.
"""

from __future__ import annotations

from ..actors._text import check_id, check_text, sanitize_category
from ..errors import InvalidInput
from ..events.streams import parse_stream
from ..providers import LLM, _ledger, extractor_id
from .store import Store

__all__ = ["reextract"]


def _users(m: Store) -> list[str]:
    users = {s.user_id for s in m.state.sessions(m.tenant)}
    users |= {parse_stream(s)[2] for s in m.log.streams() if s.startswith("facts:") and parse_stream(s)[1] == m.tenant}
    return sorted(users)


def reextract(m: Store, user: str | None = None, llm: LLM | None = None) -> dict[str, int]:
    """Bring every (or one) user's extracted facts in line with ``llm``'s extraction; returns asserted, kept, retracted."""
    if user is not None:
        check_id("user", user)
    if llm is not None and not isinstance(llm, LLM):
        raise InvalidInput("llm", "must be an eidetica LLM (e.g. OpenAILLM, OfflineLLM)", type(llm).__name__)
    llm = llm or m.llm
    name = extractor_id(llm)
    m.gate.sync()
    totals = {"asserted": 0, "kept": 0, "retracted": 0}
    for u in [user] if user is not None else _users(m):
        cur = m.runtime.curator(m.tenant, u)
        live = {f.fact_id: f for f in m.state.facts(m.tenant, u) if f.sources}  # extracted, still active
        by_text = {f.content: f.fact_id for f in live.values()}
        kept: set[str] = set()
        for s in m.state.sessions(m.tenant, u):
            for msg in m.runtime.session(m.tenant, s.session_id, u).history():
                if msg.role != "user":
                    continue
                with _ledger.scope("reextract"):  # its cost goes into the ledger once its facts are written
                    found = llm.extract_facts(msg.content)
                    calls = _ledger.take()
                source = dict(msg.metadata or {}, session_id=s.session_id, sequence=msg.sequence)
                for k, f in enumerate(found):
                    content = check_text("content", f.content).strip()
                    if content in by_text:
                        kept.add(by_text[content])
                        continue
                    rid = f"reextract:{name}:{s.session_id}:{msg.sequence}:{k}"
                    fid = cur.remember(content, sanitize_category(f.category), sources=[source], time=msg.time,
                                       request_id=rid)
                    by_text[content] = fid
                    if fid in live:
                        kept.add(fid)  # the curator found it a restatement of a live fact: reinforced, kept
                    else:
                        totals["asserted"] += 1
                        kept.add(fid)
                cur.record_calls(calls)
        totals["kept"] += len(kept & set(live))
        gone = [i for i in live if i not in kept]
        if gone:
            totals["retracted"] += len(cur.retract(gone, "reextract"))
    m.gate.sync()
    return totals
