"""A deterministic hashed-feature embedder, for tests and engine benchmarks only.

It is never the silent default: its vectors carry lexical overlap only (shared words and
character trigrams), no meaning. "I live in Paris" and "My home is in Paris" score close
because they share "in" and "paris", while "I reside in the French capital" does not.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

import numpy as np

from ..errors import InvalidInput
from ._base import CachedEmbedder, normalize_rows

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"\w+")
# Trigrams add similarity between inflections ("living"/"lived") at a lower weight than whole words.
_TRIGRAM_WEIGHT = 0.5
# Texts with no word at all still need a direction so every row has unit norm.
_EMPTY_FEATURE = "\x00<empty>"


@lru_cache(maxsize=1 << 18)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    # blake2b, not hash(): Python's str hash is salted per process and would break determinism.
    h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return h % dim, (1.0 if (h >> 63) & 1 else -1.0)


@lru_cache(maxsize=1 << 16)
def _word_features(word: str, dim: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    # Per word, not per text: vocabularies are small, so most words hit this cache.
    pairs = [_slot("w:" + word, dim)]
    padded = f"<{word}>"
    pairs += [(i, s * _TRIGRAM_WEIGHT) for i, s in (_slot("t:" + padded[j : j + 3], dim) for j in range(len(padded) - 2))]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


class HashEmbedder(CachedEmbedder):
    """Signed hashing trick over lowercased words and character trigrams; deterministic across processes."""

    def __init__(self, dim: int = 384, *, max_tokens: int = 8192, cache_size: int = 10_000) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 2:
            raise InvalidInput("dim", "must be an int >= 2", dim)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidInput("max_tokens", "must be a positive int", max_tokens)
        super().__init__(cache_size)
        self.dim = dim
        self.max_tokens = max_tokens
        self.model_id = f"hash-{dim}"

    def _features(self, text: str) -> tuple[list[int], list[float]]:
        idx: list[int] = []
        val: list[float] = []
        words = _WORD.findall(text.lower())[: self.max_tokens]
        for w in words or [_EMPTY_FEATURE]:
            wi, wv = _word_features(w, self.dim)
            idx.extend(wi)
            val.extend(wv)
        return idx, val

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for r, t in enumerate(texts):
            idx, val = self._features(t)
            out[r] = np.bincount(idx, weights=val, minlength=self.dim)
        zero = ~out.any(axis=1)
        if zero.any():
            # Features can cancel out exactly (signs collide); a fixed fallback keeps the norm at 1.
            i, s = _slot(_EMPTY_FEATURE, self.dim)
            out[zero, i] = s
        return normalize_rows(out)
