"""A server process for tests: `eidetica serve`'s code path with a small embedder and a clock a test sets.

argv: store, port, clock file ('' for the wall clock)[, open() options as JSON, e.g. a Ray runtime].
The clock file holds an ISO time the test writes (tests move time forward to test decay,
schedules and recency).
"""

import datetime as dt
import json
import sys
from pathlib import Path

import eidetica
from eidetica._server import serve
from eidetica.providers import HashEmbedder

store, port, clock_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
if "openai_base_url" in options:  # an LLM at a scripted OpenAI-compatible server (tests/support/openai_server.py)
    from eidetica.providers import OpenAILLM

    options["llm"] = OpenAILLM("gpt-test", base_url=options.pop("openai_base_url"), max_retries=0)
if "config" in options:
    options["config"] = eidetica.MemoryConfig(**options["config"])


def clock() -> dt.datetime:
    if clock_file:
        try:
            return dt.datetime.fromisoformat(Path(clock_file).read_text())
        except (OSError, ValueError):
            pass
    return dt.datetime.now(dt.timezone.utc)


with eidetica.open(store, embedder=HashEmbedder(dim=64), clock=clock if clock_file else None, **options) as m:
    serve(m, host="127.0.0.1", port=port)
