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

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import eidetica
from eidetica._server import KeyStore, build, check_bind
from eidetica.errors import InvalidInput, NotFound, Unauthorized
from eidetica.providers import HashEmbedder
from tests.served import Served

BIN = Path(sys.executable).with_name("eidetica")
ENV = dict(os.environ, EIDETICA_MODEL="hash-64")


# -- keys (no server needed) -----------------------------------------------------------------
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
    assert "peanuts" in _text(await client.call_tool("get_context", {"query": "what can Ada eat", "user": "ada"}))
    assert "note-" in _text(await client.call_tool("store_note", {"text": "flight lands 10:40", "user": "ada"}))
    await client.call_tool("forget_memory", {"fact_id": fid, "user": "ada"})
    assert "peanuts" not in _text(await client.call_tool("list_memories", {"user": "ada"}))
    bad = await client.call_tool("forget_memory", {"fact_id": fid, "user": "ada"})
    assert bad.is_error and "not found" in _text(bad)
    await client.call_tool("forget_all_memories", {"user": "ada"})
    assert "No facts" in _text(await client.call_tool("list_memories", {"user": "ada"}))


def test_mcp_tools_in_process(tmp_path) -> None:
    from mcp import Client

    from eidetica._server._mcp import build_mcp

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


def keys_cli(*args: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), "keys", *args, "--path", str(store)], capture_output=True, text=True,
                          env=ENV, timeout=300)


@pytest.mark.slow
def test_keys_cli_and_auth_against_a_served_store(server) -> None:
    # no key configured: loopback serves the default tenant without auth
    anon = eidetica.connect(server.url)
    anon.remember("the default tenant's fact", user="u")
    out = keys_cli("create", "--tenant", "acme", "--name", "ci", store=server.store)
    assert out.returncode == 0, out.stderr
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
    assert keys_cli("revoke", kid, store=server.store).returncode == 0
    with pytest.raises(Unauthorized):  # at once: the running server re-reads the key file
        m.list_memories(user="u")
    m.close()
    anon.close()


@pytest.mark.slow
def test_serve_refuses_a_public_address_without_keys(tmp_path) -> None:
    out = subprocess.run([str(BIN), "serve", "--path", str(tmp_path / "s"), "--host", "0.0.0.0", "--port", "1"],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert out.returncode != 0 and "without API keys" in out.stderr


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
