"""EideticaStore: the behaviours of LangGraph's own store tests (libs/checkpoint/tests/test_store.py),
run on a fresh store and after a reopen that rebuilds every view from the log; plus what only an
event-sourced store has (forget + compact, export / import, tenants) and a real graph with LangMem."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp  # noqa: E402

import eidetica  # noqa: E402
from eidetica.errors import InvalidInput  # noqa: E402
from eidetica.integrations.langgraph import EideticaStore  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402
from tests.support.clock import Clock  # noqa: E402

LG_T0 = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


class Env:
    """A store over a real eidetica memory; ``reopen()`` closes it and, in the "reopened" mode,
    deletes the views and opens the store again, so every answer after it comes from replay.
    In the "served" mode the memory is ``eidetica.connect()`` to a real server process, in a
    tenant of its own (a fresh store)."""

    def __init__(self, path: Path, mode: str, served: Any = None, **store_kw: Any) -> None:
        self.path, self.mode, self.served, self.store_kw = path, mode, served, store_kw
        self.clock = Clock(LG_T0)  # TTL decisions read it; a served store follows it
        self.memory = self._open()
        self.store = EideticaStore(self.memory, **store_kw)

    def _open(self) -> Any:
        if self.served is not None:
            return eidetica.connect(self.served.url, api_key=self.served.tenant(self.clock))
        return eidetica.open(self.path, embedder=HashEmbedder(dim=64), clock=self.clock)

    def reopen(self) -> EideticaStore:
        if self.mode == "reopened":
            self.memory.close()
            shutil.rmtree(self.path / "index")  # no snapshot, no checkpoint: rebuilt by replay
            self.memory = self._open()
            self.store = EideticaStore(self.memory, **self.store_kw)
        return self.store

    def close(self) -> None:
        """Close the memory; a served store gets its wall clock back."""
        self.memory.close()
        self.clock.release()


MODES = ["fresh", "reopened", pytest.param("served", marks=pytest.mark.slow)]
TTL_MODES = ["reopened", pytest.param("served", marks=pytest.mark.slow)]


def make_env(path: Path, mode: str, request: pytest.FixtureRequest, **store_kw: Any) -> Env:
    """An Env in ``mode``; "served" goes through eidetica.connect() to the module's server."""
    return Env(path, mode, request.getfixturevalue("served") if mode == "served" else None, **store_kw)


@pytest.fixture(params=MODES)
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    e = make_env(tmp_path / "store", request.param, request)
    yield e
    e.close()


def put_all(store: EideticaStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})


# -- namespaces ------------------------------------------------------------------------------
def test_list_namespaces_basic(env: Env) -> None:
    put_all(env.store, [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
                        ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")])
    s = env.reopen()
    assert sorted(s.list_namespaces(prefix=("a", "b"))) == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(s.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(s.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(s.list_namespaces(prefix=("a", "b"), max_depth=3)) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert s.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert s.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(s.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(s.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert s.list_namespaces(prefix=("nonexistent",)) == []
    assert s.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_wildcards_pagination_depth(env: Env) -> None:
    put_all(env.store, [("users", "123"), ("users", "456"), ("users", "789", "settings"), ("admin", "users", "789"),
                        ("guests", "123"), ("guests", "456", "preferences")])
    for i in range(20):
        env.store.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": i})
    put_all(env.store, [("h", "i", "j", "k"), ("a", "g")])
    s = env.reopen()
    assert sorted(s.list_namespaces(prefix=("users", "*"))) == [("users", "123"), ("users", "456"), ("users", "789", "settings")]
    assert s.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert s.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert s.list_namespaces(prefix=("namespace",), limit=5, offset=5) == [("namespace", f"sub_{i:02d}") for i in range(5, 10)]
    assert s.list_namespaces(prefix=("namespace",), limit=5, offset=15) == [("namespace", f"sub_{i:02d}") for i in range(15, 20)]
    assert s.list_namespaces(max_depth=1) == [("a",), ("admin",), ("guests",), ("h",), ("namespace",), ("users",)]
    assert ("h", "i") in s.list_namespaces(max_depth=2)


def test_list_namespaces_empty(env: Env) -> None:
    assert env.reopen().list_namespaces() == []


# -- namespaces validated as LangGraph validates them -------------------------------------------
def test_invalid_namespaces_are_refused_and_write_nothing(env: Env) -> None:
    asyncio.run(_invalid_namespaces(env))


async def _invalid_namespaces(env: Env) -> None:
    s, doc = env.store, {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            s.put(bad, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            await s.aput(bad, "foo", doc)
    with pytest.raises(InvalidNamespaceError):
        s.batch([PutOp(("a.b",), "k", doc)])  # past the public put: a '.' would alias ("a", "b")
    assert s.list_namespaces() == []
    await s.aput(("foo", "langgraph", "foo"), "bar", doc)
    assert (await s.aget(("foo", "langgraph", "foo"), "bar")).value == doc  # type: ignore[union-attr]
    assert (await s.asearch(("foo", "langgraph", "foo")))[0].value == doc
    await s.adelete(("foo", "langgraph", "foo"), "bar")
    assert await s.aget(("foo", "langgraph", "foo"), "bar") is None
    s.batch([PutOp(("langgraph", "foo"), "bar", doc)])  # the root rule is the public put's, as in LangGraph
    s = env.reopen()
    assert s.get(("langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    assert s.search(("langgraph", "foo"))[0].value == doc


# -- batch ------------------------------------------------------------------------------------
def test_batch_results_follow_the_ops_in_order(env: Env) -> None:
    s = env.store
    res = s.batch([
        PutOp(("test", "foo"), "key1", {"data": "value1"}),
        PutOp(("test", "bar"), "key2", {"data": "value2"}),
        GetOp(("test", "foo"), "key1"),
        SearchOp(("test",), None, 10, 0),
        ListNamespacesOp(None, None, 100, 0),
        PutOp(("test", "foo"), "key1", None),
        GetOp(("test", "foo"), "key1"),
        GetOp(("test", "nope"), "key9"),
    ])
    assert res[0] is None and res[1] is None and res[5] is None
    assert res[2].value == {"data": "value1"} and res[2].namespace == ("test", "foo")  # type: ignore[union-attr]
    assert sorted(i.key for i in res[3]) == ["key1", "key2"]  # type: ignore[union-attr]
    assert res[4] == [("test", "bar"), ("test", "foo")]
    assert res[6] is None and res[7] is None
    s = env.reopen()
    again = s.batch([GetOp(("test", "foo"), "key1"), GetOp(("test", "bar"), "key2")])
    assert again[0] is None and again[1].value == {"data": "value2"}  # type: ignore[union-attr]


def test_put_get_delete_and_times(env: Env) -> None:
    asyncio.run(_put_get_delete(env))


async def _put_get_delete(env: Env) -> None:
    s = env.store
    await asyncio.gather(s.aput(("test",), "same", {"value": "same"}), s.aput(("test",), "different", {"value": "different"}))
    first = s.get(("test",), "same")
    assert first is not None and first.created_at == first.updated_at
    s.put(("test",), "same", {"value": "changed"})
    s = env.reopen()
    got = s.get(("test",), "same")
    assert got is not None and got.value == {"value": "changed"}
    assert got.created_at == first.created_at and got.updated_at > first.updated_at
    s.delete(("test",), "same")
    s.delete(("test",), "never-there")  # a no-op, as in LangGraph
    assert s.get(("test",), "same") is None
    assert [i.key for i in s.search(("test",))] == ["different"]


# -- search: filters, offsets, queries ---------------------------------------------------------
DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


def test_search_with_filters(env: Env) -> None:
    for key, value in DOCS:
        env.store.put(("test",), key, value)
    s = env.reopen()
    r = s.search(("test",), query="apple", filter={"color": "red"})
    assert [i.key for i in r][:1] == ["doc1"] and len(r) == 2
    r = s.search(("test",), query="car", filter={"color": "red"})
    assert [i.key for i in r][:1] == ["doc2"] and len(r) == 2
    r = s.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})
    assert sorted(i.key for i in r) == ["doc1", "doc3", "doc4"]  # every admitted item, ranked or not
    r = s.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [i.key for i in r] == ["doc3"]
    assert sorted(i.key for i in s.search(("test",), filter={"score": {"$lt": 3.5}})) == ["doc2"]
    assert sorted(i.key for i in s.search(("test",), filter={"score": {"$lte": 3.5}})) == ["doc2", "doc4"]
    assert sorted(i.key for i in s.search(("test",), filter={"color": {"$ne": "red"}})) == ["doc3", "doc4"]
    assert sorted(i.key for i in s.search(("test",), filter={"color": {"$eq": "blue"}})) == ["doc4"]


def test_search_query_ranks_by_hybrid_search_with_scores(env: Env) -> None:
    env.store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    env.store.put(("test",), "doc2", {"text": "something about dogs"})
    env.store.put(("test",), "doc3", {"text": "text about birds"})
    s = env.reopen()
    first = s.search(("test",), query="Zany Xerxes")
    assert first[0].key == "doc1"
    initial = first[0].score
    assert initial is not None
    s.put(("test",), "doc1", {"text": "new text about dogs"})
    after = next((r.score for r in s.search(("test",), query="Zany Xerxes") if r.key == "doc1"), 0.0)
    assert (after or 0.0) < initial
    assert s.search(("test",), query="new text about dogs")[0].key == "doc1"
    s.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    s = env.reopen()
    top = s.search(("test",), query="new text about dogs", limit=3)
    assert [r.key for r in top if r.score is not None][:1] == ["doc1"]
    assert not any(r.key == "doc4" and r.score is not None for r in top)
    assert s.get(("test",), "doc4").value == {"text": "new text about dogs"}  # type: ignore[union-attr]


def test_search_pagination_and_edge_queries(env: Env) -> None:
    for i in range(5):
        env.store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    s = env.reopen()
    p1 = s.search(("test",), query="test", limit=2)
    p2 = s.search(("test",), query="test", limit=2, offset=2)
    assert len(p1) == 2 and len(p2) == 2 and not {r.key for r in p1} & {r.key for r in p2}
    assert len(s.search(("test",), query="test", limit=10)) == 5
    for q in ("", None, "test " * 100, "test!@#$%^&*()", 'tenant:x OR "'):
        assert len(s.search(("test",), query=q)) == 5
    assert [r.key for r in s.search(("test",), limit=2)] == ["doc4", "doc3"]  # newest update first
    assert s.search(("other",), query="test") == []


@pytest.mark.parametrize("mode", TTL_MODES)
def test_index_fields_as_json_paths(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    e = make_env(tmp_path / "s", mode, request, index={"dims": 64, "fields": ["title", "tags[*]"]})
    try:
        e.store.put(("docs",), "a", {"title": "volcano hiking", "tags": ["lava"], "body": "zebra zebra zebra"})
        e.store.put(("docs",), "b", {"title": "city tour", "tags": ["museum"], "body": "volcano"})
        e.store.put(("docs",), "c", {"title": "zebra safari", "body": "x"}, index=["body"])  # per-item fields
        s = e.reopen()
        assert s.search(("docs",), query="volcano")[0].key == "a"  # "volcano" in b's body is not indexed
        assert s.search(("docs",), query="museum")[0].key == "b"
        # only the named fields reach the text index: a's body and c's title were left out
        if mode != "served":
            index = e.memory.index
            assert index.search(tenant="default", text="zebra safari", mode="text", kinds=["item"]) == []
            assert [h.source_id for h in index.search(tenant="default", text="lava", mode="text", kinds=["item"])] == [
                s.memory.items.get(("docs",), "a").item_id]
        with pytest.raises(InvalidInput, match="index.dims"):
            EideticaStore(e.memory, index={"dims": 3})
        with pytest.raises(InvalidInput, match="index.embed"):
            EideticaStore(e.memory, index={"dims": 64, "embed": "openai:text-embedding-3-small"})
    finally:
        e.close()


# -- TTL ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", TTL_MODES)
def test_ttl_refresh_on_read_and_sweep(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    e = make_env(tmp_path / "s", mode, request, ttl={"default_ttl": 2.0, "refresh_on_read": True})
    try:
        s = e.store
        assert s.supports_ttl
        s.put(("t",), "kept", {"v": 1})
        s.put(("t",), "short", {"v": 2}, ttl=1.0)
        s.put(("t",), "forever", {"v": 3}, ttl=None)
        e.clock.now += dt.timedelta(seconds=90)
        assert s.sweep_ttl() == 1  # "short" expired at +60s
        assert s.get(("t",), "kept", refresh_ttl=True) is not None  # now expires at +90s+2min
        s = e.reopen()  # the refresh is an event: it survives a rebuild
        e.clock.now += dt.timedelta(seconds=60)  # +150s: past the first expiry (+120s), not the refreshed one
        assert s.sweep_ttl() == 0
        assert {i.key for i in s.search(("t",))} == {"kept", "forever"}
        e.clock.now += dt.timedelta(minutes=10)
        assert s.sweep_ttl() == 1
        assert s.get(("t",), "kept") is None and s.get(("t",), "forever") is not None
        assert s.start_ttl_sweeper(1).done() is False
        assert s.stop_ttl_sweeper(timeout=5)
    finally:
        e.close()


@pytest.mark.parametrize("mode", ["fresh", pytest.param("served", marks=pytest.mark.slow)])
def test_ttl_omit_expired_hides_before_the_sweep(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> None:
    e = make_env(tmp_path / "s", mode, request, ttl={"default_ttl": 1.0, "omit_expired": True, "refresh_on_read": False})
    try:
        e.store.put(("t",), "k", {"v": 1})
        e.store.put(("p",), "k", {"v": 2}, ttl=None)
        e.clock.now += dt.timedelta(minutes=2)
        assert e.store.get(("t",), "k") is None and e.store.search(("t",)) == []
        assert e.store.list_namespaces() == [("p",)]  # a namespace whose items all expired leaves the listing
    finally:
        e.close()


def _unit(v: list[float]) -> list[float]:
    n = sum(x * x for x in v) ** 0.5
    return [x / n for x in v]


def _letters(texts: list[str]) -> list[list[float]]:
    """A LangGraph ``embed`` function: counts of a, b, c and anything else (not normalised)."""
    return [[t.count("a") + 0.1, t.count("b") + 0.1, t.count("c") + 0.1, float(len(t)) + 0.1] for t in texts]


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "l2"])
def test_index_embed_becomes_the_store_model_and_scores_follow_the_distance_type(tmp_path: Path, distance: str) -> None:
    e = Env(tmp_path / "s", "fresh")
    try:
        s = EideticaStore(e.memory, index={"dims": 4, "embed": _letters, "fields": ["text"], "distance_type": distance})
        assert e.memory.items.embedder()[1] == 4 and s.embeddings is not None
        s.put(("d",), "x", {"text": "aaab"})
        s.put(("d",), "y", {"text": "cccc"})
        q = "abab"
        got = {r.key: r.score for r in s.search(("d",), query=q)}
        qv = _unit(_letters([q])[0])
        for key, text in (("x", "aaab"), ("y", "cccc")):
            cos = sum(a * b for a, b in zip(qv, _unit(_letters([text])[0])))
            want = -((2 - 2 * cos) ** 0.5) if distance == "l2" else cos
            assert got[key] == pytest.approx(want, abs=1e-3)
        # the same model again is accepted; another model on a store with data is refused, naming the store's
        EideticaStore(e.memory, index={"dims": 4, "embed": _letters})
        with pytest.raises(InvalidInput, match=r"index.embed.*callable:.*_letters \(4-d\)"):
            EideticaStore(e.memory, index={"dims": 4, "embed": _unit})
    finally:
        e.close()


# -- what only a log-backed store gives ---------------------------------------------------------
def test_forget_user_and_compact_erase_items(tmp_path: Path) -> None:
    e = Env(tmp_path / "s", "fresh")
    s, m = e.store, e.memory
    s.put(("alice", "memories"), "k1", {"text": "alice secret marmalade"})
    s.put(("alice", "memories"), "k2", {"text": "deleted pineapple"})
    s.put(("bob", "memories"), "k1", {"text": "bob likes marmalade too"})
    s.delete(("alice", "memories"), "k2")
    s.put(("alice", "memories"), "k2", {"text": "a new value after the delete"})
    m.compact()
    raw = b"".join(p.read_bytes() for p in (tmp_path / "s" / "log").rglob("*") if p.is_file())
    assert b"pineapple" not in raw and b"alice secret" in raw
    m.forget_user("alice")
    m.compact()
    raw = b"".join(p.read_bytes() for p in (tmp_path / "s" / "log").rglob("*") if p.is_file())
    assert b"alice secret" not in raw and b"a new value" not in raw and b"bob likes" in raw
    assert [r.key for r in s.search(("alice",), query="marmalade")] == []
    assert [r.namespace for r in s.search((), query="marmalade")] == [("bob", "memories")]
    assert s.list_namespaces() == [("bob", "memories")]
    m.close()


def test_export_import_rebuild_and_tenants(tmp_path: Path) -> None:
    e = Env(tmp_path / "s", "fresh")
    s, m = e.store, e.memory
    s.put(("alice", "prefs"), "food", {"text": "likes spicy ramen"}, ttl=30)
    s.put(("alice", "prefs"), "tmp", {"text": "x"})
    s.delete(("alice", "prefs"), "tmp")
    other = EideticaStore(m.for_tenant("acme"))
    assert other.get(("alice", "prefs"), "food") is None and other.list_namespaces() == []
    other.put(("alice", "prefs"), "food", {"text": "acme's own alice"})
    assert s.get(("alice", "prefs"), "food").value == {"text": "likes spicy ramen"}  # type: ignore[union-attr]
    before = [(r.key, r.score) for r in s.search(("alice",), query="ramen")]
    m.rebuild()
    assert [(r.key, r.score) for r in s.search(("alice",), query="ramen")] == before
    assert m.export(tmp_path / "out.jsonl") > 0
    with eidetica.open(tmp_path / "t", embedder=HashEmbedder(dim=64)) as m2:
        m2.import_(tmp_path / "out.jsonl")
        s2 = EideticaStore(m2)
        got = s2.get(("alice", "prefs"), "food")
        assert got is not None and got.value == {"text": "likes spicy ramen"}
        assert s2.get(("alice", "prefs"), "tmp") is None
        assert [(r.key, r.score) for r in s2.search(("alice",), query="ramen")] == before
    m.close()


def test_explicit_user_mapping_decides_what_forget_user_covers(tmp_path: Path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        s = EideticaStore(m, user=lambda ns: ns[1])  # LangMem's ("memories", "{user_id}")
        s.put(("memories", "alice"), "a", {"content": "alice"})
        s.put(("memories", "bob"), "b", {"content": "bob"})
        m.forget_user("alice")
        assert [i.key for i in s.search(("memories",))] == ["b"]


# -- a real graph with LangMem's tools and a scripted chat model -------------------------------
def test_langgraph_graph_with_langmem_tools_remembers_across_threads(tmp_path: Path) -> None:
    pytest.importorskip("langmem")
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langmem import create_manage_memory_tool, create_search_memory_tool

    tools = [create_manage_memory_tool(namespace=("memories", "{langgraph_user_id}")),
             create_search_memory_tool(namespace=("memories", "{langgraph_user_id}"))]
    model = FakeMessagesListChatModel(responses=[
        AIMessage("", tool_calls=[{"name": "manage_memory", "id": "c1",
                                   "args": {"content": "The user goes hiking in the Dolomites every summer", "action": "create"}}]),
        AIMessage("Noted."),
        AIMessage("", tool_calls=[{"name": "search_memory", "id": "c2", "args": {"query": "what does the user do in summer?"}}]),
        AIMessage("You hike."),
    ])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    g.add_edge("agent", END)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        graph = g.compile(checkpointer=InMemorySaver(), store=EideticaStore(m, user=lambda ns: ns[1]))
        cfg = {"configurable": {"thread_id": "t1", "langgraph_user_id": "alice"}}
        graph.invoke({"messages": [HumanMessage("I go hiking in the Dolomites every summer")]}, cfg)
        out = graph.invoke({"messages": [HumanMessage("What do I do in summer?")]},
                           {"configurable": {"thread_id": "t2", "langgraph_user_id": "alice"}})
        found = [msg for msg in out["messages"] if isinstance(msg, ToolMessage)]
        assert len(out["messages"]) == 4 and "Dolomites" in str(found[0].content)
        assert m.stats()["streams"] >= 1 and [ns for ns in EideticaStore(m).list_namespaces()] == [("memories", "alice")]
        m.forget_user("alice")
        assert EideticaStore(m).list_namespaces() == []


# -- the fleet runtime ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.ray
def test_both_adapters_on_the_ray_runtime(tmp_path: Path, ray_session) -> None:
    """On the test session's one Ray (conftest.ray_session)."""
    m = eidetica.open(tmp_path / "s", runtime="ray", embedder=HashEmbedder(dim=64))
    try:
        s = EideticaStore(m)
        s.batch([PutOp(("alice", "m"), "k1", {"text": "sails a catamaran"}), PutOp(("alice", "m"), "k2", {"text": "x"})])
        s.delete(("alice", "m"), "k2")
        assert [r.key for r in s.search(("alice",), query="catamaran")] == ["k1"]
        assert s.get(("alice", "m"), "k1").value == {"text": "sails a catamaran"}  # type: ignore[union-attr]
        pytest.importorskip("agents")
        from eidetica.integrations.openai_agents import EideticaSession

        sess = EideticaSession("c1", m, user="alice")
        asyncio.run(sess.add_items([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
        assert asyncio.run(sess.pop_item()) == {"role": "assistant", "content": "hello"}
        assert asyncio.run(sess.get_items()) == [{"role": "user", "content": "hi"}]
        m.forget_user("alice")
        assert s.list_namespaces() == [] and asyncio.run(sess.get_items()) == []
    finally:
        m.close()
        from eidetica._ray import shutdown_store

        shutdown_store(m.path)


def test_bad_item_input_names_the_field_and_writes_nothing(tmp_path: Path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        head = m.log.head(0)
        ok = {"namespace": ("a",), "key": "k", "value": {"x": 1}, "user": "u", "texts": ["x"]}
        for bad, field in [({"value": [1]}, "ops[1].value"), ({"key": 3}, "ops[1].key"), ({"namespace": ("a.b",)}, "ops[1].namespace"),
                           ({"ttl": -1}, "ops[1].ttl"), ({"texts": "x"}, "ops[1].texts"), ({"user": ""}, "ops[1].user")]:
            with pytest.raises(InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
                m.items.put([ok, dict(ok, **bad)])
        assert m.log.head(0) == head and m.items.namespaces() == []
        with pytest.raises(InvalidInput, match="limit"):
            m.items.search(("a",), limit=-1)


# -- filters travel as data (they cross the server): LangGraph's semantics --------------------------
def test_filter_matcher_agrees_with_langgraph_and_refuses_unknown_operators(tmp_path: Path) -> None:
    from langgraph.store.memory import _compare_values

    from eidetica._store.items import check_filter, matches

    values = [{"color": "red", "score": 4.5, "tags": ["a", "b"], "meta": {"k": 1, "j": "x"}},
              {"color": "blue", "score": 3, "tags": ["a"], "meta": {"k": 2}}, {"color": None, "score": 3.5}]
    filters = [{"color": "red"}, {"color": {"$ne": "red"}}, {"color": {"$eq": "blue"}}, {"score": {"$gt": 3.5}},
               {"score": {"$gte": 3.5, "$lt": 4.5}}, {"score": {"$lte": 3}}, {"tags": ["a", "b"]}, {"tags": ["b", "a"]},
               {"meta": {"k": 1}}, {"meta": {"k": {"$gt": 1}}}, {"color": "red", "score": {"$gt": 4}}, {"missing": None}]
    for value in values:
        for flt in filters:
            want = all(_compare_values(value.get(k), v) for k, v in flt.items())
            assert matches(value, check_filter("filter", flt)) == want, (value, flt)
    assert not matches({"n": "x"}, {"n": {"$gt": 1}}) and not matches({}, {"n": {"$lt": 1}})  # no TypeError
    for bad, field in [({"a": {"$regex": "x"}}, "filter.a"), ({"a": {"$gt": "3"}}, r"filter.a.\$gt"), ([1], "filter"),
                       ({"m": {"n": {"$in": [1]}}}, "filter.m.n")]:
        with pytest.raises(InvalidInput, match=field):
            check_filter("filter", bad)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        with pytest.raises(InvalidInput, match="filter.color"):
            EideticaStore(m).search(("a",), filter={"color": {"$like": "r%"}})


@pytest.mark.slow
def test_items_over_the_server_bad_input_is_a_4xx_naming_the_field_and_tenants_are_apart(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    e = make_env(tmp_path / "s", "served", request)
    m = e.memory
    try:
        ok = {"namespace": ["a"], "key": "k", "value": {"x": 1}, "user": "u", "texts": ["x"]}
        for bad, field in [({"value": [1]}, "ops[1].value"), ({"key": 3}, "ops[1].key"), ({"namespace": ["a.b"]}, "ops[1].namespace"),
                           ({"ttl": -1}, "ops[1].ttl"), ({"user": ""}, "ops[1].user")]:
            with pytest.raises(InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
                m.items.put([ok, dict(ok, **bad)])
        assert m.items.namespaces() == []
        for call, field in [(lambda: m.items.search(["a"], limit=-1), "limit"),
                            (lambda: m.items.search(["a"], filter={"x": {"$foo": 1}}), "filter.x"),
                            (lambda: m.items.get(["a"], 5), "key"), (lambda: m.items.search(["a"], refresh_ttl="yes"), "refresh_ttl")]:
            with pytest.raises(InvalidInput, match=field):
                call()
        r = httpx.post(m.url + "/v1/items", json={"ops": [dict(ok, key=3)]}, headers={"Authorization": f"Bearer {m.api_key}"})
        assert r.status_code == 400 and r.json()["field"] == "ops[0].key"
        r = httpx.post(m.url + "/v1/items", json={"ops": [ok], "tenant": "x"}, headers={"Authorization": f"Bearer {m.api_key}"})
        assert r.status_code == 400 and m.items.namespaces() == []  # no request names a tenant
        # the key's tenant, and only it: another key sees none of these items
        e.store.put(("alice", "prefs"), "food", {"text": "likes ramen"})
        other = make_env(tmp_path / "t", "served", request)
        try:
            assert other.store.get(("alice", "prefs"), "food") is None and other.store.list_namespaces() == []
            assert other.store.search(("alice",), query="ramen") == []
            assert [i.key for i in e.store.search(("alice",), query="ramen")] == ["food"]
        finally:
            other.close()
    finally:
        m.close()
