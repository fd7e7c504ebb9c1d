"""What every route module shares: the ``Api`` a router is built on, JSON answers (a write's with
its ``Eidetica-Written`` header), the request-body base model and the models several resources use."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from ..._remote.wire import WRITTEN_HEADER, error_body, floor_from_json, status_of
from ..._store.asof import PastViews
from ..._store.audit import acting
from ...memory import Memory
from .._keys import KeyStore

__all__ = ["Api", "SweepIn"]


def _json(obj: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type="application/json")


def _wrote(m: Memory, obj: Any, status: int = 200, written: dict[int, int] | None = None) -> Response:
    """A write's answer, with the offsets the serving handle's writes reached right after it (``Eidetica-Written``).

    ``m.written`` covers this write (its offsets are noted before the write returns) and holds
    committed offsets only; a client folds it into its ``written`` (another handle's ``min_offset``).
    """
    r = _json(obj, status)
    r.headers[WRITTEN_HEADER] = msgspec.json.encode(m.written if written is None else written).decode()
    return r


def _err(e: BaseException) -> Response:
    return _json(error_body(e), status_of(e))


class _Body(BaseModel):
    """Request bodies: unknown fields are refused (a typo, or an attempt to name a tenant)."""

    model_config = ConfigDict(extra="forbid")


class SweepIn(_Body):
    """Decay/prune facts as of ``now``."""

    now: dt.datetime | None = None


def _set(model: BaseModel) -> dict[str, Any]:
    """The fields the caller sent (the facade's defaults apply to the rest)."""
    out = model.model_dump(exclude_unset=True)
    if out.get("recency_half_life") is not None:
        out["recency_half_life"] = dt.timedelta(seconds=out["recency_half_life"])
    if "min_offset" in out:
        out["min_offset"] = floor_from_json(out["min_offset"])
    return out


def _session_info(h: Any) -> dict[str, Any]:
    return {"session_id": h.session_id, "user": h.user, "last_sequence": h._run_start, "messages": len(h)}


@dataclasses.dataclass
class Api:
    """What the routers are built on: the served memory, its keys, and the tenant's memory per request."""

    memory: Memory  # the store's single writer (the default tenant's handle)
    keys: KeyStore | None
    authenticate: Callable[[Request], str]
    tenant_view: Callable[[str], Memory]
    pasts: PastViews = dataclasses.field(default_factory=PastViews)
    M: Any = None  # Depends(api.mem): the route's memory (set after construction)

    async def mem(self, request: Request) -> Memory:
        """The request's tenant's memory; with ``?as_of=``, a read-only view of a past moment (writes: ReadOnly)."""
        m = self.tenant_view(self.authenticate(request))
        at = request.query_params.get("as_of")  # a read as of a past moment: a read-only view (writes: ReadOnly)
        return m if at is None else await asyncio.to_thread(self.pasts.get, m, at)

    def asking(self, request: Request) -> Any:
        """Record who asks (the API key's name) and the request id on the deletions this request makes."""
        keys = self.keys
        auth = request.headers.get("authorization", "")
        name = keys.name_of(auth[7:].strip()) if keys is not None and auth[:7].lower() == "bearer " else ""
        return acting(name, request.headers.get("x-request-id") or uuid.uuid4().hex)
