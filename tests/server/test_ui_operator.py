"""#43 the inspector for the operator: keyless on loopback, /ui lists every tenant and any page is
``/ui/t/<tenant>/...``; with keys, a key's tenant only. A real ``eidetica serve`` on 127.0.0.1,
Debian's chromium through Playwright, httpx where no browser is needed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import eidetica
from eidetica._server import KeyStore
from eidetica.providers import HashEmbedder
from tests.support.served import Served


def _store(path: Path) -> None:
    with eidetica.open(path, tenant="demo", embedder=HashEmbedder(dim=64)) as m:
        m.session("trip", user="grace").append("user", "I'm planning a two-week trip to Japan in April.")
        for text in ("Grace is pescatarian", "Grace has a JR pass voucher", "Grace loves temples"):
            m.remember(text, user="grace")
        m.remember("Linus lives in Helsinki", user="linus")
        m.for_tenant("acme").remember("Alice works as a nurse", user="alice")


@pytest.fixture(scope="module")
def keyless(tmp_path_factory):
    store = tmp_path_factory.mktemp("op") / "store"
    _store(store)
    server = Served(store).start()
    yield server
    server.stop()


def test_the_operator_lists_every_tenant_and_switches_to_one(keyless, browser) -> None:
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    page = ctx.new_page()
    try:
        page.goto(keyless.url + "/ui")
        page.click("nav a.tenants")
        rows = page.locator("table tbody tr")
        assert sorted(rows.locator("a.tenant").all_inner_texts()) == ["acme", "default", "demo"]
        demo = rows.filter(has=page.locator("a.tenant", has_text="demo")).locator("td").all_inner_texts()
        assert demo[1:5] == ["2", "1", "1", "5"]  # users, sessions, messages, active facts (one extracted)
        page.click("a.tenant:text-is('demo')")
        assert "/ui/t/demo" in page.url and page.locator("nav .tenant").inner_text() == "tenant demo"
        page.click("a.user:text-is('grace')")
        assert page.url.endswith("/ui/t/demo/users/grace")
        assert "active (4)" in page.locator("body").inner_text()
        facts = page.locator("a.fact").all_inner_texts()
        assert sorted(facts) == ["Grace has a JR pass voucher", "Grace is pescatarian", "Grace loves temples",
                                 "I'm planning a two-week trip to Japan in April."]
        page.click("nav a[href$='/usage']")  # the links stay in the tenant
        assert page.url.endswith("/ui/t/demo/usage") and "No LLM calls recorded" in page.content()
    finally:
        ctx.close()


def test_the_url_carries_the_tenant_and_a_key_sees_only_its_own(keyless, tmp_path) -> None:
    r = httpx.get(f"{keyless.url}/ui/t/acme/users/alice?format=json")
    assert r.status_code == 200 and r.json()["counts"]["active"] == 1
    assert httpx.get(f"{keyless.url}/ui/t/demo/users/alice?format=json").json()["counts"]["active"] == 0
    assert httpx.get(f"{keyless.url}/ui/t/demo/usage?format=json").json()["calls"] == 0
    bad = httpx.get(f"{keyless.url}/ui/t/no%01such/?format=json")  # a control character: not a tenant
    assert bad.status_code == 400 and bad.json()["field"] == "tenant"
    # with keys: a key's own tenant, never another's, and no list of tenants
    store = tmp_path / "keyed"
    _store(store)
    key = KeyStore(store).create("demo", "op-test")[1]
    server = Served(store).start()
    try:
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{server.url}/ui/users/grace?format=json", headers=auth).json()["counts"]["active"] == 4
        assert httpx.get(f"{server.url}/ui/t/demo/users/grace?format=json", headers=auth).status_code == 200
        assert httpx.get(f"{server.url}/ui/t/acme/users/alice?format=json", headers=auth).status_code == 401
        assert httpx.get(f"{server.url}/ui/tenants?format=json", headers=auth).status_code == 401
        assert httpx.get(f"{server.url}/ui/t/acme/?format=json").status_code == 401  # no key at all
    finally:
        server.stop()
