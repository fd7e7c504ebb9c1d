"""``/v1/items``: ``Memory.items`` over HTTP, in the key's tenant (the key-value store under framework adapters:
LangGraph's BaseStore)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import Response

from ...memory import Memory
from .common import Api, SweepIn, _Body, _json, _set, _wrote

__all__ = ["router"]


class ItemsPutIn(_Body):
    """Item writes (``Memory.items.put``): namespace, key, value (null deletes), user, texts, ttl."""

    ops: Any = None


class ItemGetIn(_Body):
    """One item by namespace and key."""

    namespace: Any = None
    key: Any = None
    refresh_ttl: Any = False
    omit_expired: Any = False


class ItemSearchIn(_Body):
    """Items under a namespace prefix, filtered (LangGraph's operators, as data), ranked by a query."""

    prefix: Any = ()
    query: Any = None
    filter: Any = None
    limit: Any = 10
    offset: Any = 0
    refresh_ttl: Any = False
    omit_expired: Any = False


class ItemRefIn(_Body):
    """An item named by namespace and key."""

    namespace: Any = None
    key: Any = None


class ItemTouchIn(_Body):
    """Items whose TTL to refresh."""

    items: list[ItemRefIn]


def router(api: Api) -> APIRouter:
    """The items' routes."""
    r = APIRouter()
    M = api.M

    @r.post("/v1/items", tags=["items"], status_code=201)
    def put_items(body: ItemsPutIn, m: Memory = M) -> Response:
        """Put or delete many items in one call per owning user; returns the last offset."""
        return _wrote(m, {"offset": m.items.put(body.ops)}, 201)

    @r.post("/v1/items/get", tags=["items"])
    def get_item(body: ItemGetIn, m: Memory = M) -> Response:
        """The item at (namespace, key), or null."""
        found = m.items.get(body.namespace, body.key, refresh_ttl=body.refresh_ttl, omit_expired=body.omit_expired)
        return _wrote(m, found) if body.refresh_ttl else _json(found)  # refreshing a TTL writes

    @r.post("/v1/items/search", tags=["items"])
    def search_items(body: ItemSearchIn, m: Memory = M) -> Response:
        """``[item, score]`` pairs: hybrid search with a query, else newest update first."""
        kw = _set(body)
        found = m.items.search(kw.pop("prefix", ()), **kw)
        return _wrote(m, found) if body.refresh_ttl else _json(found)  # refreshing a TTL writes

    @r.get("/v1/items/namespaces", tags=["items"])
    def item_namespaces(omit_expired: bool = False, m: Memory = M) -> Response:
        """Namespaces holding at least one item (with ``omit_expired``, one not expired), sorted."""
        return _json(m.items.namespaces(omit_expired=omit_expired))

    @r.get("/v1/items/embedder", tags=["items"])
    def item_embedder(m: Memory = M) -> Response:
        """The model id and dimension item texts are embedded with."""
        model_id, dim = m.items.embedder()
        return _json({"model_id": model_id, "dim": dim})

    @r.post("/v1/items/touch", tags=["items"])
    def touch_items(body: ItemTouchIn, m: Memory = M) -> Response:
        """Refresh the TTL of these items (those that exist); returns how many were found."""
        found = [it for it in (m.items.get(r.namespace, r.key) for r in body.items) if it is not None]
        m.items.touch(found)
        return _wrote(m, {"touched": len(found)})

    @r.post("/v1/items/sweep", tags=["items"])
    def sweep_items(body: SweepIn = Body(SweepIn()), m: Memory = M) -> Response:
        """Delete every expired item of the tenant; returns how many."""
        return _wrote(m, {"deleted": m.items.sweep(body.now)})
    return r
