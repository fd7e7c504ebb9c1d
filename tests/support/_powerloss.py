"""A power-loss model for the log's files: what a disk holds if the power goes at any moment.

``PowerLossOs`` stands in for the ``os`` module inside ``eidetica.events.arrow_log`` (only
there: pytest and everything else keep the real one). Every call that changes the log's
files on disk (open, write, fsync, fdatasync, ftruncate, unlink, replace, makedirs) is a
*boundary*: before it runs, the harness records a ``Cut``, the state a power failure at
that instant could leave behind. Bytes reach the durable model only through a sync, the
way the POSIX minimum promises and crash-consistency checkers (ALICE, CrashMonkey) model:

* a file's contents are durable as they were at its last ``fsync``/``fdatasync``
  (keyed by inode, so a rename carries them along);
* a directory's entries (creations, renames, unlinks) are durable as they were at the
  directory's last ``fsync``.

A cut is materialised into a fresh directory in one of three ways: ``synced`` (only what was
synced survives: every unsynced byte and entry is dropped), ``torn`` (synced, plus the first
half of each file's unsynced tail: a write the disk got half of) and ``cached`` (everything
the page cache held: what SIGKILL leaves). Recovery must keep every acknowledged event in all
three.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_REAL_OS = os


@dataclass
class Cut:
    """The disk as a power cut just before boundary ``index`` (operation ``op``) could leave it."""

    index: int
    op: str
    acked: int  # events acknowledged to the workload before this moment
    content: dict[int, bytes]  # inode -> durable bytes
    dirs: dict[str, dict[str, tuple[int, bool]]]  # dir -> durable {name: (inode, is_dir)}
    cached: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # relpath -> (inode, bytes) in the page cache
    cached_dirs: list[str] = field(default_factory=list)


class PowerLossOs:
    """The ``os`` module as the log sees it, recording a ``Cut`` before every file-changing call."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.content: dict[int, bytes] = {}
        self.dirs: dict[str, dict[str, tuple[int, bool]]] = {}
        self.cuts: list[Cut] = []
        self.acked = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(_REAL_OS, name)

    # -- the model -------------------------------------------------------------------
    def _path_of(self, fd: int) -> str:
        p = _REAL_OS.readlink(f"/proc/self/fd/{fd}")
        return p[: -len(" (deleted)")] if p.endswith(" (deleted)") else p

    def _page_cache(self) -> tuple[dict[str, tuple[int, bytes]], list[str]]:
        files: dict[str, tuple[int, bytes]] = {}
        dirs: list[str] = []
        for d, sub, names in _REAL_OS.walk(self.root):
            for s in sub:
                dirs.append(os.path.relpath(os.path.join(d, s), self.root))
            for n in names:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    files[os.path.relpath(p, self.root)] = (_REAL_OS.fstat(f.fileno()).st_ino, f.read())
        return files, dirs

    def cut(self, op: str) -> None:
        """Record what a power cut right now could leave."""
        cached, cached_dirs = self._page_cache()
        self.cuts.append(Cut(len(self.cuts), op, self.acked, dict(self.content), dict(self.dirs), cached, cached_dirs))

    def _synced(self, fd: int) -> None:
        st = _REAL_OS.fstat(fd)
        path = self._path_of(fd)
        if stat.S_ISDIR(st.st_mode):
            entries = {}
            for n in _REAL_OS.listdir(path):
                s = _REAL_OS.stat(os.path.join(path, n))
                entries[n] = (s.st_ino, stat.S_ISDIR(s.st_mode))
            self.dirs[path] = entries  # a new dict: earlier cuts keep theirs
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                self.content[st.st_ino] = f.read()

    # -- the intercepted calls ---------------------------------------------------------
    def open(self, path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        """os.open, a boundary when it may create or truncate a file."""
        if flags & (_REAL_OS.O_CREAT | _REAL_OS.O_TRUNC):
            self.cut("open")
        return _REAL_OS.open(path, flags, mode, **kw)

    def write(self, fd: int, data: Any) -> int:
        """os.write: the bytes go to the page cache, not (yet) to the durable model."""
        self.cut("write")
        return _REAL_OS.write(fd, data)

    def fsync(self, fd: int) -> None:
        """os.fsync: the file's (or directory's) current state becomes durable."""
        self.cut("fsync")
        _REAL_OS.fsync(fd)
        self._synced(fd)

    def fdatasync(self, fd: int) -> None:
        """os.fdatasync: the file's current bytes become durable."""
        self.cut("fdatasync")
        _REAL_OS.fdatasync(fd)
        self._synced(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        """os.ftruncate: in the page cache until synced."""
        self.cut("ftruncate")
        _REAL_OS.ftruncate(fd, length)

    def unlink(self, path: Any, **kw: Any) -> None:
        """os.unlink: the entry is gone for good only once its directory is synced."""
        self.cut("unlink")
        _REAL_OS.unlink(path, **kw)

    def replace(self, src: Any, dst: Any, **kw: Any) -> None:
        """os.replace: durable once the directory is synced."""
        self.cut("replace")
        _REAL_OS.replace(src, dst, **kw)

    def makedirs(self, name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        """os.makedirs: a boundary when it creates something."""
        if not _REAL_OS.path.isdir(name):
            self.cut("makedirs")
        _REAL_OS.makedirs(name, mode, exist_ok)

    # -- replaying a cut ---------------------------------------------------------------
    def materialise(self, cut: Cut, dest: str, how: str) -> None:
        """Write what survives ``cut`` into the (new) directory ``dest``: ``synced``, ``torn`` or ``cached``."""
        _REAL_OS.makedirs(dest)
        if how == "cached":
            for d in cut.cached_dirs:
                _REAL_OS.makedirs(os.path.join(dest, d), exist_ok=True)
            for rel, (_, data) in cut.cached.items():
                with open(os.path.join(dest, rel), "wb") as f:
                    f.write(data)
            return
        by_inode = {ino: data for ino, data in cut.cached.values()}
        for rel_dir, name, ino, is_dir in self._durable_entries(cut, self.root, ""):
            target = os.path.join(dest, rel_dir, name)
            if is_dir:
                _REAL_OS.makedirs(target, exist_ok=True)
                continue
            data = cut.content.get(ino, b"")
            if how == "torn":
                live = by_inode.get(ino, b"")
                if len(live) > len(data) and live.startswith(data):
                    data = live[: len(data) + (len(live) - len(data)) // 2]
            _REAL_OS.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)

    def _durable_entries(self, cut: Cut, path: str, rel: str) -> Iterator[tuple[str, str, int, bool]]:
        for name, (ino, is_dir) in sorted(cut.dirs.get(path, {}).items()):
            yield rel, name, ino, is_dir
            if is_dir:
                yield from self._durable_entries(cut, os.path.join(path, name), os.path.join(rel, name))
