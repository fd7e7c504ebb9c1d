"""Vectors kept by key in one preallocated matrix: the exact in-memory scans of a user's facts.

Rows are replaced in place, freed rows are zeroed and reused, and capacity doubles when full,
so no write rebuilds the matrix (``np.stack`` of every vector per write made writes slow down
as a user's facts grew). Used by the curator's nearest-fact check and the index's exact scans
(``_scan``).

``best_above(q, t)`` (the curator's check: the row closest to ``q`` if any reaches ``t``) is
exact but does not read the whole matrix. Every row ``v`` splits into its projection on a
low-rank basis ``B`` (the top singular vectors of the rows, refitted each time the rows
double) and a residual: ``q.v = (Bq).(Bv) + q_r.v_r <= (Bq).(Bv) + |q_r| |v_r|``. The rows'
projections (``rank`` columns, not ``dim``) and residual norms are kept in step with every
write, so one small product bounds every row and only the few rows whose bound reaches ``t``
are scored exactly. Sentence embeddings are far from isotropic: on LoCoMo's turns a rank of 64
(of 384) leaves 0.2% of the rows above a 0.8 bound, so the check reads about a fifth of the
bytes a full scan reads. ``top(q, k)`` (the exact scans' top-k) uses the same bound: the lowest
exact score among the k best-bounded rows is a bar every true answer clears.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._util.blas import single_threaded_blas

__all__ = ["VectorSlots"]


# Below this many rows a full scan is cheaper than keeping and reading the bound.
BOUND_MIN_ROWS = 2048
# float32 rounding in the bound's two products is far below this (unit-scale rows).
_SLACK = 1e-4


class VectorSlots:
    """A growable float32 matrix with a row per key, plus per-row arrays (``extra``) grown in step.

    ``rank`` > 0 keeps the low-rank bound that ``best_above`` and ``top`` read once there are
    ``bound_from`` rows (0, the default: every query scans all rows).
    """

    def __init__(self, dim: int, extra: dict[str, Any] | None = None, rank: int = 0,
                 bound_from: int = BOUND_MIN_ROWS) -> None:
        self.mat = np.zeros((64, dim), np.float32)
        self.keys: list[str | None] = []  # the key of each row (None: a freed row)
        self.slot: dict[str, int] = {}
        self.free: list[int] = []
        self.extra = {name: np.zeros(64, dtype) for name, dtype in (extra or {}).items()}
        self.rank = min(rank, dim)
        self.bound_from = bound_from
        self._basis: np.ndarray | None = None  # [rank, dim], orthonormal rows; None until fitted
        self._low = np.zeros((0, 0), np.float32)  # [capacity, rank]: each row's projection on the basis
        self._resid = np.zeros(0, np.float32)  # [capacity]: the norm of each row's residual
        self._fitted_rows = 0

    def __len__(self) -> int:
        return len(self.slot)

    @property
    def used(self) -> int:
        """Rows handed out so far (live and freed): scans read ``mat[:used]``."""
        return len(self.keys)

    def put(self, key: str, vector: np.ndarray) -> int:
        """Insert or replace the vector of ``key``; returns its row."""
        i = self.slot.get(key)
        if i is None:
            if self.free:
                i = self.free.pop()
                self.keys[i] = key
            else:
                i = len(self.keys)
                if i == self.mat.shape[0]:
                    self.mat = self._grown(self.mat, 2 * i)
                    self.extra = {name: self._grown(a, 2 * i) for name, a in self.extra.items()}
                    if self._basis is not None:
                        self._low, self._resid = self._grown(self._low, 2 * i), self._grown(self._resid, 2 * i)
                self.keys.append(key)
            self.slot[key] = i
        self.mat[i] = vector
        if self._basis is not None:
            self._bound_row(i)
        return i

    def drop(self, key: str) -> int | None:
        """Free the row of ``key`` (zeroed: similarity 0 never passes a threshold); its row, or None."""
        i = self.slot.pop(key, None)
        if i is not None:
            self.mat[i] = 0.0
            for a in self.extra.values():
                a[i] = 0
            if self._basis is not None:
                self._low[i], self._resid[i] = 0.0, 0.0  # a zero row: its bound is 0, as its score
            self.keys[i] = None
            self.free.append(i)
        return i

    @staticmethod
    def _grown(a: np.ndarray, n: int) -> np.ndarray:
        out = np.zeros((n, *a.shape[1:]), a.dtype)
        out[: len(a)] = a
        return out

    def _bound_row(self, i: int) -> None:
        v = self.mat[i]
        low = self._basis @ v
        self._low[i] = low
        self._resid[i] = np.sqrt(max(0.0, float(v @ v) - float(low @ low)))

    def _fit(self) -> None:
        """Fit the basis to (a sample of) the rows and project every row on it: O(rows) once per doubling."""
        n = self.used
        step = max(1, n // 2048)  # a basis from ~2,000 rows bounds as well as one from all
        sample = self.mat[:n:step]
        sample = sample[np.any(sample != 0, axis=1)]
        _, _, vt = np.linalg.svd(sample, full_matrices=False)
        self._basis = np.ascontiguousarray(vt[: self.rank], np.float32)
        cap = self.mat.shape[0]
        self._low = np.zeros((cap, self.rank), np.float32)
        self._low[:n] = self.mat[:n] @ self._basis.T
        self._resid = np.zeros(cap, np.float32)
        sq = np.einsum("ij,ij->i", self.mat[:n], self.mat[:n]) - np.einsum("ij,ij->i", self._low[:n], self._low[:n])
        self._resid[:n] = np.sqrt(np.maximum(sq, 0.0))
        self._fitted_rows = n

    def _bound(self, q: np.ndarray, n: int) -> np.ndarray:
        """An upper bound of every row's dot product with ``q`` (refitting the basis when the rows doubled)."""
        if self._basis is None or n >= 2 * self._fitted_rows:
            self._fit()
        ql = self._basis @ q
        qr = np.sqrt(max(0.0, float(q @ q) - float(ql @ ql)))
        bound: np.ndarray = self._low[:n] @ ql
        bound += qr * self._resid[:n]
        return bound

    def top(self, vector: np.ndarray, limit: int, admit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The rows with the ``limit`` highest dot products with ``vector`` (of those ``admit`` allows), and the products.

        Exact, in no particular order. With the bound kept: the ``limit`` rows of highest
        bound are scored, the lowest of those scores is a bar every true answer clears, and
        only rows whose bound reaches the bar are scored too.
        """
        n = self.used
        q = np.asarray(vector, np.float32)
        idx = np.flatnonzero(admit[:n]) if admit is not None else None
        with single_threaded_blas():  # small products: BLAS threads only add synchronisation
            if self.rank > 0 and n >= self.bound_from and (n if idx is None else len(idx)) > limit:
                bound = self._bound(q, n)
                pool = idx if idx is not None else np.arange(n)
                first = pool[np.argpartition(-bound[pool], limit - 1)[:limit]]
                bar = float(np.min(self.mat[first] @ q))
                rows = pool[bound[pool] >= bar - _SLACK]
                if 3 * len(rows) < n:  # gathering scattered rows costs more per row than a scan
                    sims = self.mat[rows] @ q
                    keep = np.argpartition(-sims, limit - 1)[:limit] if len(rows) > limit else slice(None)
                    return rows[keep], sims[keep]
            sims = self.mat[:n] @ q
        if idx is None:
            idx = np.argpartition(-sims, limit - 1)[:limit] if n > limit else np.arange(n)
        elif len(idx) > limit:
            idx = idx[np.argpartition(-sims[idx], limit - 1)[:limit]]
        return idx, sims[idx]

    def best_above(self, vector: np.ndarray, threshold: float) -> tuple[str | None, float]:
        """The key with the highest dot product to ``vector`` if that product is at least ``threshold``, and the product.

        ``(None, 0.0)`` when no row reaches ``threshold``. Exact: the same key and product a
        full scan gives (the first such row on ties), with no full scan once the bound is kept.
        """
        n = self.used
        if not self.slot:
            return None, 0.0
        q = np.asarray(vector, np.float32)
        with single_threaded_blas():  # small products: BLAS threads only add synchronisation
            if self.rank <= 0 or n < self.bound_from:
                rows, sims = None, self.mat[:n] @ q
            else:
                rows = np.flatnonzero(self._bound(q, n) >= threshold - _SLACK)
                if not len(rows):
                    return None, 0.0
                sims = self.mat[rows] @ q
        j = int(np.argmax(sims))
        if float(sims[j]) < threshold:
            return None, 0.0
        i = j if rows is None else int(rows[j])
        return self.keys[i], float(sims[j])
