"""The state's snapshot codec: the whole fold of a ``StateProjection`` as Arrow tables, and back.

Functions of the projection's private fold (``state``: the projection, its lock held), kept apart
from the folds themselves: what a snapshot holds changes with the snapshot schema, not with the events.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ._records import ItemInfo, NoteInfo
from ._state_rows import _ENC, _TS, _col, _Fact, _FactRow, _schedule_from_row, _schedule_row, _Session

__all__ = ["fold_tables", "restore_fold"]


def fold_tables(state: Any) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The whole fold as Arrow tables (lock held): what a snapshot holds."""
    ss = list(state._sessions.items())
    lens = np.fromiter((len(s.seqs) for _, s in ss), dtype=np.int32, count=len(ss))
    bounds = pa.array(np.concatenate([[0], np.cumsum(lens, dtype=np.int32)]), pa.int32())

    def listed(attr: str) -> pa.Array:
        flat = np.frombuffer(b"".join(getattr(s, attr).tobytes() for _, s in ss), dtype=np.int64)
        return pa.ListArray.from_arrays(bounds, pa.array(flat, pa.int64()))

    sessions = pa.table({
        "tenant": pa.array([k[0] for k, _ in ss], pa.string()),
        "session_id": pa.array([k[1] for k, _ in ss], pa.string()),
        "user_id": pa.array([s.user_id for _, s in ss], pa.string()),
        "started": pa.array([s.started for _, s in ss], _TS),
        "last": pa.array([s.last for _, s in ss], _TS),
        "forgotten": pa.array([s.forgotten for _, s in ss], pa.bool_()),
        "top_sequence": pa.array([s.top for _, s in ss], pa.int64()),
        "partition": pa.array([s.part for _, s in ss], pa.int32()),
        "summary_epoch": pa.array([s.summary[0] if s.summary else None for _, s in ss], pa.int64()),
        "summary_text": pa.array([s.summary[1] if s.summary else None for _, s in ss], pa.string()),
        "summary_upto": pa.array([s.summary[2] if s.summary else None for _, s in ss], pa.int64()),
        "summary_time": pa.array([s.summary[3] if s.summary else None for _, s in ss], _TS),
        "names": pa.array([_ENC.encode(s.names) for _, s in ss], pa.binary()),
        "labels": pa.array([_ENC.encode(s.labels) for _, s in ss], pa.binary()),
        "sequences": listed("seqs"),
        "times_us": listed("times"),
        "offsets": listed("offsets"),
    })
    su = list(state._session_user.items())
    session_users = pa.table({
        "tenant": pa.array([k[0] for k, _ in su], pa.string()),
        "session_id": pa.array([k[1] for k, _ in su], pa.string()),
        "user_id": pa.array([u for _, u in su], pa.string()),
    })
    fs = [(t, u, fid, f) for (t, u), d in state._facts.items() for fid, f in d.items()]
    facts = pa.table({
        "tenant": pa.array([x[0] for x in fs], pa.string()),
        "user_id": pa.array([x[1] for x in fs], pa.string()),
        "fact_id": pa.array([x[2] for x in fs], pa.string()),
        "fact_user": pa.array([x[3].user_id for x in fs], pa.string()),
        "content": pa.array([x[3].content for x in fs], pa.string()),
        "category": pa.array([x[3].category for x in fs], pa.string()),
        "confidence": pa.array([x[3].confidence for x in fs], pa.float64()),
        "status": pa.array([x[3].status for x in fs], pa.string()),
        "superseded_by": pa.array([x[3].by for x in fs], pa.string()),
        "created": pa.array([x[3].created for x in fs], _TS),
        "updated": pa.array([x[3].updated for x in fs], _TS),
        "attribute": pa.array([x[3].attribute for x in fs], pa.string()),
        "detail": pa.array([_ENC.encode(_FactRow(x[3].sources, x[3].history, sorted(x[3].seen), x[3].metadata)) for x in fs],
                           pa.binary()),
    })
    ns = [(t, u, n) for (t, u), d in state._notes.items() for n in d.values()]
    notes = pa.table({
        "tenant": pa.array([x[0] for x in ns], pa.string()),
        "user_id": pa.array([x[1] for x in ns], pa.string()),
        "note_id": pa.array([x[2].note_id for x in ns], pa.string()),
        "note_user": pa.array([x[2].user_id for x in ns], pa.string()),
        "text": pa.array([x[2].text for x in ns], pa.string()),
        "time": pa.array([x[2].time for x in ns], _TS),
    })
    sc = [(t, u, sid, x) for (t, u), d in state._schedules.items() for sid, x in d.items()]
    schedules = pa.table({
        "tenant": pa.array([x[0] for x in sc], pa.string()),
        "user_id": pa.array([x[1] for x in sc], pa.string()),
        "schedule_id": pa.array([x[2] for x in sc], pa.string()),
        "schedule_user": pa.array([x[1] if isinstance(x[3], bytes) else x[3].user_id for x in sc], pa.string()),
        # a schedule never decoded since the restore is written back as it was read
        "detail": pa.array([x[3] if isinstance(x[3], bytes) else _schedule_row(x[3]) for x in sc], pa.binary()),
    })
    # a user tombstone is per scope (facts, notes, items, schedules or all): kind "user:<scope>"
    tb = ([(f"user:{k[2]}", k[:2], t) for k, t in state._user_tomb.items()]
          + [("session", k, t) for k, t in state._session_tomb.items()])
    tombs = pa.table({
        "kind": pa.array([x[0] for x in tb], pa.string()),
        "tenant": pa.array([x[1][0] for x in tb], pa.string()),
        "id": pa.array([x[1][1] for x in tb], pa.string()),
        "time": pa.array([x[2] for x in tb], _TS),
    })
    its = [(t, iid, at[2], state._items[(t, at[0])][at[1]]) for (t, iid), at in state._item_at.items()
           if at[1] in state._items.get((t, at[0]), {})]
    items = pa.table({
        "tenant": pa.array([x[0] for x in its], pa.string()),
        "item_id": pa.array([x[1] for x in its], pa.string()),
        "version": pa.array([x[2] for x in its], pa.int64()),
        "detail": pa.array([_ENC.encode(x[3]) for x in its], pa.binary()),
    })
    ux = [(k, q, False) for k, v in state._todo.items() for q in v] + [(k, q, True) for k, v in state._early.items() for q in v]
    unextracted = pa.table({
        "tenant": pa.array([x[0][0] for x in ux], pa.string()),
        "session_id": pa.array([x[0][1] for x in ux], pa.string()),
        "sequence": pa.array([x[1] for x in ux], pa.int64()),
        "early": pa.array([x[2] for x in ux], pa.bool_()),
    })
    meta = {"embedder": list(state._embedder) if state._embedder else None}
    tables = {"sessions": sessions, "session_users": session_users, "facts": facts, "notes": notes,
              "schedules": schedules, "tombstones": tombs, "items": items, "unextracted": unextracted}
    return tables, meta


def restore_fold(state: Any, t: dict[str, pa.Table], meta: dict[str, Any]) -> None:
    """Replace the fold of ``state`` (a ``StateProjection``, lock held) by the one ``fold_tables`` gave."""
    state._clear()
    dec_names = msgspec.msgpack.Decoder(dict[str, int])
    dec_labels = msgspec.msgpack.Decoder(dict[int, str])
    ss = t["sessions"]
    seq_col = ss.column("sequences").combine_chunks()
    bounds = seq_col.offsets.to_numpy()
    flat = {c: ss.column(c).combine_chunks().values.to_numpy() for c in ("sequences", "times_us", "offsets")}
    cols = {c: _col(ss, c) for c in ("tenant", "session_id", "user_id", "started", "last", "forgotten",
                                     "top_sequence", "partition", "summary_epoch", "summary_text",
                                     "summary_upto", "summary_time", "names", "labels")}
    for i in range(ss.num_rows):
        s = _Session(cols["user_id"][i], cols["started"][i])
        s.last, s.forgotten = cols["last"][i], cols["forgotten"][i]
        s.top, s.part = cols["top_sequence"][i], cols["partition"][i]
        if cols["summary_epoch"][i] is not None:
            s.summary = (cols["summary_epoch"][i], cols["summary_text"][i], cols["summary_upto"][i],
                         cols["summary_time"][i])
        s.names = dec_names.decode(cols["names"][i])
        s.labels = dec_labels.decode(cols["labels"][i])
        s.count_labels()
        a, b = bounds[i], bounds[i + 1]
        s.seqs.frombytes(flat["sequences"][a:b].tobytes())
        s.times.frombytes(flat["times_us"][a:b].tobytes())
        s.offsets.frombytes(flat["offsets"][a:b].tobytes())
        state._sessions[(cols["tenant"][i], cols["session_id"][i])] = s
    su = t["session_users"]
    for tenant, sid, u in zip(_col(su, "tenant"), _col(su, "session_id"), _col(su, "user_id")):
        state._session_user[(tenant, sid)] = u
        state._user_sessions.setdefault((tenant, u), set()).add(sid)
    fdec = msgspec.msgpack.Decoder(_FactRow)
    for r in t["facts"].to_pylist():
        f = _Fact.__new__(_Fact)
        d = fdec.decode(r["detail"])
        f.user_id, f.content, f.category, f.confidence = r["fact_user"], r["content"], r["category"], r["confidence"]
        f.status, f.by, f.created, f.updated = r["status"], r["superseded_by"], r["created"], r["updated"]
        f.sources, f.history, f.seen, f.metadata = d.sources, d.history, set(d.seen), d.metadata
        f.attribute = r.get("attribute") or ""
        state._facts.setdefault((r["tenant"], r["user_id"]), {})[r["fact_id"]] = f
        state._fact_owner[(r["tenant"], r["fact_id"])] = r["user_id"]
    for r in t["notes"].to_pylist():
        state._notes.setdefault((r["tenant"], r["user_id"]), {})[r["note_id"]] = NoteInfo(
            note_id=r["note_id"], text=r["text"], time=r["time"], user_id=r["note_user"])
        state._note_owner[(r["tenant"], r["note_id"])] = r["user_id"]
    # column-wise, each row kept encoded until used (``_schedule``), with no Python loop per row: a
    # schedules actor's restore was mostly building every schedule (to_pylist, decode) before
    sc = t["schedules"]
    tenants, users, sids, susers, details = (sc.column(c).to_numpy(zero_copy_only=False).tolist() for c in
                                             ("tenant", "user_id", "schedule_id", "schedule_user", "detail"))
    rows = zip(tenants, users, sids, details)
    for key, group in itertools.groupby(rows, key=operator.itemgetter(0, 1)):  # written grouped by user
        state._schedules.setdefault(key, {}).update(map(operator.itemgetter(2, 3), group))
    state._schedule_owner.update(zip(zip(tenants, sids), users))
    if any(map(operator.ne, susers, users)):  # a row whose owner differs from its key (never written so): decode it
        for tenant, user, sid, suser, detail in zip(tenants, users, sids, susers, details):
            if suser != user:
                state._schedules[(tenant, user)][sid] = _schedule_from_row(suser, detail)
    tb = t["tombstones"]
    for kind, tenant, ident, tm in zip(_col(tb, "kind"), _col(tb, "tenant"), _col(tb, "id"), _col(tb, "time")):
        if kind.startswith("user:"):
            state._user_tomb[(tenant, ident, kind.split(":", 1)[1])] = tm
        else:
            state._session_tomb[(tenant, ident)] = tm
    idec = msgspec.msgpack.Decoder(ItemInfo)
    it = t["items"]
    for tenant, iid, version, detail in zip(_col(it, "tenant"), _col(it, "item_id"), _col(it, "version"),
                                            _col(it, "detail")):
        info = idec.decode(detail)
        state._items.setdefault((tenant, info.namespace), {})[info.key] = info
        state._item_at[(tenant, iid)] = (info.namespace, info.key, version)
    ux = t.get("unextracted", pa.table({c: [] for c in ("tenant", "session_id", "sequence", "early")}))
    for tenant, sid, q, early in zip(_col(ux, "tenant"), _col(ux, "session_id"), _col(ux, "sequence"), _col(ux, "early")):
        (state._early if early else state._todo).setdefault((tenant, sid), set()).add(q)
    emb = meta.get("embedder")
    state._embedder = (emb[0], int(emb[1])) if emb else None
