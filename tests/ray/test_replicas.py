"""View replicas on a real Ray cluster (head + worker node, one CPU each): placement, read-your-writes, failover."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ray = pytest.importorskip("ray")

import eidetica  # noqa: E402
from eidetica._ray import shutdown_store  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402


def open_store(path, **kw):
    """A store with two view replicas and a cheap deterministic embedder."""
    kw.setdefault("views_replicas", 2)
    return eidetica.open(path, runtime="ray", embedder=HashEmbedder(dim=64), config=MemoryConfig(auto_extract=False), **kw)


@ray.remote(num_cpus=0)
def agent(path: str, work: str, arg: str, after=None, **kw):
    """An agent in a Ray worker process: opens the store, does one thing, reports its node and result."""
    m = open_store(path, **kw)
    try:
        if work == "search":  # ``after``: another handle's writes, which this read must see
            out = [(h.id, round(h.score, 6)) for h in m.search(arg, user="u", min_score=0.0, min_offset=after)]
        elif work == "remember_and_recall":
            m.remember(arg, user="u")
            # its own write, read through its node's replica with no offset passed; and the offsets
            # it wrote, for a reader elsewhere
            out = [h.text for h in m.recall(arg, user="u")], m.written
        else:
            m.remember(arg, user="u")
            out = None
        return ray.get_runtime_context().get_node_id(), out
    finally:
        m.close()


def on(node_id: str, **opts):
    """Options that pin a task to a node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), **opts)


@pytest.fixture(scope="module")
def nodes(ray_session):
    """(head node id, worker node id)."""
    c, worker = ray_session
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    head = ray.get_runtime_context().get_node_id()
    others = [n for n in alive if n != head]
    assert others, "the session cluster has a worker node"
    wid = getattr(worker, "node_id", None)
    return head, wid if wid in others else others[0]


@pytest.fixture()
def store(tmp_path, nodes):
    path = tmp_path / "store"
    m = open_store(path)
    s = m.session("c", user="u", buffer=20)
    for i in range(40):
        s.append("user" if i % 2 == 0 else "assistant", f"message {i} about topic {i % 5} and hiking trip {i}")
    s.flush()
    yield path, m
    m.close()
    shutdown_store(path)


def reads_per_node(m) -> dict[str, int]:
    """Reads each node's replica has served."""
    return {r["node"]: r["served"] for r in m.views.status()}


def test_each_node_reads_from_its_own_replica_with_identical_results(store, nodes) -> None:
    path, m = store
    head, worker = nodes
    status = m.stats()["replicas"]
    assert sorted(r["node"] for r in status) == sorted([head, worker])  # one replica per node
    assert len({r["path"] for r in status}) == 2  # each in its own directory
    before = reads_per_node(m)
    after = m.written  # the fixture's writes: each agent's read waits for its replica to hold them
    assert after and after[0] >= 40
    node, from_worker = ray.get(agent.options(**on(worker)).remote(str(path), "search", "hiking topic 3", after))
    assert node == worker
    after_worker = reads_per_node(m)
    assert after_worker[worker] == before[worker] + 1 and after_worker[head] == before[head]
    node, from_head = ray.get(agent.options(**on(head)).remote(str(path), "search", "hiking topic 3", after))
    assert node == head
    after_head = reads_per_node(m)
    assert after_head[head] == after_worker[head] + 1 and after_head[worker] == after_worker[worker]
    # two independent folds of one log answer identically, and as the store's single views actor does
    assert from_worker and from_worker == from_head
    single = eidetica.open(path, runtime="ray", embedder=HashEmbedder(dim=64))  # replica 0 is the single-views layout
    assert [(h.id, round(h.score, 6)) for h in single.search("hiking topic 3", user="u", min_score=0.0)] == from_head


def test_read_your_writes_across_nodes_and_a_late_replica_raises(tmp_path, nodes) -> None:
    """A read carries its handle's writes as its floor and nothing else: another handle's writes through ``min_offset``."""
    head, worker = nodes
    path = tmp_path / "quiet"
    # replicas that never follow the log on their own: only a read's floor makes one catch up
    m = open_store(path, replica_follow=0.0)
    try:
        m.session("c", user="u").append("user", "I went hiking on Sunday")
        mine = m.written
        assert mine and set(mine) <= set(range(m.log.partitions))
        assert [h.text for h in m.search("hiking", user="u", min_score=0.0)][:1] == ["I went hiking on Sunday"]
        strict = open_store(path, replica_timeout=0.0)  # a handle that never waits for its replica
        reader = open_store(path)  # a handle that wrote nothing
        # a write on the worker node; the writer reads its own write at once through its node's replica
        node, (texts, theirs) = ray.get(
            agent.options(**on(worker)).remote(str(path), "remember_and_recall", "my kayak is green", replica_follow=0.0))
        assert node == worker and texts and texts[0] == "my kayak is green"
        assert theirs and all(theirs[p] > mine.get(p, -1) for p in theirs)  # its offsets, past the earlier write
        # on the head node: without the offset, nothing makes the head replica catch up (no call to the log)
        assert "my kayak is green" not in [h.text for h in reader.recall("kayak green", user="u")]
        with pytest.raises(eidetica.ReplicaBehind) as e:  # with it, a replica that is not there raises, never stale
            strict.recall("my kayak is green", user="u", min_offset=theirs)
        assert e.value.wanted == theirs and e.value.timeout == 0.0
        # a waiting handle catches its replica up to the offset, then answers
        assert [h.text for h in reader.recall("my kayak is green", user="u", min_offset=theirs)][:1] == ["my kayak is green"]
        rows = {r["node"]: r for r in m.stats()["replicas"]}
        assert rows[head]["lag"] == 0 and set(rows[head]["applied"]) == set(range(m.log.partitions))
        with pytest.raises(eidetica.InvalidInput) as bad:
            reader.search("kayak", user="u", min_offset="latest")
        assert bad.value.field == "min_offset"
        strict.close()
        reader.close()
    finally:
        m.close()
        shutdown_store(path)


def test_killing_a_replica_mid_load_loses_no_query(store, nodes) -> None:
    path, m = store
    head, _ = nodes
    expected = [h.id for h in m.search("hiking topic 2", user="u")]
    assert expected
    errors: list[BaseException] = []
    answers: list[list[str]] = []
    stop = threading.Event()
    started = threading.Barrier(3)
    warm = threading.Event()

    def load() -> None:
        mine = open_store(path)
        started.wait()
        try:
            while not stop.is_set() or len(answers) < 40:
                answers.append([h.id for h in mine.search("hiking topic 2", user="u")])
                if len(answers) >= 5:
                    warm.set()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            mine.close()

    ts = [threading.Thread(target=load) for _ in range(2)]
    for t in ts:
        t.start()
    started.wait()
    victim = next(h for h, r in zip(m.views.handles, m.views.status()) if r["node"] == head)
    pid = ray.get(victim.pid.remote())
    warm.wait()  # the load is running
    ray.kill(victim, no_restart=False)  # Ray restarts it; it refolds from its own checkpoint
    m.remember("written while a replica was down", user="u")
    stop.set()
    for t in ts:
        t.join()
    assert not errors, errors
    assert len(answers) >= 40 and all(a == expected for a in answers)
    assert ray.get(victim.pid.remote()) != pid  # recreated
    hits = m.recall("written while a replica was down", user="u")  # the head handle reads through the new one
    assert hits and hits[0].text == "written while a replica was down"
    rows = {r["node"]: r for r in m.stats()["replicas"]}
    assert rows[head]["lag"] == 0


def test_bad_replica_options_are_refused(ray_session, tmp_path) -> None:
    for bad in (0, -1, "all", 1.5, True):
        with pytest.raises(eidetica.InvalidInput) as e:
            open_store(tmp_path / "s", views_replicas=bad)
        assert e.value.field == "views_replicas"
    with pytest.raises(eidetica.InvalidInput) as e:
        open_store(tmp_path / "s", replica_timeout=-1)
    assert e.value.field == "replica_timeout"
    shutdown_store(tmp_path / "s")


def test_a_new_node_gets_its_replica_on_first_use_from_a_copy(ray_session, store, nodes) -> None:
    path, m = store
    cluster, _ = ray_session
    head, worker = nodes
    first = open_store(path, views_replicas="node")  # the head node's replica: a copy of replica 0's views
    expected = [(h.id, round(h.score, 6)) for h in first.search("hiking topic 3", user="u", min_score=0.0)]
    node = cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        new = node.node_id
        assert new not in (head, worker)
        got_node, got = ray.get(agent.options(**on(new)).remote(str(path), "search", "hiking topic 3", views_replicas="node"))
        assert got_node == new and got == expected  # identical to the other replicas' answer
        rows = {r["node"]: r for r in first.stats()["replicas"]} | {
            r["node"]: r for r in open_store(path, views_replicas="node").stats()["replicas"]}
        assert new in rows, rows  # created there, on that node's first use
        assert rows[new]["served"] == 1 and rows[new]["lag"] == 0
        assert rows[new]["started"]["how"] == "copy"  # from another replica's checkpoint, not a full replay
        assert rows[new]["path"] != rows[head]["path"]
    finally:
        for name in ray.util.list_named_actors():
            if name.endswith(node.node_id[:16]):
                ray.kill(ray.get_actor(name), no_restart=True)
        cluster.remove_node(node)
        first.close()


def test_a_replica_can_start_by_replay_and_answers_the_same(store) -> None:
    path, m = store
    expected = [(h.id, round(h.score, 6)) for h in m.search("hiking topic 1", user="u", min_score=0.0)]
    third = open_store(path, views_replicas=3, replica_start="replay")
    rows = {r["replica"]: r for r in third.stats()["replicas"]}
    assert rows["views:2"]["started"]["how"] == "replay"
    assert rows["views:1"]["started"]["how"] == "copy"  # the fixture's second replica was seeded from replica 0
    served = rows["views:2"]["served"]
    third.views.order = [2]  # ask replica 2 itself
    assert [(h.id, round(h.score, 6)) for h in third.search("hiking topic 1", user="u", min_score=0.0)] == expected
    assert {r["replica"]: r for r in third.stats()["replicas"]}["views:2"]["served"] == served + 1
    with pytest.raises(eidetica.InvalidInput) as e:
        open_store(path, replica_start="rsync")
    assert e.value.field == "replica_start"
    third.close()


def test_a_handles_floor_is_the_offsets_its_writes_reached() -> None:
    from eidetica._ray import Written, _collect, _noted, _unwrap, _Wrote

    w = Written()
    assert w.floor() == {}
    w.note({0: 5})
    w.note({0: 3, 1: 2})  # an older offset never lowers the floor
    assert w.floor() == {0: 5, 1: 2}
    # a hosted actor's call hands its written offsets back with its result
    assert _unwrap(_Wrote("fact-1", {0: 9}), w) == "fact-1" and w.floor() == {0: 9, 1: 2}
    assert _unwrap("nothing written", w) == "nothing written" and w.floor() == {0: 9, 1: 2}
    # inside another hosted call (a proxy passed to an actor): collected for that call's caller
    outer = _collect({})
    try:
        _noted({1: 4}, None)
    finally:
        assert _collect(outer) == {1: 4}
    _noted({1: 6}, None)  # outside any hosted call: nowhere to collect, nothing kept
    assert _collect(None) is None


def test_the_stats_command_shows_each_replicas_applied_offset_and_lag(store, nodes) -> None:
    import json

    from tests.support.cli import run

    path, m = store
    heads = sum(m.log.head(p) for p in range(m.log.partitions))
    r = run("stats", "--json", "--address", "auto", store=path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["replicas"]
    assert sorted(x["replica"] for x in rows) == ["views", "views:1"] and {x["node"] for x in rows} == set(nodes)
    for x in rows:  # lag: the log's events this replica has not applied yet
        assert x["lag"] == heads - sum(x["applied"].values())
    assert min(x["lag"] for x in rows) == 0  # the replica that answered the command caught up first
    r = run("stats", "--address", "auto", store=path)
    assert r.returncode == 0, r.stderr
    assert "view replicas" in r.stdout and "views:1" in r.stdout


def test_readers_on_a_node_without_a_replica_spread_over_every_replica() -> None:
    from eidetica._ray import _least_used, _serving_order

    # a node with no replica: the first choice varies with the process, not always replica 0 (issue #20)
    assert {_serving_order(["a", "b"], "c", pid)[0] for pid in range(4)} == {0, 1}
    assert _serving_order(["a", "b"], "b", 7) == [1, 0]  # the replica on this node first, the others after
    assert _serving_order(["a", "b", "a"], "a", 1) == [2, 0, 1]  # several here: one of them, by process
    # replica 1 goes to the node without a replica, wherever replica 0 happens to run
    assert _least_used(["a", "b"], ["b"], 1) == "a" and _least_used(["a", "b"], ["a"], 1) == "b"
    assert _least_used(["a", "b"], ["a", "b"], 2) == "a"  # every node has one: node i mod N


def test_a_second_replica_goes_to_the_node_replica_zero_leaves_free(ray_session, tmp_path, nodes) -> None:
    """Replica 0 may predate the replicas, on any node (a single views actor): replica 1 still takes the other one."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from eidetica._ray import ACTOR_OPTIONS, ViewsActor, store_key

    path = tmp_path / "store"
    first = open_store(path, views_replicas=None)
    first.remember("my kayak is green", user="u")
    first.close()
    key = store_key(path)
    ray.kill(ray.get_actor(f"eidetica:{key}:views"), no_restart=True)
    # replica 0 back on the node that "replica i on node i mod N" would also give replica 1
    later = sorted(nodes)[1]
    log_h, emb_h = ray.get_actor(f"eidetica:{key}:log"), ray.get_actor(f"eidetica:{key}:embedder")
    for _ in range(100):  # a killed actor frees its name asynchronously
        try:
            zero = ViewsActor.options(
                name=f"eidetica:{key}:views", lifetime="detached", **ACTOR_OPTIONS,
                scheduling_strategy=NodeAffinitySchedulingStrategy(later, soft=False),
            ).remote(str(path), log_h, emb_h, "views", HashEmbedder(dim=64))
            break
        except ValueError:
            time.sleep(0.1)
    assert ray.get(zero.node.remote()) == later
    m = open_store(path, views_replicas=2)
    try:
        assert sorted(r["node"] for r in m.views.status()) == sorted(nodes)  # one replica per node
        assert [h.text for h in m.recall("kayak", user="u")][:1] == ["my kayak is green"]
    finally:
        m.close()
        shutdown_store(path)


def test_a_handle_reads_what_was_committed_before_it_opened(ray_session, tmp_path) -> None:
    """The floor starts at the log's heads as of the open: a replica that predates the replicas catches up."""
    path = tmp_path / "store"
    # replica 0 is the writer's single views actor, which never read nor follows the log on its own
    first = open_store(path, views_replicas=None, replica_follow=0.0)
    try:
        first.session("c", user="u").extend(
            [{"role": "user", "content": f"my kayak trip number {i} was great"} for i in range(5)])
        later = open_store(path, views_replicas=2, replica_follow=0.0)
        assert later.written == first.written  # the heads at its open, nothing written itself
        for r in range(2):  # each replica, asked by a handle that wrote nothing, answers what the log held
            later.views.order = [r]
            assert len(later.search("kayak trip", user="u", min_score=0.0)) == 5
        later.close()
    finally:
        first.close()
        shutdown_store(path)


def test_a_client_reads_through_a_server_whose_handle_did_not_write(ray_session, tmp_path) -> None:
    """``eidetica serve --runtime ray``: a client's ``min_offset`` reaches the server's replica, and its
    ``written`` (from the server's answers) is another handle's ``min_offset``; ``ReplicaBehind`` crosses HTTP."""
    from tests.support.served import Served

    cluster, _ = ray_session
    path = tmp_path / "served"
    # one replica that never follows the log on its own: only a read's floor makes it catch up
    here = open_store(path, views_replicas=1, replica_follow=0.0)
    server = Served(path, options={"runtime": "ray", "address": cluster.address, "views_replicas": 1,
                                   "replica_follow": 0.0, "replica_timeout": 2.0}).start()
    try:
        with eidetica.connect(server.url) as client:
            here.session("c", user="u").append("assistant", "The ferry leaves at dawn")
            mine = here.written
            # the server's handle wrote nothing: without the offset its replica stays where it was
            assert "The ferry leaves at dawn" not in [h.text for h in client.search("ferry", user="u", min_score=0.0)]
            hits = client.search("ferry", user="u", min_score=0.0, min_offset=mine)
            assert [h.text for h in hits][:1] == ["The ferry leaves at dawn"]
            fact = client.remember("My kayak is green", user="u")
            theirs = client.written
            assert theirs and theirs[0] > mine[0]  # the server's answer named the offsets the write reached
            assert fact not in [h.id for h in here.recall("kayak green", user="u")]  # not without the offset
            assert [h.id for h in here.recall("kayak green", user="u", min_offset=theirs)][:1] == [fact]
            far = {0: theirs[0] + 1_000_000}  # an offset no replica reaches in time: an error, never a stale answer
            with pytest.raises(eidetica.ReplicaBehind) as e:
                client.recall("kayak", user="u", min_offset=far)
            assert e.value.wanted == far and e.value.timeout == 2.0
            with pytest.raises(eidetica.InvalidInput) as bad:
                client.search("ferry", user="u", min_offset={0: "latest"})
            assert bad.value.field == "min_offset"
    finally:
        server.stop()
        here.close()
        shutdown_store(path)
