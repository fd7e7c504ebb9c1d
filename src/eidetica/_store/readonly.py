"""``eidetica.open(path, read_only=True)``: read a store beside the process that writes it.

The writer (a running ``eidetica serve``) holds the log's lock and the only right to its
indices. A read-only handle takes neither: it opens the log read-only (no lock, nothing
written: what was committed when it opened) and folds its own state and indices in a
temporary directory, removed on ``close``. Its answers are the store's as of that moment;
a write raises ``InvalidInput`` naming the log. The fold replays the whole log (vectors are
recorded, so no model runs): on a large store, asking the server is quicker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from ..actors import MemoryConfig
from ..errors import InvalidInput
from ..events import ArrowLog

__all__ = ["open_read_only", "scratch_memory"]


def open_read_only(memory_class: Any, path: str | os.PathLike[str], **kw: Any) -> Any:
    """A ``Memory`` (``memory_class``: the facade imports this module, not the reverse) over the store at
    ``path`` that writes nothing there (``kw``: ``Memory``'s options)."""
    log_dir = Path(path) / "log"
    if not log_dir.is_dir():
        raise InvalidInput("path", f"no eidetica store at {path} (read_only opens an existing store)", str(path))
    log = ArrowLog(log_dir, readonly=True)
    try:
        view = scratch_memory(memory_class, log, "eidetica-readonly-", **kw)
    except BaseException:
        log.close()
        raise
    view.read_only = True  # type: ignore[attr-defined]
    return view


def scratch_memory(memory_class: Any, log: Any, prefix: str, directory: Path | None = None, **kw: Any) -> Any:
    """A ``Memory`` over ``log`` whose state and indices fold into a temporary directory, removed on ``close``
    (``directory``: one made already, where projections may have been laid out: they catch up from their checkpoints)."""
    # nothing is extracted here: a message the store had not yet extracted from stays so (a view writes nothing)
    kw["config"] = msgspec.structs.replace(kw.get("config") or MemoryConfig(), auto_extract=False)
    tmp = str(directory) if directory is not None else tempfile.mkdtemp(prefix=prefix)
    try:
        view = memory_class(tmp, log=log, **kw)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    closing = view.close

    def close() -> None:
        closing()
        shutil.rmtree(tmp, ignore_errors=True)

    view.close = close  # type: ignore[method-assign]
    return view
