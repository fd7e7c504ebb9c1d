"""The embedder port, vector validation and the per-instance content-hash cache."""

from __future__ import annotations

import abc
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._util import observe as _observe
from ..errors import DimensionMismatch, InvalidInput

__all__ = ["Embedder", "CacheInfo", "Coalescer", "check_vectors", "normalize_rows"]


class _Request:
    __slots__ = ("items", "result", "error", "done", "taken")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.result: list[Any] = []
        self.error: BaseException | None = None
        self.done = False
        self.taken = False  # in a batch that a leader is running


class Coalescer:
    """Callers that arrive together share one call of ``fn`` (a list of items in, one result per item out).

    The first caller runs ``fn`` on its items; callers arriving meanwhile queue theirs, and
    when the call returns one of them runs ``fn`` once on everything queued (the group
    commit of a log, applied to model calls and curator writes). A lone caller pays one
    uncontended lock. An exception of ``fn`` (or ``then``) is raised to every caller of that batch.

    With ``then``, a batch runs in two stages: ``fn(items)`` and then ``then(items, fn's
    result)``. The next batch starts its ``fn`` while this one runs ``then`` (a model call
    overlaps the previous group's commit), and ``then`` runs for batches one at a time, in
    the order their ``fn`` ran.
    """

    def __init__(self, fn: Any, then: Any = None) -> None:
        self.fn = fn
        self.then = then
        self._cond = threading.Condition(threading.Lock())
        self._then_lock = threading.Lock()
        self._pending: list[_Request] = []
        self._busy = False
        self.calls = 0  # calls of fn (for tests and stats)
        self.items = 0  # items passed to fn

    def __call__(self, items: list[Any]) -> list[Any]:
        """``fn``'s results for ``items``, in order, computed alone or with concurrent callers'."""
        req = _Request(items)
        with self._cond:
            self._pending.append(req)
            while not req.done and (self._busy or req.taken):
                self._cond.wait()
            if not req.done:
                self._busy = True
                batch, self._pending = self._pending, []
                for r in batch:
                    r.taken = True
        if not req.done:
            released = False
            try:
                flat = [x for r in batch for x in r.items]
                out = self.fn(flat)
                if self.then is not None:
                    # Taken before the next leader may start, so batches reach `then` in order.
                    self._then_lock.acquire()
                    try:
                        with self._cond:
                            self._busy, released = False, True
                            self._cond.notify_all()
                        out = self.then(flat, out)
                    finally:
                        self._then_lock.release()
                if len(out) != len(flat):
                    raise RuntimeError(f"coalesced call returned {len(out)} results for {len(flat)} items")
                k = 0
                for r in batch:
                    r.result = out[k : k + len(r.items)]
                    k += len(r.items)
            except BaseException as e:  # noqa: BLE001 - handed to every caller of the batch
                for r in batch:
                    r.error = e
            finally:
                with self._cond:
                    self.calls += 1
                    self.items += sum(len(r.items) for r in batch)
                    for r in batch:
                        r.done = True
                    if not released:
                        self._busy = False
                    self._cond.notify_all()
        if req.error is not None:
            raise req.error
        return req.result


class CacheInfo(NamedTuple):
    """Counters of an embedder's content-hash cache."""

    hits: int
    misses: int
    size: int
    maxsize: int


def check_vectors(vectors: Any, dim: int) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous float32 ``[n, dim]`` array; wrong length -> DimensionMismatch."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        # A single vector is accepted so callers can validate one query as easily as a batch.
        arr = arr.reshape(1, -1) if arr.size else arr.reshape(0, dim)
    if arr.ndim != 2:
        raise InvalidInput("vectors", f"expected a 2-d array [n, {dim}], got {arr.ndim} dimensions")
    if arr.shape[1] != dim:
        raise DimensionMismatch(dim, int(arr.shape[1]))
    if not np.isfinite(arr).all():
        raise InvalidInput("vectors", "contains NaN or infinity")
    return np.ascontiguousarray(arr)


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row of a float array in place and return it; all-zero rows stay zero."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    # A zero row has no direction; leaving it zero beats inventing one or dividing by zero.
    np.maximum(norms, np.float32(1e-12), out=norms)
    x /= norms
    return x


def clean_texts(texts: Sequence[str]) -> list[str]:
    """Validate ``texts`` as a sequence of str and repair lone surrogates (they cannot be UTF-8 encoded)."""
    if isinstance(texts, (str, bytes)):
        # A bare string is a sequence of characters: embedding each letter is never what was meant.
        raise InvalidInput("texts", "expected a sequence of strings, got a single string; wrap it in a list")
    try:
        items = list(texts)
    except TypeError:
        raise InvalidInput("texts", f"expected a sequence of strings, got {type(texts).__name__}") from None
    out: list[str] = []
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise InvalidInput("texts", f"item {i} is {type(t).__name__}, not str")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            t = t.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        out.append(t)
    return out


def _content_key(text: str) -> bytes:
    # A digest instead of the text bounds the key size even for megabyte inputs.
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class Embedder(abc.ABC):
    """The embedding port: texts in, L2-normalised float32 vectors out."""

    model_id: str
    dim: int
    max_tokens: int

    @abc.abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as a float32 ``[len(texts), dim]`` array of unit rows (``[]`` -> ``(0, dim)``)."""

    def embed_one(self, text: str) -> np.ndarray:
        """Embed a single text as a float32 ``[dim]`` vector."""
        vector: np.ndarray = self.embed([text])[0]
        return vector

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dim={self.dim})"


class CachedEmbedder(Embedder):
    """Shared plumbing: input validation, de-duplication and an LRU cache keyed by content hash.

    Subclasses implement ``_embed_uncached`` for a list of distinct, cleaned texts.
    """

    def __init__(self, cache_size: int = 10_000) -> None:
        if not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidInput("cache_size", "must be a non-negative int", cache_size)
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        # concurrent embed() calls share one model call (a batch costs far less than its texts one by one)
        self._coalescer = Coalescer(self._embed_batch)

    # Embedders travel to other processes (Ray actors): the lock cannot be pickled and the cache
    # is not worth shipping, so a copy starts with an empty cache of the same size.
    _transient: tuple[str, ...] = ("_cache", "_cache_lock", "_hits", "_misses", "_coalescer")

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self._transient}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = OrderedDict()
        self._cache_lock = threading.Lock()
        self._hits = self._misses = 0
        self._coalescer = Coalescer(self._embed_batch)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        # texts of several callers: the same text from two of them is computed once
        distinct = list(dict.fromkeys(texts))
        t0 = time.perf_counter()
        vecs = check_vectors(self._embed_uncached(distinct), self.dim)
        _observe.observe("embed_seconds", time.perf_counter() - t0)
        _observe.observe("embed_batch", len(distinct))
        if vecs.shape[0] != len(distinct):
            raise RuntimeError(f"{type(self).__name__} returned {vecs.shape[0]} vectors for {len(distinct)} texts")
        if len(distinct) == len(texts):
            return vecs
        row = {t: i for i, t in enumerate(distinct)}
        return vecs[[row[t] for t in texts]]

    @abc.abstractmethod
    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        """Embed distinct cleaned texts; return ``[len(texts), dim]`` unit rows."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as float32 ``[n, dim]`` unit rows, never computing the same text twice."""
        items = clean_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = [_content_key(t) for t in items]
        out = np.empty((len(items), self.dim), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        with self._cache_lock:
            for i, k in enumerate(keys):
                hit = self._cache.get(k)
                if hit is not None:
                    self._cache.move_to_end(k)
                    out[i] = hit
                    self._hits += 1
                else:
                    todo.setdefault(k, []).append(i)
            self._misses += len(todo)
        if todo:
            fresh = np.asarray(self._coalescer([items[rows[0]] for rows in todo.values()]))
            for (_k, rows), vec in zip(todo.items(), fresh):
                out[rows] = vec
            if self._cache_size:
                with self._cache_lock:
                    for k, vec in zip(todo, fresh):
                        # Copies: the cache must not alias arrays handed to callers.
                        self._cache[k] = vec.copy()
                        self._cache.move_to_end(k)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return out

    def cache_info(self) -> CacheInfo:
        """Hits, misses and size of this instance's content-hash cache."""
        with self._cache_lock:
            return CacheInfo(self._hits, self._misses, len(self._cache), self._cache_size)

    def cache_clear(self) -> None:
        """Empty the cache and reset its counters."""
        with self._cache_lock:
            self._cache.clear()
            self._hits = self._misses = 0
