"""``now=``: the question's own time on search, recall and context, on every face.

Relative dates ("last week", "3 days ago", "last Saturday", a bare month) resolve against it;
bad values are refused with ``InvalidInput(field="now")``; the block dates the question.
Faces: embedded ``Memory``, ``AsyncMemory``, ``connect()`` and ``connect_async()`` against a
real server on 127.0.0.1, and the MCP tools in process.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import uuid

import numpy as np
import pytest

import eidetica
from eidetica.errors import InvalidInput
from eidetica.projections._ranking import in_windows
from eidetica.projections._relative import check_now, query_windows
from eidetica.providers import HashEmbedder

UTC = dt.timezone.utc
ASKED = dt.datetime(2023, 3, 25, 10, 0, tzinfo=UTC)  # a Saturday
EARLY = dt.datetime(2023, 2, 8, 10, 0, tzinfo=UTC)


def _us(d: dt.datetime) -> int:
    return int(d.timestamp() * 1_000_000)


def _hit(query: str, when: dt.datetime, now: dt.datetime | None = ASKED) -> bool:
    windows, _ = query_windows(query, now)
    return bool(in_windows([_us(when)], windows)[0])


# -- resolving relative dates ------------------------------------------------------------------
@pytest.mark.parametrize("query,inside,outside", [
    ("What did I buy 10 days ago?", dt.datetime(2023, 3, 15, 12, tzinfo=UTC), dt.datetime(2023, 3, 20, tzinfo=UTC)),
    ("What did I buy two months ago?", dt.datetime(2023, 1, 20, tzinfo=UTC), dt.datetime(2023, 3, 1, tzinfo=UTC)),
    ("How far did I run last week?", dt.datetime(2023, 3, 14, tzinfo=UTC), dt.datetime(2023, 3, 10, tzinfo=UTC)),
    ("What did I do last Saturday?", dt.datetime(2023, 3, 18, 20, tzinfo=UTC), dt.datetime(2023, 3, 17, tzinfo=UTC)),
    ("What did I eat yesterday?", dt.datetime(2023, 3, 24, 19, tzinfo=UTC), dt.datetime(2023, 3, 22, tzinfo=UTC)),
    ("Which events did I go to in the past month?", dt.datetime(2023, 3, 1, tzinfo=UTC), dt.datetime(2023, 2, 1, tzinfo=UTC)),
    ("What did I watch in January?", dt.datetime(2023, 1, 20, tzinfo=UTC), dt.datetime(2022, 1, 20, tzinfo=UTC)),
    ("Which airline did I fly in April?", dt.datetime(2022, 4, 20, tzinfo=UTC), dt.datetime(2023, 4, 20, tzinfo=UTC)),
])
def test_relative_dates_resolve_against_now(query, inside, outside) -> None:
    assert _hit(query, inside) and not _hit(query, outside)
    assert query_windows(query, ASKED)[1] != query  # the phrase leaves the text: it is matched against times


def test_the_same_words_move_with_now_and_default_to_the_wall_clock() -> None:
    when = dt.datetime(2023, 3, 14, tzinfo=UTC)
    assert _hit("what did I do last week?", when, ASKED)
    assert not _hit("what did I do last week?", when, EARLY)
    assert not _hit("what did I do last week?", when, None)  # the wall clock: years later
    # a bare month without an explicit now keeps matching that month of any year
    assert _hit("what did I watch in January?", dt.datetime(2021, 1, 5, tzinfo=UTC), None)
    assert not _hit("what did I watch in January?", dt.datetime(2021, 1, 5, tzinfo=UTC), ASKED)
    # plans are not periods of the past: no window, the words stay
    for plan in ("any documentary for tonight?", "I'm visiting the music store this weekend, ideas?"):
        assert query_windows(plan, ASKED) == ((), plan)
    # questions that ask for a difference name no period: nothing is taken out
    assert query_windows("How many days ago did I run the 5K?", ASKED) == ((), "How many days ago did I run the 5K?")


def test_check_now_takes_aware_naive_and_iso_and_refuses_the_rest() -> None:
    aware = dt.datetime(2023, 3, 25, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert check_now(aware) == dt.datetime(2023, 3, 25, 10, tzinfo=UTC)
    assert check_now(dt.datetime(2023, 3, 25, 10)) == ASKED  # naive is UTC
    assert check_now("2023-03-25T10:00:00Z") == ASKED == check_now("2023-03-25T12:00:00+02:00")
    assert check_now(None) is None
    for bad in ("last week", "2023-13-01", 1679738400, dt.date(2023, 3, 25), True, []):
        with pytest.raises(InvalidInput) as e:
            check_now(bad)
        assert e.value.field == "now"


def test_day_range_windows_count_their_late_days() -> None:
    start = dt.datetime(2023, 3, 13, tzinfo=UTC)
    ts = [_us(start + dt.timedelta(days=d, hours=23)) for d in (-1, 0, 6, 7, 9)]
    assert in_windows(ts, [(2023, 3, 13, 7, 0)]).tolist() == [False, True, True, False, False]
    assert in_windows(ts, [(2023, 3, 13, 7, 3)]).tolist() == [False, True, True, True, True]
    assert not in_windows(np.array([], dtype=np.int64), [(2023, 3, 13, 7, 0)]).size


# -- every face --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.support.served import Served

    srv = Served(tmp_path_factory.mktemp("now") / "store").start()
    yield srv
    srv.stop()


@pytest.fixture(params=["embedded", "embedded-async", pytest.param("remote", marks=pytest.mark.slow),
                        pytest.param("remote-async", marks=pytest.mark.slow)])
def face(request, tmp_path):
    from tests.support.synced import Loop, Synced

    loop = Loop() if request.param.endswith("async") else None
    if request.param.startswith("remote"):
        from eidetica._server import KeyStore

        srv = request.getfixturevalue("server")
        _, key = KeyStore(srv.store).create(f"t-{uuid.uuid4().hex[:12]}")
        m = (Synced(loop.run(eidetica.connect_async(srv.url, api_key=key)), loop) if loop
             else eidetica.connect(srv.url, api_key=key))
    else:
        inner = eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64))
        m = Synced(eidetica.AsyncMemory(inner), loop) if loop else inner
    yield m
    m.close()
    if loop:
        loop.close()


def _history(m) -> None:
    m.session("feb", user="ada").append("user", "At the farmers market I bought a blender today",
                                        time=dt.datetime(2023, 2, 3, 11, tzinfo=UTC))
    m.session("mar", user="ada").append("user", "At the farmers market I bought a smoker today",
                                        time=dt.datetime(2023, 3, 15, 11, tzinfo=UTC))
    m.session("mar2", user="ada").append("user", "The weather was rainy and grey all day",
                                         time=dt.datetime(2023, 3, 16, 11, tzinfo=UTC))


def test_now_moves_what_last_week_means_on_every_face(face) -> None:
    _history(face)
    q = "what did I buy at the farmers market last week?"
    assert "smoker" in face.search(q, user="ada", now=ASKED)[0].text
    assert "blender" in face.search(q, user="ada", now=EARLY)[0].text
    assert "blender" in face.search(q, user="ada", now="2023-02-08T10:00:00")[0].text  # naive ISO: UTC
    assert "smoker" in face.recall(q, user="ada", now=ASKED)[0].text
    assert "blender" in face.recall(q, user="ada", now=EARLY)[0].text
    block = face.context(q, user="ada", now=ASKED)
    assert "Asked on 2023-03-25 (Saturday)." in block
    first = next(line for line in block.splitlines() if line.startswith("- ["))
    assert first.startswith("- [2023-03-15, mar]") and "smoker" in first  # every line carries its date
    data = face.context(q, user="ada", now=EARLY, as_data=True)
    assert data["now"].startswith("2023-02-08") and "blender" in data["conversations"][0]["text"]
    assert "Asked on" not in face.context(q, user="ada")  # the wall clock: nothing to say about it
    face.remember("Ada is allergic to peanuts", user="ada", category="health")
    said = dt.datetime.now(UTC).date()
    block = face.context("what is Ada allergic to?", user="ada", now=ASKED)
    assert re.search(r"- Ada is allergic to peanuts \(health, \d{4}-\d\d-\d\d\)", block)  # facts are dated too
    assert said.isoformat() in block or (said - dt.timedelta(days=1)).isoformat() in block
    assert "- Ada is allergic to peanuts (health)" in face.context("what is Ada allergic to?", user="ada")


def test_a_bad_now_is_refused_naming_the_field_on_every_face(face) -> None:
    _history(face)
    for call in (lambda v: face.search("market", user="ada", now=v), lambda v: face.recall("market", user="ada", now=v),
                 lambda v: face.context("market", user="ada", now=v)):
        for bad in ("next tuesday", 12345):
            with pytest.raises(InvalidInput) as e:
                call(bad)
            assert e.value.field == "now"


def test_mcp_tools_take_now(tmp_path) -> None:
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    def text(result) -> str:
        return "\n".join(c.text for c in result.content if getattr(c, "text", None))

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        _history(m)

        async def go() -> None:
            async with Client(build_mcp(lambda scope: m)) as c:
                q = {"query": "what did I buy at the farmers market last week?", "user": "ada"}
                block = text(await c.call_tool("get_context", {**q, "now": "2023-03-25T10:00:00Z"}))
                assert "Asked on 2023-03-25" in block and "smoker" in block.split("blender")[0]
                found = text(await c.call_tool("search_memory", {**q, "now": "2023-02-08T10:00:00Z"}))
                assert found.splitlines()[0].count("blender") == 1
                bad = await c.call_tool("recall", {**q, "now": "soon"})
                assert bad.is_error and "now" in text(bad)

        asyncio.run(go())
