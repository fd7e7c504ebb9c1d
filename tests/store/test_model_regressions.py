"""Bugs the model-based test (tests/support/stateful.py) found, each pinned by the smallest case."""

from __future__ import annotations

import uuid

import eidetica
from eidetica.providers import HashEmbedder


def test_a_retried_append_returns_the_offset_its_first_attempt_returned(tmp_path) -> None:
    # found by the model: the retry answered the message's offset, the first call its chunk event's
    # (the commit's last); a reader given the retry's offset as min_offset could miss the vectors
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64)) as m:
        s = m.session("s1", user="u1")
        s.append("user", "first message here")
        eid = uuid.uuid4()
        first = s.append("user", "zqretried message text", event_id=eid)
        m.session("s2", user="u1").append("user", "another session in between")
        again = s.append("user", "zqretried message text", event_id=eid)
        assert again == first
        assert [x.content for x in s.history()] == ["first message here", "zqretried message text"]
        many = [{"role": "user", "content": f"part {i} of a batch", "event_id": uuid.uuid4()} for i in range(3)]
        last = s.extend(many)
        assert s.extend(many) == last


def test_as_of_refuses_a_negative_offset_as_the_client_does(tmp_path) -> None:
    # found by the model (bad_input): embedded as_of(-1) answered an empty store, connect() refused it
    import pytest

    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64)) as m:
        m.remember("zqkept fact", user="u1")
        for when in (-1, {0: -1}, True):
            with pytest.raises(eidetica.InvalidInput) as e:
                m.as_of(when)
            assert e.value.field == "when"
        with m.as_of(0) as past:  # offset 0 is the first event: a valid moment
            assert past.list_memories(user="u1") == []
