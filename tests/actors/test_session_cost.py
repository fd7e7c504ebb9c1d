"""A plain append does work for the new message only, not for the whole session (real log, real actor)."""

from __future__ import annotations

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.actors import session as session_module
from eidetica.providers import HashEmbedder, count_tokens


def _naive_needs_summary(actor: session_module.SessionActor) -> bool:
    """The rule, recounted from scratch: the reference the cached count must agree with."""
    pending = [m for m in actor.history() if m.sequence > actor.summary_upto]
    tokens = sum(count_tokens(m.content) for m in pending)
    cfg = actor.config
    if tokens > cfg.summary_trigger * cfg.token_budget and len(pending) - cfg.window >= cfg.min_turns_outside:
        return True
    # or what read() shows after the summary no longer fits the budget beside it
    text = actor.summary_text
    return text is not None and tokens > cfg.token_budget - count_tokens(session_module.SUMMARY_PREFIX + text) \
        and len(pending) > cfg.retain_recent


def test_an_append_counts_only_the_new_messages_tokens(tmp_path, monkeypatch) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), fsync="never") as m:
        s = m.session("long", user="ada")
        s.extend([{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} about the garden roses"}
                  for i in range(300)])
        calls: list[str] = []

        def counting(text: str) -> int:
            calls.append(text)
            return count_tokens(text)

        monkeypatch.setattr(session_module, "count_tokens", counting)
        s.append("user", "one more turn about the garden roses")
        assert len(calls) <= 2, f"{len(calls)} messages recounted for one append"


def test_the_cached_summary_trigger_agrees_with_a_recount(tmp_path) -> None:
    cfg = MemoryConfig(token_budget=120, window=4, auto_extract=False, strategy="simple")  # summaries only when asked
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), config=cfg, fsync="never") as m:
        s = m.session("c", user="ada")
        actor = m.runtime.session(m.tenant, "c", "ada")
        seen: set[bool] = set()
        for i in range(60):
            s.append("user" if i % 2 == 0 else "assistant", f"message {i} " + "word " * (i % 7))
            if i % 9 == 8:
                s.pop()  # a retraction drops a message: the cached sums must follow
            if i % 13 == 12:
                s.summarize(force=True)  # a summary moves the start of the pending tail
            assert actor.needs_summary() == _naive_needs_summary(actor)
            seen.add(actor.needs_summary())
        assert seen == {True, False}  # both sides of the rule were checked
