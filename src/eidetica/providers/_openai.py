"""OpenAI-compatible providers: ``/v1/embeddings`` and ``/v1/chat/completions`` via the ``openai`` client.

Both classes work against OpenAI itself or any compatible server (vLLM, Ollama, LiteLLM,
llama.cpp, ...) given ``base_url``. The client's own retries are switched off: retries
happen here, so rate limits (429, honouring ``Retry-After``), server errors (5xx, 408, 409),
timeouts, dropped connections and malformed replies are all retried with exponential
backoff and jitter, then surface as one ``ProviderError``. Other 4xx errors (bad key,
unknown model, bad request) fail at once.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlparse

import msgspec
import numpy as np

from ..errors import EideticaError, InvalidInput, ProviderError
from . import _ledger
from ._base import CachedEmbedder, check_vectors, normalize_rows
from ._llm import (
    DECISIONS,
    LLM,
    ExtractedFact,
    FactDecision,
    check_messages,
    check_target_tokens,
    check_text,
    count_tokens,
    truncate_to_tokens,
)

__all__ = ["OpenAIEmbedder", "OpenAILLM", "EXTRACTION_PROMPT", "SUMMARY_PROMPT", "CONTRADICTION_PROMPT", "DECISION_PROMPT"]

log = logging.getLogger("eidetica.providers")

T = TypeVar("T")

# Placeholder key for servers that need none (local vLLM/Ollama, the test server): the client
# refuses to start without some key.
_NO_KEY = "sk-no-key-needed"
_MAX_BACKOFF = 30.0
_RETRY_STATUS = frozenset({408, 409, 429})

_KNOWN_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class _Malformed(Exception):
    """A reply arrived but did not have the promised shape; worth retrying."""


def _positive(field: str, value: Any, kind: type = int) -> Any:
    if not isinstance(value, (int, float) if kind is float else int) or isinstance(value, bool) or value <= 0:
        raise InvalidInput(field, "must be positive", value)
    return value


def _check_transport(timeout: Any, max_retries: Any, backoff: Any) -> None:
    """Validate the arguments every client shares (InvalidInput names the field)."""
    _positive("timeout", timeout, float)
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidInput("max_retries", "must be a non-negative int", max_retries)
    if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
        raise InvalidInput("backoff", "must be >= 0", backoff)


def _make_client(base_url: str | None, api_key_env: str, timeout: float) -> Any:
    import openai

    key = os.environ.get(api_key_env, "").strip()
    if not key:
        if base_url is None:
            raise ProviderError(
                f"environment variable {api_key_env} is not set; set it to your OpenAI API key, "
                "or pass base_url= for a server that needs no key"
            )
        key = _NO_KEY
    if base_url is not None and urlparse(base_url).scheme not in {"http", "https"}:
        raise InvalidInput("base_url", "must be an http(s) URL", base_url)
    return openai.OpenAI(api_key=key, base_url=base_url, timeout=timeout, max_retries=0)


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is not None:
            try:
                return max(0.0, float(raw) * scale)
            except ValueError:
                return None  # an HTTP date: rare enough to fall back to our own backoff
    return None


def _call_with_retries(
    fn: Callable[[], T], *, what: str, max_retries: int, backoff: float, on_bad_request: Callable[[Exception], bool] | None = None
) -> T:
    """Run ``fn`` with retries on transient failures; raise ProviderError when they run out."""
    import openai

    attempt = 0
    while True:
        delay: float | None = None
        try:
            return fn()
        except openai.APIStatusError as e:
            status = e.status_code
            if status == 400 and on_bad_request is not None and on_bad_request(e) and attempt < max_retries:
                problem = f"HTTP 400 (input too long), retrying with shorter input: {_short(e)}"
                delay = 0.0
            elif status in _RETRY_STATUS or status >= 500:
                problem = f"HTTP {status}: {_short(e)}"
                delay = _retry_after(e.response)
            else:
                raise ProviderError(f"{what} failed: HTTP {status}: {_short(e)}") from e
            err: Exception = e
        except openai.APITimeoutError as e:
            problem, err = "timed out", e
        except openai.APIConnectionError as e:
            problem, err = f"connection failed: {e}", e
        except (openai.APIResponseValidationError, _Malformed, json.JSONDecodeError) as e:
            # JSONDecodeError: the client parses the body lazily and lets it escape for non-JSON.
            problem, err = f"malformed reply: {e}", e
        except EideticaError:
            raise
        except Exception as e:
            # Anything else from the client or the reply is not known to be transient: no retry,
            # but callers still see the one documented error type.
            raise ProviderError(f"{what} failed: {type(e).__name__}: {e}") from e
        if attempt >= max_retries:
            raise ProviderError(f"{what} failed after {attempt + 1} attempts: {problem}") from err
        if delay is None:
            # Exponential backoff with jitter, so many clients hitting one rate limit spread out.
            delay = backoff * (2**attempt) * random.uniform(0.5, 1.0)
        delay = min(delay, _MAX_BACKOFF)
        log.warning("%s: %s; retry %d/%d in %.2fs", what, problem, attempt + 1, max_retries, delay)
        time.sleep(delay)
        attempt += 1


def _short(e: Exception) -> str:
    msg = getattr(e, "message", None) or str(e)
    return msg if len(msg) <= 300 else msg[:300] + "..."


_CONTEXT_ERROR = re.compile(r"context length|maximum.*tokens|too (?:long|many tokens)|token limit", re.IGNORECASE)


class OpenAIEmbedder(CachedEmbedder):
    """Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint, batched, retried, normalised.

    ``dim`` comes from ``dimensions``, else from a table of OpenAI models, else from one probe
    request made the first time ``dim`` is read.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 30.0,
        max_retries: int = 4,
        max_tokens: int = 8191,
        backoff: float = 0.5,
        cache_size: int = 10_000,
    ) -> None:
        super().__init__(cache_size)
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("model", "must be a non-empty string", model)
        if dimensions is not None:
            _positive("dimensions", dimensions)
        _positive("batch_size", batch_size)
        _positive("max_tokens", max_tokens)
        _check_transport(timeout, max_retries, backoff)
        self.model = model
        self.model_id = model
        self.dimensions = dimensions
        self.batch_size = min(batch_size, 2048)  # the API's per-request input limit
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self._client = _make_client(base_url, api_key_env, timeout)
        self._dim: int | None = dimensions or _KNOWN_DIMS.get(model)
        self._dim_lock = threading.Lock()
        # Fraction of max_tokens the local estimate may use; halved when the server still says
        # "too long", because count_tokens is an approximation and tokenizers differ.
        self._token_safety = 0.9

    # Pickled for other processes (Ray actors) without the client or the key: the copy builds
    # its own client and reads the key from its own environment.
    _transient = (*CachedEmbedder._transient, "_client", "_dim_lock")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._dim_lock = threading.Lock()
        self._client = _make_client(self.base_url, self.api_key_env, self.timeout)

    @property
    def dim(self) -> int:  # type: ignore[override]  # a property over the base's attribute
        """Vector length; probes the endpoint once if neither ``dimensions`` nor the model table says."""
        if self._dim is None:
            with self._dim_lock:
                if self._dim is None:
                    probe = self._request(["dimension probe"], check_dim=False)
                    self._dim = int(probe.shape[1])
        return self._dim

    def _prepare(self, text: str) -> str:
        if not text.strip():
            # The API rejects empty input; a space has a well-defined (if meaningless) embedding.
            return " "
        budget = int(self.max_tokens * self._token_safety)
        return truncate_to_tokens(text, budget) or text[: budget * 2]

    def _request(self, texts: list[str], *, check_dim: bool = True) -> np.ndarray:
        def bad_request_is_length(e: Exception) -> bool:
            if _CONTEXT_ERROR.search(_short(e)):
                self._token_safety /= 2
                return True
            return False

        def call() -> np.ndarray:
            kwargs: dict[str, Any] = {"model": self.model, "input": [self._prepare(t) for t in texts], "encoding_format": "float"}
            if self.dimensions is not None:
                kwargs["dimensions"] = self.dimensions
            resp = self._client.embeddings.create(**kwargs)
            if not isinstance(getattr(resp, "data", None), list):
                raise _Malformed("reply has no data list")
            data = sorted(resp.data, key=lambda d: d.index if isinstance(d.index, int) else 0)
            if len(data) != len(texts):
                raise _Malformed(f"{len(data)} embeddings for {len(texts)} inputs")
            rows = [d.embedding for d in data]
            if not rows or not all(isinstance(r, list) and r for r in rows):
                raise _Malformed("embedding is not a list of numbers")
            if len({len(r) for r in rows}) != 1:
                raise _Malformed("embeddings of different lengths in one reply")
            return np.asarray(rows, dtype=np.float32)

        vecs = _call_with_retries(
            call, what=f"embeddings ({self.model})", max_retries=self.max_retries, backoff=self.backoff,
            on_bad_request=bad_request_is_length,
        )
        if check_dim:
            vecs = check_vectors(vecs, self.dim)
        elif not np.isfinite(vecs).all():
            raise ProviderError(f"embeddings ({self.model}): reply contains NaN or infinity")
        return normalize_rows(vecs)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        out: list[np.ndarray] = []
        # Batches are also capped by estimated tokens: the API limits tokens summed over a request.
        batch: list[str] = []
        tokens = 0
        for t in texts:
            n = min(count_tokens(t), self.max_tokens)
            if batch and (len(batch) >= self.batch_size or tokens + n > 250_000):
                out.append(self._request(batch))
                batch, tokens = [], 0
            batch.append(t)
            tokens += n
        if batch:
            out.append(self._request(batch))
        return np.concatenate(out) if len(out) > 1 else out[0]


# --- chat completions ----------------------------------------------------------------------------

EXTRACTION_PROMPT = """You extract durable facts about the user from one message the user wrote.
A durable fact stays true beyond this conversation: identity, name, age, job, where they live,
relationships, preferences, dislikes, health and allergies, possessions, long-term plans.
Ignore greetings, thanks, questions, requests to the assistant and passing states ("I'm tired").
Write each fact as a short first-person sentence in the user's words.
Reply with JSON only, exactly of the form
{"facts": [{"content": "I live in Paris.", "category": "location"}]}
where category is one of: identity, work, location, relationship, preference, health, possession, personal, general.
If the message contains no durable fact, reply with the single word NONE."""

SUMMARY_PROMPT = """You maintain a running summary of a conversation between a user and an assistant.
Start from the previous summary, keep what still matters, add what is new and durable (facts about
the user, decisions, open tasks), and drop small talk. Write plain text in the third person, no
preamble, at most {target_tokens} tokens."""

CONTRADICTION_PROMPT = """Decide whether the NEW statement contradicts the OLD statement, meaning both cannot be
true of the same user at the same time (for example a different city of residence, a different
employer, or a preference reversed). Statements that merely add information do not contradict.
Answer with the single word YES or NO."""


DECISION_PROMPT = """You keep a user's long-term memory current. You get the EXISTING facts most related to a NEW
fact about the user, each with an id, and decide what the NEW fact does to the memory:
ADD: it is new information. UPDATE: it changes an existing fact (a new value of the same thing about the
user: diet, home, job, employer, partner, tools, plans, ...), whatever the wording; give that fact's id
and the up-to-date text. DELETE: it says an existing fact is no longer true and adds nothing else; give
that fact's id. NONE: an existing fact already says it; give that fact's id.
Reply with JSON only, exactly of the form {"event": "UPDATE", "id": "0", "text": "I live in Toronto."}"""


class _FactOut(msgspec.Struct):
    content: str
    category: str = "general"
    attribute: str = ""


class _DecisionOut(msgspec.Struct):
    event: str
    id: str | int = ""
    text: str = ""


class _FactsOut(msgspec.Struct):
    facts: list[_FactOut]


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


def parse_facts(reply: str) -> list[ExtractedFact]:
    """Parse an extraction reply: ``NONE`` or ``{"facts": [...]}`` (code fences tolerated)."""
    text = reply.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    if text.strip(" .\"'").upper() == "NONE":
        return []
    try:
        payload = msgspec.json.decode(text, type=_FactsOut)
    except msgspec.DecodeError as e:
        raise _Malformed(f"extraction reply is neither NONE nor valid facts JSON: {e}") from None
    facts: list[ExtractedFact] = []
    seen: set[str] = set()
    for f in payload.facts:
        content = " ".join(f.content.split())
        category = (f.category or "general").strip().lower() or "general"
        if content and content.lower() not in seen:
            seen.add(content.lower())
            facts.append(ExtractedFact(content=content, category=category, attribute=f.attribute.strip().lower()))
    return facts


def parse_decision(reply: str, ids: Sequence[str]) -> FactDecision:
    """Parse a decision reply ``{"event", "id", "text"}`` (code fences tolerated); ``id`` indexes ``ids``."""
    text = reply.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    try:
        out = msgspec.json.decode(text, type=_DecisionOut)
    except msgspec.DecodeError as e:
        raise _Malformed(f"decision reply is not valid JSON: {e}") from None
    event = out.event.strip().lower()
    if event not in DECISIONS:
        raise _Malformed(f"decision event must be one of ADD, UPDATE, DELETE, NONE, got {out.event[:20]!r}")
    ref = str(out.id).strip()
    if event in ("update", "delete") and not (ref.isdigit() and int(ref) < len(ids)):
        raise _Malformed(f"{event.upper()} names id {ref[:20]!r}, not one of 0..{len(ids) - 1}")
    target = ids[int(ref)] if ref.isdigit() and int(ref) < len(ids) else ""
    return FactDecision(event=event, target=target, content=" ".join(out.text.split()) if event == "update" else "")


# the ledger's purpose of each kind of call (``_chat``'s ``what``)
_PURPOSES = {"fact extraction": "extract", "summary": "summarise", "memory update decision": "decide",
             "contradiction check": "contradict"}


class OpenAILLM(LLM):
    """Extraction, summaries and contradiction checks through OpenAI-compatible chat completions."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        temperature: float = 0.0,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("model", "must be a non-empty string", model)
        _check_transport(timeout, max_retries, backoff)
        self.model = model
        self.model_id = model
        self.base_url = base_url
        self.max_retries = max_retries
        self.backoff = float(backoff)
        self.temperature = temperature
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self._client = _make_client(base_url, api_key_env, timeout)

    def __getstate__(self) -> dict[str, Any]:
        # No client (and so no key) in the pickle: the receiving process builds its own.
        return {k: v for k, v in self.__dict__.items() if k != "_client"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client = _make_client(self.base_url, self.api_key_env, self.timeout)

    def _chat(self, system: str, user: str, parse: Callable[[str], T], what: str) -> T:
        purpose = _PURPOSES.get(what, what)

        def call() -> T:
            started = time.perf_counter()
            resp = None
            outcome = "error"
            try:
                resp = self._client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                    temperature=self.temperature,
                )
                if not isinstance(getattr(resp, "choices", None), list) or not resp.choices or resp.choices[0].message is None:
                    raise _Malformed("reply has no choices")
                content = resp.choices[0].message.content
                if not isinstance(content, str):
                    raise _Malformed("reply has no text content")
                out = parse(content)
                outcome = "ok"
                return out
            finally:  # every call the model answered or refused, with the tokens its reply says it used
                usage = getattr(resp, "usage", None)
                _ledger.note(model=self.model, purpose=purpose, prompt=system,
                             input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                             output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                             latency=time.perf_counter() - started, outcome=outcome)

        return _call_with_retries(call, what=f"{what} ({self.model})", max_retries=self.max_retries, backoff=self.backoff)

    def extract_facts(self, text: str) -> list[ExtractedFact]:
        """Durable facts in one user message, asked as JSON and validated with msgspec."""
        check_text("text", text)
        if not text.strip():
            return []
        return self._chat(EXTRACTION_PROMPT, text, parse_facts, "fact extraction")

    def summarize(
        self, messages: Sequence[tuple[str, str]], *, target_tokens: int, previous_summary: str = ""
    ) -> str:
        """Summary of ``messages`` extending ``previous_summary``; trimmed to ``target_tokens`` if the model overruns."""
        budget = check_target_tokens(target_tokens)
        msgs = check_messages(messages)
        previous = check_text("previous_summary", previous_summary).strip()
        if not msgs:
            return truncate_to_tokens(previous, budget)
        transcript = "\n".join(f"{role}: {' '.join(content.split())}" for role, content in msgs)
        user = f"Previous summary:\n{previous or '(none)'}\n\nNew messages:\n{transcript}"

        def parse(reply: str) -> str:
            out = " ".join(reply.split())
            if not out:
                raise _Malformed("empty summary")
            return out

        summary = self._chat(SUMMARY_PROMPT.format(target_tokens=budget), user, parse, "summary")
        if count_tokens(summary) > budget:
            # Models overrun word limits; cut at the last whole sentence that fits, else at a word.
            kept = ""
            for sent in re.split(r"(?<=[.!?])\s+", summary):
                candidate = f"{kept} {sent}".strip()
                if count_tokens(candidate) > budget:
                    break
                kept = candidate
            summary = kept or truncate_to_tokens(summary, budget)
        return summary

    def decide(self, fact: str, related: Sequence[tuple[str, str]]) -> FactDecision | None:
        """Ask the model what ``fact`` does to the ``related`` facts (ADD / UPDATE / DELETE / NONE, as JSON)."""
        check_text("fact", fact)
        ids = [fid for fid, _ in related]
        listing = "\n".join(f"{i}: {' '.join(text.split())}" for i, (_, text) in enumerate(related)) or "(none)"
        user = f"EXISTING:\n{listing}\nNEW: {' '.join(fact.split())}"
        return self._chat(DECISION_PROMPT, user, lambda reply: parse_decision(reply, ids), "memory update decision")

    def contradicts(self, old: str, new: str) -> bool:
        """Ask the model whether ``new`` contradicts ``old`` (YES/NO)."""
        check_text("old", old)
        check_text("new", new)
        if not old.strip() or not new.strip():
            return False

        def parse(reply: str) -> bool:
            word = re.match(r"\W*(\w+)", reply)
            answer = word.group(1).upper() if word else ""
            if answer not in {"YES", "NO"}:
                raise _Malformed(f"expected YES or NO, got {reply[:60]!r}")
            return answer == "YES"

        return self._chat(CONTRADICTION_PROMPT, f"OLD: {old.strip()}\nNEW: {new.strip()}", parse, "contradiction check")
