"""Request body limits: a body past its limit is refused with 413 (``InvalidInput`` body), also a chunked one."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response

from .._remote.wire import error_body
from ..errors import InvalidInput
from .routes.common import _json


def _too_large(limit: int) -> Response:
    return _json(error_body(InvalidInput("body", f"is larger than the limit of {limit} bytes")), 413)


TOO_LARGE = "eidetica.too_large"  # set in a request's scope (to the limit) once its body passed it


class _TooLarge(Exception):
    pass


def _limited(receive: Any, limit: int, scope: dict[str, Any]) -> Any:
    """A receive that stops a chunked body once it passes ``limit`` bytes (and marks the scope: FastAPI
    turns an error while it reads a body into a 400, which the handlers turn back into this 413)."""
    seen = 0

    async def inner() -> dict[str, Any]:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                scope[TOO_LARGE] = limit
                raise _TooLarge()
        return message

    return inner


async def _send(send: Any, response: Response) -> None:
    await response({"type": "http"}, None, send)  # type: ignore[arg-type]
