"""The runtime port's conformance suite: every Runtime (LocalRuntime, RayRuntime) subclasses it.

Subclasses provide ``make_runtime(log_path)`` (a runtime over a fresh log at that path, with
a ``HashEmbedder`` and the offline LLM) and ``restart(runtime, actor)`` (the actor's
process or object goes away; the runtime must bring back an actor rebuilt from the log).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from eidetica.actors import MemoryConfig, Runtime
from eidetica.errors import InvalidInput, NotFound
from eidetica.providers import HashEmbedder


def clock() -> dt.datetime:
    """A fixed clock (the suite does not test time)."""
    return dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.timezone.utc)


CONFIG = MemoryConfig(auto_extract=False)


def msgs(*texts: str) -> list[dict[str, Any]]:
    """User messages for ``append_many``."""
    return [{"role": "user", "content": t, "metadata": {}} for t in texts]


class RuntimeConformance:
    """Behaviour every runtime must show."""

    def make_runtime(self, path: Any) -> Runtime:
        raise NotImplementedError

    def restart(self, runtime: Runtime, actor: Any) -> None:
        raise NotImplementedError

    @pytest.fixture
    def rt(self, tmp_path):
        rt = self.make_runtime(tmp_path / "log")
        yield rt
        rt.close()

    def test_one_actor_per_session_sees_every_write(self, rt: Runtime) -> None:
        rt.session("t", "s", "u").append_many(msgs("one", "two"))
        again = rt.session("t", "s", "u")
        assert [m.content for m in again.history()] == ["one", "two"]
        assert [m.sequence for m in again.history()] == [0, 1]

    def test_actor_attribute_writes_take_effect(self, rt: Runtime) -> None:
        a = rt.session("t", "s", "u")
        a.user_id = "v"  # what LocalRuntime does on a new owner; a proxy must not drop it
        assert a.user_id == "v"
        assert rt.session("t", "s", "v").user_id == "v"

    def test_a_restarted_actor_is_rebuilt_from_the_log(self, rt: Runtime) -> None:
        a = rt.session("t", "s", "u")
        a.append_many(msgs("before"))
        fid = rt.curator("t", "u").remember("the user keeps bees", "hobbies", request_id="r1")
        self.restart(rt, a)
        b = rt.session("t", "s", "u")
        b.append_many(msgs("after"))
        assert [(m.sequence, m.content) for m in b.history()] == [(0, "before"), (1, "after")]
        assert [f.fact_id for f in rt.curator("t", "u").active(None)] == [fid]

    def test_the_store_facing_methods_keep_what_was_written(self, rt: Runtime) -> None:
        a = rt.session("t", "s", "u")
        a.append_many(msgs("kept"))
        rt.drain()  # the writes done behind their calls are in the log afterwards
        floor = rt.written_floor()
        assert floor is None or (floor and all(o >= 0 for o in floor.values()))  # tracked: this handle wrote
        rt.refold()  # actors held here fold the log again on next use: nothing is lost
        assert [m.content for m in rt.session("t", "s", "u").history()] == ["kept"]
        other = rt.with_embedder(HashEmbedder(dim=32))
        assert isinstance(other, Runtime)
        assert [m.content for m in other.session("t", "s", "u").history()] == ["kept"]
        if other is not rt:
            other.close()

    def test_errors_cross_the_boundary_with_type_and_fields(self, rt: Runtime) -> None:
        with pytest.raises(InvalidInput) as bad:
            rt.session("t", "s", "u").append_many([{"role": "robot", "content": "x", "metadata": {}}])
        assert bad.value.field == "role"
        assert rt.session("t", "s", "u").history() == []  # nothing was written
        with pytest.raises(NotFound) as missing:
            rt.notes("t", "u").delete("note-0000")
        assert missing.value.ident == "note-0000"

    def test_per_user_actors_are_separate_and_tenants_too(self, rt: Runtime) -> None:
        rt.curator("t", "u1").remember("u1 likes tea", "general", request_id="a")
        rt.curator("t2", "u2").remember("u2 likes coffee", "general", request_id="b")
        assert [f.content for f in rt.curator("t", "u1").active(None)] == ["u1 likes tea"]
        assert [f.content for f in rt.curator("t2", "u2").active(None)] == ["u2 likes coffee"]
        assert rt.curator("t", "u2").active(None) == []
        assert rt.notes("t", "u1").store("a note").startswith("note-")
        assert isinstance(rt.summarizer().committed, int)
