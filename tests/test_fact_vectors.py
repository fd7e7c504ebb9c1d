"""One user's fact vectors answered from memory: the same rows and distances as LanceDB's
exact filtered scan, kept in step by every write (adds, deletes, forgetting, rebuilds)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from eidetica.events import ArrowLog, ChunksEmbedded, FactDeleted, FactPruned, NewEvent, UserForgotten
from eidetica.events.streams import facts_stream
from eidetica.projections import ChunkIndex, Projector
from eidetica.projections._rows import Filters

DIM = 16
UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)


def fact(rng: np.random.Generator, user: str, i: int, category: str = "general") -> ChunksEmbedded:
    v = rng.standard_normal((1, DIM)).astype("<f4")
    return ChunksEmbedded(model_id="m", dim=DIM, chunk_ids=[f"fact-{user}-{i}"], vectors=v.tobytes(),
                          texts=[f"fact {i} of {user}"], source_id=f"fact-{user}-{i}", kind="fact", user_id=user,
                          category=category, time=T0 + dt.timedelta(hours=i))


def compare(idx: ChunkIndex, rng: np.random.Generator, tenant: str, user: str, **kw) -> None:
    """The in-memory answer equals LanceDB's exact scan over the same filter, for a few queries."""
    since = kw.pop("since", None)
    f = Filters.build(tenant, ["fact"], user, None, None, kw.get("category"), since, None)
    for _ in range(3):
        q = rng.standard_normal(DIM).astype(np.float32)
        mem = idx._lance.vector_search(q, f.sql(), 10, exact=True, filters=f)
        ref = idx._lance.vector_search(q, f.sql(), 10, exact=True)
        assert sorted(k for k, _ in mem) == sorted(k for k, _ in ref)
        d = dict(ref)
        for k, dist in mem:
            assert dist == pytest.approx(d[k], abs=1e-5)
        keys = [k for k, _ in mem]
        got = idx._lance.vectors(tenant, keys)
        assert set(got) == set(keys)


def test_in_memory_fact_scan_tracks_every_write(tmp_path) -> None:
    rng = np.random.default_rng(5)
    log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
    idx = ChunkIndex(tmp_path / "idx", dim=DIM)
    proj = Projector(log, [idx], batch_size=16)

    def write(tenant: str, user: str, events: list) -> None:
        log.append(facts_stream(tenant, user), [NewEvent.of(e, tenant=tenant) for e in events])
        proj.catch_up()

    write("a", "u", [fact(rng, "u", i, "food" if i % 3 == 0 else "general") for i in range(30)])
    write("a", "v", [fact(rng, "v", i) for i in range(12)])
    write("b", "u", [fact(rng, "u", i) for i in range(12)])  # same user id, other tenant
    compare(idx, rng, "a", "u")  # loads user u's facts from the table
    compare(idx, rng, "a", "u", category="food")
    compare(idx, rng, "a", "u", since=T0 + dt.timedelta(hours=20))
    assert ("a", "u") in idx._lance._facts
    # writes after the load: new facts, deletes, pruning, a re-written key
    write("a", "u", [fact(rng, "u", i) for i in range(30, 40)] + [FactDeleted(fact_id="fact-u-3"),
                                                                    FactPruned(fact_id="fact-u-31")])
    write("a", "u", [fact(rng, "u", 5)])
    compare(idx, rng, "a", "u")
    compare(idx, rng, "b", "u")
    fv = idx._lance._facts[("a", "u")]
    assert "a\x1ffact-u-3" not in {r.id for r in fv.rows if r is not None} and len(fv.slot) == 38
    write("a", "u", [UserForgotten(user_id="u")])
    compare(idx, rng, "a", "u")
    assert not idx._lance._facts[("a", "u")].slot
    write("a", "u", [fact(rng, "u", i) for i in range(50, 55)])
    compare(idx, rng, "a", "u")
    # a rebuild replays into the table in bulk: the memory copy is dropped and reloaded
    proj.rebuild()
    compare(idx, rng, "a", "u")
    compare(idx, rng, "a", "v")
    # the memory budget drops the least recently used user
    idx._lance.fact_cache_rows = 12
    idx._lance._facts.clear()
    compare(idx, rng, "a", "u")  # 5 rows
    compare(idx, rng, "a", "v")  # 12 more: u makes room
    assert list(idx._lance._facts) == [("a", "v")]
    idx.close()
    log.close()
