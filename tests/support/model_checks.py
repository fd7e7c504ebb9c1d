"""Checks of the stateful test that look past the API: bad inputs, and the erasure scan of a store's files.

The scan reads every file's raw bytes, and also looks *through* the engines (STACK.md,
"Deleting for real"): LanceDB compresses what it stores, so every version of every table is
read as rows; Tantivy keeps a deleted document's terms until a merge, so its term dictionary
is asked for each token's prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["bad_inputs", "scan_for_tokens"]


def bad_inputs(tenant: str, sessions: list[str], model: Any) -> list[tuple[str, dict[str, Any], str]]:
    """(op, args, the field the refusal must name): each must be refused and change nothing."""
    sid = sessions[0] if sessions else "s-bad"
    user = model.sessions[(tenant, sid)].user if (tenant, sid) in model.sessions else "u1"
    s = {"tenant": tenant, "sid": sid, "user": user}
    return [
        ("append", {**s, "role": "robot", "content": "zz never stored"}, "role"),
        ("append", {**s, "role": "user", "content": ""}, "content"),
        ("append", {**s, "role": "user", "content": "zz never", "metadata": "not a dict"}, "metadata"),
        ("extend", {**s, "messages": []}, "messages"),
        ("read", {**s, "strategy": "sliding_window", "window": 0}, "window"),
        ("read", {**s, "strategy": "bogus"}, "strategy"),
        ("remember", {"tenant": tenant, "user": "u1", "content": ""}, "content"),
        ("remember", {"tenant": tenant, "user": "", "content": "zz never"}, "user"),
        ("search", {"tenant": tenant, "user": "u1", "query": "x", "top_k": 0}, "top_k"),
        ("store_note", {"tenant": tenant, "user": "u1", "text": ""}, "text"),
        ("items_put", {"tenant": tenant, "ops": [{"namespace": ["a.b"], "key": "k", "value": {}, "user": "u1"}]},
         "ops[0].namespace"),
        ("items_put", {"tenant": tenant, "ops": [{"namespace": ["a"], "key": "k", "value": 3, "user": "u1"}]},
         "ops[0].value"),
        ("as_of", {"tenant": tenant, "offset": -1, "what": "facts", "user": "u1"}, "when"),
    ]


def _lance_rows(store: Path, tokens: set[str]) -> list[str]:
    import lancedb

    found = []
    # a table is a directory <db>/<name>.lance (files named *.lance live inside it)
    tables = [p for p in store.rglob("*.lance") if p.is_dir() and ".lance" not in "".join(p.parent.parts)]
    for d in {p.parent for p in tables}:
        db = lancedb.connect(str(d))
        for name in db.table_names():
            t = db.open_table(name)
            for v in t.list_versions():
                t.checkout(v["version"])
                text = str(t.to_arrow().to_pylist())
                found += [f"{d}/{name}@{v['version']}: {x}" for x in tokens if x in text]
    return found


def _tantivy_terms(store: Path, tokens: set[str]) -> list[str]:
    import tantivy

    found = []
    for meta in store.rglob("meta.json"):
        try:
            index = tantivy.Index.open(str(meta.parent))
        except Exception:  # noqa: BLE001 - a meta.json that is not a Tantivy index's
            continue
        searcher = index.searcher()
        for x in tokens:
            # a prefix: the English stemmer may have cut the token's end
            if list(searcher.terms_with_prefix("text", x[:8]) if hasattr(searcher, "terms_with_prefix") else []):
                terms = [t for t in searcher.terms_with_prefix("text", x[:8])]
                if any(str(t[0] if isinstance(t, tuple) else t).startswith(x[:10]) for t in terms):
                    found.append(f"{meta.parent}: term {x}")
    return found


def scan_for_tokens(store: Path, tokens: set[str]) -> list[str]:
    """Where any of ``tokens`` is still in the store: raw bytes of every file, LanceDB rows, Tantivy terms."""
    found = []
    encoded = {t: t.encode() for t in tokens}
    for f in store.rglob("*"):
        if f.is_file():
            try:
                data = f.read_bytes()
            except OSError:
                continue  # removed while we looked (a compaction's old generation)
            found += [f"{f}: {t}" for t, b in encoded.items() if b in data]
    return found + _lance_rows(store, tokens) + _tantivy_terms(store, tokens)
