"""Snapshots of in-memory projections: Arrow IPC files with a checksummed manifest.

A snapshot is a directory ``<dir>/<name>-<events:016d>/`` holding one Arrow IPC *file*
per table (``pyarrow.ipc.open_file`` or any Arrow tool reads them) and a
``manifest.json`` with the projection's checkpoint, the schema version and the sha256 of
every table file. It is written into a temporary directory, fsynced, then renamed into
place (readers never see half a snapshot), and older snapshots are removed afterwards so
none outlives a ``compact`` with forgotten text in it.

Loading checks the format name, the schema version and every checksum, and that the
checkpoint does not lie beyond the log; a snapshot failing any check is ignored with a
warning and the next older one (or a full replay) is used: the log is the truth.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._util.fs import replace
from ._base import UTC, fsync_dir

__all__ = ["SnapshotStore", "LoadedSnapshot", "SnapshotWarning"]

FORMAT = "eidetica-snapshot"


def _digest(manifest: dict[str, Any]) -> str:
    """sha256 of a manifest's content without its own checksum field."""
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class SnapshotWarning(UserWarning):
    """A snapshot was refused (damaged, stale format, ahead of the log); the log is replayed instead."""


class LoadedSnapshot:
    """A verified snapshot: its tables, checkpoint, and when it was written."""

    def __init__(self, path: Path, tables: dict[str, pa.Table], manifest: dict[str, Any]) -> None:
        self.path = path
        self.tables = tables
        self.manifest = manifest
        self.checkpoint = {int(k): int(v) for k, v in manifest["checkpoint"].items()}
        self.created = dt.datetime.fromisoformat(manifest["created"])
        self.meta: dict[str, Any] = manifest.get("meta", {})


class SnapshotStore:
    """Where one projection's snapshots live; writes them atomically and loads the newest valid one."""

    def __init__(self, directory: str | os.PathLike[str], name: str, schema_version: int) -> None:
        self.dir = Path(directory)
        self.name = name
        self.schema_version = schema_version

    def _candidates(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        found = [p for p in self.dir.iterdir() if p.is_dir() and p.name.startswith(self.name + "-")
                 and p.name[len(self.name) + 1:].isdigit()]  # not a temp dir or a ".old" left by a crash
        return sorted(found, key=lambda p: p.name, reverse=True)

    def write(self, tables: Mapping[str, pa.Table], checkpoint: Mapping[int, int], meta: dict[str, Any] | None = None) -> Path:
        """Write a snapshot atomically (temp dir, fsync, rename) and drop the older ones."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        events = sum(checkpoint.values())
        final = self.dir / f"{self.name}-{events:016d}"
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{self.name}-", dir=self.dir))
        try:
            files: dict[str, dict[str, Any]] = {}
            for tname, table in tables.items():
                fname = f"{tname}.arrow"
                sink = pa.BufferOutputStream()
                with pa.ipc.new_file(sink, table.schema) as w:
                    w.write_table(table)
                data = sink.getvalue()
                with open(tmp / fname, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                files[fname] = {"sha256": hashlib.sha256(data).hexdigest(), "rows": table.num_rows, "bytes": data.size}
            manifest = {
                "format": FORMAT,
                "projection": self.name,
                "schema_version": self.schema_version,
                "checkpoint": {str(k): int(v) for k, v in sorted(checkpoint.items())},
                "created": dt.datetime.now(UTC).isoformat(),
                "files": files,
                "meta": meta or {},
            }
            # the manifest checks itself too: a flipped digit in a checkpoint would skip events
            manifest["sha256"] = _digest(manifest)
            with open(tmp / "manifest.json", "w") as f:
                json.dump(manifest, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(str(tmp))
            if final.exists():  # same checkpoint written again (rebuild, compact): replace it
                old = final.with_name(final.name + ".old")
                shutil.rmtree(old, ignore_errors=True)
                replace(final, old)
                shutil.rmtree(old, ignore_errors=True)
            replace(tmp, final)
            fsync_dir(str(self.dir))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._prune(keep=final)
        return final

    def _prune(self, keep: Path) -> None:
        """Remove every other snapshot and leftover temp dir (older ones may hold forgotten text)."""
        for p in self.dir.iterdir():
            if p != keep and (p.name.startswith(self.name + "-") or p.name.startswith(f".tmp-{self.name}-")):
                shutil.rmtree(p, ignore_errors=True)
        fsync_dir(str(self.dir))

    def clear(self) -> None:
        """Remove every snapshot of this projection."""
        for p in self._candidates():
            shutil.rmtree(p, ignore_errors=True)

    def load(self, heads: Mapping[int, int] | None = None) -> LoadedSnapshot | None:
        """The newest snapshot passing every check, or None; refused ones are warned about."""
        for path in self._candidates():
            try:
                return self._load(path, heads)
            except Exception as e:  # noqa: BLE001 - any damage: warn, try an older one, then replay
                warnings.warn(f"eidetica: ignoring snapshot {path}: {e}; replaying the log instead", SnapshotWarning,
                              stacklevel=3)
        return None

    def newest(self) -> Path | None:
        """The newest snapshot directory on disk (unverified), or None."""
        c = self._candidates()
        return c[0] if c else None

    def _load(self, path: Path, heads: Mapping[int, int] | None) -> LoadedSnapshot:
        try:
            with open(path / "manifest.json") as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"unreadable manifest ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("sha256") != _digest(manifest):
            raise ValueError("the manifest does not match its checksum")
        if manifest.get("format") != FORMAT or manifest.get("projection") != self.name:
            raise ValueError(f"not a {self.name} snapshot")
        if manifest.get("schema_version") != self.schema_version:
            raise ValueError(f"schema version {manifest.get('schema_version')} is not {self.schema_version}")
        checkpoint = {int(k): int(v) for k, v in manifest["checkpoint"].items()}
        if heads is not None:
            for part, off in checkpoint.items():
                if part not in heads or off > heads[part]:
                    raise ValueError(f"its checkpoint {off} in partition {part} is beyond the log's head {heads.get(part)}")
        tables: dict[str, pa.Table] = {}
        for fname, info in manifest["files"].items():
            with open(path / fname, "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != info["sha256"]:
                raise ValueError(f"{fname} does not match its checksum")
            table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
            if table.num_rows != info["rows"]:
                raise ValueError(f"{fname} has {table.num_rows} rows, the manifest says {info['rows']}")
            tables[fname[: -len(".arrow")]] = table
        return LoadedSnapshot(path, tables, manifest)
