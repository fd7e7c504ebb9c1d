"""Validation on msgspec: raw values converted into a typed struct, errors as ``InvalidInput(field)``.

A struct's annotations say what a value must be (``Annotated[float, Meta(ge=0, le=1)]``,
``Literal[...]``, ``tuple[...]``); ``msgspec.convert`` checks them, and ``validated`` turns
its ``ValidationError`` into the ``InvalidInput`` every API refusal is, naming the field from
the error's path (``$.neighbors[1]`` -> ``neighbors``). A struct's ``__post_init__`` may raise
``InvalidInput`` itself for what a type cannot say (a positive ``timedelta``); it comes out as is.

Known msgspec 0.19-0.22 trap: a constrained float in a union with a fixed-length tuple
(``Annotated[float, Meta(ge=0)] | tuple[float, float]``) reads garbage constraints and can crash
the interpreter; write the tuple as ``Annotated[tuple[X, ...], Meta(min_length=n, max_length=n)]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from ..errors import InvalidInput

__all__ = ["validated", "field_of"]

T = TypeVar("T")

_PATH = re.compile(r" - at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_UNKNOWN = re.compile(r"(?:unknown|missing required) field `([^`]+)`")


def field_of(error: msgspec.ValidationError, default: str = "value") -> str:
    """The top-level field a msgspec validation error names (``$.field...``, or an unknown/missing field)."""
    text = str(error)
    m = _PATH.search(text) or _UNKNOWN.search(text)
    return m.group(1) if m else default


def validated(kind: type[T], raw: Mapping[str, Any], *, strict: bool = True, name: str = "value") -> T:
    """``raw`` (field -> value) converted into ``kind``; a bad value raises ``InvalidInput`` naming its field.

    ``strict=False`` also takes the wire's forms (numbers as strings, seconds for a timedelta).
    ``name``: the field reported when the error names none (``raw`` is not a mapping).
    """
    try:
        return msgspec.convert(raw, kind, strict=strict)
    except msgspec.ValidationError as e:
        if isinstance(e.__cause__, InvalidInput):  # raised by the struct's __post_init__
            raise e.__cause__ from None
        field = field_of(e, name)
        value = raw.get(field) if isinstance(raw, Mapping) else raw
        message = str(e).split(" - at `$")[0]
        raise InvalidInput(field, message, value) from None
