"""The projection port, the search hit record, and small helpers shared by projections."""

from __future__ import annotations

import abc
import datetime as dt
import errno
import functools
import inspect
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from ..errors import CorruptIndex, EideticaError
from ..events import RecordedEvent
from ..events._segments import fsync_dir  # one copy, in the lowest layer that needs it

__all__ = ["Projection", "SearchHit", "atomic_write_json", "read_json", "fsync_dir", "engine_boundary", "UTC"]

UTC = dt.timezone.utc


class Projection(abc.ABC):
    """Port: a fold of the log into some queryable output.

    ``apply`` must be idempotent (applying the same events twice changes nothing), and
    ``save_checkpoint`` is called by the Projector only after the output of the events it
    covers is durable, so a crash between the two replays harmlessly.
    """

    name: str = "projection"

    @abc.abstractmethod
    def apply(self, events: Sequence[RecordedEvent]) -> None:
        """Fold a batch of events (in log order within each partition) into the output."""

    @abc.abstractmethod
    def checkpoint(self) -> dict[int, int]:
        """Partition -> next offset to apply (a missing partition means 0)."""

    @abc.abstractmethod
    def save_checkpoint(self, checkpoint: dict[int, int]) -> None:
        """Record the checkpoint; called after the output of the events it covers is durable."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Drop every output and the checkpoint (before a rebuild)."""

    def maintain(self, force: bool = False) -> None:
        """Housekeeping the Projector runs when caught up; ``force`` skips rate limits (default: nothing)."""

    def begin_rebuild(self) -> None:
        """Called by ``Projector.rebuild`` after ``reset``, before replaying the log (default: nothing).

        A projection may then write in bulk and keep checkpoints in memory, as long as the
        saved checkpoint never covers output that is not durable.
        """

    def end_rebuild(self, completed: bool = True) -> None:
        """Called after the replay: make everything durable and save the checkpoint, or, when
        the replay failed (``completed`` False), return to a state its saved checkpoint describes
        (default: nothing)."""

    def write_snapshot(self, *, closing: bool = False) -> str | None:
        """Save in-memory output with its checkpoint now (closing: only when worth it); returns
        where, or None (default: nothing to snapshot, the output is durable by itself)."""
        return None

    def close(self) -> None:
        """Release files and threads (default: nothing)."""


class SearchHit(msgspec.Struct, kw_only=True):
    """One search result row.

    ``score`` depends on the mode: hybrid = calibrated fused score (``_ranking.calibrate``: the
    hit's share of the best ranking score times the best candidate's absolute relevance in
    [0, 1], comparable across queries; raw fused score with ``calibrate=False``); vector = cosine
    similarity (1 - cosine distance, in [-1, 1]); text = BM25 / best BM25 of the query, in
    (0, 1]. ``vector_score`` (cosine similarity) and ``text_score`` (raw BM25) are the
    un-normalised inputs, 0.0 when the row was not in that candidate list.
    """

    id: str
    kind: str
    text: str
    score: float
    time: dt.datetime
    tenant: str
    user_id: str
    session_id: str
    category: str
    confidence: float
    source_id: str
    metadata: dict[str, Any]
    vector_score: float = 0.0
    text_score: float = 0.0


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to ``path`` atomically (temp file, fsync, rename, fsync dir)."""
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(d)


def read_json(path: str, default: Any = None) -> Any:
    """Read a JSON file, or ``default`` when it does not exist; ``CorruptIndex`` when it is not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError: damaged bytes
        raise CorruptIndex(path, f"{type(e).__name__}: {e}") from e


# What LanceDB (RuntimeError "lance error", OSError), Tantivy (ValueError) and pyarrow
# (ArrowInvalid, ArrowIOError) raise when the files they read are damaged or missing.
_DAMAGE = (OSError, RuntimeError, ValueError)
# Not damage: the environment. Rebuilding would not help, and would throw away a good index.
_NOT_DAMAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EMFILE})

_C = TypeVar("_C", bound=type)


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(self, *args, **kw)
        except EideticaError:
            raise
        except _DAMAGE as e:
            if isinstance(e, OSError) and e.errno in _NOT_DAMAGE_ERRNOS:
                raise
            where = getattr(self, "path", None) or getattr(self, "root", None) or type(self).__name__
            raise CorruptIndex(str(where), f"{type(e).__name__}: {e}") from e

    return call


def engine_boundary(cls: _C) -> _C:
    """Class decorator for an engine adapter: the damage its engine reports becomes ``CorruptIndex``.

    Only the engines' own error types are translated (a plain bug, a ``TypeError`` say,
    propagates as it is), so that nothing but damage triggers a rebuild. Generators are
    left alone (their errors surface during iteration, on rebuild paths).
    """
    for name, fn in list(vars(cls).items()):
        if inspect.isfunction(fn) and not inspect.isgeneratorfunction(fn):
            setattr(cls, name, _guard(fn))
    return cls
