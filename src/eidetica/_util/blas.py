"""Thread-local control of OpenBLAS's threads (NumPy 2 wheels bundle OpenBLAS >= 0.3.27).

OpenBLAS's own threads synchronise at every call; when other processes compete for the
cores, each sync waits for a descheduled thread, and small products (one user's fact scan,
the curator's nearest-fact check) ran 5-50x slower than on one thread. ``single_threaded_blas()``
runs a block with one BLAS thread in the calling thread only, and restores the setting after.
Imported by the projections' vector matrices (``_vectors``, which the curator also uses); a leaf module, like ``errors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["blas_local", "single_threaded_blas"]


def _find_blas_local() -> Any:
    import ctypes
    import glob
    import os

    np_dir = Path(np.__file__).resolve().parent
    patterns = [
        str(np_dir.parent / "numpy.libs" / "*openblas*"),  # Linux and Windows wheels
        str(np_dir / ".dylibs" / "*openblas*"),  # macOS wheels
    ]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                lib = ctypes.CDLL(path) if os.name != "nt" else ctypes.WinDLL(path)  # type: ignore[attr-defined]
                fn = lib.openblas_set_num_threads_local
            except (OSError, AttributeError):
                continue
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_int
            return fn
    return None


@lru_cache(maxsize=1)
def blas_local() -> Any:
    """``openblas_set_num_threads_local`` (returns the previous count), or None when unavailable."""
    try:
        return _find_blas_local()
    except Exception:  # any surprise in probing native libraries means: no control
        return None



@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run the block with one OpenBLAS thread in this thread (a no-op without the control)."""
    fn = blas_local()
    if fn is None:
        yield
        return
    old = fn(1)
    try:
        yield
    finally:
        fn(old)
