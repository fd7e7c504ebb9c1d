"""``Memory.items``: the key-value item store that framework adapters (LangGraph) sit on.

Items are events (``ItemPut`` / ``ItemDeleted`` / ``ItemTouched`` in ``items:<tenant>:<user>``),
written by the owning user's ``ItemsActor``, folded into the state (values, times) and into the
chunk index (kind ``item``), so a query search is eidetica's hybrid search.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from ..actors._text import check_id
from ..errors import InvalidInput
from ..events.streams import parse_stream
from ..projections import ItemInfo
from ..projections._ranking import SEARCH_DEFAULTS
from .reembed import reembed
from .searching import search_hits, to_hit
from .store import Store

__all__ = ["Items", "ItemInfo", "check_namespace", "check_filter", "matches"]

_MAX_SCAN = 10_000  # chunk rows asked of the index at most, per search


def check_namespace(field: str, namespace: Any, *, allow_empty: bool = False) -> tuple[str, ...]:
    """A namespace as LangGraph validates it: a tuple of non-empty strings without '.' or NUL."""
    if isinstance(namespace, list):
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple) or (not namespace and not allow_empty):
        raise InvalidInput(field, "must be a non-empty tuple of strings", namespace)
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise InvalidInput(field, "labels must be non-empty strings without '.' or NUL", namespace)
    return namespace


_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
_ORDER = {"$gt": lambda a, b: a > b, "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def check_filter(field: str, flt: Any) -> dict[str, Any] | None:
    """A LangGraph search filter as data: ``{key: value}`` (equality, nested dicts and lists
    compared as JSON) or ``{key: {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}}``."""
    if flt is None:
        return None
    if not isinstance(flt, Mapping) or not all(isinstance(k, str) for k in flt):
        raise InvalidInput(field, "must be a dict of field names to values or {operator: value}", flt)

    def walk(path: str, v: Any) -> None:
        if isinstance(v, Mapping):
            ops = [k for k in v if isinstance(k, str) and k.startswith("$")]
            if ops:
                bad = [k for k in v if k not in _OPERATORS]
                if bad:
                    raise InvalidInput(path, f"unknown operator {bad[0]!r}; use one of {sorted(_OPERATORS)}", v)
                for op in ("$gt", "$gte", "$lt", "$lte"):
                    if op in v and (isinstance(v[op], bool) or not isinstance(v[op], (int, float))):
                        raise InvalidInput(f"{path}.{op}", "must be a number", v[op])
            else:
                for k, sub in v.items():
                    walk(f"{path}.{k}", sub)

    for k, v in flt.items():
        walk(f"{field}.{k}", v)
    return dict(flt)


def _compare(value: Any, want: Any) -> bool:
    """LangGraph's filter semantics (its stores compare JSONB-like; a missing or non-numeric
    value fails an order comparison rather than raising)."""
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            for op, target in want.items():
                if op == "$eq":
                    ok = value == target
                elif op == "$ne":
                    ok = value != target
                else:
                    try:
                        ok = _ORDER[op](float(value), float(target))
                    except (TypeError, ValueError):
                        ok = False
                if not ok:
                    return False
            return True
        return isinstance(value, Mapping) and all(_compare(value.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(want)
                and all(_compare(a, b) for a, b in zip(value, want)))
    return bool(value == want)


def matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a filter checked by ``check_filter``."""
    return flt is None or all(_compare(value.get(k), v) for k, v in flt.items())


def _check_ttl(field: str, ttl: Any) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
        raise InvalidInput(field, "must be a number of minutes > 0, or None", ttl)
    return float(ttl)


class Items:
    """The items of one tenant: put, get, search, list namespaces, TTL refresh and sweep."""

    def __init__(self, memory: Store) -> None:  # the Memory facade (imported by it: no import back)
        self._m = memory
        self._recovered = False

    def _users(self) -> list[str]:
        """Users of the tenant with an items stream."""
        return sorted({parse_stream(s)[2] for s in self._m.log.streams()  # type: ignore[attr-defined]
                       if s.startswith("items:") and parse_stream(s)[1] == self._m.tenant})

    def _recover(self) -> None:
        """Once per handle: build every item owner's actor, which embeds puts whose vectors a crash
        kept from the log (written behind the put); ``_sync`` then waits for them."""
        if not self._recovered:
            for u in self._users():
                self._m.runtime.items(self._m.tenant, u)
            self._recovered = True

    def _now(self) -> dt.datetime:
        return self._m.clock()

    def put(self, ops: Sequence[dict[str, Any]]) -> int:
        """Write items in one call per owning user; returns the last log offset (-1 when nothing was written).

        Each op: ``namespace`` (tuple), ``key`` (str), ``value`` (dict, or None to delete),
        ``user`` (the owner: its stream, and what ``forget_user`` covers), ``texts`` (the
        texts to embed and index; None: not searchable by query), ``ttl`` (minutes or None).
        """
        if isinstance(ops, (str, bytes, dict)) or not isinstance(ops, Sequence):
            raise InvalidInput("ops", "must be a list of dicts")
        by_user: dict[str, list[dict[str, Any]]] = {}
        for i, op in enumerate(ops):
            if not isinstance(op, dict):
                raise InvalidInput(f"ops[{i}]", "must be a dict")
            ns = check_namespace(f"ops[{i}].namespace", op.get("namespace"))
            key = op.get("key")
            if not isinstance(key, str):
                raise InvalidInput(f"ops[{i}].key", "must be a string", key)
            value = op.get("value")
            if value is not None and not isinstance(value, dict):
                raise InvalidInput(f"ops[{i}].value", "must be a dict or None", value)
            texts = op.get("texts")
            if texts is not None and (not isinstance(texts, list) or not all(isinstance(t, str) for t in texts)):
                raise InvalidInput(f"ops[{i}].texts", "must be a list of strings or None", texts)
            user = check_id(f"ops[{i}].user", op.get("user"))
            ttl = _check_ttl(f"ops[{i}].ttl", op.get("ttl"))
            by_user.setdefault(user, []).append(
                {"namespace": ns, "key": key, "value": value, "texts": [t for t in texts if t.strip()] if texts is not None else None,
                 "ttl": ttl}
            )
        last = -1
        for user, items in by_user.items():
            last = max(last, self._m.runtime.items(self._m.tenant, user).put_many(items))
        return last

    def _live(self, it: ItemInfo | None, omit_expired: bool) -> bool:
        return it is not None and not (omit_expired and it.expires_at is not None and it.expires_at <= self._now())

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool = False, omit_expired: bool = False) -> ItemInfo | None:
        """The item at (namespace, key), or None."""
        if isinstance(namespace, str) or not isinstance(namespace, Sequence):
            raise InvalidInput("namespace", "must be a tuple of strings", namespace)
        ns = check_namespace("namespace", tuple(namespace))
        if not isinstance(key, str):
            raise InvalidInput("key", "must be a string", key)
        self._m.gate.sync()
        it = self._m.state.item(self._m.tenant, ns, key)
        if not self._live(it, omit_expired):
            return None
        if refresh_ttl and it.ttl_minutes is not None:  # type: ignore[union-attr]
            self.touch([it])  # type: ignore[list-item]
        return it

    def touch(self, items: Sequence[ItemInfo]) -> None:
        """Refresh the TTL of these items (a write: ``ItemTouched``)."""
        by_user: dict[str, list[str]] = {}
        for it in items:
            if it.ttl_minutes is not None:
                by_user.setdefault(it.user_id, []).append(it.item_id)
        for user, ids in by_user.items():
            self._m.runtime.items(self._m.tenant, user).touch(ids)

    def search(
        self,
        prefix: Sequence[str] = (),
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,  # noqa: A002 - LangGraph's name for it
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = False,
        omit_expired: bool = False,
    ) -> list[tuple[ItemInfo, float | None]]:
        """Items under ``prefix`` whose value passes ``filter`` (see ``check_filter``): ranked by hybrid
        search when ``query`` is given, each with its cosine similarity to the query (its best indexed
        text's; items without a match follow, scoreless), else newest update first."""
        if isinstance(prefix, str) or not isinstance(prefix, Sequence):
            raise InvalidInput("prefix", "must be a tuple of strings", prefix)
        pre = check_namespace("prefix", tuple(prefix), allow_empty=True)
        flt = check_filter("filter", filter)
        for name, flag in (("refresh_ttl", refresh_ttl), ("omit_expired", omit_expired)):
            if not isinstance(flag, bool):
                raise InvalidInput(name, "must be true or false", flag)
        for name, n in (("limit", limit), ("offset", offset)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise InvalidInput(name, "must be an int >= 0", n)
        if query is not None and not isinstance(query, str):
            raise InvalidInput("query", "must be a string or None", query)
        self._recover()
        self._m.gate.sync()
        want = offset + limit
        if limit == 0:
            return []
        if query is not None and query.strip():
            out = self._ranked(query, pre, flt, omit_expired, want)[offset:want]
        else:
            admitted = (it for it in self._m.state.items(self._m.tenant, pre)
                        if self._live(it, omit_expired) and matches(it.value, flt))
            out = [(it, None) for k, it in zip(range(want), admitted)][offset:]  # type: ignore[assignment]  # scoreless
        if refresh_ttl:
            self.touch([it for it, _ in out])
        return out

    def _ranked(
        self, query: str, prefix: tuple[str, ...], flt: dict[str, Any] | None, omit_expired: bool, want: int
    ) -> list[tuple[ItemInfo, float | None]]:
        """Hybrid search over item rows; admitted items are looked up per hit, so a query costs
        what the engines return, not the size of the namespace."""
        state, tenant, n = self._m.state, self._m.tenant, len(prefix)
        namespaces = [ns for ns in state.item_namespaces(tenant) if ns[:n] == prefix]
        if not namespaces:
            return []
        # one namespace: its rows' session_id is an indexed filter (exact search over it)
        session_id = ".".join(namespaces[0]) if len(namespaces) == 1 else None

        def admit(it: ItemInfo | None) -> bool:
            return (it is not None and it.namespace[:n] == prefix and self._live(it, omit_expired)
                    and matches(it.value, flt))

        k = min(_MAX_SCAN, max(20, 2 * want))
        while True:
            # search's fusion and calibration (not its conversation smoothing: an item has no neighbours)
            hits = [to_hit(h) for h in search_hits(
                self._m, query, top_k=k, user=None, kinds=["item"], session_id=session_id, min_score=None, names=False,
                candidates=k, fusion=SEARCH_DEFAULTS.fusion, vector_weight=SEARCH_DEFAULTS.vector_weight)]
            # ranked by the hybrid score (the order of the hits); each item reports its best
            # chunk's cosine similarity to the query, as LangGraph's stores score a vector search
            scored: dict[str, tuple[ItemInfo, float]] = {}
            for h in hits:
                if h.source_id in scored:
                    it, best = scored[h.source_id]
                    scored[h.source_id] = (it, max(best, float(h.vector_score)))
                    continue
                it = state.item_by_id(tenant, h.source_id)
                if admit(it):
                    scored[h.source_id] = (it, float(h.vector_score))  # type: ignore[assignment]
            if len(scored) >= want or len(hits) < k or k >= _MAX_SCAN:
                break
            k = min(_MAX_SCAN, k * 4)
        out: list[tuple[ItemInfo, float | None]] = list(scored.values())
        if len(out) < want:  # items the engines did not propose (not indexed, no match) follow, scoreless
            rest = (it for it in state.items(tenant, prefix) if it.item_id not in scored and admit(it))
            out += [(it, None) for _, it in zip(range(want - len(out)), rest)]
        return out

    def embedder(self) -> tuple[str, int]:
        """The store's embedding model id and dimension (what item texts are embedded with)."""
        return self._m.embedder.model_id, int(self._m.embedder.dim)

    def namespaces(self, *, omit_expired: bool = False) -> list[tuple[str, ...]]:
        """Namespaces holding at least one item (with ``omit_expired``, one not expired), sorted."""
        if not isinstance(omit_expired, bool):
            raise InvalidInput("omit_expired", "must be true or false", omit_expired)
        self._m.gate.sync()
        if not omit_expired:
            return self._m.state.item_namespaces(self._m.tenant)
        return sorted({tuple(it.namespace) for it in self._m.state.items(self._m.tenant, ()) if self._live(it, True)})

    def adopt_embedder(self, embedder: Any) -> bool:
        """Switch the store to ``embedder`` if nothing is written yet (only the store's own
        records); False, changing nothing, when the store holds data embedded with its model."""
        if any(not s.startswith("meta:") for s in self._m.log.streams()):  # type: ignore[attr-defined]
            return False
        reembed(self._m, embedder)  # nothing to embed again: records the switch and moves to it
        return True

    def sweep(self, now: dt.datetime | None = None) -> int:
        """Delete every expired item of the tenant (``ItemDeleted``, reason "expired"); returns how many."""
        self._m.gate.sync()
        users = self._users()
        n = sum(self._m.runtime.items(self._m.tenant, u).sweep(now) for u in users)
        if n:
            self._m.gate.sync()
        return n
