"""``/ui`` in a real ``eidetica serve`` process on 127.0.0.1, driven by Debian's chromium through
Playwright (never ``playwright install``: ``.ci/run`` / ``make test`` install the apt package),
and by httpx where no browser is needed (cookie flags, CSRF, JSON).

``EIDETICA_SCREENSHOTS=docs`` makes the browser tests save the main pages as PNG there.
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import httpx
import pytest

import eidetica
from eidetica._server import KeyStore
from eidetica.actors import MemoryConfig
from eidetica.providers import HashEmbedder
from tests.support.served import Served

SHOTS = os.environ.get("EIDETICA_SCREENSHOTS")


def _build_store(path: Path) -> dict[str, str]:
    """Two tenants: acme (alice with a conversation, extracted and remembered facts; bob) and globex (carol)."""
    out: dict[str, str] = {}
    with eidetica.open(path, tenant="acme", embedder=HashEmbedder(dim=64)) as m:
        s = m.session("trip-1", user="alice")
        s.append("user", "I am planning a hiking trip to the Dolomites in July.")
        s.append("assistant", "Great, do you need hut recommendations?")
        s.append("user", "My dog is called Rex and he comes along.")
        out["fact"] = m.remember("Alice is vegetarian", "diet", user="alice")
        m.remember("Alice is vegetarian", "diet", user="alice")  # reinforced: a second history entry
        out["other_fact"] = m.remember("Alice works as a nurse in Lyon", "work", user="alice")
        m.store_note("call back about the hut booking", user="alice")
        m.remember("Bob prefers tea over coffee", user="bob")
        g = m.for_tenant("globex")
        out["globex_fact"] = g.remember("Carol owns a secret sailboat named Albatross", user="carol")
        g.session("sea-1", user="carol").append("user", "The Albatross is moored in Brest.")
    ks = KeyStore(path)
    out["acme_key"] = ks.create("acme", "ui-test")[1]
    out["globex_key"] = ks.create("globex", "ui-test")[1]
    return out


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    store = tmp_path_factory.mktemp("ui") / "store"
    data = _build_store(store)
    server = Served(store).start()
    yield server, data
    server.stop()


def _shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"ui-{name}.png"), full_page=True)


def _login(browser, url: str, key: str):
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    page = ctx.new_page()
    page.goto(url + "/ui")
    assert "/ui/login" in page.url  # keys exist: no key, no page
    page.fill("input[name=key]", key)
    page.click("form.login button")
    page.wait_for_url(url + "/ui")
    return ctx, page


# -- real browser -----------------------------------------------------------------------------
def test_log_in_with_a_key_see_users_facts_and_a_facts_history(ui_server, browser) -> None:
    server, data = ui_server
    ctx, page = _login(browser, server.url, data["acme_key"])
    try:
        assert page.locator("nav .tenant").inner_text() == "tenant acme"
        rows = page.locator("table tbody tr")
        assert sorted(rows.locator("a.user").all_inner_texts()) == ["alice", "bob"]
        alice = rows.filter(has=page.locator("a.user", has_text="alice"))
        cells = alice.locator("td").all_inner_texts()
        assert cells[1:6] == ["1", "3", cells[3], "1", "0"] and int(cells[3]) >= 2  # sessions, messages, facts, notes, schedules
        _shot(page, "users")
        page.click("a.user:text-is('alice')")
        page.wait_for_url(f"{server.url}/ui/users/alice")
        facts = page.locator("a.fact").all_inner_texts()
        assert "Alice is vegetarian" in facts and "Alice works as a nurse in Lyon" in facts
        assert any("Rex" in f for f in facts)  # extracted from the conversation
        _shot(page, "facts")

        page.click("a.fact:text-is('Alice is vegetarian')")
        page.wait_for_url(re.compile(r".*/facts/fact-.*"))
        assert page.locator("h1").inner_text() == "Alice is vegetarian"
        history = page.locator("table.history tbody tr td:nth-child(2)").all_inner_texts()
        assert history == ["FactAsserted", "FactReinforced"]
        page.click("a.audit")  # the audit trail: m.explain's account, read from the log
        page.wait_for_url(re.compile(r".*/audit$"))
        assert page.locator("table.history tbody tr td:nth-child(2)").all_inner_texts() == ["asserted", "reinforced"]
        assert "remember" in page.locator("dl.fields").inner_text()  # the extractor

        # an extracted fact shows the message it came from, which links to its session
        page.goto(f"{server.url}/ui/users/alice")
        page.locator("a.fact", has_text="Rex").first.click()
        page.wait_for_url(re.compile(r".*/facts/fact-.*"))
        assert "My dog is called Rex and he comes along." in page.content()
        _shot(page, "fact")
        page.click("a:text-is('trip-1')")
        page.wait_for_url(f"{server.url}/ui/users/alice/sessions/trip-1")
        read = page.locator(".read .msg .content").all_inner_texts()
        assert read[-1] == "My dog is called Rex and he comes along." and len(read) == 3
        _shot(page, "session")
    finally:
        ctx.close()


def test_the_search_playground_shows_hits_with_their_scores(ui_server, browser) -> None:
    server, data = ui_server
    ctx, page = _login(browser, server.url, data["acme_key"])
    try:
        page.click("nav a:text-is('Search')")
        page.fill("input[name=q]", "hiking trip Dolomites")
        page.fill("input[name=user]", "alice")
        page.fill("input[name=min_score]", "0")
        page.click("form.search button")
        page.wait_for_url(re.compile(r".*/ui/search\?q=.*"))
        rows = page.locator("table.hits tbody tr")
        first = rows.first.locator("td").all_inner_texts()
        assert first[3] == "message" and "Dolomites" in first[4]
        assert 0 < float(first[0]) <= 1 and float(first[1]) > 0 and float(first[2]) > 0  # score, vector, text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", first[5])
        _shot(page, "search")
        page.goto(f"{server.url}/ui/health")
        assert "projection lag" in page.content()
        _shot(page, "health")
    finally:
        ctx.close()


def test_forget_a_fact_from_its_page_with_a_confirmation(ui_server, browser) -> None:
    server, data = ui_server
    fid = data["other_fact"]
    ctx, page = _login(browser, server.url, data["acme_key"])
    try:
        page.goto(f"{server.url}/ui/users/alice/facts/{fid}")
        page.click("a.button.danger")
        page.wait_for_url(re.compile(r".*/forget$"))
        assert "Forget fact" in page.locator("h1").inner_text()
        page.click("button[name=confirm]")
        page.wait_for_url(re.compile(r".*/ui/users/alice\?done=.*"))
        assert "forgot fact" in page.locator(".done").inner_text()
        assert "Alice works as a nurse in Lyon" not in page.locator("a.fact").all_inner_texts()
        page.select_option("select[name=status]", "deleted")
        page.click("form.filters button")
        assert page.locator("a.fact").all_inner_texts() == ["Alice works as a nurse in Lyon"]
    finally:
        ctx.close()
    # the same call as the API's: the fact is gone for every client
    listed = httpx.get(f"{server.url}/v1/users/alice/memories", headers={"Authorization": f"Bearer {data['acme_key']}"})
    assert fid not in [h["id"] for h in listed.json()]


def test_a_tenants_key_never_shows_another_tenants_data(ui_server, browser) -> None:
    server, data = ui_server
    ctx, page = _login(browser, server.url, data["acme_key"])
    try:
        for path in ["/ui/users/carol", f"/ui/users/carol/facts/{data['globex_fact']}", "/ui/users/carol/sessions",
                     "/ui/users/carol/sessions/sea-1", f"/ui/users/alice/facts/{data['globex_fact']}",
                     "/ui/search?q=where+is+the+boat+moored&user=carol&min_score=0&kinds=message&kinds=fact"]:
            page.goto(server.url + path)
            assert "Albatross" not in page.content() and "Brest" not in page.content(), path
            own = _globex_sees(server, path, data)  # the same URL shows carol's data to her own tenant
            assert "Albatross" in own or ">sea-1</a>" in own, path
        assert "carol" not in page.goto(server.url + "/ui").text()
        r = page.goto(f"{server.url}/ui/users/carol/facts/{data['globex_fact']}")
        assert r.status == 404
    finally:
        ctx.close()
    # and the other way round, by header: globex sees carol, not alice
    ctx = browser.new_context(extra_http_headers={"Authorization": f"Bearer {data['globex_key']}"})
    try:
        page = ctx.new_page()
        page.goto(server.url + "/ui")
        assert page.locator("a.user").all_inner_texts() == ["carol"]
        assert page.goto(f"{server.url}/ui/users/alice/facts/{data['fact']}").status == 404
    finally:
        ctx.close()


def _globex_sees(server, path: str, data: dict[str, str]) -> str:
    """The page at ``path`` (alice's fact URL mapped to carol's) as globex's key gets it."""
    path = path.replace("/users/alice/", "/users/carol/")
    return httpx.get(server.url + path, headers={"Authorization": f"Bearer {data['globex_key']}"}).text


# -- the same server over plain HTTP -----------------------------------------------------------
def test_login_cookie_is_httponly_and_samesite_strict_and_forms_need_the_csrf_token(ui_server) -> None:
    server, data = ui_server
    with httpx.Client(base_url=server.url) as c:
        r = c.get("/ui")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
        assert c.get("/ui?format=json").status_code == 401
        token = re.search(r'name="csrf" value="([^"]+)"', c.get("/ui/login").text).group(1)
        bad = c.post("/ui/login", data={"key": "ek_nope_nope", "csrf": token, "next": "/ui"})
        assert bad.status_code == 401 and "unknown or revoked" in bad.text
        ok = c.post("/ui/login", data={"key": data["acme_key"], "csrf": token, "next": "https://evil.example/"})
        assert ok.status_code == 303 and ok.headers["location"] == "/ui"  # no open redirect
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        users = c.get("/ui?format=json").json()
        assert [u["user"] for u in users["users"]] == ["alice", "bob"]
        # a forget without the page's token (another site's form) changes nothing
        fid = data["fact"]
        r = c.post(f"/ui/users/alice/facts/{fid}/forget", data={"confirm": "yes"})
        assert r.status_code == 400 and "csrf" in r.text
        assert c.get(f"/ui/users/alice/facts/{fid}?format=json").json()["fact"]["status"] == "active"


def test_pages_are_paged_and_also_json(ui_server) -> None:
    server, data = ui_server
    h = {"Authorization": f"Bearer {data['acme_key']}"}
    one = httpx.get(f"{server.url}/ui?limit=1&format=json", headers=h).json()
    assert len(one["users"]) == 1 and one["page"] == {"total": 2, "offset": 0, "limit": 1, "next": 1, "prev": None}
    two = httpx.get(f"{server.url}/ui?limit=1&offset=1&format=json", headers=h).json()
    assert [u["user"] for u in one["users"] + two["users"]] == ["alice", "bob"] and two["page"]["next"] is None
    bad = httpx.get(f"{server.url}/ui/users/alice?limit=100000&format=json", headers=h)
    assert bad.status_code == 400 and bad.json()["field"] == "limit"
    bad = httpx.get(f"{server.url}/ui/users/alice?status=gone&format=json", headers=h)
    assert bad.status_code == 400 and bad.json()["field"] == "status"
    facts = httpx.get(f"{server.url}/ui/users/alice?status=active&format=json", headers=h).json()
    assert facts["counts"]["active"] == facts["page"]["total"] == len(facts["facts"])


def test_forget_a_session_then_a_user_through_their_confirmation_forms(ui_server) -> None:
    server, data = ui_server
    h = {"Authorization": f"Bearer {data['acme_key']}"}
    with httpx.Client(base_url=server.url, headers=h) as c:
        assert c.post("/v1/users/dave/sessions/d-1/messages", json={"messages": [{"role": "user", "content": "Dave here"}]}).status_code == 201
        assert c.post("/v1/users/dave/sessions/d-2/messages", json={"messages": [{"role": "user", "content": "Dave again"}]}).status_code == 201
        assert c.post("/v1/users/dave/memories", json={"content": "Dave sails"}).status_code == 201

        def confirm_and_post(path: str) -> httpx.Response:
            page = c.get(path)
            assert page.status_code == 200 and "Yes, forget it" in page.text
            token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            return c.post(path, data={"csrf": token, "confirm": "yes"})

        r = confirm_and_post("/ui/users/dave/sessions/d-1/forget")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/users/dave/sessions?done=")
        assert [s["session_id"] for s in c.get("/ui/users/dave/sessions?format=json").json()["sessions"]] == ["d-2"]
        assert c.get("/ui/users/dave/sessions/d-1?format=json").status_code == 404
        r = confirm_and_post("/ui/users/dave/forget")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui?done=")
        assert "dave" not in [u["user"] for u in c.get("/ui?format=json&limit=500").json()["users"]]
        assert c.get("/v1/users/dave/memories").json() == []


def test_without_keys_only_a_loopback_host_name_gets_the_pages(tmp_path) -> None:
    """Keyless loopback serving: a page reached under another host name (DNS rebinding) is refused."""
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.remember("Erin likes chess", user="erin")
        from starlette.testclient import TestClient  # sync: this module's browser runs Playwright's own loop

        from eidetica._server import build

        app = build(m, mcp=False)

        def get(host: str) -> httpx.Response:
            return TestClient(app, base_url=f"http://{host}:8765", client=("127.0.0.1", 5000)).get("/ui?format=json")

        assert [u["user"] for u in get("127.0.0.1").json()["users"]] == ["erin"]
        assert get("localhost").status_code == 200
        assert get("rebound.example").status_code == 401


# -- 10,000 facts and 1,000 sessions for one user ----------------------------------------------
@pytest.mark.slow
def test_a_user_with_10000_facts_and_1000_sessions_renders_paged(tmp_path, browser) -> None:
    store = tmp_path / "big"
    config = MemoryConfig(auto_extract=False, max_memories=20_000)
    t0 = time.perf_counter()
    rng = random.Random(7)
    words = ["".join(rng.choice("bcdfghjklmnprstvz") + rng.choice("aeiou") for _ in range(3)) for _ in range(5_000)]
    with eidetica.open(store, embedder=HashEmbedder(dim=64), config=config, fsync="never") as m:
        for b in range(0, 10_000, 1_000):  # distinct random words: no fact reinforces another
            m.remember_many([(" ".join(rng.sample(words, 8)), f"cat{i % 7}") for i in range(b, b + 1_000)], user="big")
        listed = m.list_memories(user="big", limit=10_000)
        assert len(listed) == 10_000
        some_fact = listed[5_000].id
        for i in range(1_000):
            m.session(f"s{i:04d}", user="big").append("user", f"session {i} says hello about topic {i % 31}")
    built = time.perf_counter() - t0
    server = Served(store).start()
    timings = {}
    try:
        ctx = browser.new_context()
        page = ctx.new_page()
        for name, path in [("users", "/ui"), ("facts", "/ui/users/big"), ("facts, last page", "/ui/users/big?offset=9950"),
                           ("facts, status filter", "/ui/users/big?status=active&category=cat3"),
                           ("sessions", "/ui/users/big/sessions"), ("session", "/ui/users/big/sessions/s0500"),
                           ("a fact", f"/ui/users/big/facts/{some_fact}"),
                           ("a fact's audit trail (m.explain: the user's facts stream)", f"/ui/users/big/facts/{some_fact}/audit")]:
            page.goto(server.url + path)  # a first visit warms the process up
            t = time.perf_counter()
            page.goto(server.url + path)
            page.wait_for_load_state("load")
            timings[name] = round((time.perf_counter() - t) * 1000, 1)
        assert page.locator("table.history tbody tr td:nth-child(2)").all_inner_texts() == ["asserted"]  # the audit page
        page.goto(server.url + "/ui/users/big/sessions/s0500")
        assert page.locator(".read .msg .content").all_inner_texts() == ["session 500 says hello about topic 4"]
        page.goto(server.url + "/ui/users/big")
        assert page.locator("a.fact").count() == 50
        assert "1–50 of 10000" in page.locator(".pager").inner_text()
        page.goto(server.url + "/ui")
        assert page.locator("table tbody tr td").all_inner_texts()[:4] == ["big", "1000", "1000", "10000"]
        ctx.close()
    finally:
        server.stop()
    print(f"\nui render ms (10,000 facts, 1,000 sessions; store built in {built:.1f} s): {timings}")
