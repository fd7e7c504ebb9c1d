"""``/metrics`` of a real ``eidetica serve`` process on 127.0.0.1, read with prometheus-client's own parser."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import eidetica
from eidetica._server import KeyStore, build
from eidetica.providers import HashEmbedder
from tests.served import Served


def scrape(url: str, **kw) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics as (name, sorted labels) -> value."""
    r = httpx.get(url + "/metrics", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = tmp_path_factory.mktemp("metrics") / "store"
    s = Served(store).start()
    yield s
    s.stop()


def test_after_n_requests_the_counters_show_n_by_route_template_and_nothing_names_a_user(server) -> None:
    before = scrape(server.url)
    n = 7
    with httpx.Client(base_url=server.url) as c:
        for i in range(n):
            r = c.post(f"/v1/users/secret-user-{i}/sessions/secret-session-{i}/messages",
                       json={"messages": [{"role": "user", "content": f"my password is hunter{i}"}]})
            assert r.status_code == 201, r.text
            assert c.post("/v1/search", json={"query": "password", "user": f"secret-user-{i}"}).status_code == 200
        assert c.post("/v1/users/secret-user-0/memories/recall", json={"query": "password"}).status_code == 200
        assert c.post("/v1/context", json={"query": "password", "user": "secret-user-0"}).status_code == 200
        assert c.get("/v1/users/secret-user-0/memories/nope-fact").status_code == 405  # a DELETE-only route
        assert c.get("/v1/nowhere/secret-user-0").status_code == 404
    text = httpx.get(server.url + "/metrics").text
    after = scrape(server.url)

    append = "/v1/users/{user}/sessions/{session_id}/messages"
    got = value(after, "eidetica_http_requests_total", route=append, method="POST", status="201") \
        - value(before, "eidetica_http_requests_total", route=append, method="POST", status="201")
    assert got == n
    got = value(after, "eidetica_http_requests_total", route="/v1/search", method="POST", status="200") \
        - value(before, "eidetica_http_requests_total", route="/v1/search", method="POST", status="200")
    assert got == n
    assert value(after, "eidetica_http_requests_total", route="unmatched", method="GET", status="404") >= 1
    for op, k in (("append", n), ("search", n), ("recall", 1), ("context", 1)):
        assert value(after, "eidetica_operation_duration_seconds_count", operation=op) \
            - value(before, "eidetica_operation_duration_seconds_count", operation=op) == k, op
    # the layers below report through the _observe port: every append reached the log, fsynced
    assert value(after, "eidetica_log_appends_total") - value(before, "eidetica_log_appends_total") >= n
    assert value(after, "eidetica_log_fsyncs_total") > value(before, "eidetica_log_fsyncs_total")
    assert value(after, "eidetica_log_group_commit_appends_count") >= n
    assert value(after, "eidetica_embed_batch_texts_sum") >= n  # each message was embedded (hash-64 here)
    assert value(after, "eidetica_embed_batch_duration_seconds_count") >= 1
    assert ("eidetica_projection_lag_events", (("projection", "state"),)) in after
    assert ("eidetica_extraction_queue_messages", ()) in after
    # no user, session, id or text in any label
    assert not re.search(r"secret|hunter|password|nope-fact", text)


def test_metrics_from_elsewhere_need_an_operator_key(tmp_path) -> None:
    """A non-loopback peer (an in-process ASGI client with another address) needs an operator key."""
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        keys = KeyStore(tmp_path / "s")
        _, tenant_key = keys.create("acme")
        _, operator_key = keys.create("acme", "prometheus", operator=True)
        app = build(m, keys=keys, host="0.0.0.0", mcp=False)

        async def get(client: tuple[str, int], key: str | None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            transport = httpx.ASGITransport(app=app, client=client)
            async with httpx.AsyncClient(transport=transport, base_url="http://eidetica") as c:
                return await c.get("/metrics", headers=headers)

        far = ("192.0.2.7", 40000)
        assert asyncio.run(get(far, None)).status_code == 401
        refused = asyncio.run(get(far, tenant_key))
        assert refused.status_code == 401 and "operator key" in refused.json()["message"]
        assert asyncio.run(get(far, "ek_nope_nope")).status_code == 401
        ok = asyncio.run(get(far, operator_key))
        assert ok.status_code == 200 and "eidetica_http_requests_total" in ok.text
        assert asyncio.run(get(("127.0.0.1", 40000), None)).status_code == 200  # a local scraper needs none
        assert [k["operator"] for k in keys.list()] == [False, True]
