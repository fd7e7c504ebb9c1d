"""Fleet mode on a real Ray cluster (head + worker node on loopback)."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ray = pytest.importorskip("ray")

import eidetica  # noqa: E402
from eidetica._ray import ActorHost, shutdown_store, store_key  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.events import ArrowLog  # noqa: E402
from eidetica.events.streams import session_stream, summary_stream  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def cluster(ray_session):
    """A head node and one worker node, small, on 127.0.0.1 (the test session's one Ray)."""
    return ray_session


def open_store(path, tenant="default", **kw):
    """A store on the cluster with a cheap deterministic embedder."""
    return eidetica.open(path, tenant=tenant, runtime="ray", embedder=HashEmbedder(dim=64), **kw)


def test_fleet_of_agents(cluster, tmp_path) -> None:
    path = tmp_path / "fleet"
    agents = 20
    errors: list[BaseException] = []
    mems = [open_store(path, tenant=f"agent{k}", config=MemoryConfig(auto_extract=False)) for k in range(agents)]

    def agent(k: int) -> None:
        try:
            m = mems[k]
            s = m.session(f"conv{k}", user=f"user{k}", buffer=10)
            for i in range(50):
                s.append("user" if i % 2 == 0 else "assistant", f"agent {k} message {i}")
            s.flush()
            m.remember(f"agent {k} favourite number is {k * 7}", user=f"user{k}")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=agent, args=(k,)) for k in range(agents)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    log = mems[0].log
    types = [e.type for p in range(log.partitions) for e in log.read(partition=p)]
    assert types.count("MessageAppended") == agents * 50
    for k in (0, 7, 19):
        evs = log.read_stream(session_stream(f"agent{k}", f"conv{k}"))
        seqs = [e.decode().sequence for e in evs if e.type == "MessageAppended"]
        assert seqs == list(range(50))
        hits = mems[k].recall("favourite number", user=f"user{k}")
        assert hits and hits[0].text == f"agent {k} favourite number is {k * 7}"
        assert all(h.user_id == f"user{k}" for h in hits)
        for other in (1, 2):
            assert mems[k].recall(f"agent {other}", user=f"user{other}") == [] or k == other
    for m in mems:
        m.close()
    shutdown_store(path)


def test_faults_lose_nothing(cluster, tmp_path) -> None:
    _, worker = cluster
    path = tmp_path / "faults"
    m = open_store(path, config=MemoryConfig(auto_extract=False))
    s = m.session("s", user="u")
    sent = 0
    for i in range(20):
        s.append("user", f"before {i}")
        sent += 1
    key = store_key(path)
    session_actor = ray.get_actor(f"eidetica:{key}:session:default:s")
    log_actor = ray.get_actor(f"eidetica:{key}:log")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        nonlocal sent
        try:
            while not stop.is_set() and sent < 200:
                s.append("user", f"during {sent}")
                sent += 1
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()

    def progress(n: int) -> None:
        """Let the writer get ``n`` more messages acknowledged (bounded) before the next blow."""
        goal, deadline = sent + n, time.monotonic() + 120
        while sent < goal and t.is_alive() and time.monotonic() < deadline:
            threading.Event().wait(0.01)

    progress(10)
    ray.kill(session_actor, no_restart=False)  # restarted by Ray, rebuilt from the log
    progress(10)
    ray.kill(log_actor, no_restart=False)  # the writer of the log itself
    progress(10)
    cluster[0].remove_node(worker)  # a whole node goes away
    t.join(timeout=300)
    stop.set()
    assert not errors, errors
    cluster[0].add_node(num_cpus=1, resources={"worker": 1})
    history = s.history()
    contents = [x.content for x in history]
    assert len(contents) == sent, "an acknowledged message was lost or duplicated"
    assert len(set(contents)) == len(contents)
    assert [x.sequence for x in history] == list(range(sent))
    m.close()
    shutdown_store(path)
    with ArrowLog(path / "log", readonly=True) as log:  # state equals a replay of the log
        replayed = [e.decode().content for e in log.read_stream(session_stream("default", "s")) if e.type == "MessageAppended"]
    assert replayed == contents


def test_summarizers_on_different_nodes_commit_once_per_epoch(cluster, tmp_path) -> None:
    path = tmp_path / "race"
    cfg = MemoryConfig(window=2, token_budget=100_000, retain_recent=1, auto_extract=False, strategy="sliding_window")
    m = open_store(path, config=cfg)
    s = m.session("s", user="u")
    runtime = m.runtime
    from eidetica._ray import ACTOR_OPTIONS, RemoteActor, _unwrap
    from eidetica.actors import Summarizer

    def host(resources):
        h = ActorHost.options(resources=resources, **ACTOR_OPTIONS).remote(
            "summarizer", runtime.log, runtime.embedder, runtime.llm, cfg, ()
        )
        return RemoteActor(h, Summarizer)

    a, b = host({"worker": 0.1}), host({})
    committed = 0
    for epoch in range(10):
        s.append("user", f"topic {epoch} was discussed at length")
        s.append("assistant", f"summary material {epoch}")
        refs = [x._handle.call.remote("summarize", s._actor, force=True) for x in (a, b)]
        results = [_unwrap(r, None) for r in ray.get(refs)]  # a call's result comes with the offsets it wrote
        assert any(r.committed for r in results)
        committed += sum(r.committed for r in results)
    commits = [e for e in m.log.read_stream(summary_stream("default", "s")) if e.type == "SummaryCommitted"]
    assert len(commits) == committed
    epochs = [e.decode().epoch for e in commits]
    assert len(epochs) == len(set(epochs)), "two summaries committed for the same epoch"
    assert len(s.history()) == 20
    m.close()
    shutdown_store(path)


def test_replay_on_a_new_cluster_gives_identical_results(cluster, tmp_path) -> None:
    path = tmp_path / "replay"
    m = open_store(path)
    s = m.session("s", user="u")
    for i in range(30):
        s.append("user", f"I like topic {i}" if i % 4 == 0 else f"we talked about subject {i}")
    m.remember("the user prefers tea over coffee", user="u")
    queries = ["topic", "tea", "subject 7", "coffee preferences"]
    before = [[h.id for h in m.search(q, user="u", min_score=0.0)] + [h.id for h in m.recall(q, user="u")] for q in queries]
    m.close()
    shutdown_store(path)
    import shutil

    shutil.rmtree(path / "index")
    m2 = open_store(path)
    m2.rebuild()
    after = [[h.id for h in m2.search(q, user="u", min_score=0.0)] + [h.id for h in m2.recall(q, user="u")] for q in queries]
    assert after == before
    m2.close()
    shutdown_store(path)


def test_idle_session_actors_retire_and_come_back(cluster, tmp_path) -> None:
    path = tmp_path / "idle"
    m = open_store(path, idle_seconds=1.0, config=MemoryConfig(auto_extract=False))
    s = m.session("s", user="u")
    s.append("user", "before retirement")
    name = f"eidetica:{store_key(path)}:session:default:s"
    ray.get_actor(name)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            break  # retired by the janitor
        time.sleep(0.5)
    else:
        pytest.fail("the idle session actor was never retired")
    s.append("user", "after retirement")  # comes back on demand, rebuilt from the log
    assert [x.content for x in s.history()] == ["before retirement", "after retirement"]
    assert [x.sequence for x in s.history()] == [0, 1]
    m.close()
    shutdown_store(path)


def test_concurrent_schedule_updates_from_two_clients_lose_nothing(cluster, tmp_path) -> None:
    """Schedules have one writer per user on Ray: two clients' updates and runs all land, none decided on stale state."""
    import datetime as dt

    path = tmp_path / "sched"
    a, b = open_store(path), open_store(path)
    job = a.schedules.create("sync", "interval", 600, user="ada")
    a.schedules.update(job.id, expression=3600)
    b.schedules.update(job.id, name="sync inbox")  # client b must decide on a's change, not its own old view
    got = b.schedules.get(job.id)
    assert got.expression == "3600" and got.name == "sync inbox"
    assert got.next_run_at > dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=3000)
    errors: list[BaseException] = []

    def client(m, k: int) -> None:
        try:
            for i in range(8):
                m.schedules.record_run(job.id, {"status": "ok" if i % 2 else "error", "output": f"client {k} run {i}"})
                m.schedules.update(job.id, payload={"last": f"{k}-{i}"})
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=client, args=(m, k)) for k, m in enumerate((a, b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    final_a, final_b = a.schedules.get(job.id), b.schedules.get(job.id)
    assert final_a == final_b
    assert final_a.run_count == 16 and final_a.expression == "3600" and final_a.name == "sync inbox"
    outputs = {r["output_summary"] for r in final_a.runs}
    assert outputs == {f"client {k} run {i}" for k in (0, 1) for i in range(8)}
    assert final_a.consecutive_failures == 0  # every client's last run was ok
    a.close()
    b.close()
    shutdown_store(path)


def test_hosted_session_actors_come_back_from_their_snapshot(cluster, tmp_path) -> None:
    path = tmp_path / "snap"
    m = open_store(path, idle_seconds=1.0, config=MemoryConfig(auto_extract=False, actor_snapshot_events=10))
    s = m.session("s", user="u")
    for i in range(30):
        s.append("user", f"message {i}")
    name = f"eidetica:{store_key(path)}:session:default:s"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            ray.get_actor(name)
        except ValueError:
            break  # retired by the janitor, which saved its fold first
        time.sleep(0.5)
    else:
        pytest.fail("the idle session actor was never retired")
    assert list((path / "snapshots" / "actors" / "session").rglob("manifest.json"))
    s.append("user", "after retirement")
    assert ray.get(ray.get_actor(name).get.remote("replayed")) == 0  # only the (empty) tail, not 31 events
    assert [x.content for x in s.history()] == [f"message {i}" for i in range(30)] + ["after retirement"]
    assert [x.sequence for x in s.history()] == list(range(31))
    m.close()
    shutdown_store(path)


def test_fsync_reaches_the_log_actor(cluster, tmp_path) -> None:
    """``open(runtime="ray", fsync=...)`` is the log actor's setting, read back through the runtime's log."""
    m = open_store(tmp_path / "batch", fsync="batch")
    try:
        assert m.log.fsync == "batch"
        s = m.session("s", user="u")
        s.append("user", "written under fsync='batch'")
        assert [msg.content for msg in s.history()] == ["written under fsync='batch'"]
    finally:
        m.close()
        shutdown_store(tmp_path / "batch")
    m = open_store(tmp_path / "default")
    try:
        assert m.log.fsync == "always"  # the default, as embedded
    finally:
        m.close()
        shutdown_store(tmp_path / "default")
    with pytest.raises(eidetica.InvalidInput, match="fsync"):
        open_store(tmp_path / "bad", fsync="sometimes")  # refused before any actor starts
    assert not (tmp_path / "bad").exists()
