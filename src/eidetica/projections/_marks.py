"""The marks file of a chunk index: deletes and confidence changes remembered for rows that arrive late."""

from __future__ import annotations

import json
import os

from .._util.fs import write_atomic
from ._rows import Pred, Row

__all__ = ["Marks"]


class Marks:
    """Durable memory of deletes and confidence changes, for rows that arrive late.

    ``marks.jsonl`` is append-only; a torn last line (crash) is ignored and the events
    behind it are replayed anyway, because the checkpoint is written after ``sync()``.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.dels: dict[tuple[str, str, str], tuple[int, tuple[str, ...] | None]] = {}
        self.confs: dict[tuple[str, str], tuple[int, float]] = {}
        self._buf: list[str] = []
        self._unsynced = False
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                lines = f.readlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                rec = json.loads(line)
                if rec[0] == "d":
                    self._del(rec[1], rec[2], rec[3], int(rec[4]), tuple(rec[5]) if rec[5] is not None else None)
                elif rec[0] == "c":
                    self._conf(rec[1], rec[2], int(rec[3]), float(rec[4]))
            except (ValueError, IndexError, TypeError, KeyError):
                continue  # torn tail

    def _del(self, tenant: str, field: str, value: str, time: int, kinds: tuple[str, ...] | None) -> bool:
        k = (tenant, field, value)
        old = self.dels.get(k)
        if old is not None and old[0] >= time:
            return False
        self.dels[k] = (time, kinds)
        return True

    def _conf(self, tenant: str, source: str, time: int, conf: float) -> bool:
        old = self.confs.get((tenant, source))
        if old is not None and old[0] > time:
            return False
        self.confs[(tenant, source)] = (time, conf)
        return True

    def add_delete(self, p: Pred) -> None:
        """Remember a delete (the latest per tenant/field/value)."""
        if self._del(p.tenant, p.field, p.value, p.time, p.kinds):
            self._buf.append(json.dumps(["d", p.tenant, p.field, p.value, p.time, p.kinds]))

    def add_conf(self, tenant: str, source: str, time: int, conf: float) -> bool:
        """Remember a confidence change; False when an even later one is known (stale)."""
        if not self._conf(tenant, source, time, conf):
            return False
        self._buf.append(json.dumps(["c", tenant, source, time, conf]))
        return True

    def kills(self, row: Row) -> bool:
        """Whether a delete newer than the row covers it."""
        for field, value in (("source_id", row.source_id), ("user_id", row.user_id), ("session_id", row.session_id)):
            if not value:
                continue
            m = self.dels.get((row.tenant, field, value))
            if m is not None and row.etime <= m[0] and (m[1] is None or row.kind in m[1]):
                return True
        return False

    def conf_for(self, row: Row) -> float | None:
        """A confidence change newer than the row, if any."""
        if not row.source_id:
            return None
        c = self.confs.get((row.tenant, row.source_id))
        return c[1] if c is not None and c[0] >= row.etime else None

    def flush(self) -> None:
        """Append buffered marks to the file (fsync happens in ``sync``)."""
        if not self._buf:
            return
        with open(self.path, "a") as f:
            f.write("\n".join(self._buf) + "\n")
        self._buf = []
        self._unsynced = True

    def sync(self) -> None:
        """fsync the marks file if anything was appended since the last sync."""
        self.flush()
        if self._unsynced:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def rewrite(self) -> None:
        """Rewrite the file with one line per mark (drops superseded lines)."""
        self.flush()
        lines = [json.dumps(["d", t, fld, v, time, kinds]) + "\n" for (t, fld, v), (time, kinds) in self.dels.items()]
        lines += [json.dumps(["c", t, s, time, conf]) + "\n" for (t, s), (time, conf) in self.confs.items()]
        write_atomic(self.path, "".join(lines), mode=0o644)
        self._unsynced = False

    def reset(self) -> None:
        """Forget every mark and truncate the file."""
        self.dels.clear()
        self.confs.clear()
        self._buf = []
        with open(self.path, "w") as f:
            f.flush()
            os.fsync(f.fileno())
        self._unsynced = False
