"""The views port's conformance suite: local, Ray, replicated and past (``as_of``) views all subclass it.

Subclasses provide ``open_store(path)`` (a writable ``Memory`` on a fresh store) and may override
``views_of(m)`` (the views under test and the embedder a query is made with: by default the
store's own). Class attributes say what the implementation is: ``replicated`` (reads carry their
floor to a replica) and ``local`` (the views live in this process).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from eidetica.memory import Memory
from eidetica.projections import LocalViews, Views
from eidetica.providers import Embedder

USER = "u"


def _eventually(probe: Callable[[], Any], seconds: float = 30.0) -> Any:
    """``probe()`` once it is truthy (views elsewhere follow the log on their own), else its last answer."""
    deadline = time.monotonic() + seconds
    while True:
        got = probe()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


class ViewsConformance:
    """Behaviour every ``Views`` must show, seen through the port only."""

    replicated = False
    local = False

    def open_store(self, path: Any) -> Memory:
        raise NotImplementedError

    def views_of(self, m: Memory) -> tuple[Views, Embedder, Callable[[], None]]:
        """The views under test, the embedder to query with, and how to let them go."""
        return m.views, m.embedder, lambda: None

    def shutdown(self, path: Any) -> None:
        """Stop what outlives the handle (a Ray store's named actors); nothing by default."""

    @pytest.fixture(scope="class")
    @classmethod
    def seeded(cls, tmp_path_factory):
        """One store per class, written once (every test only reads, or rebuilds to the same answers)."""
        self = cls()
        path = tmp_path_factory.mktemp("views") / "store"
        m = self.open_store(path)
        s = m.session("trip", user=USER)
        s.append("user", "We went hiking in the Dolomites last summer", metadata={"name": "Ana"})
        s.append("user", "The glacier lake was freezing cold", metadata={"name": "Ana"})
        s.append("assistant", "That sounds like a wonderful trip")
        m.remember("Ana keeps bees on her balcony", user=USER)
        m.gate.sync()
        views, embedder, release = self.views_of(m)
        try:
            yield m, views, embedder
        finally:
            release()
            m.close()
            self.shutdown(path)

    def _query(self, m: Memory, views: Views, embedder: Embedder, text: str, **kw: Any) -> list[Any]:
        search: dict[str, Any] = dict(user=USER, mode="hybrid", names=False, options={}, top_k=5,
                                      kinds=["message", "fact"], category=None, exclude_session=None, session_id=None,
                                      min_score=None)
        search.update(kw)
        if views.replicated:
            search["min_offset"] = m.written  # the serving replica waits for the writer's writes
        return views.query(embedder, m.tenant, text, **search)

    def test_is_the_port_and_says_what_it_is(self, seeded) -> None:
        m, views, _ = seeded
        assert isinstance(views, Views)
        assert views.replicated is self.replicated
        assert (views.local() is not None) is self.local
        if self.local:
            assert isinstance(views.local(), LocalViews) and views.local().index is views.index

    def test_query_finds_what_was_written(self, seeded) -> None:
        m, views, embedder = seeded
        hits = _eventually(lambda: self._query(m, views, embedder, "hiking in the Dolomites"))
        assert hits and "Dolomites" in hits[0].text and hits[0].kind == "message"
        facts = _eventually(lambda: self._query(m, views, embedder, "bees on the balcony", kinds=["fact"]))
        assert [h.text for h in facts] == ["Ana keeps bees on her balcony"]
        assert self._query(m, views, embedder, "hiking", kinds=["message"], session_id="no such session") == []

    def test_participant_names_come_from_the_messages(self, seeded) -> None:
        m, views, _ = seeded
        assert "Ana" in _eventually(lambda: views.participant_names(m.tenant, USER))
        assert views.participant_names(m.tenant, "someone else") == frozenset()

    def test_state_and_projector_answer_through_the_port(self, seeded) -> None:
        m, views, _ = seeded
        sessions = _eventually(lambda: views.state.sessions(m.tenant, USER))
        assert [s.session_id for s in sessions] == ["trip"]
        assert [f.content for f in views.state.facts(m.tenant, USER)] == ["Ana keeps bees on her balcony"]
        assert all(isinstance(v, int) and v >= 0 for v in views.projector.lag().values())

    def test_status_and_housekeep(self, seeded) -> None:
        _, views, _ = seeded
        status = views.status()
        assert isinstance(status, list)
        if self.replicated:
            assert status and all({"replica", "applied", "lag"} <= set(r) for r in status)
        else:
            assert status == []
        done = views.housekeep()
        assert done is None or isinstance(done, str)

    def test_fresh_rebuilds_and_answers_the_same(self, seeded) -> None:
        m, views, embedder = seeded
        before = [h.id for h in _eventually(lambda: self._query(m, views, embedder, "glacier lake"))]
        views.fresh(embedder)
        after = [h.id for h in _eventually(lambda: self._query(m, views, embedder, "glacier lake"))]
        assert before and after == before
