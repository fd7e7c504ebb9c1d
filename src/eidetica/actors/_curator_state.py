"""The curator's write-side state: a fact as it decides with, the active facts' vectors, what is
trivial, and the fold's snapshot tables (split out of ``actors/curator.py``, issue 41)."""

from __future__ import annotations

import datetime as dt
import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ..errors import InvalidInput
from ..projections._vectors import VectorSlots
from ._snapshots import ActorSnapshot, column, times
from ._text import check_text, sanitize_category

__all__ = ["trivial", "restore_curator", "curator_tables", "parse_remember_items"]

_TS = pa.timestamp("us", tz="UTC")
_ENC = msgspec.msgpack.Encoder()
_DEC_SOURCES = msgspec.msgpack.Decoder(list[list[dict[str, Any]]])

_TRIVIAL = {
    "ok", "okay", "okk", "kk", "k", "thanks", "thank you", "thx", "ty", "tysm", "yes", "yeah", "yep", "yup", "no", "nope",
    "nah", "hi", "hey", "hello", "bye", "cya", "cool", "sure", "lol", "lmao", "rofl", "great", "nice", "wow", "oh", "ah",
    "hmm", "hm", "uh", "um", "mhm", "wkwk", "wkwkwk", "xd", "omg", "np", "gg", "brb", "ttyl", "idk", "same", "true", "fine",
    "alright", "right", "got it", "i see", "sounds good", "good night", "good morning", "see you",
}
# Laughter and filler in any length ("hahaha", "wkwkwk", "hehe", "lolol", "xDD", "kkkk", "555"): a message made
# only of these tokens states nothing durable.
_FILLER = re.compile(r"^(?:(?:ha|he|hi|ho|hu|wk|lo|ja|je|ke|ka|xd|ok)+h?|a?h+a*|k+|l+o+l+[lo]*|5{3,}|m+|h+m+|u+m+|e+r+m*|o+h+|a+w+)$")


def trivial(text: str) -> bool:
    """Whether a message is small talk that no extractor should see (acknowledgements, laughter, filler)."""
    t = text.lower().strip()
    words = re.findall(r"[^\W_]+", t)
    if not words:
        return True  # punctuation, emoji only
    if " ".join(words) in _TRIVIAL:
        return True
    if len(words) <= 4 and all(w in _TRIVIAL or _FILLER.match(w) for w in words):
        return True
    return len("".join(words)) < 4


@dataclass
class _FactState:
    """What the curator decides with (write side: vectors, decay clocks); readers use ``projections.FactInfo``."""

    fact_id: str
    content: str
    category: str
    confidence: float
    status: str  # active | superseded | deleted | pruned
    created: dt.datetime
    reinforced: dt.datetime
    decayed: dt.datetime
    vector: np.ndarray | None = None
    superseded_by: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    attribute: str = ""  # the single-valued attribute of the user it sets ("diet", "residence", ...), "" when none


class _VectorSet(VectorSlots):
    """Active facts' vectors (unit rows): add and remove in O(1); the nearest fact above a threshold without a full scan."""

    def __init__(self, dim: int) -> None:
        # a rank of a sixth of the dimension: 64 of MiniLM's 384 (see VectorSlots.best_above)
        super().__init__(dim, rank=max(8, dim // 6))

    def add(self, fact_id: str, vector: np.ndarray) -> None:
        """Insert or replace the vector of a fact."""
        self.put(fact_id, vector)

    def remove(self, fact_id: str) -> None:
        """Drop a fact's vector."""
        self.drop(fact_id)


def restore_curator(self: Any, snap: ActorSnapshot) -> None:
    """Fill an empty curator (``_reset``) from its snapshot: facts, vectors, the vector set's rows, requests."""
    t, meta = snap.tables, snap.meta
    if meta.get("model_id") != self.embedder.model_id or int(meta.get("dim", -1)) != self.embedder.dim:
        raise ValueError(f"it holds vectors of {meta.get('model_id')}, not {self.embedder.model_id}")
    f = t["facts"]
    cols = {c: column(f, c) for c in ("fact_id", "content", "category", "confidence", "status", "superseded_by",
                                      "order", "vector_row", "attribute")}
    # every fact's sources in one msgpack document: one decode call rather than one per fact
    cols["sources"] = _DEC_SOURCES.decode(t["sources"].column("all")[0].as_py())
    for c in ("created", "reinforced", "decayed"):
        cols[c] = times(f, c)
    dim = self.embedder.dim
    mat = t["vectors"].column("v").combine_chunks().values.to_numpy().reshape(-1, dim)
    for i, fid in enumerate(cols["fact_id"]):
        row = cols["vector_row"][i]
        fs = _FactState(fid, cols["content"][i], cols["category"][i], cols["confidence"][i], cols["status"][i],
                        cols["created"][i], cols["reinforced"][i], cols["decayed"][i],
                        vector=None if row < 0 else mat[row], superseded_by=cols["superseded_by"][i],
                        sources=cols["sources"][i], attribute=cols["attribute"][i])
        self.facts[fid] = fs
        if fs.status == "active":
            self._active.add(fid)
            if fs.attribute:
                self._by_attribute.setdefault(fs.attribute, set()).add(fid)
    self._order = dict(zip(cols["fact_id"], cols["order"]))
    # the vector set's rows exactly as the replay left them (freed rows, reuse order): best_above() breaks
    # ties by row; the set is fresh (_reset), so its bound is fitted on first use from these rows
    vs = self._vectors
    vs.keys = list(meta["vector_rows"])
    vs.slot = {k: i for i, k in enumerate(vs.keys) if k is not None}
    vs.free = list(meta["vector_free"])
    vs.mat = np.zeros((max(64, len(vs.keys)), dim), np.float32)
    for k, i in vs.slot.items():
        vs.mat[i] = self.facts[k].vector
    x = t["extracted"]
    self.extracted = set(zip(column(x, "session_id"), column(x, "sequence")))
    r = t["requests"]
    self.requests = dict(zip(column(r, "request_id"), column(r, "fact_id")))
    self._weak = [(fs.confidence, fs.reinforced.timestamp(), self._order[fs.fact_id], fs.fact_id)
                  for fs in (self.facts[i] for i in self._active)]
    heapq.heapify(self._weak)
    self.version = max(self.version, snap.version)
    self._covered = snap.version

def curator_tables(self: Any) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """A curator's fold as Arrow tables (lock held): what its snapshot holds."""
    fs = list(self.facts.values())
    has = np.fromiter((f.vector is not None for f in fs), bool, len(fs))
    facts = pa.table({
        "fact_id": pa.array([f.fact_id for f in fs], pa.string()),
        "content": pa.array([f.content for f in fs], pa.string()),
        "category": pa.array([f.category for f in fs], pa.string()),
        "confidence": pa.array([f.confidence for f in fs], pa.float64()),
        "status": pa.array([f.status for f in fs], pa.string()),
        "created": pa.array([f.created for f in fs], _TS),
        "reinforced": pa.array([f.reinforced for f in fs], _TS),
        "decayed": pa.array([f.decayed for f in fs], _TS),
        "superseded_by": pa.array([f.superseded_by for f in fs], pa.string()),
        "order": pa.array([self._order[f.fact_id] for f in fs], pa.int64()),
        "vector_row": pa.array(np.where(has, np.cumsum(has) - 1, -1), pa.int64()),
        "attribute": pa.array([f.attribute for f in fs], pa.string()),
    })
    with_vec = [f.vector for f in fs if f.vector is not None]
    flat = np.concatenate(with_vec).astype("<f4") if with_vec else np.zeros(0, np.float32)
    vectors = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), self.embedder.dim)})
    ex = sorted(self.extracted)
    extracted = pa.table({"session_id": pa.array([k[0] for k in ex], pa.string()),
                          "sequence": pa.array([k[1] for k in ex], pa.int64())})
    requests = pa.table({"request_id": pa.array(list(self.requests), pa.string()),
                         "fact_id": pa.array(list(self.requests.values()), pa.string())})
    meta = {"model_id": self.embedder.model_id, "dim": self.embedder.dim,
            "vector_rows": list(self._vectors.keys), "vector_free": list(self._vectors.free)}
    sources = pa.table({"all": pa.array([_ENC.encode([f.sources for f in fs])], pa.binary())})
    return {"facts": facts, "extracted": extracted, "requests": requests, "vectors": vectors, "sources": sources}, meta


def parse_remember_items(items: Any) -> list[tuple[str, str]]:
    """``remember_many``'s items as (content, category) pairs; ``InvalidInput`` names the first bad one."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInput("items", "must be a list of strings, (content, category) pairs or dicts", type(items).__name__)
    parsed: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            content, category = item, "general"
        elif isinstance(item, dict):
            unknown = set(item) - {"content", "category"}
            if unknown or "content" not in item:
                raise InvalidInput(f"items[{i}]", "a dict needs 'content' and may have 'category'", sorted(item))
            content, category = item["content"], item.get("category", "general")
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            content, category = item
        else:
            raise InvalidInput(f"items[{i}]", "must be a string, a (content, category) pair or a dict", item)
        try:
            parsed.append((check_text("content", content).strip(), sanitize_category(category)))
        except InvalidInput as e:
            raise InvalidInput(f"items[{i}].{e.field}", e.problem, e.value) from None
    return parsed
