"""Participants' names in queries: found as whole words (possessives included) and stripped."""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["name_pattern", "names_in", "strip_names"]


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
