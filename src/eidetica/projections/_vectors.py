"""Vectors kept by key in one preallocated matrix: the exact in-memory scans of a user's facts.

Rows are replaced in place, freed rows are zeroed and reused, and capacity doubles when full,
so no write rebuilds the matrix (``np.stack`` of every vector per write made writes slow down
as a user's facts grew). Used by the curator's nearest-fact check and the index's exact scans
(``_scan``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["VectorSlots"]


class VectorSlots:
    """A growable float32 matrix with a row per key, plus per-row arrays (``extra``) grown in step."""

    def __init__(self, dim: int, extra: dict[str, Any] | None = None) -> None:
        self.mat = np.zeros((64, dim), np.float32)
        self.keys: list[str | None] = []  # the key of each row (None: a freed row)
        self.slot: dict[str, int] = {}
        self.free: list[int] = []
        self.extra = {name: np.zeros(64, dtype) for name, dtype in (extra or {}).items()}

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
                self.keys.append(key)
            self.slot[key] = i
        self.mat[i] = vector
        return i

    def drop(self, key: str) -> int | None:
        """Free the row of ``key`` (zeroed: similarity 0 never passes a threshold); its row, or None."""
        i = self.slot.pop(key, None)
        if i is not None:
            self.mat[i] = 0.0
            for a in self.extra.values():
                a[i] = 0
            self.keys[i] = None
            self.free.append(i)
        return i

    @staticmethod
    def _grown(a: np.ndarray, n: int) -> np.ndarray:
        out = np.zeros((n, *a.shape[1:]), a.dtype)
        out[: len(a)] = a
        return out
