"""The state's facts: each with its status, confidence and history of events (a part of ``StateProjection``, issue 41).

Folds of the ``facts`` events, and the queries on them; the tombstones, the lock and the log are
``StateBase``'s. ``StateProjection`` composes the five aggregates and routes each event to its fold.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..events import RecordedEvent
from ..events import types as ev
from ._records import FactInfo
from ._state_base import StateBase
from ._state_rows import _Fact


class FactFolds(StateBase):
    """The facts aggregate of the state: its maps, folds and queries."""

    _facts: dict[tuple[str, str], dict[str, _Fact]]  # (tenant, user) -> facts
    _fact_owner: dict[tuple[str, str], str]  # (tenant, fact_id) -> user

    def _reset_facts(self) -> None:
        """Empty this aggregate."""
        self._facts = {}
        self._fact_owner = {}

    def _fact(self, tenant: str, fact_id: str) -> _Fact | None:
        u = self._fact_owner.get((tenant, fact_id))
        return None if u is None else self._facts.get((tenant, u), {}).get(fact_id)

    def _on_fact_asserted(self, rec: RecordedEvent, e: ev.FactAsserted) -> None:
        if self._dead(rec.tenant, e.user_id, None, rec.time, "facts"):
            return
        f = self._fact(rec.tenant, e.fact_id)
        if f is None:
            f = _Fact(e.user_id, e, rec.time)
            self._facts.setdefault((rec.tenant, e.user_id), {})[e.fact_id] = f
            self._fact_owner[(rec.tenant, e.fact_id)] = e.user_id
        if rec.event_id in f.seen:
            return
        f.seen.add(rec.event_id)
        f.history.append((rec.time, "FactAsserted", {"content": e.content, "category": e.category,
                                                      "confidence": float(e.confidence)}))

    def _fact_event(self, rec: RecordedEvent, fact_id: str, detail: dict[str, Any]) -> _Fact | None:
        f = self._fact(rec.tenant, fact_id)
        if f is None or rec.event_id in f.seen:
            return None
        f.seen.add(rec.event_id)
        f.history.append((rec.time, rec.type, detail))
        f.updated = max(f.updated, rec.time)
        return f

    def _on_fact_reinforced(self, rec: RecordedEvent, e: ev.FactReinforced) -> None:
        f = self._fact_event(rec, e.fact_id, {"confidence": float(e.confidence)})
        if f is not None:
            f.confidence = float(e.confidence)
            f.sources.extend(e.sources)

    def _on_fact_decayed(self, rec: RecordedEvent, e: ev.FactDecayed) -> None:
        f = self._fact_event(rec, e.fact_id, {"confidence": float(e.confidence)})
        if f is not None:
            f.confidence = float(e.confidence)

    def _on_fact_superseded(self, rec: RecordedEvent, e: ev.FactSuperseded) -> None:
        f = self._fact_event(rec, e.fact_id, {"by": e.by})
        if f is not None:
            f.status, f.by = "superseded", e.by

    def _on_fact_pruned(self, rec: RecordedEvent, e: ev.FactPruned) -> None:
        f = self._fact_event(rec, e.fact_id, {"reason": e.reason})
        if f is not None:
            f.status = "pruned"

    def _on_fact_deleted(self, rec: RecordedEvent, e: ev.FactDeleted) -> None:
        f = self._fact_event(rec, e.fact_id, {})
        if f is not None:
            f.status = "deleted"

    def facts(self, tenant: str, user_id: str, include_inactive: bool = False) -> list[FactInfo]:
        """A user's facts, newest first; only active ones unless ``include_inactive``."""
        with self._lock:
            facts = self._facts.get((tenant, user_id), {})
            out = [f.info(fid) for fid, f in facts.items() if include_inactive or f.status == "active"]
        out.sort(key=lambda f: (f.created, f.fact_id), reverse=True)
        return out

    def fact_counts(self, tenant: str, cap: int | None = None) -> dict[str, int]:
        """Facts of a tenant by status, and how many users hold ``cap`` or more active facts."""
        out = {"active": 0, "superseded": 0, "deleted": 0, "pruned": 0, "users": 0, "users_at_cap": 0}
        with self._lock:
            for (t, _), facts in self._facts.items():
                if t != tenant:
                    continue
                out["users"] += 1
                active = 0
                for f in facts.values():
                    out[f.status] = out.get(f.status, 0) + 1
                    active += f.status == "active"
                out["users_at_cap"] += cap is not None and active >= cap
        return out

    def fact(self, tenant: str, fact_id: str) -> FactInfo | None:
        """One fact (any status) or None."""
        with self._lock:
            f = self._fact(tenant, fact_id)
            return None if f is None else f.info(fact_id)

    def fact_history(self, tenant: str, fact_id: str) -> list[tuple[dt.datetime, str, dict[str, Any]]]:
        """A fact's events as (log time, event type name, detail), oldest first."""
        with self._lock:
            f = self._fact(tenant, fact_id)
            return [] if f is None else sorted(f.history, key=lambda h: h[0])

    def facts_page(self, tenant: str, user_id: str, *, status: str | None = None, category: str | None = None,
                   offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """One page of a user's facts of any status (newest first), with counts by status and by category:
        only the page's rows are built (a user may hold many thousands)."""
        status_n: dict[str, int] = {}
        category_n: dict[str, int] = {}
        with self._lock:
            facts = self._facts.get((tenant, user_id), {})
            keys = []
            for fid, f in facts.items():
                status_n[f.status] = status_n.get(f.status, 0) + 1
                category_n[f.category] = category_n.get(f.category, 0) + 1
                if (status is None or f.status == status) and (category is None or f.category == category):
                    keys.append((f.created, fid))
            keys.sort(reverse=True)
            rows = [facts[fid].info(fid) for _, fid in keys[offset:offset + limit]]
        return {"facts": rows, "total": len(keys), "statuses": status_n, "categories": category_n}

    def _forget_user_facts(self, rec: RecordedEvent, t: str, u: str) -> None:
        """Drop the user's facts created no later than the forget."""
        facts = self._facts.get((t, u), {})
        for fid in [f for f, x in facts.items() if x.created <= rec.time]:
            del facts[fid]
            self._fact_owner.pop((t, fid), None)
