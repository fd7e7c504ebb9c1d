"""#43 the LLM ledger: every model call the store used is an ``LlmCalled`` event; ``usage()`` sums them.

Against the scripted OpenAI-compatible server (tests/support/openai_server.py), whose own count of calls
and tokens is the truth ``usage()`` must equal, embedded and over ``connect()``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import eidetica
from eidetica.errors import InvalidInput
from eidetica.providers import HashEmbedder, OpenAILLM
from tests.support.openai_server import FakeOpenAI
from tests.support.served import Served

SAID = ["I moved to Lisbon last spring.", "I'm allergic to shellfish.", "I work as a nurse at the city hospital.",
        "I've been vegan since college.", "My sister Anna lives in Porto."]


def _wait(pred, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)  # polling another process's progress, not ordering threads


def _ledger_rows(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "LlmCalled"]


def test_usage_equals_the_servers_own_count_and_the_ledger_is_events(tmp_path) -> None:
    with FakeOpenAI() as server:
        llm = OpenAILLM("gpt-test", base_url=server.base_url, max_retries=0)
        with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=llm) as m:
            s = m.session("chat", user="ada")
            for text in SAID:
                s.append("user", text)
                s.append("assistant", f"Noted: {text}")  # not extracted; the summary has turns to roll up
            m.remember("Ada lives in Lisbon now", user="ada")  # a related fact: a decision is asked
            m.session("other", user="bob").append("user", "I'm a teacher in Leeds.")
            assert s.summarize(force=True)
            u = m.usage()
            truth = server.chat_usage
            assert truth["calls"] >= len(SAID) + 2
            assert (u["calls"], u["input_tokens"], u["output_tokens"]) == (
                truth["calls"], truth["input_tokens"], truth["output_tokens"])
            purposes = {r["purpose"] for r in u["by"]}
            assert {"extract", "summarise"} <= purposes and {r["model"] for r in u["by"]} == {"gpt-test"}
            assert {r["user"] for r in u["by"]} == {"ada", "bob"}
            bob = m.usage(user="bob")
            assert bob["calls"] == 1 and all(r["user"] == "bob" for r in bob["by"])
            later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
            assert m.usage(since=later)["calls"] == 0 and m.usage(until=later)["calls"] == u["calls"]
            assert u["by"][0]["day"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
            with pytest.raises(InvalidInput) as e:
                m.usage(since=dt.datetime(2026, 1, 1))  # naive: refused, naming it
            assert e.value.field == "since"
            # the ledger is events of the store: exported, without the prompt's text
            m.export(tmp_path / "dump.jsonl")
            rows = _ledger_rows(tmp_path / "dump.jsonl")
            assert len(rows) == u["calls"]
            assert all(r["event"]["prompt_version"].startswith("prompt-") for r in rows)
            text = json.dumps(rows)
            assert "shellfish" not in text and "Extract" not in text
            # and a past view sees the calls made by then
            assert m.as_of(dt.datetime.now(dt.timezone.utc)).usage()["calls"] == u["calls"]


def test_past_the_daily_budget_extraction_falls_back_offline_and_says_so(tmp_path) -> None:
    with FakeOpenAI() as server:
        llm = OpenAILLM("gpt-test", base_url=server.base_url, max_retries=0)
        cfg = eidetica.MemoryConfig(llm_tokens_per_day=1)
        with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=llm, config=cfg) as m:
            s = m.session("chat", user="ada")
            s.append("user", SAID[0])  # under budget (nothing spent yet): the model extracts
            assert server.chat_usage["calls"] == 1, [r.body["messages"][0]["content"][:40] for r in server.requests]
            s.append("user", SAID[1])  # past it: the offline rules, no call
            s.append("user", SAID[3])
            assert server.chat_usage["calls"] == 1
            u = m.usage()
            assert u["calls"] == 1 and u["fallbacks"] == 2
            assert "I'm allergic to shellfish." in [f.text for f in m.list_memories(user="ada")]
    with pytest.raises(InvalidInput) as e:
        eidetica.MemoryConfig(llm_tokens_per_day=0)
    assert e.value.field == "llm_tokens_per_day"


@pytest.mark.slow
def test_usage_over_connect_http_cli_and_metrics_and_exactly_once_across_a_sigkill(tmp_path) -> None:
    with FakeOpenAI() as server:
        served = Served(tmp_path / "store", options={"openai_base_url": server.base_url}).start()
        try:
            c = eidetica.connect(served.url)
            s = c.session("chat", user="ada")
            for text in SAID[:3]:
                s.append("user", text)
            _wait(lambda: c.usage()["calls"] == server.chat_usage["calls"] and server.chat_usage["calls"] >= 3)
            u = c.usage()
            assert (u["input_tokens"], u["output_tokens"]) == (server.chat_usage["input_tokens"],
                                                               server.chat_usage["output_tokens"])
            assert httpx.get(f"{served.url}/v1/usage", params={"user": "ada"}).json() == c.usage(user="ada")
            metrics = httpx.get(f"{served.url}/metrics").text
            assert 'eidetica_llm_tokens_total{direction="input",model="gpt-test",purpose="extract"}' in metrics
            assert 'eidetica_llm_calls_total{model="gpt-test",outcome="ok",purpose="extract"}' in metrics
            # a SIGKILL while extractions may be in flight, then a restart: each message's extraction is in
            # the ledger exactly once (a call whose result was lost is not; a resumed one is, once)
            for text in SAID[3:]:
                s.append("user", text)
            served.kill()
            served = Served(tmp_path / "store", port=served.port,
                            options={"openai_base_url": server.base_url}).start()
            c = eidetica.connect(served.url)
            _wait(lambda: len([f for f in c.list_memories(user="ada", limit=100)]) >= len(SAID))
            c.close()
        finally:
            served.stop()
    cli = subprocess.run([str(Path(sys.executable).with_name("eidetica")), "usage", "--json", "--path",
                          str(tmp_path / "store"), "--model", "hash-64"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)
    extracts = sum(r["calls"] for r in out["by"] if r["purpose"] == "extract")
    assert extracts == len(SAID)  # one per message, whatever the kill cut short
    assert out["calls"] <= server.chat_usage["calls"]
