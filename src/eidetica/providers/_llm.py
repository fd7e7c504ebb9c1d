"""The LLM port (fact extraction, summaries, contradiction checks) and the token estimate.

``count_tokens`` is a cheap approximation, not a real tokenizer: one token per run of
letters (plus one per further 10 letters), one per 3 digits, one per punctuation mark and
one per CJK/kana/hangul character. On English prose and Python source it lands within
about 15% of the MiniLM WordPiece count (it runs ~13% lower, which is close to what BPE
tokenizers such as OpenAI's produce). It is meant for budgets, never for billing.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Sequence

import msgspec

from ..errors import InvalidInput

__all__ = ["ExtractedFact", "FactDecision", "DECISIONS", "LLM", "count_tokens", "check_messages", "check_target_tokens"]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_PIECE = re.compile(rf"[{_CJK}]|[^\W\d_{_CJK}]+|\d+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Approximate token count of ``text`` (see the module docstring for the rule)."""
    n = 0
    for piece in _PIECE.findall(text):
        c = piece[0]
        if c.isdigit():
            n += (len(piece) + 2) // 3
        elif c.isalpha() and len(piece) > 1:
            n += 1 + len(piece) // 10
        else:
            n += 1
    return n


class ExtractedFact(msgspec.Struct, frozen=True):
    """One durable fact found in a user message, with a coarse category and, when it states one, the
    single-valued attribute of the user it sets ("diet", "residence", "employer", ...: a newer value supersedes)."""

    content: str
    category: str = "general"
    attribute: str = ""


DECISIONS = ("add", "update", "delete", "none")


class FactDecision(msgspec.Struct, frozen=True):
    """What to do with a new fact, given the user's most related facts (mem0's ADD / UPDATE / DELETE / NONE).

    ``add``: store it; ``update``: store it (as ``content`` when given) and supersede ``target``;
    ``delete``: ``target`` is no longer true and the new fact adds nothing else; ``none``: ``target``
    already says it (reinforced), or, without a target, nothing worth keeping.
    """

    event: str
    target: str = ""
    content: str = ""


class LLM(abc.ABC):
    """Port for the language-model work memory needs: extraction, summaries, contradictions."""

    model_id: str

    @abc.abstractmethod
    def extract_facts(self, text: str) -> list[ExtractedFact]:
        """Durable facts stated in one user message; ``[]`` when there are none."""

    @abc.abstractmethod
    def summarize(
        self, messages: Sequence[tuple[str, str]], *, target_tokens: int, previous_summary: str = ""
    ) -> str:
        """Summary of ``(role, content)`` messages, extending ``previous_summary``, within ~``target_tokens``."""

    @abc.abstractmethod
    def contradicts(self, old: str, new: str) -> bool:
        """Whether statement ``new`` conflicts with ``old`` (so ``new`` should supersede it)."""

    def decide(self, fact: str, related: Sequence[tuple[str, str]]) -> FactDecision | None:
        """Add, update, delete or none for ``fact`` against ``related`` ``(fact id, content)`` facts, most similar
        first; ``None``: no opinion, the curator applies its offline rules (attributes, then similarity)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"


def check_text(field: str, text: object) -> str:
    """Return ``text`` if it is a str, else raise InvalidInput naming ``field``."""
    if not isinstance(text, str):
        raise InvalidInput(field, f"expected str, got {type(text).__name__}")
    return text


def check_target_tokens(target_tokens: object) -> int:
    """Return ``target_tokens`` if it is a positive int, else raise InvalidInput."""
    if not isinstance(target_tokens, int) or isinstance(target_tokens, bool) or target_tokens < 1:
        raise InvalidInput("target_tokens", "must be a positive int", target_tokens)
    return target_tokens


def check_messages(messages: object) -> list[tuple[str, str]]:
    """Return ``messages`` as a list of ``(role, content)`` str pairs, else raise InvalidInput."""
    if isinstance(messages, (str, bytes)):
        raise InvalidInput("messages", "expected a sequence of (role, content) pairs, got a string")
    try:
        items = list(messages)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidInput("messages", f"expected a sequence of (role, content) pairs, got {type(messages).__name__}") from None
    out: list[tuple[str, str]] = []
    for i, m in enumerate(items):
        if not isinstance(m, (tuple, list)) or len(m) != 2 or not all(isinstance(s, str) for s in m):
            raise InvalidInput("messages", f"item {i} is not a (role, content) pair of strings")
        out.append((m[0], m[1]))
    return out


def truncate_to_tokens(text: str, budget: int) -> str:
    """Longest whitespace-delimited prefix of ``text`` whose ``count_tokens`` fits ``budget``."""
    if count_tokens(text) <= budget:
        return text
    words = text.split()
    lo, hi = 0, len(words)
    # Binary search: count_tokens is monotone in the number of leading words kept.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])
