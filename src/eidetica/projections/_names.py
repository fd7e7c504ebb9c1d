"""Participants' names in queries: found as whole words (possessives included) and stripped."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["name_pattern", "names_in", "strip_names", "named_words"]


def name_pattern(name: str) -> str:
    """A regex for a name as a whole word, with its possessive."""
    return rf"(?<!\w){re.escape(name)}(?:'s|s'|\u2019s)?(?!\w)"


def names_in(query: str, names: Sequence[str] | frozenset[str]) -> frozenset[str]:
    """The given names the query mentions (whole words, possessives included)."""
    return frozenset(n for n in names if re.search(name_pattern(n), query))


def strip_names(query: str, names: Sequence[str] | frozenset[str], flags: int = 0) -> str:
    """The query without the given names (and their possessives); the query itself when nothing would be left."""
    out = query
    for name in sorted(names, key=len, reverse=True):  # "Mary Ann" before "Mary"
        out = re.sub(name_pattern(name), " ", out, flags=flags)
    out = " ".join(out.split())
    return out if re.search(r"\w", out) else query


# Capitalised words that name no person, place or thing of a conversation.
_NOT_NAMES = frozenset(
    """i i'm i've i'd i'll ok okay mr mrs ms dr monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december""".split()
)
_CAPITALISED = re.compile(r"(?<![\w'])([A-Z][\w'\u2019-]*)")


def named_words(query: str) -> list[str]:
    """The words a query capitalises inside a sentence (people, places, titles): "Caroline",
    "Boston", "LGBTQ"; sentence-initial words, weekdays, months and "I" are not names."""
    out: list[str] = []
    for m in _CAPITALISED.finditer(query):
        before = query[: m.start()].rstrip()
        if not before or before[-1] in ".!?:;\"(\n":
            continue  # sentence-initial: "What", "Did"
        word = re.sub(r"(?:'s|\u2019s|')$", "", m.group(1))
        if len(word) > 1 and word.lower() not in _NOT_NAMES:
            out.append(word)
    return list(dict.fromkeys(out))
