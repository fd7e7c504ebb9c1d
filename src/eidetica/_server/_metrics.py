"""``/metrics``: the server's Prometheus figures (``prometheus-client``), names prefixed ``eidetica_``.

Requests by route template, method and status, and their latency; latency of the agent's hot
calls (append, search, recall, context); and, through the ``eidetica._util.observe`` port the lower
layers report to, log appends, events, fsyncs and group-commit sizes, embedding batch sizes and
time, and extractions in flight. Projection lag is read when scraped. Labels are route
templates, methods, status codes, operation and projection names: never a user, a session, an
id or any text.

Who may read it: a scraper on loopback without a key; from elsewhere only an operator key
(``eidetica keys create --operator``): the figures are store-wide, not a tenant's to see.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .._remote.wire import error_body, status_of
from .._util import observe as _observe
from ..errors import Unauthorized
from ..memory import Memory
from ._keys import KeyStore
from ._tracing import finish_span, request_span

__all__ = ["Metrics", "Observed", "metrics"]

# the hot calls of an agent, by the route that serves them
OPERATIONS = {
    ("POST", "/v1/users/{user}/sessions/{session_id}/messages"): "append",
    ("POST", "/v1/search"): "search",
    ("POST", "/v1/users/{user}/memories/recall"): "recall",
    ("POST", "/v1/context"): "context",
}
_LEAN_APPEND = re.compile(r"/v1/users/[^/]+/sessions/[^/]+/messages")
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """The process's Prometheus objects, also the ``_observe`` sink of the layers below."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("eidetica_http_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("eidetica_http_request_duration_seconds", "HTTP request latency by route template",
                                 ["route", "method"], registry=r)
        self.operations = Histogram("eidetica_operation_duration_seconds",
                                    "Latency of append, search, recall and context requests", ["operation"], registry=r)
        self._counters = {
            "log_appends": Counter("eidetica_log_appends", "Appends committed to the log", registry=r),
            "log_events": Counter("eidetica_log_events", "Events committed to the log", registry=r),
            "log_fsyncs": Counter("eidetica_log_fsyncs", "fsyncs of log segments", registry=r),
        }
        self._histograms = {
            "log_group_commit": Histogram("eidetica_log_group_commit_appends", "Appends written by one group commit",
                                          buckets=_SIZES, registry=r),
            "embed_batch": Histogram("eidetica_embed_batch_texts", "Texts per embedding model call",
                                     buckets=_SIZES, registry=r),
            "embed_seconds": Histogram("eidetica_embed_batch_duration_seconds", "Time of one embedding model call",
                                       registry=r),
        }
        self._levels = {
            "extraction_queue": Gauge("eidetica_extraction_queue_messages",
                                      "User messages waiting for or in fact extraction", registry=r),
        }
        self.lag = Gauge("eidetica_projection_lag_events", "Committed events a projection has not applied yet",
                         ["projection"], registry=r)
        r.register(_LedgerCollector())
        self.extraction_failures = Gauge("eidetica_extraction_failures",
                                         "Extractions that failed (a provider error) since the store opened", registry=r)

    # -- the _observe sink -----------------------------------------------------------------
    def count(self, name: str, n: float) -> None:
        """Add to a counter of the layers below (unknown names are ignored)."""
        c = self._counters.get(name)
        if c is not None:
            c.inc(n)

    def observe(self, name: str, value: float) -> None:
        """Record a sample of the layers below."""
        h = self._histograms.get(name)
        if h is not None:
            h.observe(value)

    def add(self, name: str, delta: float) -> None:
        """Move a level of the layers below."""
        g = self._levels.get(name)
        if g is not None:
            g.inc(delta)

    # -- scraping ----------------------------------------------------------------------------
    def exposition(self, memory: Memory) -> bytes:
        """The text format, with the levels read now (projection lag, extraction failures)."""
        try:
            lag = memory.projector.lag()
        except Exception:  # noqa: BLE001 - a scrape reports what it can (a Ray view may be restarting)
            lag = {}
        for name, behind in (lag.items() if isinstance(lag, dict) else ()):
            self.lag.labels(projection=str(name)).set(float(behind))
        self.extraction_failures.set(getattr(memory, "extraction_failures", 0))
        return generate_latest(self.registry)


class _LedgerCollector:
    """``eidetica_llm_tokens_total`` and ``eidetica_llm_calls_total``: this process's LLM calls (``providers._ledger``)."""

    def describe(self) -> list[Any]:
        """No samples at registration (read at each scrape)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The ledger's running counts, by model and purpose (and direction, or outcome)."""
        from prometheus_client.core import CounterMetricFamily

        from ..providers import _ledger

        tokens = CounterMetricFamily("eidetica_llm_tokens", "LLM tokens by model, purpose and direction (input|output)",
                                     labels=["model", "purpose", "direction"])
        calls = CounterMetricFamily("eidetica_llm_calls", "LLM calls by model, purpose and outcome",
                                    labels=["model", "purpose", "outcome"])
        for key, n in sorted(_ledger.TOKENS.items()):
            tokens.add_metric(list(key), float(n))
        for key, n in sorted(_ledger.CALLS.items()):
            calls.add_metric(list(key), float(n))
        yield tokens
        yield calls


_METRICS: Metrics | None = None


def metrics() -> Metrics:
    """The process's metrics, made and installed as the ``_observe`` sink on first use."""
    global _METRICS
    if _METRICS is None:
        _METRICS = Metrics()
        _observe.install(_METRICS)
    return _METRICS


def _route(scope: dict[str, Any]) -> str:
    """The route template a request matched (never its concrete path, which names users and ids)."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str):
        return template
    path = scope.get("path", "")
    if _LEAN_APPEND.fullmatch(path):
        return "/v1/users/{user}/sessions/{session_id}/messages"
    for fixed in ("/metrics", "/mcp", "/ui/static"):
        if path == fixed or path.startswith(fixed + "/"):
            return fixed
    return "unmatched"


class Observed:
    """ASGI wrapper: counts and times every HTTP request by route template, and answers ``/metrics``."""

    def __init__(self, app: Any, memory: Memory, keys: KeyStore | None) -> None:
        self.app = app
        self.memory = memory
        self.keys = keys
        self.metrics = metrics()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass the request on (or answer /metrics), then record its route, status and time."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500
        started = time.perf_counter()

        async def sent(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with request_span(scope) as span:
            try:
                if scope["path"] == "/metrics":
                    await self._scrape(scope, receive, sent)
                else:
                    await self.app(scope, receive, sent)
            finally:
                took = time.perf_counter() - started
                route, method = _route(scope), scope.get("method", "")
                finish_span(span, method, route, status)
                self._record(route, method, status, took)

    def _record(self, route: str, method: str, status: int, took: float) -> None:
        """Count and time one request."""
        self.metrics.requests.labels(route=route, method=method, status=str(status)).inc()
        self.metrics.latency.labels(route=route, method=method).observe(took)
        op = OPERATIONS.get((method, route))
        if op is not None:
            self.metrics.operations.labels(operation=op).observe(took)

    async def _scrape(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import anyio
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response

        request = Request(scope)
        try:
            self._allow(request)
        except Unauthorized as e:
            return await JSONResponse(error_body(e), status_of(e))(scope, receive, send)
        body = await anyio.to_thread.run_sync(self.metrics.exposition, self.memory)
        await Response(body, media_type=CONTENT_TYPE_LATEST)(scope, receive, send)

    def _allow(self, request: Any) -> None:
        """Loopback scrapers need no key; anyone else needs an operator key."""
        from ._app import is_loopback

        if request.client is not None and is_loopback(request.client.host):
            return
        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        if self.keys is None or not self.keys.is_operator(bearer):
            raise Unauthorized("/metrics needs an operator key from a non-loopback address "
                               "(`eidetica keys create --operator`)")
