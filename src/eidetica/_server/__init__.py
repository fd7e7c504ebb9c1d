"""`eidetica serve` and `eidetica mcp`: the memory API over HTTP (FastAPI + uvicorn) and MCP.

Above the facade: imports ``eidetica.memory``, never the reverse.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import InvalidInput
from ..memory import Memory
from ._app import Guard, create_app, is_loopback
from ._keys import KEYS_FILE, KeyStore
from ._metrics import Observed

__all__ = ["build", "serve", "serve_mcp_stdio", "KeyStore", "KEYS_FILE", "is_loopback", "check_bind"]


def build(memory: Memory, *, keys: KeyStore | None = None, host: str = "127.0.0.1", mcp: bool = True) -> Observed:
    """The ASGI application: the HTTP API and /ui, plus MCP (streamable HTTP) at /mcp; counted and timed, /metrics."""
    app = create_app(memory, keys=keys, host=host)
    if not mcp:
        return Observed(Guard(app), memory, keys)
    from mcp.server.transport_security import TransportSecuritySettings

    from ._mcp import build_mcp

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
    return Observed(Guard(app, mcp_app, server), memory, keys)


def check_bind(host: str, keys: KeyStore) -> None:
    """Refuse a non-loopback address while no API key exists (the store would be open to anyone)."""
    if not is_loopback(host) and not keys.active():
        raise InvalidInput(
            "host", f"refusing to serve {host} without API keys (anyone on the network could read and erase the "
            f"store); create one with `eidetica keys create --path {keys.path.parent} --tenant NAME` (add --init "
            "when the store does not exist yet), or bind loopback with `--host 127.0.0.1`"
        )


def serve(memory: Memory, *, host: str = "127.0.0.1", port: int = 8765, mcp: bool = True, log_level: str = "warning") -> None:
    """Serve ``memory`` over HTTP until interrupted (the process holds the store's writer lock)."""
    import uvicorn

    keys = KeyStore(memory.path)
    check_bind(host, keys)
    app = build(memory, keys=keys, host=host, mcp=mcp)
    print(f"eidetica: serving {memory.path} on http://{host}:{port} (docs at /docs, MCP at /mcp, inspector at /ui, "
          "metrics at /metrics)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False, lifespan="on")


def serve_mcp_stdio(memory: Memory) -> None:
    """Serve ``memory`` as MCP tools over stdin/stdout (for desktop and coding agents)."""
    from ._mcp import build_mcp

    build_mcp(lambda scope: memory).run()
