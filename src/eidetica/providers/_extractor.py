"""Which extractor wrote a fact: a stable name for an LLM's extraction behaviour, recorded with each extraction.

An LLM may declare its own ``extractor_version``; otherwise the offline extractor is named
by a hash of its rule set (the source of ``HeuristicExtractor``: any change to a rule is a
new version) and an OpenAI-compatible model by its model id and a hash of its extraction
prompt. ``explain`` shows it; re-extraction compares it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect

from ._llm import LLM

__all__ = ["extractor_id"]


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.cache
def _offline_rules() -> str:
    from ._offline import HeuristicExtractor

    return "rules-" + _short(inspect.getsource(HeuristicExtractor))


def extractor_id(llm: LLM) -> str:
    """``offline:rules-<hash>`` for the offline rule set, ``llm:<model>:prompt-<hash>`` for a model, or the LLM's own."""
    own = getattr(llm, "extractor_version", None)
    if isinstance(own, str) and own:
        return own
    from ._offline import OfflineLLM
    from ._openai import EXTRACTION_PROMPT

    if isinstance(llm, OfflineLLM):
        return f"offline:{_offline_rules()}"
    return f"llm:{getattr(llm, 'model_id', type(llm).__name__)}:prompt-{_short(EXTRACTION_PROMPT)}"
