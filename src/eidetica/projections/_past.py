"""A past chunk index derived from the live one (``derive_past``): what ``as_of`` searches.

The chunk index at a moment is what replaying the log's prefix up to it builds, but a replay
costs in proportion to the prefix: every chunk decoded, folded, written to LanceDB and
Tantivy. Most rows of the live index are already the past's rows, because a row is made by
the event that embedded it and changed only by later events that delete it or set its
confidence. So the past index is

* the live rows that no event after the moment touched, taken as Arrow (nothing decoded), and
* the touched rows as the prefix makes them, folded from the prefix's own events in a small
  index of their own.

"Touched" over-approximates on purpose: every key an event after the moment embedded, and
every source, session and user such an event deletes or re-scores, whatever its kinds or
time bounds. A row wrongly called touched is only re-folded from the prefix, which gives
the same row; a row that was touched cannot be taken from the live index.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..events import types as ev
from ..events.envelope import events_from_batch
from ._index import _HANDLED, ChunkIndex
from ._rows import SEP, make_key
from ._views import ModelView

__all__ = ["derive_past", "TOUCHES"]

# For each event the index folds (besides ChunksEmbedded): the row field it deletes or
# re-scores by, and the event's attribute holding the value (``_index._fold`` is the truth)
TOUCHES: dict[str, tuple[str, str]] = {
    "FactReinforced": ("source_id", "fact_id"), "FactDecayed": ("source_id", "fact_id"),
    "FactSuperseded": ("source_id", "fact_id"), "FactDeleted": ("source_id", "fact_id"),
    "FactPruned": ("source_id", "fact_id"), "NoteDeleted": ("source_id", "note_id"),
    "ItemPut": ("source_id", "item_id"), "ItemDeleted": ("source_id", "item_id"),
    "MessageRetracted": ("source_id", "message_id"), "SessionForgotten": ("session_id", "session_id"),
    "UserForgotten": ("user_id", "user_id"),
}
_FIELDS = ("source_id", "session_id", "user_id")


class _ChunkRef(msgspec.Struct, frozen=True, tag="ChunksEmbedded", kw_only=True):
    """What of a ChunksEmbedded says which rows it makes (its vectors and texts are skipped, not copied)."""

    chunk_ids: list[str]
    source_id: str = ""
    kind: str = "message"
    user_id: str = ""
    session_id: str = ""


_REFS = msgspec.msgpack.Decoder(_ChunkRef)


class _Touched:
    """Keys, and (tenant, value) per field, that events after the moment may have changed."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.values: dict[str, set[str]] = {f: set() for f in _FIELDS}

    def add(self, type_: str, tenant: str, e: Any) -> None:
        """Note what one event after the moment can change."""
        if isinstance(e, _ChunkRef):
            self.keys.update(make_key(tenant, c) for c in e.chunk_ids)
            if e.kind == "summary" and e.source_id:  # a new summary replaces its source's rows
                self.values["source_id"].add(tenant + SEP + e.source_id)
            return
        field, attr = TOUCHES[type_]
        value = getattr(e, attr, "")
        if value:
            self.values[field].add(tenant + SEP + value)

    def hits(self, tenant: str, e: Any) -> bool:
        """Whether a ChunksEmbedded of the prefix made any touched row."""
        t = tenant + SEP
        return (any(make_key(tenant, c) in self.keys for c in e.chunk_ids)
                or t + e.source_id in self.values["source_id"] or t + e.session_id in self.values["session_id"]
                or t + e.user_id in self.values["user_id"])

    def mask(self, rows: pa.Table) -> pa.Array:
        """True for the rows (LanceDB columns) that are touched."""
        hit = pc.is_in(rows.column("key"), pa.array(sorted(self.keys), pa.string()))
        for f in _FIELDS:
            if self.values[f]:
                scoped = pc.binary_join_element_wise(rows.column("tenant"), rows.column(f), SEP)
                hit = pc.or_(hit, pc.is_in(scoped, pa.array(sorted(self.values[f]), pa.string())))
        return hit


def _handled(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[pa.RecordBatch, list[str], list[str], list[Any]]]:
    """Per batch, the events the chunk index folds: (their rows, types, tenants, decoded payloads);
    other types are dropped in Arrow and no envelope is built."""
    wanted = pa.array(sorted(_HANDLED), pa.string())
    for b in batches:
        b = b.filter(pc.is_in(b.column("type"), wanted))
        if b.num_rows:
            types = b.column("type").to_pylist()
            yield (b, types, b.column("tenant").to_pylist(),
                   [_REFS.decode(x) if t == "ChunksEmbedded" else ev.decode(x)
                    for t, x in zip(types, b.column("payload").to_pylist())])


def derive_past(live_rows: pa.Table, tail: Sequence[pa.RecordBatch], prefix: Sequence[pa.RecordBatch],
                dest: str | os.PathLike[str], *, dim: int, model_id: str, checkpoint: dict[int, int],
                linked: bool = False) -> None:
    """Write at ``dest`` the chunk index that replaying ``prefix`` would build (checkpoint ``checkpoint``).

    ``live_rows``: every row of the live index (its LanceDB columns), which has applied exactly
    the prefix's events and the ``tail``'s (the events after the moment), nothing else.
    ``linked``: ``dest``'s Tantivy already holds the live index's documents (``link_generation``,
    taken with the rows): only the touched ones are replaced; otherwise it is built from the rows.
    """
    touched = _Touched()
    for _, types, tenants, events in _handled(tail):
        for t, tenant, e in zip(types, tenants, events):
            touched.add(t, tenant, e)
    kept = live_rows.filter(pc.invert(touched.mask(live_rows)))
    # the touched rows as the prefix makes them: its deletes and re-scorings, and the chunks of touched rows
    side_events = []
    for b, types, tenants, events in _handled(prefix):
        rows = [i for i, (t, tenant, e) in enumerate(zip(types, tenants, events))
                if t != "ChunksEmbedded" or touched.hits(tenant, e)]
        if rows:
            side_events.extend(events_from_batch(b.take(pa.array(rows, pa.int64()))))
    with tempfile.TemporaryDirectory(prefix="eidetica-past-") as tmp:
        side = ChunkIndex(tmp, dim=dim, scan_rows=0, ann_threshold=2**62)  # read once, never searched
        try:
            side.begin_rebuild()
            view = ModelView(side, model_id)
            for i in range(0, len(side_events), 1000):
                view.apply(side_events[i : i + 1000])
            side.end_rebuild(True)
            refolded = rows_of(side)
        finally:
            side.close()
    refolded = refolded.filter(touched.mask(refolded)).select(kept.schema.names).cast(kept.schema)
    past = ChunkIndex(dest, dim=dim)
    try:
        # one LanceDB add; Tantivy: the live documents less the touched ones, plus the refolded
        # (or, not linked, built from all rows); then the checkpoint (output first)
        past._lance.table.add(pa.concat_tables([kept, refolded]))
        if linked:
            # each value is "tenant<SEP>value": split(SEP, 1) gives the two parts
            scoped: list[tuple[str, str, str]] = [
                (f, *v.split(SEP, 1)) for f in _FIELDS for v in touched.values[f]]  # type: ignore[misc]
            past._text.drop_and_add(touched.keys, scoped, refolded.to_batches(max_chunksize=8192))
        else:
            past._text.rebuild(pa.concat_tables([kept, refolded]).to_batches(max_chunksize=8192))
        past.save_checkpoint(checkpoint)
    finally:
        past.close()


def rows_of(index: ChunkIndex) -> pa.Table:
    """Every row of an index, its LanceDB columns (vectors included), read under its lock."""
    with index._lock:
        return index._lance.table.to_arrow()
