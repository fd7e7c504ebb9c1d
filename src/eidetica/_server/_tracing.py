"""Optional OpenTelemetry tracing of requests: one server span per HTTP request, named by its route
template (``POST /v1/search``), parented by an incoming ``traceparent``.

Off unless a tracer provider is configured: by ``eidetica serve`` when the ``otel`` extra is
installed and ``OTEL_TRACES_EXPORTER`` is ``console`` or ``otlp`` (the exporter's own
``OTEL_EXPORTER_OTLP_*`` variables apply), or by the embedding application. The API package is
already there (FastAPI and the MCP SDK depend on it); without a provider nothing is recorded
and a request pays one check. Span attributes are the route template, method and status:
never a concrete path, a user or any text.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..errors import InvalidInput

__all__ = ["request_span", "finish_span", "setup_from_env"]


def _tracer() -> Any:
    """The tracer requests report to, or None while no provider is configured (the default)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return trace.get_tracer("eidetica.server")


def request_span(scope: dict[str, Any]) -> AbstractContextManager[Any]:
    """A server span for this request (its name and attributes are set by ``finish_span``), or a no-op."""
    tracer = _tracer()
    if tracer is None:
        return nullcontext(None)
    from opentelemetry import propagate, trace

    carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}
    return tracer.start_as_current_span(scope.get("method", "HTTP"), context=propagate.extract(carrier),
                                        kind=trace.SpanKind.SERVER)


def finish_span(span: Any, method: str, route: str, status: int) -> None:
    """Name the span by the route template and record method and status."""
    if span is None:
        return
    span.update_name(f"{method} {route}")
    span.set_attribute("http.request.method", method)
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))


def setup_from_env() -> bool:
    """Configure a tracer provider from ``OTEL_TRACES_EXPORTER`` (console | otlp); True when tracing is on."""
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if kind in ("", "none"):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise InvalidInput("OTEL_TRACES_EXPORTER", "tracing needs the otel extra: pip install 'eidetica[otel]'") from None
    if kind == "console":
        exporter: Any = ConsoleSpanExporter()
    elif kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise InvalidInput("OTEL_TRACES_EXPORTER",
                               "otlp needs pip install opentelemetry-exporter-otlp-proto-http") from None
        exporter = OTLPSpanExporter()
    else:
        raise InvalidInput("OTEL_TRACES_EXPORTER", "must be console, otlp or none", kind)
    service = os.environ.get("OTEL_SERVICE_NAME", "eidetica")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return True
