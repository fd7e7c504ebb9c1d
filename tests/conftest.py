"""Test-wide settings: keep Ray on loopback and every telemetry channel off."""

import os

# Must be set before Ray starts anywhere in the test process.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


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
