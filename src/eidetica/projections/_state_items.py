"""The state's framework store items: one value per (namespace, key) (a part of ``StateProjection``, issue 41).

Folds of the ``items`` events, and the queries on them; the tombstones, the lock and the log are
``StateBase``'s. ``StateProjection`` composes the five aggregates and routes each event to its fold.
"""

from __future__ import annotations

import msgspec

from ..events import RecordedEvent
from ..events import types as ev
from ._records import ItemInfo
from ._state_base import StateBase


class ItemFolds(StateBase):
    """The items aggregate of the state: its maps, folds and queries."""

    _items: dict[tuple[str, tuple[str, ...]], dict[str, ItemInfo]]  # (tenant, namespace) -> key -> item
    _item_at: dict[tuple[str, str], tuple[tuple[str, ...], str, int]]  # (tenant, item id) -> (ns, key, version)

    def _reset_items(self) -> None:
        """Empty this aggregate."""
        self._items = {}
        self._item_at = {}

    def _drop_item(self, tenant: str, iid: str) -> None:
        at = self._item_at.pop((tenant, iid), None)
        if at is None:
            return
        bucket = self._items.get((tenant, at[0]))
        if bucket is not None:
            bucket.pop(at[1], None)
            if not bucket:
                del self._items[(tenant, at[0])]

    def _item_seen(self, rec: RecordedEvent, iid: str) -> bool:
        """Whether this item event (or a later one) is already folded: replays change nothing."""
        at = self._item_at.get((rec.tenant, iid))
        return at is not None and at[2] >= rec.version

    def _on_item_put(self, rec: RecordedEvent, e: ev.ItemPut) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "items") or self._item_seen(rec, e.item_id):
            return
        ns = tuple(e.namespace)
        bucket = self._items.setdefault((rec.tenant, ns), {})
        old = bucket.get(e.key)
        bucket[e.key] = ItemInfo(
            item_id=e.item_id, user_id=e.user_id, namespace=ns, key=e.key, value=dict(e.value),
            created_at=old.created_at if old is not None else rec.time, updated_at=rec.time, indexed=e.indexed,
            ttl_minutes=e.ttl_minutes, expires_at=e.expires_at,
        )
        self._item_at[(rec.tenant, e.item_id)] = (ns, e.key, rec.version)

    def _on_item_touched(self, rec: RecordedEvent, e: ev.ItemTouched) -> None:
        at = self._item_at.get((rec.tenant, e.item_id))
        if at is None or at[2] >= rec.version:
            return
        bucket = self._items.get((rec.tenant, at[0]), {})
        it = bucket.get(at[1])
        if it is not None:
            bucket[at[1]] = msgspec.structs.replace(it, expires_at=e.expires_at)
        self._item_at[(rec.tenant, e.item_id)] = (at[0], at[1], rec.version)

    def _on_item_deleted(self, rec: RecordedEvent, e: ev.ItemDeleted) -> None:
        if not self._item_seen(rec, e.item_id):
            self._drop_item(rec.tenant, e.item_id)

    def item(self, tenant: str, namespace: tuple[str, ...], key: str) -> ItemInfo | None:
        """One framework store item, or None."""
        with self._lock:
            return self._items.get((tenant, tuple(namespace)), {}).get(key)

    def item_by_id(self, tenant: str, item_id: str) -> ItemInfo | None:
        """One framework store item by its id, or None."""
        with self._lock:
            at = self._item_at.get((tenant, item_id))
            return None if at is None else self._items.get((tenant, at[0]), {}).get(at[1])

    def item_namespaces(self, tenant: str) -> list[tuple[str, ...]]:
        """Namespaces of the tenant that hold at least one item, sorted."""
        with self._lock:
            return sorted(ns for (t, ns), b in self._items.items() if t == tenant and b)

    def items(self, tenant: str, prefix: tuple[str, ...] = ()) -> list[ItemInfo]:
        """Items of the tenant under a namespace prefix, newest update first."""
        n = len(prefix)
        with self._lock:
            out = [it for (t, ns), b in self._items.items() if t == tenant and ns[:n] == tuple(prefix) for it in b.values()]
        out.sort(key=lambda i: (i.updated_at, i.namespace, i.key), reverse=True)
        return out

    def _forget_user_items(self, rec: RecordedEvent, t: str, u: str) -> None:
        """Drop the user's items last updated no later than the forget."""
        for iid, (ns, key, _) in list(self._item_at.items()):
            if iid[0] != t:
                continue
            it = self._items.get((t, ns), {}).get(key)
            if it is not None and it.user_id == u and it.updated_at <= rec.time:
                self._drop_item(t, iid[1])
