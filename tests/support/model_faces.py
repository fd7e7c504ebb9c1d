"""Three faces of one store for the stateful test, each a process the test can SIGKILL.

* ``ChildFace("sync")``: ``eidetica.open`` in a child process (``model_child.py``);
* ``ChildFace("async")``: ``AsyncMemory`` over it, in the same kind of child;
* ``ServerFace``: a real ``eidetica serve`` process, reached by ``eidetica.connect`` clients
  (one API key per tenant: over HTTP the tenant comes from the key).

Each answers ``call(op, args)`` with ``("ok", value)`` or ``("err", {"error", "field", ...})``,
``many([...])`` (several clients at once), ``crash_during(op, args, delay)`` (SIGKILL while a
write may be in flight: returns the answer if it came first, else None) and ``restart()``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

import eidetica

from .model_ops import error_of, run

__all__ = ["ChildFace", "ServerFace", "TENANTS", "make_face"]

CHILD = Path(__file__).with_name("model_child.py")
ROOT = Path(__file__).resolve().parents[2]
TENANTS = ("ta", "tb", "imp0", "imp1", "imp2")
BIN = Path(sys.executable).with_name("eidetica")
START_TIMEOUT = 180.0


def _env() -> dict[str, str]:
    env = dict(os.environ, EIDETICA_MODEL="hash-64", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    return env


class ChildFace:
    """The embedded store (sync or async face) held by a child process."""

    def __init__(self, store: Path, face: str) -> None:
        self.store, self.face, self.name = Path(store), face, f"embedded-{face}"
        self.proc: subprocess.Popen | None = None
        self.log = self.store.with_name(self.store.name + f".{face}.log")

    def start(self) -> None:
        """Start the child and wait for READY."""
        self._err = self.log.open("ab")
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(self.store), self.face], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err, env=_env(), text=True, bufsize=1,
                                     start_new_session=True)
        line = self._readline(START_TIMEOUT)
        if line.strip() != "READY":
            raise RuntimeError(f"store child did not start: {line!r} {self.log.read_text()[-3000:]}")

    def _readline(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        timer = threading.Timer(timeout, self.kill)  # a hung store is a failure, not a hung test
        timer.start()
        try:
            return self.proc.stdout.readline()
        finally:
            timer.cancel()

    def _send(self, req: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def call(self, op: str, args: dict[str, Any], timeout: float = 300.0) -> tuple[str, Any]:
        """One operation; its answer."""
        self._send({"op": op, "args": args})
        line = self._readline(timeout)
        if not line:
            raise RuntimeError(f"store child died during {op}: {self.log.read_text()[-3000:]}")
        out = json.loads(line)
        return ("ok", out["ok"]) if "ok" in out else ("err", out["err"])

    def many(self, reqs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
        """Several operations at once, on threads of the child (clients sharing one store)."""
        self._send({"many": [list(r) for r in reqs]})
        line = self._readline(300.0)
        if not line:
            raise RuntimeError(f"store child died: {self.log.read_text()[-3000:]}")
        return [("ok", o["ok"]) if "ok" in o else ("err", o["err"]) for o in json.loads(line)["ok"]]

    def crash_during(self, op: str, args: dict[str, Any], delay: float) -> tuple[str, Any] | None:
        """Send ``op``, SIGKILL the child after ``delay`` seconds; the answer if it came before the kill."""
        self._send({"op": op, "args": args})
        time.sleep(delay)
        self.kill()
        line = self.proc.stdout.readline() if self.proc and self.proc.stdout else ""
        if not line:
            return None
        out = json.loads(line)
        return ("ok", out["ok"]) if "ok" in out else ("err", out["err"])

    def kill(self) -> None:
        """SIGKILL: nothing flushed, nothing closed."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)

    def restart(self) -> None:
        """Kill (if alive) and start again on the same store."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Close stdin (the child closes the store) and wait; kill if it hangs."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(60)
            except (subprocess.TimeoutExpired, OSError):
                self.kill()
        if getattr(self, "_err", None):
            self._err.close()


_KEYS: dict[str, Any] = {}


def _keys() -> tuple[bytes, dict[str, str]]:
    """keys.json and one key per tenant, made once per process with ``eidetica keys create`` (hashes only: copyable)."""
    if not _KEYS:
        d = Path(tempfile.mkdtemp(prefix="eidetica-model-keys-")) / "store"
        keys = {}
        for t in TENANTS:
            out = subprocess.run([str(BIN), "keys", "create", "--tenant", t, "--path", str(d), "--init"],
                                 capture_output=True, text=True, env=_env(), check=True)
            keys[t] = re.findall(r"ek_\S+", out.stdout)[-1]
        _KEYS["file"], _KEYS["keys"] = (d / "keys.json").read_bytes(), keys
        shutil.rmtree(d.parent, ignore_errors=True)
    return _KEYS["file"], _KEYS["keys"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerFace:
    """A real ``eidetica serve`` process over the store, reached through ``eidetica.connect``."""

    name = "server"

    def __init__(self, store: Path) -> None:
        self.store = Path(store)
        self.store.mkdir(parents=True, exist_ok=True)
        raw, self.keys = _keys()
        (self.store / "keys.json").write_bytes(raw)
        os.chmod(self.store / "keys.json", 0o600)
        self.proc: subprocess.Popen | None = None
        self.clients: dict[str, Any] = {}
        self.pool = ThreadPoolExecutor(8)
        self.log = self.store.with_name(self.store.name + ".server.log")

    def start(self) -> None:
        """Start ``eidetica serve`` on a free port; wait for /healthz."""
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._out = self.log.open("ab")
        self.proc = subprocess.Popen([str(BIN), "serve", "--path", str(self.store), "--host", "127.0.0.1",
                                      "--port", str(self.port)], stdout=self._out, stderr=subprocess.STDOUT,
                                     env=_env(), start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling a process start
        else:
            raise RuntimeError(f"server did not start: {self.log.read_text()[-3000:]}")
        self.clients = {}

    def _client(self, tenant: str) -> Any:
        # one client per tenant and thread: several clients at once are several connections
        k = (tenant, threading.get_ident())
        if k not in self.clients:
            self.clients[k] = eidetica.connect(self.url, api_key=self.keys[tenant], retries=1)
        return self.clients[k]

    def call(self, op: str, args: dict[str, Any]) -> tuple[str, Any]:
        """One operation through a client of the op's tenant."""
        try:
            return "ok", json.loads(json.dumps(run(self._client, op, args), default=str))
        except Exception as e:  # noqa: BLE001 - every error is an answer the test compares
            return "err", error_of(e)

    def many(self, reqs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
        """Several clients at once (threads, each its own connection)."""
        return list(self.pool.map(lambda r: self.call(r[0], r[1]), reqs))

    def crash_during(self, op: str, args: dict[str, Any], delay: float) -> tuple[str, Any] | None:
        """Start ``op``, SIGKILL the server after ``delay``; its answer if it came before the kill."""
        fut = self.pool.submit(self.call, op, args)
        time.sleep(delay)
        self.kill()
        status, value = fut.result(120)
        if status == "err" and value["error"] in ("Unavailable", "StorageError", "ConnectError", "RemoteProtocolError"):
            return None
        return status, value

    def kill(self) -> None:
        """SIGKILL the server."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)
        for c in self.clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a client of a dead server
                pass
        self.clients = {}

    def restart(self) -> None:
        """Kill (if alive) and serve the same store again."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()
        if getattr(self, "_out", None):
            self._out.close()


def make_face(kind: str, store: Path) -> Any:
    """``sync`` | ``async`` | ``server``."""
    return ServerFace(store) if kind == "server" else ChildFace(store, kind)
