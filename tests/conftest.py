"""Test-wide settings (Ray on loopback, telemetry off) and the fixtures shared by the suite.

``mem`` is one store on the runtime named by the ``runtime`` fixture ("local" unless a module
overrides ``runtime`` with params), opened with ``mem_options``; ``served`` is one real server
process for the whole session, in which a test takes a tenant of its own (``Served.tenant``).
"""

import os

# Must be set before Ray starts anywhere in the test process.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402

from tests.support.clock import Clock  # noqa: E402
from tests.support.memories import ray_options  # noqa: E402
from tests.support.openai_server import FakeOpenAI  # noqa: E402
from tests.support.served import Served  # noqa: E402


@pytest.fixture(scope="session")
def ray_session():
    """One Ray for the whole test session (started on first use): a head and one worker node on 127.0.0.1."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = c.add_node(num_cpus=1, resources={"worker": 1})
    ray.init(address=c.address, namespace="eidetica", log_to_driver=False)
    yield c, worker
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def clock():
    """A settable clock at ``T0``; a served store that followed it gets its wall clock back afterwards."""
    c = Clock()
    yield c
    c.release()


@pytest.fixture
def fake_openai():
    """A started FakeOpenAI (an OpenAI-compatible HTTP server on 127.0.0.1) for one test; stopped afterwards."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """One real `eidetica serve` process for the session (each test takes a tenant: ``served.tenant(clock)``).

    Its clock file starts empty (the wall clock); a test's ``clock`` drives it while the test runs.
    """
    d = tmp_path_factory.mktemp("served")
    (d / "clock").write_text("")
    server = Served(d / "store", clock_file=d / "clock").start()
    yield server
    server.stop()


@pytest.fixture
def runtime() -> str:
    """Where ``mem`` runs: "local", "ray", "remote" (connect() to ``served``), "embedded-async" or "remote-async"."""
    return "local"


@pytest.fixture
def mem_options() -> dict:
    """eidetica.open()'s options for ``mem`` besides path and runtime; ``clock`` replaces the test's clock."""
    from eidetica.providers import HashEmbedder

    return {"embedder": HashEmbedder(dim=64)}


@pytest.fixture
def key_options() -> dict:
    """``KeyStore.create``'s options for the key of a remote ``mem``'s tenant."""
    return {}


@pytest.fixture
def mem(tmp_path, clock, runtime, mem_options, key_options, request):
    """A store: embedded (local or Ray), a client of the served store, or an async face of either."""
    import eidetica

    options = {"clock": clock, **mem_options}
    if runtime.endswith("-async"):  # the async face, called through a sync adapter on one event loop
        from tests.support.synced import Loop, Synced

        loop = Loop()
        if runtime == "remote-async":
            server = request.getfixturevalue("served")
            m = Synced(loop.run(eidetica.connect_async(server.url, api_key=server.tenant(clock, **key_options))), loop)
        else:
            m = Synced(eidetica.AsyncMemory(eidetica.open(tmp_path / "store", **options)), loop)
        yield m
        m.close()
        loop.close()
        return
    if runtime == "remote":
        server = request.getfixturevalue("served")
        m = eidetica.connect(server.url, api_key=server.tenant(clock, **key_options))
        yield m
        m.close()
        return
    if runtime == "ray":
        request.getfixturevalue("ray_session")
    m = eidetica.open(tmp_path / "store", runtime=runtime, **options, **ray_options(runtime))
    yield m
    m.close()
    if runtime == "ray":
        from eidetica._ray import shutdown_store

        shutdown_store(m.path)


# What needs a process, a cluster or a browser is marked from where it lives and what it uses, so
# `make test-unit` (-m "not slow and not ray and not crash and not server and not browser") skips it.
_DIR_MARKS = {"ray": "ray", "server": "server"}  # tests/<dir>/ -> marker


def pytest_collection_modifyitems(config, items) -> None:
    """Mark tests by directory (tests/ray, tests/server) and by fixture (``served``, ``ray_session``, ``browser``)."""
    for item in items:
        parts = item.path.relative_to(config.rootpath).parts
        if len(parts) > 2 and parts[1] in _DIR_MARKS:
            item.add_marker(_DIR_MARKS[parts[1]])
        names = set(getattr(item, "fixturenames", ()))
        if "served" in names:
            item.add_marker("server")
        if "ray_session" in names:
            item.add_marker("ray")
        if "browser" in names:
            item.add_marker("browser")
        if item.get_closest_marker("crash") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(900))  # a crash loop starts a process per round
