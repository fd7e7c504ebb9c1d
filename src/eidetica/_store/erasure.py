"""Cascading erasure: forgetting messages reaches what was derived from them, and ``compact`` proves it.

``forget_message`` / ``forget_session`` append the message's (or session's) tombstone, then:

* facts: every live fact whose every source message is now forgotten is retracted
  (``FactDeleted(reason="erasure")``, by the user's curator); a fact that another live
  message also stated keeps that source and stays;
* summaries: a session summary that covered a forgotten message is summarised again without
  it (``SummaryCommitted(rewritten=True)``: ``compact`` redacts the session's earlier summaries);
* chunks: the tombstones take the message, fact and summary rows out of the indices at once.

``compact`` then redacts the log, rebuilds the indices in fresh directories and drops the
snapshots, and returns a receipt (also written to ``<store>/receipts/``): what was forgotten
(counts, message ids, sha256 of each text: never the text), which facts and summaries it
reached, which files were rewritten, and ``verified``: a scan of every file of the store
(raw bytes) and of every row both engines hold (LanceDB, every version; Tantivy's stored
rows: both compress text, so bytes alone prove nothing) finds none of the forgotten texts.
A forgotten text that live data still holds (the same sentence said again in a message
that is not forgotten) is not counted as forgotten: ``kept_elsewhere`` says how many.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._util.fs import write_atomic
from ..errors import InvalidInput, NotFound
from ..events.streams import parse_stream, session_stream
from .asof import close_views
from .audit import who
from .compaction import plan_compaction
from .store import Store

__all__ = ["forget_message", "forget_session", "cascade", "compact", "verify"]

_BLOCK = 1 << 24  # bytes read from a file at a time by the verification scan
_MIN_TEXT = 8  # shorter strings ("ok", a name) occur by chance anywhere: not evidence either way


class _Alive:
    """Whether a (session, sequence) message is still in the log, each session's stream read once."""

    def __init__(self, log: Any, tenant: str) -> None:
        self.log, self.tenant = log, tenant
        self._alive: dict[str, set[int]] = {}

    def __call__(self, pair: tuple[Any, Any]) -> bool:
        sid, seq = pair
        if not isinstance(sid, str):
            return True  # not a message source: never counts as forgotten
        if sid not in self._alive:
            live: dict[int, int] = {}  # sequence -> version
            for rec in self.log.read_stream(session_stream(self.tenant, sid)):
                if rec.type == "MessageAppended":
                    live[rec.decode().sequence] = rec.version  # type: ignore[attr-defined]
                elif rec.type == "MessageRetracted":
                    live.pop(rec.decode().sequence, None)  # type: ignore[attr-defined]
                elif rec.type == "SessionForgotten":
                    live.clear()
            self._alive[sid] = set(live)
        return seq in self._alive[sid]


def cascade(m: Store, user: str, forgotten: Iterable[tuple[str, int]], summaries: bool = True) -> dict[str, Any]:
    """Retract the facts whose every source is now forgotten and rewrite the summaries that covered ``forgotten``."""
    forgotten = list(forgotten)
    cur = m.runtime.curator(m.tenant, user)
    reached = cur.sourced_from(forgotten)
    alive = _Alive(m.log, m.tenant)
    gone = set(forgotten) | {p for pairs in reached.values() for p in pairs if not alive(p)}
    by, rid = who()
    facts = cur.retract_sourced(list(gone), "erasure", "", rid or "", by) if reached else []
    rewritten = []
    for sid in sorted({s for s, _ in forgotten}) if summaries else []:
        actor = m.runtime.session(m.tenant, sid, user)
        _, text, upto = actor.summary()
        if text is not None and any(q <= upto for s, q in forgotten if s == sid):
            if m.runtime.summarizer().rewrite(actor).committed:
                rewritten.append(sid)
    m.gate.sync()
    return {"facts": facts, "summaries": rewritten}


def forget_message(m: Store, actor: Any, sequence: int) -> dict[str, Any]:
    """Forget one message of a session and what was derived from it alone; returns what the cascade reached."""
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise InvalidInput("sequence", "must be an int", sequence)
    if actor.retract(sequence) is None:
        raise NotFound("message", f"{actor.session_id}#{sequence}")
    m.gate.sync()
    return {"session_id": actor.session_id, "sequence": sequence,
            **cascade(m, actor.user_id, [(actor.session_id, sequence)])}


def forget_session(m: Store, session_id: str, user: str | None = None) -> dict[str, Any]:
    """Forget a whole session (its tombstone) and what was derived from its messages alone (its owner: looked up)."""
    if user is None:
        m.gate.sync()
        user = next((s.user_id for s in m.state.sessions(m.tenant) if s.session_id == session_id), None)
        if user is None:
            raise NotFound("session", session_id)
    seqs = [rec.decode().sequence for rec in m.log.read_stream(session_stream(m.tenant, session_id))  # type: ignore[attr-defined]
            if rec.type == "MessageAppended"]
    m.runtime.session(m.tenant, session_id, user).forget()
    m.gate.sync()
    # the tombstone takes the summaries too (compact redacts the summary stream): nothing to rewrite
    return cascade(m, user, [(session_id, q) for q in seqs], summaries=False)


# -- compaction with a receipt -------------------------------------------------------------
_TEXT_FIELDS = {"MessageAppended": ("content",), "FactAsserted": ("content",), "NoteStored": ("text",),
                "NoteUpdated": ("text",), "SummaryCommitted": ("text",), "ChunksEmbedded": ("texts",)}


def _forgotten(log: Any, redact: dict[int, set[int]]) -> dict[str, Any]:
    """What the redaction takes: counts by type, the messages, facts and summaries, and their texts."""
    by_type: dict[str, int] = {}
    texts: set[str] = set()
    messages, facts, summaries = [], set(), set()
    for p, offsets in redact.items():
        for rec in log.read_offsets(sorted(offsets), partition=p):
            by_type[rec.type] = by_type.get(rec.type, 0) + 1
            fields = _TEXT_FIELDS.get(rec.type)
            if fields is None:
                continue
            ev = rec.decode()
            for f in fields:
                v = getattr(ev, f)
                texts.update(t for t in ([v] if isinstance(v, str) else v) if len(t) >= _MIN_TEXT)
            if rec.type == "MessageAppended":
                messages.append({"session_id": ev.session_id, "sequence": ev.sequence})  # type: ignore[attr-defined]
            elif rec.type == "FactAsserted":
                facts.add(ev.fact_id)  # type: ignore[attr-defined]
            elif rec.type == "SummaryCommitted":
                summaries.add(parse_stream(rec.stream)[2])
    return {"by_type": by_type, "texts": texts, "messages": messages, "facts": sorted(facts), "summaries": sorted(summaries)}


def _files(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for f in root.rglob("*"):
        try:
            if f.is_file():
                st = f.stat()
                out[str(f.relative_to(root))] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            continue  # gone meanwhile
    return out


_AUTHORED = pa.array(["MessageAppended", "NoteStored", "NoteUpdated"])  # what a user says, not what was derived


def _still_live(log: Any, texts: set[str]) -> set[str]:
    """The texts a live message or note still holds after the redaction (said again elsewhere): not forgotten.

    Only what a user wrote counts: a fact, summary or chunk still quoting a forgotten text is
    exactly what the verification must catch.
    """
    if not texts:
        return set()
    import ahocorasick_rs

    order = sorted(texts)
    ac = ahocorasick_rs.BytesAhoCorasick([t.encode() for t in order])  # one pass per batch, not one per text
    found: set[str] = set()
    for p in range(log.partitions):
        for batch in log.read_batches(partition=p):
            said = batch.filter(pc.is_in(batch.column("type"), value_set=_AUTHORED))
            if not said.num_rows:
                continue
            blob = b"\x00".join(said.column("payload").to_pylist())
            found.update(order[i] for i, _, _ in ac.find_matches_as_indexes(blob, overlapping=True))
            if len(found) == len(order):
                return found
    return found


def _automaton(texts: set[str]) -> tuple[Any, int] | None:
    """One Aho-Corasick automaton over every text's UTF-8 bytes (one pass per file, not one per text) and the longest."""
    import ahocorasick_rs

    needles = sorted({t.encode() for t in texts if t})
    if not needles:
        return None
    return ahocorasick_rs.BytesAhoCorasick(needles), max(map(len, needles))


def _file_has(path: Path, ac: Any, longest: int, view: memoryview) -> bool:
    """Whether the file's raw bytes hold any needle: read once in blocks (into ``view``), each after the last one's tail."""
    keep = longest - 1  # a needle cut by a block boundary is whole in the tail plus the next block
    held = 0
    with open(path, "rb") as f:
        while n := f.readinto(view[held:]):
            end = held + n
            if ac.find_matches_as_indexes(view[:end]):
                return True
            held = min(keep, end)
            view[:held] = bytes(view[end - held:end])
    return False


def _rows_have(column: Any, ac: Any) -> bool:
    """Whether any string of an Arrow column holds a needle: one pass over its value bytes, a match across rows ignored."""
    arr = pc.cast(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column, pa.large_string())
    if not len(arr):
        return False
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    if data is None:
        return False
    first = int(offsets[0])
    for _, start, end in ac.find_matches_as_indexes(memoryview(data).cast("B")[first:int(offsets[-1])]):
        start, end = start + first, end + first
        row = int(np.searchsorted(offsets, start, side="right")) - 1
        if end <= offsets[row + 1]:  # inside one row: not two neighbours' ends and starts
            return True
    return False


def _engine_columns(index: Any) -> Iterable[Any]:
    """Every text the index's engines hold, as Arrow string columns: each LanceDB version's rows, Tantivy's stored rows."""
    lance = getattr(index, "_lance", None)
    if lance is not None:
        import lancedb

        table = lancedb.connect(lance.path).open_table(lance.table.name)  # its own handle: checkouts leave the live one be
        # A Lance row id is (fragment id << 32 | row in fragment); a data fragment is never changed
        # in place and new ones get larger ids, so the rows a version holds that no earlier version
        # held are those above the largest id seen: each row is read once, not once per version
        # (the versions of a store rebuilt by compact number in the hundreds). Needs address-style
        # row ids, Lance's default (eidetica does not enable stable row ids).
        seen = -1
        for v in sorted(v["version"] if isinstance(v, dict) else v.version for v in table.list_versions()):
            table.checkout(v)
            q = table.search().with_row_id(True).select(["text"]).limit(None)
            rows = (q.where(f"_rowid > {seen}", prefilter=True) if seen >= 0 else q).to_arrow()
            if rows.num_rows:
                seen = max(seen, pc.max(rows.column("_rowid")).as_py())
                yield rows.column("text")
    text = getattr(index, "_text", None)
    if text is not None:
        import tantivy

        from ..projections._rows import Row

        searcher = text.index.searcher()
        if searcher.num_docs:
            hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs).hits
            yield pa.array([Row.unpack(searcher.doc(addr).get_first("row")).text for _, addr in hits], pa.large_string())


def verify(root: Path, index: Any, texts: set[str]) -> list[str]:
    """Where any of ``texts`` is still found: files of the store (raw bytes) and the engines' rows; [] when nowhere."""
    found: list[str] = []
    auto = _automaton(texts)
    if auto is None:
        return found
    ac, longest = auto
    view = memoryview(bytearray(_BLOCK + longest))  # one buffer for every file: not a fresh one each
    for rel in sorted(_files(root)):
        try:
            if _file_has(root / rel, ac, longest, view):
                found.append(rel)
        except OSError:
            continue  # gone meanwhile
    if index is not None and any(_rows_have(col, ac) for col in _engine_columns(index)):
        found.append("index rows")
    return found


def compact(m: Store) -> dict[str, Any]:
    """Erase forgotten content from disk (log redaction, fresh indices, no snapshots) and return the erasure receipt."""
    m.gate.sync()
    before = _files(m.path)
    m.actor_snapshots.clear()  # first: a crash during the rewrite must not leave one behind
    with m.gate.lock:
        redact, _ = plan_compaction(m.log)
        what = _forgotten(m.log, redact)
        report = m.log.redact(redact)  # type: ignore[attr-defined]
        m.views.fresh(m.embedder)
    closed = close_views(m.log)  # their temporary copies hold what the store held before the erasure
    m.runtime.refold()  # actors held here fold the compacted log again
    m.actor_snapshots.clear()  # and what closing the actors wrote: they may hold forgotten text
    texts = what.pop("texts")
    kept = _still_live(m.log, texts)
    texts -= kept
    after = _files(m.path)
    local = m.views.local()  # an index in this process is searched too; one elsewhere holds its own files
    found = verify(m.path, local.index if local is not None else None, texts)
    now = dt.datetime.now(dt.timezone.utc)
    receipt = {
        **report,
        "time": now.isoformat(),
        "forgotten": {"events": sum(what["by_type"].values()), "by_type": what["by_type"], "messages": what["messages"],
                      "texts": len(texts), "text_sha256": sorted(hashlib.sha256(t.encode()).hexdigest() for t in texts)},
        "facts": what["facts"],
        "summaries": what["summaries"],
        "files_rewritten": sorted(f for f, st in after.items() if before.get(f) != st),
        "files_removed": sorted(set(before) - set(after)),
        "kept_elsewhere": len(kept),
        "past_views_closed": closed,
        "found_in": found,
        "verified": not found,
    }
    out = m.path / "receipts" / f"erasure-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    out.parent.mkdir(exist_ok=True)
    write_atomic(out, json.dumps(receipt, indent=1), mode=0o644)  # the receipt survives a crash whole, or not at all
    receipt["receipt"] = str(out)
    return receipt
