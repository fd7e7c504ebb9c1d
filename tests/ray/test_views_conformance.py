"""The views suite on a real Ray cluster (the session's head and worker node, one CPU each): the views
actor of a store, and view replicas."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

ray = pytest.importorskip("ray")

import eidetica  # noqa: E402
from eidetica._ray import shutdown_store  # noqa: E402
from eidetica.actors import MemoryConfig  # noqa: E402
from eidetica.memory import Memory  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402
from tests.contracts.views import ViewsConformance  # noqa: E402


class _OnRay(ViewsConformance):
    options: dict[str, Any] = {}

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _cluster(cls, ray_session):
        """The session's small Ray cluster (two nodes, one CPU each; shut down with the session)."""

    def shutdown(self, path: Any) -> None:
        shutdown_store(path)  # the store's named actors go with the class

    def open_store(self, path: Any) -> Memory:
        return eidetica.open(path, runtime="ray", embedder=HashEmbedder(dim=32), config=MemoryConfig(auto_extract=False),
                             **self.options)


class TestRayViews(_OnRay):
    """One views actor, following the log."""


class TestReplicatedViews(_OnRay):
    """Two view replicas; each read carries the writer's floor to the one that serves it."""

    replicated = True
    options = {"views_replicas": 2}
