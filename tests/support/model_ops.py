"""The operations the stateful test sends to a store, run through the public API only.

One function, ``run(memory_of, op, args)``, serves every face: the embedded ``Memory`` and
``AsyncMemory`` (in the child process that holds the store, ``model_child.py``) and
``connect()`` clients (in the test's process). ``memory_of(tenant)`` hands the face's handle
for a tenant; ``call`` resolves what a call returns (an awaitable on the async face), so the
same code drives sync and async faces. Answers are plain JSON (lists, dicts, strings).
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["run", "error_of"]


def _msg(m: Any) -> dict[str, Any]:
    return {"role": m.role, "content": m.content, "sequence": m.sequence, "metadata": dict(m.metadata or {})}


def _hit(h: Any) -> dict[str, Any]:
    return {"kind": h.kind, "text": h.text, "user_id": h.user_id, "session_id": h.session_id,
            "source_id": h.source_id, "id": h.id}


def error_of(e: BaseException) -> dict[str, Any]:
    """An exception as data: its class name and, for InvalidInput, the field it names."""
    return {"error": type(e).__name__, "field": getattr(e, "field", None), "message": str(e)[:300]}


def run(memory_of: Callable[[str], Any], op: str, a: dict[str, Any], call: Callable[[Any], Any] = lambda x: x) -> Any:
    """Run one operation ``op`` with arguments ``a``; returns its answer as JSON data."""
    m = memory_of(a["tenant"]) if "tenant" in a else None
    if op == "append":
        s = call(m.session(a["sid"], user=a["user"]))
        eid = uuid.UUID(a["event_id"]) if a.get("event_id") else None
        return call(s.append(a["role"], a["content"], a.get("metadata"), event_id=eid))
    if op == "extend":
        s = call(m.session(a["sid"], user=a["user"]))
        return call(s.extend([dict(x) for x in a["messages"]]))
    if op == "history":
        s = call(m.session(a["sid"], user=a["user"]))
        return [_msg(x) for x in call(s.history(a.get("limit")))]
    if op == "read":
        s = call(m.session(a["sid"], user=a["user"]))
        kw = {k: a[k] for k in ("strategy", "window") if a.get(k) is not None}
        return [_msg(x) for x in call(s.read(**kw))]
    if op == "summarize":
        s = call(m.session(a["sid"], user=a["user"]))
        return call(s.summarize(force=True))
    if op == "forget_message":
        s = call(m.session(a["sid"], user=a["user"]))
        call(s.forget_message(a["sequence"]))
        return None
    if op == "forget_session":
        return call(m.forget_session(a["sid"]))
    if op == "remember":
        return call(m.remember(a["content"], a.get("category", "general"), user=a["user"], request_id=a.get("request_id")))
    if op == "remember_many":
        return call(m.remember_many(a["items"], user=a["user"]))
    if op == "forget":
        return call(m.forget(a["fact_id"], user=a["user"]))
    if op == "list_memories":
        return [{"id": f.id, "content": f.text} for f in call(m.list_memories(user=a["user"], limit=a.get("limit", 1000)))]
    if op == "store_note":
        return call(m.store_note(a["text"], user=a["user"]))
    if op == "update_note":
        return call(m.update_note(a["note_id"], a["text"], user=a["user"]))
    if op == "delete_note":
        return call(m.delete_note(a["note_id"], user=a["user"]))
    if op == "list_notes":
        return [{"id": n.note_id, "text": n.text} for n in call(m.list_notes(user=a["user"], limit=a.get("limit", 1000)))]
    if op == "forget_user":
        return call(m.forget_user(a["user"]))
    if op == "items_put":
        ops = [dict(o, namespace=tuple(o["namespace"])) for o in a["ops"]]
        return call(m.items.put(ops))
    if op == "items_get":
        it = call(m.items.get(tuple(a["namespace"]), a["key"]))
        return None if it is None else {"value": it.value, "user": it.user_id}
    if op == "items_search":
        got = call(m.items.search(tuple(a["prefix"]), query=a.get("query"), filter=a.get("filter"), limit=a.get("limit", 1000)))
        return [[list(it.namespace), it.key] for it, _score in got]
    if op == "items_namespaces":
        return [list(ns) for ns in call(m.items.namespaces())]
    if op == "search":
        hits = call(m.search(a["query"], user=a["user"], top_k=a.get("top_k", 10), min_score=a.get("min_score", 0.0),
                             mode=a.get("mode", "hybrid"), kinds=a.get("kinds", ["message", "summary", "fact", "note"])))
        return [_hit(h) for h in hits]
    if op == "export":
        return call(m.export(a["path"]))
    if op == "import":
        return call(m.import_(a["path"]))
    if op == "compact":
        r = call(m.compact())
        return {k: v for k, v in r.items() if isinstance(v, (int, str, bool))}
    if op == "rebuild":
        return call(m.rebuild())
    if op == "as_of":
        past = call(m.as_of(a["offset"]))
        try:
            if a["what"] == "histories":  # several sessions through one past view
                out = {}
                for sid, user in a["sessions"]:
                    s = call(past.session(sid, user=user))
                    out[sid] = [_msg(x) for x in call(s.history())]
                return out
            if a["what"] == "history":
                s = call(past.session(a["sid"], user=a["user"]))
                return [_msg(x) for x in call(s.history())]
            return [f.id for f in call(past.list_memories(user=a["user"], limit=1000))]
        finally:
            close = getattr(past, "close", None)
            if close is not None:
                r = close()
                if inspect.isawaitable(r):
                    call(r)
    if op == "pid":
        return os.getpid()
    raise ValueError(f"unknown op {op!r}")
