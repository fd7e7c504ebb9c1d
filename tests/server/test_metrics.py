"""``/metrics`` of a real ``eidetica serve`` process on 127.0.0.1, read with prometheus-client's own parser."""

from __future__ import annotations

import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import eidetica
from eidetica._server import KeyStore, build
from eidetica.providers import HashEmbedder
from tests.support.served import Served


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
    """A non-loopback peer (an in-process client with another address) needs an operator key."""
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        keys = KeyStore(tmp_path / "s")
        _, tenant_key = keys.create("acme")
        _, operator_key = keys.create("acme", "prometheus", operator=True)
        app = build(m, keys=keys, host="0.0.0.0", mcp=False)

        def get(client: tuple[str, int], key: str | None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            return TestClient(app, client=client).get("/metrics", headers=headers)

        far = ("192.0.2.7", 40000)
        assert get(far, None).status_code == 401
        refused = get(far, tenant_key)
        assert refused.status_code == 401 and "operator key" in refused.json()["message"]
        assert get(far, "ek_nope_nope").status_code == 401
        ok = get(far, operator_key)
        assert ok.status_code == 200 and "eidetica_http_requests_total" in ok.text
        assert get(("127.0.0.1", 40000), None).status_code == 200  # a local scraper needs none
        assert [k["operator"] for k in keys.list()] == [False, True]


def test_requests_become_opentelemetry_spans_named_by_route_template_once_a_provider_is_set(tmp_path) -> None:
    """The otel extra: a server span per request, parented by the caller's traceparent, no ids in it."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process: what OTEL_TRACES_EXPORTER makes `serve` do
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        c = TestClient(build(m, mcp=False))
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        r = c.post("/v1/users/zoe-secret/sessions/z-1/messages", headers={"traceparent": parent},
                   json={"messages": [{"role": "user", "content": "Zoe here"}]})
        assert r.status_code == 201
        assert c.post("/v1/search", json={"query": "x", "user": "zoe-secret"}).status_code == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    append = spans["POST /v1/users/{user}/sessions/{session_id}/messages"]
    assert append.attributes["http.response.status_code"] == 201 and append.kind == trace.SpanKind.SERVER
    assert format(append.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"  # joined the caller's trace
    assert spans["POST /v1/search"].attributes["http.route"] == "/v1/search"
    assert not any("zoe" in str(s.name) + str(dict(s.attributes)) for s in spans.values())
