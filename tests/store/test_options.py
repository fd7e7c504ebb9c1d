"""``eidetica.SearchOptions``: the ranking options of ``search`` written once, embedded and over ``connect()``.

The keyword API is unchanged (its defaults are the struct's); ``options=`` gives them as one
value and keywords override it; a bad value raises ``InvalidInput`` naming the field before any work.
"""

from __future__ import annotations

import datetime as dt
import inspect
import typing

import msgspec
import pytest

import eidetica
from eidetica import SearchOptions
from eidetica._remote.client import RemoteMemory
from eidetica._store.options import SEARCH_OPTIONS, Kind, SearchKw
from eidetica.errors import InvalidInput
from eidetica.memory import Memory
from eidetica.projections._ranking import MIN_SCORE, SEARCH_DEFAULTS, SEARCH_KINDS
from eidetica.projections._rows import KINDS


@pytest.fixture(params=["local", "remote"])
def runtime(request) -> str:
    return request.param


def test_the_defaults_are_the_measured_configuration() -> None:
    d = SearchOptions()
    assert d == SEARCH_OPTIONS and d.min_score == MIN_SCORE and d.kinds == SEARCH_KINDS
    for name in ("candidates", "vector_weight", "neighbors", "session_weight", "speaker_weight", "time_weight",
                 "fusion"):
        assert getattr(d, name) == getattr(SEARCH_DEFAULTS, name), name
    assert set(typing.get_args(Kind)) == set(KINDS)
    assert set(SearchKw.__annotations__) == set(SearchOptions.__struct_fields__)


@pytest.mark.parametrize("cls", [Memory, RemoteMemory])
def test_search_signature_lists_every_option_with_the_structs_default(cls) -> None:
    params = inspect.signature(cls.search).parameters
    for name in SearchOptions.__struct_fields__:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].default == getattr(SearchOptions(), name), name
    assert params["options"].default is None and params["top_k"].default == 10


def test_a_struct_built_with_a_bad_value_names_the_field_and_lists_become_tuples() -> None:
    for field, value in (("min_score", 1.5), ("kinds", ["memes"]), ("neighbors", (0.1, 2)), ("mode", "fuzzy"),
                         ("candidates", 0), ("names", "yes"), ("recency_half_life", dt.timedelta(0)),
                         ("fusion", "magic"), ("mmr", float("nan"))):
        with pytest.raises(InvalidInput) as e:
            SearchOptions(**{field: value})
        assert e.value.field == field
    o = SearchOptions(kinds=["fact", "note"], neighbors=[0.1, 0.3])
    assert o.kinds == ("fact", "note") and o.neighbors == (0.1, 0.3)
    assert msgspec.json.decode(msgspec.json.encode(o), type=SearchOptions) == o  # it travels as JSON


def test_options_give_the_same_hits_as_their_keywords_and_keywords_override_them(mem) -> None:
    s = mem.session("trip", user="ada")
    s.append("user", "The ryokan in Kyoto is booked for April")
    s.append("user", "I paint watercolours of the harbour on Sundays")
    mem.remember("Ada is vegetarian", "diet", user="ada")
    opts = SearchOptions(min_score=0.0, kinds=("message",), fusion="minmax")
    by_kw = mem.search("Kyoto ryokan", user="ada", min_score=0.0, kinds=("message",), fusion="minmax")
    assert mem.search("Kyoto ryokan", user="ada", options=opts) == by_kw and by_kw
    assert {h.kind for h in by_kw} == {"message"}
    both = mem.search("vegetarian", user="ada", options=opts, kinds=("fact",))  # the keyword wins
    assert both and {h.kind for h in both} == {"fact"}
    assert mem.search("Kyoto ryokan", user="ada", options=SearchOptions()) == mem.search("Kyoto ryokan", user="ada")


def test_bad_options_are_refused_naming_the_field(mem) -> None:
    mem.session("trip", user="ada").append("user", "The ryokan in Kyoto is booked for April")
    for kw, field in (({"options": {"min_score": 0.1}}, "options"), ({"min_score": 2}, "min_score"),
                      ({"options": SEARCH_OPTIONS, "neighbors": [0.1, 5]}, "neighbors"),
                      ({"options": SEARCH_OPTIONS, "kinds": ["memes"]}, "kinds")):
        with pytest.raises(InvalidInput) as e:
            mem.search("Kyoto", user="ada", **kw)
        assert e.value.field == field


def test_the_package_exports_it() -> None:
    assert eidetica.SearchOptions is SearchOptions and "SearchOptions" in eidetica.__all__
