"""The one exception tree of eidetica.

Every error eidetica raises on purpose is an ``EideticaError``; the tree is flat so a
caller catches either the root or one precise leaf::

    EideticaError
    ├── InvalidInput           bad argument; names the field; nothing was written
    ├── WrongExpectedVersion   optimistic concurrency check failed; nothing was written
    ├── EventIdConflict        an event id already names another event of the tenant; nothing was written
    ├── CorruptLog             a log segment failed verification; names file and offset
    ├── CorruptIndex           an index's files are damaged; rebuilt from the log (automatically)
    ├── UnknownEventType       an event tag this version cannot decode (newer writer?)
    ├── StoreLocked            another process holds the store open for writing
    ├── EmbeddingModelChanged  the store was built with another embedder
    ├── DimensionMismatch      a vector has the wrong length for the store
    ├── NotFound               the id names nothing (in this tenant)
    ├── Unauthorized           a server request without a valid API key (missing, unknown, revoked)
    ├── ProviderError          an embedding or LLM provider failed after retries
    ├── StorageError           the disk refused a write (full, read-only, I/O error); carries errno and path
    ├── ReplicaBehind          a view replica did not reach a read's offset in time (no stale answer)
    └── Unavailable            ``eidetica.connect()`` could not reach the server (refused, timed out); says what to retry
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EideticaError",
    "InvalidInput",
    "WrongExpectedVersion",
    "EventIdConflict",
    "CorruptLog",
    "CorruptIndex",
    "UnknownEventType",
    "StoreLocked",
    "EmbeddingModelChanged",
    "DimensionMismatch",
    "NotFound",
    "ProviderError",
    "StorageError",
    "Unauthorized",
    "ReplicaBehind",
    "ReadOnly",
    "Unavailable",
]


class EideticaError(Exception):
    """Root of every error eidetica raises on purpose."""

    _init_args: tuple[Any, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the constructor's arguments: errors cross process boundaries (Ray).
        return (type(self), self._init_args or self.args)


class InvalidInput(EideticaError, ValueError):
    """An argument is invalid; ``field`` names it and nothing was changed."""

    def __init__(self, field: str, problem: str, value: Any = None) -> None:
        self._init_args = (field, problem, value)
        self.field = field
        self.problem = problem
        self.value = value
        super().__init__(f"invalid {field}: {problem}")


class WrongExpectedVersion(EideticaError):
    """An append's ``expected_version`` did not match the stream; nothing was written."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        self._init_args = (stream, expected, actual)
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream!r}: expected version {_version_name(expected)}, "
            f"actual {_version_name(actual)}"
        )


class EventIdConflict(EideticaError):
    """The caller's event id already names another event of its tenant (other stream or content); nothing was written.

    A repeated id is a retry only when it carries the same event; anything else would be
    acknowledged without being stored.
    """

    def __init__(self, event_id: str, problem: str = "already names a different event") -> None:
        self._init_args = (str(event_id), problem)
        self.event_id = str(event_id)
        self.problem = problem
        super().__init__(f"event id {event_id} {problem}; give a new event a new id")


class CorruptLog(EideticaError):
    """A log segment failed verification at ``path`` near byte ``position``."""

    def __init__(self, path: str, position: int, problem: str, offset: int | None = None) -> None:
        self._init_args = (path, position, problem, offset)
        self.path = path
        self.position = position
        self.offset = offset
        self.problem = problem
        at = f"byte {position}" + (f", event offset {offset}" if offset is not None else "")
        super().__init__(f"corrupt log segment {path} at {at}: {problem}")


class CorruptIndex(EideticaError):
    """An index's files at ``path`` are damaged (the engine could not read them).

    The log is the truth: this, and only this, makes the store rebuild the index from it.
    """

    def __init__(self, path: str, problem: str) -> None:
        self._init_args = (path, problem)
        self.path = path
        self.problem = problem
        super().__init__(f"damaged index at {path}: {problem}")


class UnknownEventType(EideticaError):
    """A payload carries an event tag this version does not know and cannot upcast."""

    def __init__(self, tag: str) -> None:
        self._init_args = (tag,)
        self.tag = tag
        super().__init__(
            f"unknown event type {tag!r}: written by a newer eidetica, or an upcaster is missing"
        )


class StoreLocked(EideticaError):
    """Another process (or handle) holds the store open for writing."""

    def __init__(self, path: str) -> None:
        self._init_args = (path,)
        self.path = path
        super().__init__(
            f"store {path} is open for writing elsewhere; close it there, or open read-only"
        )


class EmbeddingModelChanged(EideticaError):
    """The store's vectors come from another embedder than the one given."""

    def __init__(self, stored: str, given: str, path: str | None = None) -> None:
        import shlex

        self._init_args = (stored, given, path)
        self.stored = stored
        self.given = given
        self.path = path
        at = f" --path {shlex.quote(path)}" if path else ""
        self.hint = f"eidetica reembed{at} --from {shlex.quote(stored)} --model {shlex.quote(given)}"
        super().__init__(
            f"store was embedded with {stored!r} but {given!r} was given; "
            f"run `{self.hint}` to switch, or open with the stored model"
        )


class DimensionMismatch(EideticaError):
    """A vector's length differs from the store's dimension."""

    def __init__(self, expected: int, actual: int, hint: str = "") -> None:
        self._init_args = (expected, actual, hint)
        self.expected = expected
        self.actual = actual
        self.hint = hint  # a command that fixes it, when there is one (another embedder: reembed)
        super().__init__(f"vector has dimension {actual}, the store expects {expected}"
                         + (f"; run `{hint}` to switch, or open with the stored model" if hint else ""))


class NotFound(EideticaError, KeyError):
    """The id names nothing in this tenant."""

    def __init__(self, what: str, ident: str) -> None:
        self._init_args = (what, ident)
        self.what = what
        self.ident = ident
        super().__init__(f"{what} {ident!r} not found")

    def __str__(self) -> str:
        return str(self.args[0])


class ProviderError(EideticaError):
    """An embedding or LLM provider failed (after its retries)."""


class StorageError(EideticaError, OSError):
    """The disk refused a write (``errno``, ``path``); nothing of the failed write was kept. Also an ``OSError``."""

    def __init__(self, errno: int | None, problem: str, path: str) -> None:
        self._init_args = (errno, problem, path)
        OSError.__init__(self, errno, f"cannot write to {path}: {problem}")
        self.errno = errno
        self.problem = problem
        self.path = path

    def __str__(self) -> str:
        return f"cannot write to {self.path}: {self.problem}" + (f" (errno {self.errno})" if self.errno else "")


class Unauthorized(EideticaError):
    """A request to ``eidetica serve`` carried no valid API key (missing, unknown or revoked)."""

    def __init__(self, problem: str = "a valid API key is required") -> None:
        self._init_args = (problem,)
        self.problem = problem
        super().__init__(problem)


def _version_name(v: int) -> str:
    return {-1: "NO_STREAM", -2: "ANY", -4: "STREAM_EXISTS"}.get(v, str(v))


class ReplicaBehind(EideticaError):
    """A view replica did not apply the log up to a read's ``min_offsets`` within ``timeout`` seconds."""

    def __init__(self, replica: str, wanted: dict[int, int], applied: dict[int, int], timeout: float) -> None:
        self._init_args = (replica, wanted, applied, timeout)
        self.replica = replica
        self.wanted = wanted
        self.applied = applied
        self.timeout = timeout
        super().__init__(
            f"view replica {replica} applied {applied} but the read needs {wanted} (next offset per partition) "
            f"after {timeout:g}s; retry, or raise replica_timeout"
        )


class Unavailable(EideticaError):
    """The server could not be reached or did not answer (connection refused, timeout) after the client's retries.

    ``sent`` is False when the request never left (nothing was done: retry freely); True when
    it may have arrived (an append or ``remember`` is safe to retry: ids make it exactly-once).
    """

    def __init__(self, url: str, request: str, problem: str, sent: bool) -> None:
        self._init_args = (url, request, problem, sent)
        self.url = url
        self.request = request
        self.problem = problem
        self.sent = sent
        what = ("the request may have reached the server: retry the call (appends and remember are idempotent)"
                if sent else "nothing was sent: retry the call once the server is up")
        super().__init__(f"cannot reach eidetica at {url} ({request}): {problem}; {what}")


class ReadOnly(EideticaError):
    """A write through a read-only handle (a past moment: ``m.as_of(...)``); nothing was written."""

    def __init__(self, what: str = "this handle") -> None:
        self._init_args = (what,)
        self.what = what
        super().__init__(f"{what} is read-only")
