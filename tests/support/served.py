"""A real `eidetica serve` process on 127.0.0.1 (free port) for tests; killed when stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

CHILD = Path(__file__).with_name("_serve_child.py")


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """One server process over a store directory."""

    def __init__(self, store: Path, *, clock_file: Path | None = None, port: int | None = None,
                 cli: bool = False, host: str = "127.0.0.1", options: dict | None = None,
                 args: tuple[str, ...] = (), model: str | None = "hash-64") -> None:
        self.store = Path(store)
        self.model = model  # `eidetica serve --model` (with cli=True); None: the default offline model
        self.args = args  # more `eidetica serve` options (with cli=True)
        self.options = options  # eidetica.open()'s options in the server (e.g. runtime="ray", address=...)
        self.clock_file = clock_file
        self.port = port or free_port()
        self.host = host
        self.url = f"http://127.0.0.1:{self.port}"
        self.cli = cli
        self.proc: subprocess.Popen | None = None
        self.log = self.store.with_name(self.store.name + f".server-{self.port}.log")

    def start(self, timeout: float = 120.0) -> Served:
        """Start the process and wait until /healthz answers."""
        env = {k: v for k, v in os.environ.items() if k != "EIDETICA_MODEL"}
        if self.model is not None:
            env["EIDETICA_MODEL"] = self.model
        if self.cli:
            cmd = [str(Path(sys.executable).with_name("eidetica")), "serve", "--path", str(self.store),
                   "--host", self.host, "--port", str(self.port), *self.args]
        else:
            cmd = [sys.executable, str(CHILD), str(self.store), str(self.port), str(self.clock_file or "")]
            if self.options:
                cmd.append(json.dumps(self.options))
        self._out = self.log.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # polling a process start, not ordering threads
        self.stop()
        raise RuntimeError(f"server did not start: {self.log.read_text()[-3000:]}")

    def tenant(self, clock: Any = None, **key_options: Any) -> str:
        """A key of a fresh tenant of this server (so a fresh store); with ``clock`` (a ``Clock``), the server reads it."""
        import uuid

        from eidetica._server import KeyStore

        _, key = KeyStore(self.store).create(f"t-{uuid.uuid4().hex[:12]}", **key_options)
        if clock is not None:
            clock.follow(self.clock_file)
        return key

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed or closed)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "_out", None):
            self._out.close()
