"""`eidetica serve`, keys, MCP and eidetica.connect() with real parts: a real server process on
127.0.0.1 (free port), the real CLI, the MCP SDK's own clients, real client processes."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import eidetica
from eidetica._server import KeyStore, check_bind
from eidetica.errors import InvalidInput, NotFound, Unauthorized
from eidetica.providers import HashEmbedder
from tests.support import SUPPORT
from tests.support.served import Served

BIN = Path(sys.executable).with_name("eidetica")
ENV = dict(os.environ, EIDETICA_MODEL="hash-64")


# -- keys (no server needed) -----------------------------------------------------------------
def test_errors_cross_the_http_body_with_their_fields() -> None:
    """The client raises the server's error again, fields in their types (JSON makes a dict's int keys strings)."""
    from eidetica import errors
    from eidetica._remote.wire import error_body, error_from_body, status_of

    cases = [
        errors.InvalidInput("min_offset", "must be an offset (int) or {partition: offset}", {"0": "x"}),
        errors.WrongExpectedVersion("s", 1, 3),
        errors.CorruptLog("/x/seg", 10, "bad", offset=4),
        errors.NotFound("fact", "f1"),
        errors.StorageError(28, "No space left on device", "/x/log"),
        errors.ReplicaBehind("views:1", {0: 9, 2: 4}, {0: 3}, 0.5),
    ]
    for e in cases:
        back = error_from_body(status_of(e), json.loads(json.dumps(error_body(e))))
        assert type(back) is type(e) and vars(back) == vars(e) and str(back) == str(e)
    assert status_of(cases[-1]) == 503


def test_keys_are_stored_only_as_salted_hashes_in_a_private_file(tmp_path) -> None:
    ks = KeyStore(tmp_path)
    kid, key = ks.create("acme", "ci")
    kid2, key2 = ks.create("acme")
    raw = (tmp_path / "keys.json").read_text()
    assert key not in raw and key.split("_")[-1] not in raw and key2 not in raw
    assert stat.S_IMODE(os.stat(tmp_path / "keys.json").st_mode) == 0o600
    records = json.loads(raw)
    assert records[kid]["salt"] != records[kid2]["salt"]
    assert ks.tenant_of(key) == "acme"
    assert [k["id"] for k in ks.list()] == [kid, kid2] and "hash" not in ks.list()[0]
    for bad in (None, "", "ek_nope_x", key[:-1] + ("A" if key[-1] != "A" else "B"), f"ek_{kid2}_{key.split('_')[-1]}"):
        with pytest.raises(Unauthorized):
            ks.tenant_of(bad)
    ks.revoke(kid)
    with pytest.raises(Unauthorized):
        ks.tenant_of(key)
    assert ks.tenant_of(key2) == "acme"
    with pytest.raises(NotFound):
        ks.revoke(kid)


def test_a_non_loopback_bind_needs_a_key(tmp_path) -> None:
    ks = KeyStore(tmp_path)
    with pytest.raises(InvalidInput) as e:
        check_bind("0.0.0.0", ks)
    assert e.value.field == "host" and "keys create" in str(e.value)
    check_bind("127.0.0.1", ks)
    check_bind("::1", ks)
    ks.create("acme")
    check_bind("0.0.0.0", ks)


# -- MCP in process, with the SDK's own client --------------------------------------------------
def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


async def _mcp_round_trip(client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"remember", "recall", "search_memory", "list_memories", "forget_memory", "forget_all_memories",
            "get_context", "append_messages", "read_session", "store_note"} <= set(tools)
    assert {"content", "user", "category"} <= set(tools["remember"].input_schema["properties"])
    assert {"query", "user", "top_k"} <= set(tools["recall"].input_schema["properties"])
    out = _text(await client.call_tool("remember", {"content": "Ada is allergic to peanuts", "user": "ada",
                                                    "category": "health"}))
    fid = out.split()[-1].rstrip(".")
    assert fid.startswith("fact-")
    recalled = _text(await client.call_tool("recall", {"query": "peanuts allergy", "user": "ada"}))
    assert "[Health | " in recalled and "Ada is allergic to peanuts" in recalled and fid in recalled
    await client.call_tool("append_messages", {"session_id": "s1", "user": "ada", "messages": [
        {"role": "user", "content": "We booked the ryokan in Kyoto for April"}]})
    assert "ryokan" in _text(await client.call_tool("read_session", {"session_id": "s1", "user": "ada"}))
    assert "ryokan" in _text(await client.call_tool("search_memory", {"query": "Kyoto ryokan", "user": "ada"}))
    assert "peanuts" in _text(await client.call_tool("get_context", {"query": "is Ada allergic to peanuts", "user": "ada"}))
    assert "note-" in _text(await client.call_tool("store_note", {"text": "flight lands 10:40", "user": "ada"}))
    await client.call_tool("forget_memory", {"fact_id": fid, "user": "ada"})
    assert "peanuts" not in _text(await client.call_tool("list_memories", {"user": "ada"}))
    bad = await client.call_tool("forget_memory", {"fact_id": fid, "user": "ada"})
    assert bad.is_error and "not found" in _text(bad)
    await client.call_tool("forget_all_memories", {"user": "ada"})
    assert "No facts" in _text(await client.call_tool("list_memories", {"user": "ada"}))


def test_mcp_store_note_links_the_session_a_revert_takes_back(tmp_path) -> None:
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.session("bob-chat", user="bob").append("user", "hi")

        async def go() -> str:
            async with Client(build_mcp(lambda scope: m)) as c:
                await c.call_tool("append_messages", {"session_id": "s1", "user": "ada", "messages": [
                    {"role": "user", "content": "Remember to wire the money"}]})
                out = _text(await c.call_tool("store_note", {"text": "wire money Friday", "user": "ada",
                                                             "session_id": "s1"}))
                bad = await c.call_tool("store_note", {"text": "x", "user": "ada", "session_id": "bob-chat"})
                assert bad.is_error and "session_id" in _text(bad)
                return out.split()[-1].rstrip(".")

        nid = asyncio.run(go())
        assert nid.startswith("note-") and m.revert(user="ada", session_id="s1")["notes"] == [nid]
        assert m.list_notes(user="ada") == []


def test_mcp_tools_in_process(tmp_path) -> None:
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        async def go() -> None:
            async with Client(build_mcp(lambda scope: m)) as c:
                await _mcp_round_trip(c)

        asyncio.run(go())


# -- a real server process -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One `eidetica serve` (the real console script) for this module's tests."""
    d = tmp_path_factory.mktemp("srv")
    s = Served(d / "store", cli=True).start()
    yield s
    s.stop()


def keys_cli(*args: str, store: Path, env_path: bool = False) -> subprocess.CompletedProcess:
    """`eidetica keys ...` on ``store``, named by --path or (``env_path``) by $EIDETICA_PATH alone."""
    where = [] if env_path else ["--path", str(store)]
    env = dict(ENV, EIDETICA_PATH=str(store)) if env_path else ENV
    return subprocess.run([str(BIN), "keys", *args, *where], capture_output=True, text=True, env=env, timeout=300,
                          cwd=store.parent)


@pytest.mark.slow
def test_keys_cli_and_auth_against_a_served_store(server) -> None:
    # no key configured: loopback serves the default tenant without auth
    anon = eidetica.connect(server.url)
    anon.remember("the default tenant's fact", user="u")
    out = keys_cli("create", "--tenant", "acme", "--name", "ci", store=server.store, env_path=True)
    assert out.returncode == 0, out.stderr
    assert not (server.store.parent / "eidetica-data").exists()  # the key went to the served store
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("ek_") and "shown" not in out.stdout
    # keys now exist: every request needs one, and acts in its tenant
    r = httpx.get(server.url + "/v1/stats")
    assert r.status_code == 401 and r.json()["error"] == "Unauthorized"
    with pytest.raises(Unauthorized):
        anon.list_memories(user="u")
    m = eidetica.connect(server.url, api_key=key)
    assert m.tenant == "acme" and m.list_memories(user="u") == []
    m.remember("acme's fact", user="u")
    listed = keys_cli("list", store=server.store)
    assert "acme" in listed.stdout and key not in listed.stdout
    kid = key.split("_")[1]
    assert keys_cli("revoke", kid, store=server.store, env_path=True).returncode == 0
    with pytest.raises(Unauthorized):  # at once: the running server re-reads the key file
        m.list_memories(user="u")
    m.close()
    anon.close()


@pytest.mark.slow
def test_serve_refuses_a_public_address_without_keys(tmp_path) -> None:
    out = subprocess.run([str(BIN), "serve", "--path", str(tmp_path / "s"), "--host", "0.0.0.0", "--port", "1"],
                         capture_output=True, text=True, env=ENV, timeout=300, cwd=tmp_path)
    assert out.returncode != 0 and "without API keys" in out.stderr
    one_line = out.stderr.replace("\n", "")
    assert f"keys create --path {tmp_path / 's'}" in one_line and "--host 127.0.0.1" in one_line
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


@pytest.mark.slow
def test_openapi_docs_health_and_readiness(server) -> None:
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/readyz").status_code in (200, 401)
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/search" in doc["paths"] and "/v1/users/{user}/memories" in doc["paths"]
    assert httpx.get(server.url + "/docs").status_code == 200


@pytest.mark.slow
def test_mcp_over_streamable_http_with_a_key(server, tmp_path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    key = KeyStore(server.store).create(f"mcp-{uuid.uuid4().hex[:8]}")[1]
    assert httpx.post(server.url + "/mcp", json={}).status_code == 401

    async def go() -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as c:
                await _mcp_round_trip(c)

    asyncio.run(go())
    # the tools acted in the key's tenant
    m = eidetica.connect(server.url, api_key=key)
    assert m.tenant.startswith("mcp-") and m.export(tmp_path / "dump.jsonl") > 5
    m.close()


@pytest.mark.slow
def test_mcp_over_stdio(tmp_path) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=str(BIN), args=["mcp", "--path", str(tmp_path / "s")], env=ENV)

    async def go() -> None:
        async with Client(stdio_client(params)) as c:
            await _mcp_round_trip(c)

    asyncio.run(go())


# -- bad input: random and malformed requests ----------------------------------------------------
PATHS = ["/v1/search", "/v1/context", "/v1/users/{u}/memories", "/v1/users/{u}/memories/recall",
         "/v1/users/{u}/memories/{x}", "/v1/users/{u}/memories/forget-matching", "/v1/users/{u}/notes",
         "/v1/users/{u}/notes/{x}", "/v1/users/{u}/sessions/{x}", "/v1/users/{u}/sessions/{x}/messages",
         "/v1/users/{u}/sessions/{x}/read", "/v1/users/{u}/sessions/{x}/restore", "/v1/users/{u}/sessions/{x}/summarize",
         "/v1/sessions", "/v1/sessions/{x}", "/v1/schedules", "/v1/schedules/{x}", "/v1/schedules/{x}/runs",
         "/v1/schedules/due", "/v1/sweep", "/v1/clear", "/v1/import", "/v1/stats", "/v1/{x}", "/{x}"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
segments = st.text(max_size=20) | st.sampled_from(["..", "%2e%2e", "a/b", "", " ", "\x00", "ü", "x" * 300])
FIELDS = ["query", "user", "content", "category", "top_k", "messages", "text", "now", "min_score", "kinds", "mode",
          "threshold", "role", "max_tokens", "limit", "name", "cadence", "expression", "payload", "run"]


@st.composite
def bad_requests(draw):
    """A request that must not change anything: a read, or a write with something wrong in it."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]))
    seg = lambda: quote(draw(segments), safe="/%.")  # noqa: E731 - traversal attempts stay raw
    path = draw(st.sampled_from(PATHS)).format(u=seg(), x=seg())
    params = draw(st.dictionaries(st.sampled_from(FIELDS), st.text(max_size=12), max_size=3))
    kind = draw(st.sampled_from(["json", "bytes", "none"] if method == "GET" else ["json", "bytes"]))
    if kind == "json":
        body = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5) | json_values)
        if method != "GET":  # writes always carry something wrong: an unknown field
            body = dict(body, zz_not_a_field=draw(json_values)) if isinstance(body, dict) else {"zz": body, "zz_not_a_field": 1}
        content = json.dumps(body, allow_nan=True).encode()
    elif kind == "bytes":
        content = b"\xff" + draw(st.binary(max_size=200))  # never valid JSON
    else:
        content = b""
    ctype = draw(st.sampled_from(["application/json", "text/plain", "application/x-ndjson", ""]))
    if method == "DELETE" and "{" not in path:
        method = "GET"  # a well-formed DELETE of a made-up id may only say NotFound; keep it to reads
    return method, path, params, content, ctype


@pytest.mark.slow
def test_random_and_malformed_requests_get_4xx_and_change_nothing(server, tmp_path) -> None:
    key = KeyStore(server.store).create(f"fuzz-{uuid.uuid4().hex[:8]}")[1]
    m = eidetica.connect(server.url, api_key=key)
    m.session("s", user="u").append("user", "a message to keep")
    fact = m.remember("a fact to keep", user="u")
    before = (m.stats()["events"], m.export(tmp_path / "before.jsonl"))
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    seen: list[int] = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(bad_requests())
    @example(("POST", "/v1/import", {}, b"\xff", "application/json"))  # not UTF-8: was a 500
    @example(("POST", "/v1/import", {}, b"{not json", "application/x-ndjson"))
    @example(("POST", "/v1/users/u/sessions/s/messages", {}, b'{"messages": [{"role": "user", "content": "x"}]}', ""))
    @example(("POST", "/v1/users/u/sessions/s/messages", {}, b'{"messages": [], "tenant": "other"}', "application/json"))
    def check(req) -> None:
        method, path, params, content, ctype = req
        headers = {"Content-Type": ctype} if ctype else {}
        r = http.request(method, path, params=params, content=content, headers=headers)
        seen.append(r.status_code)
        assert r.status_code < 500, (req, r.text)
        if method != "GET" or r.status_code >= 400:
            assert 400 <= r.status_code < 500, (req, r.status_code, r.text)
            body = r.json()
            assert set(body) >= {"error", "field", "message"} and "Traceback" not in r.text

    check()
    # an oversized body is refused before it is read
    r = http.post("/v1/users/u/memories", content=b"{" + b" " * (9 * 1024 * 1024) + b"}",
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["field"] == "body"
    assert (m.stats()["events"], m.export(tmp_path / "after.jsonl")) == before
    assert (tmp_path / "before.jsonl").read_text() == (tmp_path / "after.jsonl").read_text()
    assert [h.id for h in m.list_memories(user="u")] == [fact]
    assert any(400 <= s < 500 for s in seen)
    http.close()
    m.close()


# -- isolation: B's key never reaches A's data --------------------------------------------------------
MARK = "zebracorn-77810"  # in tenant A's data only; B's requests carry at most pieces of it
NASTY = ["tenant:acme-a", "*", "text:zebracorn", '"zebracorn', "zebracorn~2", "tenant:* OR zebracorn",
         "' OR 1=1 --", "ua' OR tenant = 'acme-a", "1; DROP TABLE chunks", "user_id = 'ua'", "zebracorn 77810",
         "(tenant:acme-a)", "+tenant:acme-a -tenant:b", "tenant = 'acme-a'"]


@pytest.mark.slow
def test_isolation_between_two_tenants(server, tmp_path) -> None:
    ks = KeyStore(server.store)
    ta, tb = f"acme-a-{uuid.uuid4().hex[:6]}", f"bravo-b-{uuid.uuid4().hex[:6]}"
    key_a, (kid_b, key_b) = ks.create(ta)[1], ks.create(tb)
    a = eidetica.connect(server.url, api_key=key_a)
    a.session("sa", user="ua").append("user", f"my locker code is {MARK}")
    fid = a.remember(f"ua's locker code is {MARK}", user="ua")
    nid = a.store_note(f"note {MARK}", user="ua")
    sched = a.schedules.create(f"ping {MARK}", "interval", 600, user="ua").id
    a_before = a.export(tmp_path / "a0.jsonl")
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key_b}"}, timeout=60)
    ids = [fid, nid, sched, "sa", "ua", ta, f"../{ta}", f"{ta}/ua", "%2e%2e", fid.upper()]
    users = ["ua", f"{ta}:ua", f"../{ta}/ua", "ua%00", "*"]

    @st.composite
    def attacks(draw):
        u, x, q = draw(st.sampled_from(users)), draw(st.sampled_from(ids)), draw(st.sampled_from(NASTY + ids))
        extra = draw(st.sampled_from([{}, {"tenant": ta}, {"tenant_id": ta}, {"user_id": "ua"}]))
        return draw(st.sampled_from([
            ("POST", "/v1/search", {"query": q, "user": u, "min_score": 0.0, **extra}),
            ("POST", f"/v1/users/{u}/memories/recall", {"query": q, **extra}),
            ("POST", "/v1/context", {"query": q, "user": u, **extra}),
            ("GET", f"/v1/users/{u}/memories", None),
            ("GET", f"/v1/users/{u}/sessions/{x}/messages", None),
            ("GET", f"/v1/users/{u}/sessions/{x}/read", None),
            ("GET", f"/v1/schedules/{x}", None),
            ("GET", "/v1/schedules", None),
            ("GET", "/v1/sessions", None),
            ("GET", f"/v1/users/{u}/participants", None),
            ("DELETE", f"/v1/users/{u}/memories/{x}", None),
            ("DELETE", f"/v1/users/{u}/notes/{x}", None),
            ("DELETE", f"/v1/sessions/{x}", None),
            ("DELETE", f"/v1/schedules/{x}", None),
            ("PATCH", f"/v1/schedules/{x}", {"name": "taken over", **extra}),
            ("POST", f"/v1/users/{u}/memories/forget-matching", {"query": q, "threshold": 0.0, **extra}),
            ("POST", f"/v1/users/{u}/sessions/{x}/messages", {"messages": [{"role": "user", "content": q}], **extra}),
            ("GET", "/v1/export", None),
        ]))

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(attacks())
    def check(attack) -> None:
        method, path, body = attack
        r = http.request(method, path, json=body, params={"q": "x"} if method == "GET" else None)
        assert r.status_code < 500, (attack, r.text)
        assert MARK not in r.text, (attack, r.text)

    check()
    # B also did real damage attempts with valid calls: nothing of A moved
    b = eidetica.connect(server.url, api_key=key_b)
    b.forget_user("ua")
    b.clear()
    with pytest.raises(NotFound):
        b.forget(fid, user="ua")
    assert a.export(tmp_path / "a1.jsonl") == a_before
    assert (tmp_path / "a0.jsonl").read_text() == (tmp_path / "a1.jsonl").read_text()
    assert [h.id for h in a.list_memories(user="ua")] == [fid]
    assert MARK in a.session("sa", user="ua").history()[0].content
    # a revoked key is refused at once
    ks.revoke(kid_b)
    with pytest.raises(Unauthorized):
        b.list_memories(user="ua")
    assert http.get("/v1/stats").status_code == 401
    http.close()
    a.close()
    b.close()


# -- many writers, lost answers, and a SIGKILL of the server under that load ----------------------------
WRITER = SUPPORT / "_server_writer.py"


@pytest.mark.slow
@pytest.mark.crash
def test_many_writers_with_retries_survive_a_server_sigkill(tmp_path) -> None:
    """8 client processes x 200 appends into 4 shared sessions; every 10th answer is lost and the append
    retried with the same event id; the server is SIGKILLed mid-way and restarted, the clients resume.
    Afterwards each session's sequences are dense, nothing acknowledged is lost, nothing is duplicated."""
    writers, count, sessions = 8, 200, 4
    server = Served(tmp_path / "store").start()
    try:
        key = KeyStore(server.store).create("fleet")[1]
        acks = [tmp_path / f"acks-{w}" for w in range(writers)]
        procs = [subprocess.Popen([sys.executable, str(WRITER), server.url, key, str(w), str(count), str(acks[w]),
                                   str(sessions)], env=ENV, stderr=subprocess.PIPE, text=True)
                 for w in range(writers)]

        def acked() -> list[str]:
            return [line for a in acks if a.exists() for line in a.read_text().splitlines()]

        import time

        deadline = time.monotonic() + 300
        while len(acked()) < writers * count // 4 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
            time.sleep(0.2)  # watching progress across processes, not ordering threads
        before_crash = set(acked())
        assert len(before_crash) >= writers * count // 4
        server.kill()
        server = Served(server.store, port=server.port).start()
        for p in procs:
            assert p.wait(600) == 0, p.stderr.read()
        m = eidetica.connect(server.url, api_key=key)
        expected = {f"w{w} m{i}" for w in range(writers) for i in range(count)}
        assert set(acked()) == expected and before_crash <= expected
        stored: list[str] = []
        for k in range(sessions):
            hist = m.session(f"shared-{k}", user="u").history()
            assert [x.sequence for x in hist] == list(range(len(hist)))  # dense
            stored += [x.content for x in hist]
        assert len(stored) == len(set(stored)) == writers * count  # nothing duplicated
        assert set(stored) == expected  # nothing lost
        m.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_retried_writes_are_idempotent_by_caller_chosen_ids(server) -> None:
    key = KeyStore(server.store).create(f"retry-{uuid.uuid4().hex[:8]}")[1]
    m = eidetica.connect(server.url, api_key=key)
    s = m.session("s", user="u")
    eid = uuid.uuid4()
    s.append("user", "booked the train to Porto", event_id=eid)
    events = m.stats()["events"]
    s.append("user", "booked the train to Porto", event_id=eid)  # a retry: nothing is written
    assert m.stats()["events"] == events
    assert [x.content for x in s.history()] == ["booked the train to Porto"]
    fid = m.remember("Ada keeps bees", user="ada", request_id="req-1")
    assert m.remember("Ada keeps two cats", user="ada", request_id="req-1") == fid  # the retry writes nothing
    assert [h.text for h in m.list_memories(user="ada")] == ["Ada keeps bees"]
    m.close()


@pytest.mark.slow
def test_the_append_route_keeps_its_contract(server) -> None:
    """POST .../messages (answered on the lean path) names bad fields, refuses unknown ones, stays documented."""
    key = KeyStore(server.store).create(f"lean-{uuid.uuid4().hex[:8]}")[1]
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    path = "/v1/users/u/sessions/s/messages"
    ok = {"role": "user", "content": "the lease ends in May"}
    cases = [({"messages": [ok], "tenant": "other"}, "tenant"), ({"messages": [dict(ok, tenant="other")]}, "messages"),
             ({"messages": [dict(ok, time=5)]}, "messages"), ({"messages": [dict(ok, role="boss")]}, "role"),
             ({"messages": [dict(ok, content="")]}, "content"), ({"messages": []}, "messages"), ({}, "messages"),
             ({"messages": [ok], "strategy": "psychic"}, "strategy"), ([ok], "body")]
    for body, field in cases:
        r = http.post(path, json=body)
        assert (r.status_code, r.json()["error"], r.json()["field"]) == (400, "InvalidInput", field), (body, r.text)
    assert http.post(path, content=json.dumps({"messages": [ok]}), headers={"Content-Type": "text/plain"}).status_code == 400
    assert httpx.post(server.url + path, json={"messages": [ok]}, headers={"Authorization": "Bearer nope"}).status_code == 401
    eid = str(uuid.uuid4())
    first = http.post(path, json={"messages": [dict(ok, event_id=eid)]})
    assert first.status_code == 201
    again = http.post(path, json={"messages": [dict(ok, event_id=eid)]})  # a retry: answered, nothing written
    assert again.status_code == 201 and again.json()["offset"] <= first.json()["offset"]
    got = http.get(path).json()
    assert [(x["role"], x["content"]) for x in got] == [("user", "the lease ends in May")]
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "post" in doc["paths"]["/v1/users/{user}/sessions/{session_id}/messages"]
    http.close()


@pytest.mark.slow
def test_event_ids_conflict_with_409_and_are_scoped_per_tenant(server) -> None:
    """#36 item 2: a known id with another message is 409 EventIdConflict; each tenant's ids are its own."""
    keys = [KeyStore(server.store).create(f"ids-{k}-{uuid.uuid4().hex[:8]}")[1] for k in range(2)]
    a, b = (httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {k}"}, timeout=60) for k in keys)
    eid, fresh = str(uuid.uuid4()), str(uuid.uuid4())
    msg = {"role": "user", "content": "the lease ends in May", "event_id": eid}
    first = a.post("/v1/users/u/sessions/s1/messages", json={"messages": [msg]})
    assert first.status_code == 201
    for path, body in (("/v1/users/u/sessions/s2/messages", {"messages": [msg]}),  # another session
                       ("/v1/users/u/sessions/s1/messages", {"messages": [dict(msg, content="ends in June")]}),
                       ("/v1/users/u/sessions/s2/messages", {"messages": [dict(msg, event_id=fresh), msg]})):
        r = a.post(path, json=body)
        assert r.status_code == 409 and r.json()["error"] == "EventIdConflict", r.text
        assert eid in r.json()["message"] and fresh not in r.json()["message"]
    assert [x["content"] for x in a.get("/v1/users/u/sessions/s1/messages").json()] == ["the lease ends in May"]
    assert [x["session_id"] for x in a.get("/v1/sessions").json()] == ["s1"]
    # tenant b: the same id is b's own new event, alone or beside a fresh id; nothing tells b of a's
    r = b.post("/v1/users/u/sessions/s9/messages", json={"messages": [dict(msg, event_id=fresh),
                                                                        dict(msg, content="b's own words")]})
    assert r.status_code == 201 and r.json()["offset"] > first.json()["offset"], r.text
    assert [x["content"] for x in b.get("/v1/users/u/sessions/s9/messages").json()] == [
        "the lease ends in May", "b's own words"]
    # the client raises the same class
    m = eidetica.connect(server.url, api_key=keys[0])
    with pytest.raises(eidetica.EventIdConflict) as e:
        m.session("s3", user="u").append("user", "x", event_id=uuid.UUID(eid))
    assert e.value.event_id == eid
    m.close()
    a.close()
    b.close()


@pytest.mark.slow
def test_import_writes_into_the_key_tenant_and_counts_written_and_skipped(server, tmp_path) -> None:
    """#36 item 3: another tenant's export is written as the importer's own; a second import writes nothing."""
    ks = KeyStore(server.store)
    a = eidetica.connect(server.url, api_key=ks.create(f"exp-{uuid.uuid4().hex[:8]}")[1])
    key_b = ks.create(f"imp-{uuid.uuid4().hex[:8]}")[1]
    a.session("s", user="u").append("user", "the boiler is serviced every October")
    fid = a.remember("u's boiler is serviced in October", user="u")
    n = a.export(tmp_path / "a.jsonl")
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key_b}",
                                                      "Content-Type": "application/x-ndjson"}, timeout=60)
    body = (tmp_path / "a.jsonl").read_bytes()
    r = http.post("/v1/import", content=body)
    assert (r.status_code, r.json()) == (200, {"written": n, "skipped": 0, "conflicts": []}), r.text
    r = http.post("/v1/import", content=body)
    assert (r.status_code, r.json()) == (200, {"written": 0, "skipped": n, "conflicts": []}), r.text
    b = eidetica.connect(server.url, api_key=key_b)
    assert fid in [h.id for h in b.list_memories(user="u")]
    assert [x.content for x in b.session("s", user="u").history()] == ["the boiler is serviced every October"]
    assert b.import_(tmp_path / "a.jsonl") == {"written": 0, "skipped": n, "conflicts": []}
    assert a.import_(tmp_path / "a.jsonl") == {"written": 0, "skipped": n, "conflicts": []}
    # #43: a third tenant holds the id of a's message for another message: that one is skipped and named, over
    # HTTP and connect(), and everything else is written
    rows = [json.loads(line) for line in body.decode().splitlines()]
    msg = next(r for r in rows if r["type"] == "MessageAppended")
    for face in ("http", "connect"):
        c = eidetica.connect(server.url, api_key=ks.create(f"cl-{uuid.uuid4().hex[:8]}")[1])
        c.session("other", user="u").append("user", "the boiler is new", event_id=uuid.UUID(msg["event_id"]))
        if face == "http":
            r = httpx.post(f"{server.url}/v1/import", content=body, timeout=60,
                           headers={"Authorization": f"Bearer {c.api_key}", "Content-Type": "application/x-ndjson"})
            assert r.status_code == 200, r.text
            out = r.json()
        else:
            out = c.import_(tmp_path / "a.jsonl")
        assert msg["event_id"] in out["conflicts"] and out["written"] + out["skipped"] == n, out
        assert out["written"] == n - len(out["conflicts"])
        assert fid in [h.id for h in c.list_memories(user="u")]
        assert [x.content for x in c.session("other", user="u").history()] == ["the boiler is new"]
        c.close()
    for m in (a, b):
        m.close()
    http.close()


# -- #36 items 6 and 7: inputs refused at the edge, operations -------------------------------------
@pytest.fixture(scope="module")
def small_import(tmp_path_factory):
    """A server whose import limit is 1 MiB (bodies of other routes keep the 8 MiB limit)."""
    s = Served(tmp_path_factory.mktemp("lim") / "store", cli=True, args=("--max-import-mb", "1")).start()
    yield s
    s.stop()


def _chunks(total: int, piece: int = 1 << 20):
    """A body sent chunked (no Content-Length): ``total`` bytes of a JSON string."""
    yield b'{"content": "'
    sent = 0
    while sent < total:
        yield b"x" * min(piece, total - sent)
        sent += piece
    yield b'"}'


@pytest.mark.slow
def test_bad_inputs_at_the_edge_are_refused_naming_what_to_fix(small_import) -> None:
    http = httpx.Client(base_url=small_import.url, timeout=120)
    http.post("/v1/users/u/sessions/s/messages", json={"messages": [{"role": "user", "content": "hello there"}]})
    events = http.get("/v1/stats").json()["events"]
    for body, field in (({"kinds": ["message", "memes"]}, "kinds"), ({"min_score": 5}, "min_score"),
                        ({"min_score": -0.1}, "min_score"), ({"kinds": "nope"}, "kinds")):
        r = http.post("/v1/search", json={"query": "hello", "user": "u", **body})
        assert (r.status_code, r.json()["error"], r.json()["field"]) == (400, "InvalidInput", field), r.text
    r = http.post("/v1/search", content=b'{"query": "hello", "user": "u", "min_score": NaN}',
                  headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["field"]) == (400, "min_score"), r.text
    for route in ("read", "restore"):
        r = http.get(f"/v1/users/u/sessions/s/{route}", params={"token_budget": -5})
        assert (r.status_code, r.json()["field"]) == (400, "token_budget"), r.text
    # a chunked body past 8 MiB is 413 like one with a Content-Length
    r = http.post("/v1/users/u/memories", content=_chunks(9 << 20), headers={"Content-Type": "application/json"})
    assert (r.status_code, r.json()["field"]) == (413, "body"), r.text
    # the import limit, chunked or not, answered before the body is all read
    for content in (_chunks(3 << 20), b"x" * (2 << 20)):
        r = http.post("/v1/import", content=content, headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 413 and str(1 << 20) in r.json()["message"], r.text
    # a wrong method is labelled as such, with the methods that work
    r = http.put("/v1/stats")
    assert (r.status_code, r.json()["error"], r.headers["allow"]) == (405, "MethodNotAllowed", "GET"), r.text
    assert "GET" in r.json()["message"]
    # a body without its Content-Type says how to send it
    r = http.post("/v1/users/u/memories", content=b'{"content": "x"}')
    assert r.status_code == 400 and "Content-Type: application/json" in r.json()["message"], r.text
    # a missing session: 404 to read or forget it, and nothing written
    for method, path in (("GET", "/v1/users/u/sessions/nope/messages"), ("GET", "/v1/users/u/sessions/nope/read"),
                         ("GET", "/v1/users/u/sessions/nope/restore"), ("GET", "/v1/users/u/sessions/nope/summary"),
                         ("DELETE", "/v1/users/u/sessions/nope"), ("DELETE", "/v1/sessions/nope")):
        r = http.request(method, path)
        assert (r.status_code, r.json()["error"]) == (404, "NotFound"), (path, r.text)
    assert http.get("/v1/stats").json()["events"] == events  # nothing of the refused requests was written
    assert http.delete("/v1/users/u/sessions/s").status_code == 200
    assert http.get("/v1/users/u/sessions/s/messages").status_code == 404  # forgotten: gone
    http.close()


@pytest.mark.slow
def test_serve_on_a_busy_port_fails_before_saying_it_serves(small_import, tmp_path) -> None:
    out = subprocess.run([str(BIN), "serve", "--path", str(tmp_path / "other"), "--port", str(small_import.port)],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "serving" not in out.stderr and "already in use" in out.stderr and "--port" in out.stderr
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_stats_of_a_tenant_key_show_that_tenant_only(server, tmp_path) -> None:
    """#36 item 5: with keys, /v1/stats counts the key's tenant; store-wide figures stay the operator's."""
    ks = KeyStore(server.store)
    a = eidetica.connect(server.url, api_key=ks.create(f"st-a-{uuid.uuid4().hex[:8]}")[1])
    b = eidetica.connect(server.url, api_key=ks.create(f"st-b-{uuid.uuid4().hex[:8]}")[1])
    a.session("s", user="u").append("user", "a message only tenant a wrote")
    a.remember("u likes tea", user="u")
    sa, sb = a.stats(), b.stats()
    assert sa["events"] == a.export(tmp_path / "a.jsonl") > 0 and sa["sessions"] == 1 and sa["streams"] >= 2
    assert (sb["events"], sb["streams"], sb["sessions"], sb["tenant"]) == (0, 0, 0, b.tenant)
    for hidden in ("log_bytes", "index", "lag", "snapshot", "summaries_committed", "extraction_failures"):
        assert hidden not in sa and hidden not in sb
    a.close()
    b.close()


@pytest.mark.slow
def test_docs_page_is_served_from_packaged_assets_and_renders_offline(server) -> None:
    """#36 item 7: /docs references only this server's URLs, which serve the packaged Swagger UI; a browser that
    may reach nothing but the server renders every route."""
    import re

    html = httpx.get(server.url + "/docs").text
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(r"""url: ?['"]([^'"]+)['"]""", html)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    assert "http://" not in html and "https://" not in html and "validatorUrl" in html
    for u in urls:
        r = httpx.get(server.url + u)
        assert r.status_code == 200 and len(r.content) > 0, u
    assert httpx.get(server.url + "/docs/assets/swagger-ui-bundle.js").headers["content-type"].startswith(
        ("text/javascript", "application/javascript"))
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no /usr/bin/chromium (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    elsewhere: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
        page = browser.new_page()

        def only_local(route) -> None:
            if route.request.url.startswith(server.url):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        page.route("**/*", only_local)
        page.goto(server.url + "/docs")
        page.wait_for_selector(".opblock-summary-path", timeout=60_000)
        paths = page.locator(".opblock-summary-path").all_inner_texts()
        browser.close()
    assert elsewhere == [] and any("/v1/search" in x for x in paths), (elsewhere, paths[:5])


def test_mcp_answers_fit_a_model(tmp_path) -> None:
    """#36 item 7: ids wherever an agent may act on one (get_context too), no 0.00 hits, plain error sentences,
    serverInfo.version set."""
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        fid = m.remember("Ada is allergic to peanuts", "health", user="ada")
        m.remember("Ada collects vintage typewriters", "hobby", user="ada")
        nid = m.store_note("the flight lands at 10:40", user="ada")

        async def go() -> None:
            async with Client(build_mcp(lambda scope: m)) as c:
                assert c.server_info is not None and c.server_info.version == eidetica.__version__
                block = _text(await c.call_tool("get_context", {"query": "is Ada allergic to peanuts", "user": "ada"}))
                assert "peanuts" in block and f"id: {fid}" in block
                notes = _text(await c.call_tool("get_context", {"query": "when does the flight land", "user": "ada"}))
                assert f"id: {nid}" in notes
                for tool in ("recall", "search_memory"):
                    out = _text(await c.call_tool(tool, {"query": "zebra quantum harbour", "user": "ada", "top_k": 10}))
                    assert "| 0.00 |" not in out, out
                bad = await c.call_tool("recall", {"query": "peanuts", "top_k": "five"})
                text = _text(bad)
                assert bad.is_error and "`user` is required" in text and "`top_k`" in text, text
                assert "http" not in text and "pydantic" not in text and "validation error" not in text, text

        asyncio.run(go())
