"""A handle's read floor (``written``, ``min_offset``) in the embedded mode; on Ray replicas see test_replicas.py."""

from __future__ import annotations

import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.providers import HashEmbedder


@pytest.fixture()
def mem(tmp_path):
    m = eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), config=MemoryConfig(auto_extract=False))
    yield m
    m.close()


def test_written_is_the_last_offset_a_write_reached_and_serves_as_min_offset(mem) -> None:
    offset = mem.session("c", user="u").append("user", "I went hiking on Sunday")
    assert offset >= 0 and mem.written == {0: offset}
    hits = mem.search("hiking", user="u", min_offset=mem.written, min_score=0.0)
    assert [h.text for h in hits][:1] == ["I went hiking on Sunday"]
    assert [h.text for h in mem.search("hiking", user="u", min_offset=offset, min_score=0.0)][:1] == [
        "I went hiking on Sunday"]
    assert mem.recall("hiking", user="u", min_offset=-1) is not None  # -1: a buffered append wrote nothing yet


@pytest.mark.parametrize("bad", ["latest", 1.5, True, {1: 3}, {0: "3"}, {"0": 3}])
def test_a_bad_min_offset_is_refused_naming_the_field(mem, bad) -> None:
    mem.session("c", user="u").append("user", "I went hiking on Sunday")
    before = mem.written
    for read in (mem.search, mem.recall):
        with pytest.raises(eidetica.InvalidInput) as e:
            read("hiking", user="u", min_offset=bad)
        assert e.value.field == "min_offset"
    assert mem.written == before  # nothing changed
