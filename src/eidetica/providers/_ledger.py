"""What each LLM call cost, collected where the call is made and written by whoever uses its result.

A provider notes every HTTP call to a model (``note``: model, purpose, prompt version, the
response's ``usage`` tokens, latency, outcome) into the calling thread's open ``scope``; the
actor that uses the result (the curator's extraction or remember, the summarizer) takes the
scope's calls and appends them as ``LlmCalled`` events in the same append as the result, so
a call whose result was used is recorded exactly once, crash or not; the calls of a scope
whose result is never written (an error, a crash) are not recorded. ``TOTALS`` counts every
call of this process since it started, for ``/metrics``.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["CALLS", "TOKENS", "note", "prompt_version", "restore", "scope", "take"]

_local = threading.local()
_lock = threading.Lock()
TOKENS: Counter[tuple[str, str, str]] = Counter()  # (model, purpose, "input" | "output") -> tokens, this process
CALLS: Counter[tuple[str, str, str]] = Counter()  # (model, purpose, outcome) -> calls, this process


def prompt_version(prompt: str) -> str:
    """``prompt-<hash>``: which prompt text a call used (the text itself is never stored)."""
    return "prompt-" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:10]


@contextlib.contextmanager
def scope(purpose: str = "", *, join: bool = False) -> Iterator[list[dict[str, Any]]]:
    """Collect this thread's calls until ``take``; ``purpose`` overrides the providers' own (``reextract``);
    ``join``: inside an open scope, collect into it (extraction's calls are written by the facts' append)."""
    outer = getattr(_local, "calls", None), getattr(_local, "purpose", "")
    if join and outer[0] is not None:
        yield outer[0]
        return
    _local.calls, _local.purpose = [], purpose or outer[1]
    try:
        yield _local.calls
    finally:
        _local.calls, _local.purpose = outer


def note(*, model: str, purpose: str, prompt: str, input_tokens: int, output_tokens: int, latency: float,
         outcome: str) -> None:
    """Record one call into the open scope (none open: counted for ``/metrics`` only)."""
    purpose = getattr(_local, "purpose", "") or purpose
    with _lock:
        TOKENS[(model, purpose, "input")] += input_tokens
        TOKENS[(model, purpose, "output")] += output_tokens
        CALLS[(model, purpose, outcome)] += 1
    calls = getattr(_local, "calls", None)
    if calls is not None:
        calls.append({"model": model, "purpose": purpose, "prompt_version": prompt_version(prompt) if prompt else "",
                      "input_tokens": int(input_tokens), "output_tokens": int(output_tokens),
                      "latency_ms": round(latency * 1000.0, 3), "outcome": outcome})


def take() -> list[dict[str, Any]]:
    """The open scope's calls not yet taken (and forget them): the caller writes them with its result."""
    calls = getattr(_local, "calls", None)
    if not calls:
        return []
    out = list(calls)
    calls.clear()
    return out


def restore(calls: list[dict[str, Any]]) -> None:
    """Give back calls ``take`` returned whose write failed (the writer retries, and writes them then)."""
    if calls and getattr(_local, "calls", None) is not None:
        _local.calls[:0] = calls
