"""`eidetica serve` and `eidetica mcp`: the memory API over HTTP (FastAPI + uvicorn) and MCP.

Above the facade: imports ``eidetica.memory``, never the reverse.
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any

from .._remote.wire import MAX_BODY_BYTES, MAX_IMPORT_BYTES
from ..errors import InvalidInput
from ..memory import Memory
from ._app import create_app, is_loopback
from ._guard import Guard
from ._keys import KEYS_FILE, KeyStore
from ._metrics import Observed

__all__ = ["build", "bind", "serve", "serve_mcp_stdio", "KeyStore", "KEYS_FILE", "is_loopback", "check_bind"]


def build(memory: Memory, *, keys: KeyStore | None = None, host: str = "127.0.0.1", mcp: bool = True,
          max_body_bytes: int = MAX_BODY_BYTES, max_import_bytes: int = MAX_IMPORT_BYTES) -> Observed:
    """The ASGI application: the HTTP API and /ui, plus MCP (streamable HTTP) at /mcp; counted and timed (/metrics);
    bodies past the limits get 413."""
    app = create_app(memory, keys=keys, host=host)
    limits = {"max_body_bytes": max_body_bytes, "max_import_bytes": max_import_bytes}
    if not mcp:
        return Observed(Guard(app, **limits), memory, keys)
    from mcp.server.transport_security import TransportSecuritySettings

    from .mcp import build_mcp

    def memory_for(scope: dict[str, Any] | None) -> Memory:
        tenant = (scope or {}).get("eidetica_tenant")
        if tenant is None:
            raise InvalidInput("authorization", "no tenant resolved for this request")
        return app.state.tenant_view(tenant)

    server = build_mcp(memory_for)
    # On loopback keep the SDK's DNS-rebinding protection; elsewhere the API key is the gate.
    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                         transport_security=security, host=host)
    return Observed(Guard(app, mcp_app, server, **limits), memory, keys)


def check_bind(host: str, keys: KeyStore) -> None:
    """Refuse a non-loopback address while no API key exists (the store would be open to anyone)."""
    if not is_loopback(host) and not keys.active():
        raise InvalidInput(
            "host", f"refusing to serve {host} without API keys (anyone on the network could read and erase the "
            f"store); create one with `eidetica keys create --path {keys.path.parent} --tenant NAME` (add --init "
            "when the store does not exist yet), or bind loopback with `--host 127.0.0.1`"
        )


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening; ``InvalidInput`` naming --port or --host when it cannot be.

    Bound before the store opens and before anything says "serving": a busy port fails first,
    with nothing created, and connections are refused (not left waiting) until the server runs.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise InvalidInput("port", f"{host}:{port} is already in use (another server?); pick another with --port",
                               port) from None
        raise InvalidInput("host", f"cannot listen on {host}:{port}: {e.strerror or e}; pick another with --host",
                           host) from None
    return sock


def serve(memory: Memory, *, host: str = "127.0.0.1", port: int = 8765, mcp: bool = True, log_level: str = "warning",
          sock: socket.socket | None = None, max_import_bytes: int = MAX_IMPORT_BYTES) -> None:
    """Serve ``memory`` over HTTP until interrupted (the process holds the store's writer lock).

    ``sock``: a socket from ``bind`` (else one is bound here); "serving on" is printed only
    once the address is held.
    """
    import uvicorn

    from ._tracing import setup_from_env

    keys = KeyStore(memory.path)
    check_bind(host, keys)
    setup_from_env()  # OpenTelemetry spans per request when OTEL_TRACES_EXPORTER asks (the otel extra)
    sock = sock or bind(host, port)
    app = build(memory, keys=keys, host=host, mcp=mcp, max_import_bytes=max_import_bytes)
    bound = sock.getsockname()[1]
    print(f"eidetica: serving {memory.path} on http://{host}:{bound} (docs at /docs, MCP at /mcp, inspector at /ui, "
          "metrics at /metrics)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=host, port=bound, log_level=log_level, access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def serve_mcp_stdio(memory: Memory) -> None:
    """Serve ``memory`` as MCP tools over stdin/stdout (for desktop and coding agents)."""
    from .mcp import build_mcp

    build_mcp(lambda scope: memory).run()
