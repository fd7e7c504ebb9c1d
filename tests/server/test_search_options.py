"""Every face of ``search`` shows and applies ``SearchOptions``' defaults: the server's OpenAPI schema
(``/docs``), the MCP tool ``search_memory`` and the /ui search playground; and the playground, on the
demo store with its default model, finds grace's diet as ``search()`` does."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

import eidetica
from eidetica._server import build
from eidetica._store.options import OPTION_FIELDS, SEARCH_OPTIONS
from eidetica.providers import HashEmbedder
from tests.support.served import Served


def _as_json(value: Any) -> Any:
    """A default as JSON shows it (tuples are arrays)."""
    return msgspec.json.decode(msgspec.json.encode(value))


@pytest.fixture
def app_client(tmp_path):
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.remember("Erin likes chess", user="erin")
        yield m, TestClient(build(m, mcp=False), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 5000))


def test_the_openapi_schema_shows_the_defaults_search_applies(app_client) -> None:
    _, client = app_client
    props = client.get("/openapi.json").json()["components"]["schemas"]["SearchIn"]["properties"]
    assert set(OPTION_FIELDS) <= set(props)
    for name in OPTION_FIELDS:  # (OpenAPI leaves a null default out)
        assert props[name].get("default") == _as_json(getattr(SEARCH_OPTIONS, name)), name
    assert props["top_k"]["default"] == 10
    assert props["min_score"]["anyOf"][0] == {"type": "number", "minimum": 0.0, "maximum": 1.0}  # its constraints too


def test_a_search_over_http_with_no_options_equals_search(app_client) -> None:
    m, client = app_client
    r = client.post("/v1/search", json={"query": "chess", "user": "erin"})
    assert r.status_code == 200 and [h["text"] for h in r.json()] == [h.text for h in m.search("chess", user="erin")]
    bad = client.post("/v1/search", json={"query": "chess", "user": "erin", "neighbors": [0.1, 3]})
    assert bad.status_code == 400 and bad.json()["field"] == "neighbors"


def test_the_mcp_tool_schema_shows_the_defaults_search_applies(tmp_path) -> None:
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        async def schema() -> dict[str, Any]:
            async with Client(build_mcp(lambda scope: m)) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                return tools["search_memory"].input_schema["properties"]

        props = asyncio.run(schema())
    shared = [name for name in OPTION_FIELDS if name in props]
    assert {"min_score", "kinds"} <= set(shared)
    for name in shared:
        assert props[name].get("default") == _as_json(getattr(SEARCH_OPTIONS, name)), name


def test_the_playground_form_starts_at_the_defaults_search_applies(app_client) -> None:
    _, client = app_client
    form = client.get("/ui/search?format=json").json()["form"]
    assert float(form["min_score"]) == SEARCH_OPTIONS.min_score and form["kinds"] == list(SEARCH_OPTIONS.kinds)
    assert form["mode"] == SEARCH_OPTIONS.mode and form["fusion"] == SEARCH_OPTIONS.fusion
    html = client.get("/ui/search").text
    assert re.search(r'name="min_score" value="0\.3"', html)
    checked = re.findall(r'name="kinds" value="(\w+)" checked', html)
    assert checked == list(SEARCH_OPTIONS.kinds)
    assert re.search(r"<option selected>zscore</option>", html)
    asked = client.get("/ui/search?format=json&q=chess&user=erin&kinds=fact&min_score=0.3").json()
    assert [h["text"] for h in asked["hits"]] == ["Erin likes chess"]
    none = client.get("/ui/search?format=json&q=chess&user=erin&kinds=fact&min_score=1.5").json()
    assert none["error"]["field"] == "min_score" and none["hits"] is None


# -- the demo store, its default model, a real server and Debian's chromium ------------------------
@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    from rich.console import Console

    from eidetica.demo import run_demo
    from eidetica.providers import default_embedder

    store = tmp_path_factory.mktemp("demo") / "store"
    run_demo(store, default_embedder(), Console(file=io.StringIO()))
    with eidetica.open(store, tenant="demo") as m:
        expected = [h.text for h in m.search("what does grace eat", user="grace")]
    server = Served(store, cli=True, model=None).start()  # `eidetica serve`, its default model; keyless on loopback
    yield server, expected
    server.stop()


@pytest.mark.slow
def test_the_playground_on_the_demo_store_finds_graces_diet_as_search_does(demo_server, browser) -> None:
    server, expected = demo_server
    assert any(re.search(r"vegetarian|pescatarian", t) for t in expected)  # search() answers it
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    page = ctx.new_page()
    try:
        page.goto(server.url + "/ui/t/demo/search")
        page.fill("input[name=q]", "what does grace eat")
        page.fill("input[name=user]", "grace")
        page.click("form.search button")  # every other field as the page first shows it
        page.wait_for_url(re.compile(r".*/ui/t/demo/search\?q=.*"), timeout=60_000)
        rows = page.locator("table.hits tbody tr")
        texts = [rows.nth(i).locator("td").nth(4).inner_text() for i in range(rows.count())]
        assert texts == expected
    finally:
        ctx.close()
