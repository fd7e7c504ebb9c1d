"""A real HTTP server on 127.0.0.1 that speaks the OpenAI wire format, for tests.

Usage::

    from tests.support.openai_server import FakeOpenAI   # or the `fake_openai` fixture (tests/conftest.py)

    with FakeOpenAI() as server:
        emb = OpenAIEmbedder("text-embedding-3-small", base_url=server.base_url)
        server.fail_next("429", times=2)          # the next two requests get 429 + Retry-After
        emb.embed(["hello"])                       # retried, then succeeds
        assert len(server.requests) == 3

Endpoints:

- ``POST /v1/embeddings``: deterministic ``HashEmbedder`` vectors (so similar texts share
  features), honouring ``dimensions`` and both ``encoding_format`` values; like OpenAI it
  rejects empty strings and inputs over ``max_input_tokens`` with a 400.
- ``POST /v1/chat/completions``: scripted replies first (``script_chat``), else a default
  answer by task, recognised from the system prompt of ``OpenAILLM``: extraction returns
  the heuristic extractor's facts as JSON (or ``NONE``), summaries come from the extractive
  summariser within the requested token budget, contradiction checks answer YES/NO with the
  offline heuristic. Anything else gets ``"OK"``.
- ``GET /v1/models``: the model list.

Faults (``fail_next(kind, times=1)``), consumed one per request in order:
``"429"`` (rate limit with ``Retry-After``), ``"500"``, ``"503"``, ``"slow"`` (sleeps
``delay`` seconds, then answers normally: beyond a short client timeout it is a timeout), ``"malformed"`` (200 with
a body that is not JSON), ``"wrong_shape"`` (200 with JSON that is not the expected
envelope), ``"bad_output"`` (a valid envelope whose content is garbage:
non-JSON chat content, or embedding vectors of the wrong length), ``"401"``, ``"400"``.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eidetica.providers import HashEmbedder, OfflineLLM, count_tokens
from eidetica.providers._offline import fact_attribute
from eidetica.providers._openai import CONTRADICTION_PROMPT, DECISION_PROMPT, EXTRACTION_PROMPT, SUMMARY_PROMPT

__all__ = ["FakeOpenAI", "RecordedRequest"]

FAULT_KINDS = frozenset({"429", "500", "503", "slow", "malformed", "wrong_shape", "bad_output", "401", "400"})
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}

_EXTRACTION_MARK = EXTRACTION_PROMPT.splitlines()[0]
_SUMMARY_MARK = SUMMARY_PROMPT.splitlines()[0]
_CONTRADICTION_MARK = CONTRADICTION_PROMPT.splitlines()[0]
_DECISION_MARK = DECISION_PROMPT.splitlines()[0]


@dataclass
class RecordedRequest:
    """One request the server received (faulted ones included); header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    fault: str | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Fault:
    kind: str
    retry_after: float
    delay: float


class FakeOpenAI:
    """The fake server: start with ``with FakeOpenAI() as s`` (or ``start()``/``stop()``)."""

    def __init__(self, *, default_dim: int = 256, api_key: str | None = None, max_input_tokens: int = 8191) -> None:
        self.default_dim = default_dim
        self.api_key = api_key
        self.max_input_tokens = max_input_tokens
        self.requests: list[RecordedRequest] = []
        self._faults: deque[_Fault] = deque()
        self._scripted: deque[str] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._embedders: dict[int, HashEmbedder] = {}
        self._llm = OfflineLLM()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # the server's own count of the chat completions it answered and the usage it reported (the ledger's check)
        self.chat_usage: dict[str, int] = {"calls": 0, "input_tokens": 0, "output_tokens": 0}

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        """Bind to a free port on 127.0.0.1 and serve in a daemon thread."""
        self._stop.clear()
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests sleeping in a ``slow`` fault are woken and dropped."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    # --- scripting ------------------------------------------------------------------------------
    def fail_next(self, kind: str | int, times: int = 1, *, retry_after: float = 0.01, delay: float = 3.0) -> None:
        """Make the next ``times`` requests fail with ``kind`` (see the module docstring)."""
        kind = str(kind)
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {sorted(FAULT_KINDS)}")
        with self._lock:
            self._faults.extend(_Fault(kind, retry_after, delay) for _ in range(times))

    def script_chat(self, *contents: str) -> None:
        """Queue literal assistant replies for the next chat completions, in order."""
        with self._lock:
            self._scripted.extend(contents)

    def reset(self) -> None:
        """Forget recorded requests, pending faults and scripted replies."""
        with self._lock:
            self.requests.clear()
            self._faults.clear()
            self._scripted.clear()

    def calls(self, path_suffix: str) -> list[RecordedRequest]:
        """Recorded requests whose path ends with ``path_suffix`` (e.g. ``"/embeddings"``)."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(path_suffix)]

    # --- behaviour ------------------------------------------------------------------------------
    def _next_fault(self) -> _Fault | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _embedder(self, dim: int) -> HashEmbedder:
        with self._lock:
            if dim not in self._embedders:
                self._embedders[dim] = HashEmbedder(dim=dim, cache_size=0)
            return self._embedders[dim]

    def embeddings(self, body: dict[str, Any], bad_output: bool) -> tuple[int, dict[str, Any]]:
        """Answer an embeddings request: (status, JSON body)."""
        model = body.get("model")
        inputs = body.get("input")
        if not isinstance(model, str) or inputs is None:
            return 400, _error("'model' and 'input' are required", "invalid_request_error")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            return 400, _error("'$.input' is invalid: only strings are supported here", "invalid_request_error")
        if any(t == "" for t in inputs):
            return 400, _error("'$.input' is invalid. Please check the API reference.", "invalid_request_error")
        if len(inputs) > 2048:
            return 400, _error("'$.input' must have at most 2048 items", "invalid_request_error")
        for t in inputs:
            n = count_tokens(t)
            if n > self.max_input_tokens:
                return 400, _error(
                    f"This model's maximum context length is {self.max_input_tokens} tokens, however you "
                    f"requested {n} tokens. Please reduce your prompt.",
                    "invalid_request_error",
                )
        dim = body.get("dimensions") or KNOWN_DIMS.get(model, self.default_dim)
        if not isinstance(dim, int) or dim < 2:
            return 400, _error("'dimensions' must be an integer >= 2", "invalid_request_error")
        vecs = self._embedder(dim).embed(inputs)
        if bad_output:
            vecs = vecs[:, : max(1, dim // 2)]
        b64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if b64 else [float(x) for x in v],
            }
            for i, v in enumerate(vecs)
        ]
        tokens = sum(count_tokens(t) for t in inputs)
        return 200, {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def chat(self, body: dict[str, Any], bad_output: bool) -> tuple[int, dict[str, Any]]:
        """Answer a chat completion: scripted reply, else the default behaviour by task."""
        model = body.get("model")
        messages = body.get("messages")
        if not isinstance(model, str) or not isinstance(messages, list) or not messages:
            return 400, _error("'model' and 'messages' are required", "invalid_request_error")
        with self._lock:
            scripted = self._scripted.popleft() if self._scripted else None
        if bad_output:
            content = "Sure! Here are the facts you asked for: {not json"
        elif scripted is not None:
            content = scripted
        else:
            content = self._default_reply(messages)
        prompt_tokens = sum(count_tokens(str(m.get("content", ""))) for m in messages)
        completion_tokens = count_tokens(content)
        with self._lock:
            self.chat_usage["calls"] += 1
            self.chat_usage["input_tokens"] += prompt_tokens
            self.chat_usage["output_tokens"] += completion_tokens
        return 200, {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
        }

    def _default_reply(self, messages: list[dict[str, Any]]) -> str:
        system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
        if _EXTRACTION_MARK in system:
            facts = self._llm.extract_facts(user)
            if not facts:
                return "NONE"
            return json.dumps({"facts": [{"content": f.content, "category": f.category} for f in facts]})
        if _SUMMARY_MARK in system:
            m = re.search(r"at most (\d+) tokens", system)
            target = int(m.group(1)) if m else 100
            previous, transcript = _split_summary_request(user)
            return self._llm.summarize(transcript, target_tokens=target, previous_summary=previous) or "(nothing to summarise)"
        if _DECISION_MARK in system:
            return _default_decision(user, self._llm)
        if _CONTRADICTION_MARK in system:
            old = re.search(r"^OLD:\s*(.*)$", user, re.MULTILINE)
            new = re.search(r"^NEW:\s*(.*)$", user, re.MULTILINE)
            if old and new and self._llm.contradicts(old.group(1), new.group(1)):
                return "YES"
            return "NO"
        return "OK"


def _default_decision(user: str, llm: OfflineLLM) -> str:
    """A plausible model's answer: NONE for a restatement, UPDATE for a new value of one attribute, else ADD."""
    new = re.search(r"^NEW:\s*(.*)$", user, re.MULTILINE)
    fact = new.group(1) if new else ""
    for i, old in re.findall(r"^(\d+): (.*)$", user, re.MULTILINE):
        if " ".join(old.lower().split()).rstrip(".") == " ".join(fact.lower().split()).rstrip("."):
            return json.dumps({"event": "NONE", "id": i})
        same = fact_attribute(old) and fact_attribute(old) == fact_attribute(fact)
        if same or llm.contradicts(old, fact):
            return json.dumps({"event": "UPDATE", "id": i, "text": fact})
    return json.dumps({"event": "ADD"})


def _split_summary_request(user: str) -> tuple[str, list[tuple[str, str]]]:
    previous = ""
    transcript: list[tuple[str, str]] = []
    m = re.search(r"Previous summary:\n(.*?)\n\nNew messages:\n(.*)\Z", user, re.DOTALL)
    if not m:
        return "", [("user", user)]
    previous = "" if m.group(1).strip() == "(none)" else m.group(1).strip()
    for line in m.group(2).splitlines():
        role, sep, content = line.partition(": ")
        if sep:
            transcript.append((role, content))
    return previous, transcript


def _headers(handler: BaseHTTPRequestHandler) -> dict[str, str]:
    # Lower-case names: HTTP headers are case-insensitive and clients differ in how they send them.
    return {k.lower(): v for k, v in handler.headers.items()}


def _error(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    # Buffer the response: unbuffered writes cost ~40 ms per call through Nagle + delayed ACK.
    wbufsize = 1 << 16

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.fake._record(RecordedRequest("GET", self.path, _headers(self), None))
        if self.path.rstrip("/") == "/v1/models":
            models = ["text-embedding-3-small", "fake-chat"]
            self._send_json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in models]})
        else:
            self._send_json(404, _error(f"no route {self.path}", "invalid_request_error"))

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = None
        fault = self.fake._next_fault()
        self.fake._record(RecordedRequest("POST", self.path, _headers(self), body, fault.kind if fault else None))
        if self.fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            self._send_json(401, _error("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
            return
        if fault is not None and fault.kind != "bad_output":
            try:
                if self._apply_fault(fault):
                    return
            except OSError:
                return  # the client hung up (timed out) before the answer
        if body is None or not isinstance(body, dict):
            self._send_json(400, _error("We could not parse the JSON body of your request.", "invalid_request_error"))
            return
        bad = fault is not None and fault.kind == "bad_output"
        path = self.path.rstrip("/")
        if path == "/v1/embeddings":
            status, obj = self.fake.embeddings(body, bad)
        elif path == "/v1/chat/completions":
            status, obj = self.fake.chat(body, bad)
        else:
            status, obj = 404, _error(f"no route {self.path}", "invalid_request_error")
        try:
            self._send_json(status, obj)
        except OSError:
            self.close_connection = True  # the client gave up waiting (a "slow" fault)

    def _apply_fault(self, fault: _Fault) -> bool:
        """Act out a fault; True when the response has been sent (or dropped)."""
        kind = fault.kind
        if kind == "429":
            self._send_json(
                429,
                _error("Rate limit reached. Please try again later.", "requests", "rate_limit_exceeded"),
                {"Retry-After": f"{fault.retry_after:g}", "retry-after-ms": str(int(fault.retry_after * 1000))},
            )
        elif kind in {"500", "503"}:
            self._send_json(int(kind), _error("The server had an error while processing your request.", "server_error"))
        elif kind == "401":
            self._send_json(401, _error("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
        elif kind == "400":
            self._send_json(400, _error("Invalid request (scripted).", "invalid_request_error"))
        elif kind == "wrong_shape":
            self._send_json(200, {"object": "list", "unexpected": True})
        elif kind == "malformed":
            self._send(200, b'{"object": "list", "data": [{"embedding": [0.1, 0.2', ctype="application/json")
        elif kind == "slow":
            # Then answer normally: a client whose timeout is longer than the delay succeeds.
            # stop() cuts the wait short so shutting down never waits for a sleeping handler.
            if self.fake._stop.wait(fault.delay):
                self.close_connection = True
                return True
            return False
        return True
