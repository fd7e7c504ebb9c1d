"""The Runtime suite on LocalRuntime and RayRuntime; the log and embedder suites on the Ray proxies."""

from __future__ import annotations

import itertools
import os
import signal
from typing import Any

import pytest

from eidetica.actors import LocalRuntime, Runtime
from eidetica.events import ArrowLog, EventLog
from eidetica.providers import Embedder, HashEmbedder, OfflineLLM
from tests.contracts.embedder import EmbedderConformance
from tests.contracts.log import LogConformance
from tests.contracts.runtime import CONFIG, RuntimeConformance, clock

_names = itertools.count()


class TestLocalRuntime(RuntimeConformance):
    def make_runtime(self, path: Any) -> Runtime:
        self.log = ArrowLog(path)
        return LocalRuntime(self.log, HashEmbedder(dim=32), OfflineLLM(), CONFIG, clock)

    @pytest.fixture
    def rt(self, tmp_path):
        rt = self.make_runtime(tmp_path / "log")
        yield rt
        rt.close()
        self.log.close()

    def restart(self, runtime: Runtime, actor: Any) -> None:
        runtime.close()  # every in-process actor is gone; the next call folds the log again


@pytest.mark.slow
@pytest.mark.ray
class TestRayRuntime(RuntimeConformance):
    @pytest.fixture(autouse=True)
    def _ray(self, ray_session):
        import ray

        self.ray = ray

    def make_runtime(self, path: Any) -> Runtime:
        from eidetica._ray import ACTOR_OPTIONS, EmbedderActor, LogActor, RayRuntime

        key = f"rt{next(_names)}-{abs(hash(str(path))) % 10**8}"
        self.log_h = LogActor.options(name=f"eidetica:{key}:log", **ACTOR_OPTIONS).remote(str(path))
        self.emb_h = EmbedderActor.options(name=f"eidetica:{key}:embedder", **ACTOR_OPTIONS).remote(HashEmbedder(dim=32))
        self.key = key
        return RayRuntime(key, self.log_h, self.emb_h, OfflineLLM(), CONFIG, 300.0, clock)

    @pytest.fixture
    def rt(self, tmp_path):
        rt = self.make_runtime(tmp_path / "log")
        yield rt
        rt.close()
        for name in self.ray.util.list_named_actors():
            if name.startswith(f"eidetica:{self.key}:"):
                try:
                    self.ray.kill(self.ray.get_actor(name), no_restart=True)
                except ValueError:
                    pass  # gone already

    def restart(self, runtime: Runtime, actor: Any) -> None:
        pid = self.ray.get(actor._handle.pid.remote())
        os.kill(pid, signal.SIGKILL)  # a crash; Ray restarts the actor (max_restarts) in a new process
        assert self.ray.get(actor._handle.pid.remote()) != pid


@pytest.mark.slow
@pytest.mark.ray
class TestRemoteLog(LogConformance):
    """The log port through a LogActor."""

    @pytest.fixture(autouse=True)
    def _env(self, ray_session, tmp_path):
        self.tmp = tmp_path
        self.handles: list[Any] = []
        yield
        import ray

        for h in self.handles:
            ray.kill(h, no_restart=True)

    def make_log(self, **kw: Any) -> EventLog:
        from eidetica._ray import LogActor, RemoteLog

        h = LogActor.remote(str(self.tmp / f"log{next(_names)}"), **kw)
        self.handles.append(h)
        return RemoteLog(h)


@pytest.mark.slow
@pytest.mark.ray
class TestRemoteEmbedder(EmbedderConformance):
    """The embedder port through an EmbedderActor."""

    @pytest.fixture(autouse=True)
    def _env(self, ray_session):
        self.handles: list[Any] = []
        yield
        import ray

        for h in self.handles:
            ray.kill(h, no_restart=True)

    def make_embedder(self) -> Embedder:
        from eidetica._ray import EmbedderActor, RemoteEmbedder

        h = EmbedderActor.remote(HashEmbedder(dim=64))
        self.handles.append(h)
        return RemoteEmbedder(h)
