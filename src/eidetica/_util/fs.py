"""Durable file replacement: the one atomic write (and the one ``os.replace``) every layer uses.

A crash at any point leaves either the old file or the new one, whole: the content goes to a
temporary file beside the target, is flushed and fsynced, renamed over the target, and the
directory is fsynced so the rename itself survives a power loss.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["fsync_dir", "replace", "write_atomic"]


def fsync_dir(path: str | os.PathLike[str], os_: ModuleType | Any = os) -> None:
    """fsync a directory so a create, rename or unlink inside it is durable (``os_``: the caller's ``os``, which
    the log's power-loss tests replace to cut at every call)."""
    fd = os_.open(path, os_.O_RDONLY)
    try:
        os_.fsync(fd)
    finally:
        os_.close(fd)


def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], os_: ModuleType | Any = os) -> None:
    """Rename ``src`` over ``dst`` (a file already fsynced, or a directory) and fsync ``dst``'s directory."""
    os_.replace(src, dst)
    fsync_dir(os.path.dirname(os.path.abspath(dst)), os_)


def write_atomic(path: str | os.PathLike[str], data: str | bytes | Iterable[bytes | memoryview], mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` (text is UTF-8; an iterable of buffers is written in order) durably.

    Temp file in the same directory (a rename across file systems is not atomic), write, flush,
    fsync the file, ``os.replace``, fsync the directory. On failure the target is untouched and
    the temporary file removed.
    """
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(os.path.abspath(target)))
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, str):
                f.write(data.encode("utf-8"))
            elif isinstance(data, bytes):
                f.write(data)
            else:
                for chunk in data:
                    f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
