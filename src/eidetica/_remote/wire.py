"""What crosses the HTTP boundary: the error body and its status, shared by server and client.

An error travels as ``{"error": <class name>, "field": ..., "message": ..., "args": [...]}``;
``args`` are the constructor's arguments, so the client raises the same class with the
same fields (as pickling does across Ray).

A write's answer carries the header ``Eidetica-Written``: ``{"partition": last offset}`` the
serving handle's writes had reached right after the write (committed offsets only), which the
client folds into its ``written``: another handle's ``min_offset`` (read-your-writes across servers).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any
from urllib.parse import quote

import msgspec

from .. import errors
from .._store.floor import floor_from_json  # the facade reads the same form (min_offset)

__all__ = ["STATUS", "error_body", "error_from_body", "MAX_BODY_BYTES", "MAX_IMPORT_BYTES", "WRITTEN_HEADER",
           "floor_from_json", "q"]

WRITTEN_HEADER = "eidetica-written"  # on a write's answer: the offsets it reached, {"partition": offset}

MAX_BODY_BYTES = 8 * 1024 * 1024  # a request body above this gets 413 (InvalidInput "body")
MAX_IMPORT_BYTES = 512 * 1024 * 1024  # POST /v1/import carries a whole export

STATUS: dict[type[BaseException], int] = {
    errors.InvalidInput: 400,
    errors.DimensionMismatch: 400,
    errors.Unauthorized: 401,
    errors.NotFound: 404,
    errors.WrongExpectedVersion: 409,
    errors.EventIdConflict: 409,
    errors.EmbeddingModelChanged: 409,
    errors.StoreLocked: 423,
    errors.ProviderError: 502,
    errors.CorruptLog: 500,
    errors.UnknownEventType: 500,
    errors.StorageError: 507,  # Insufficient Storage: the disk refused the write
    errors.ReplicaBehind: 503,  # Service Unavailable: the serving view replica is behind; retry
    errors.ReadOnly: 409,  # a write to a past moment (as_of)
}


def _plain(value: Any) -> Any:
    """A JSON-safe version of an error argument (the offending value may be anything)."""
    try:
        return msgspec.to_builtins(value)
    except (TypeError, ValueError, OverflowError):
        return repr(value)


def status_of(e: BaseException) -> int:
    """The HTTP status an error maps to (500 for anything unexpected)."""
    for cls in type(e).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(e: BaseException) -> dict[str, Any]:
    """The JSON body for an error; unexpected errors say nothing of the server's insides."""
    if not isinstance(e, errors.EideticaError):
        return {"error": "EideticaError", "field": None, "message": "internal server error", "args": []}
    args = list(e._init_args or e.args)
    return {
        "error": type(e).__name__,
        "field": getattr(e, "field", None),
        "message": str(e),
        "args": [_plain(a) for a in args],
    }


def _typed(cls: type, args: list[Any]) -> list[Any]:
    """Arguments back in the constructor's types where JSON changed them (``{"0": 9}`` for a ``dict[int, int]``)."""
    try:
        hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
        names = list(inspect.signature(cls).parameters)
    except Exception:  # noqa: BLE001 - an unresolvable hint: the arguments as they came
        return args
    out = []
    for i, arg in enumerate(args):
        hint = hints.get(names[i]) if i < len(names) else None
        try:
            out.append(arg if hint is None else msgspec.convert(arg, hint, strict=False))
        except (msgspec.ValidationError, TypeError):
            out.append(arg)
    return out


def error_from_body(status: int, body: Any) -> errors.EideticaError:
    """The exception an error body describes: the same class with the same fields when known."""
    if not isinstance(body, dict):
        return errors.EideticaError(f"HTTP {status}")
    name, message = body.get("error"), str(body.get("message") or f"HTTP {status}")
    cls = getattr(errors, name, None) if isinstance(name, str) and name in errors.__all__ else None
    if cls is None:
        return errors.EideticaError(message)
    try:
        return cls(*_typed(cls, list(body.get("args") or []))) if cls is not errors.EideticaError else cls(message)
    except TypeError:
        return errors.EideticaError(message)


def q(segment: str) -> str:
    """A path segment, escaped (ids may hold '/', '?', '#'); bad types fail on the server."""
    if not isinstance(segment, str):
        raise errors.InvalidInput("id", "must be a string", segment)
    return quote(segment, safe="") or "%20"
