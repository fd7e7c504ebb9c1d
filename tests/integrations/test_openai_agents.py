"""EideticaSession under the Agents SDK's real Runner (a scripted Model), side by side with SQLiteSession."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

import eidetica  # noqa: E402
from eidetica.integrations.openai_agents import EideticaSession  # noqa: E402
from eidetica.providers import HashEmbedder  # noqa: E402


def _say(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


class ScriptedModel(Model):
    """A Model that answers from a script and records the input of every call."""

    def __init__(self, script: list[list[Any]]) -> None:
        self.script = list(script)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> ModelResponse:
        self.inputs.append(input)
        return ModelResponse(output=self.script.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 24C in {city}"


def script() -> list[list[Any]]:
    return [
        [ResponseFunctionToolCall(type="function_call", call_id="call_1", name="get_weather", arguments='{"city": "Lisbon"}', id="fc_1")],
        [_say("It is sunny in Lisbon.", 1)],
        [_say("You asked about Lisbon's weather.", 2)],
    ]


async def two_turns(session: Any) -> ScriptedModel:
    model = ScriptedModel(script())
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])
    cfg = RunConfig(tracing_disabled=True)
    r1 = await Runner.run(agent, "What's the weather in Lisbon?", session=session, run_config=cfg)
    assert r1.final_output == "It is sunny in Lisbon."
    r2 = await Runner.run(agent, "What did I ask you before?", session=session, run_config=cfg)
    assert r2.final_output == "You asked about Lisbon's weather."
    return model


def open_memory(tmp_path: Path, mode: str, request: pytest.FixtureRequest) -> Any:
    """``eidetica.open`` on tmp_path, or ``eidetica.connect()`` to the session's server in a fresh tenant."""
    if mode == "served":
        server = request.getfixturevalue("served")
        return eidetica.connect(server.url, api_key=server.tenant())
    return eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64))


MODES = ["local", pytest.param("served", marks=pytest.mark.slow)]


@pytest.mark.parametrize("mode", MODES)
def test_runner_two_turns_and_the_same_answers_as_sqlite_session(tmp_path: Path, mode: str,
                                                                 request: pytest.FixtureRequest) -> None:
    asyncio.run(_compare(tmp_path, open_memory(tmp_path, mode, request), mode))


async def _compare(tmp_path: Path, memory: Any, mode: str) -> None:
    sqlite = SQLiteSession("conv-1", str(tmp_path / "agents.db"))
    with memory as m:
        ours = EideticaSession("conv-1", m, user="alice")
        model = await two_turns(ours)
        await two_turns(sqlite)
        # the second turn saw the first: the question, the tool call and its output
        seen = str(model.inputs[2])
        assert "What's the weather in Lisbon?" in seen and "call_1" in seen and "sunny and 24C" in seen
        items = await ours.get_items()
        assert items == await sqlite.get_items()  # verbatim, function calls and outputs included
        assert {i.get("type") for i in items} >= {"function_call", "function_call_output"}
        assert await ours.get_items(limit=2) == await sqlite.get_items(limit=2)
        # the items are messages of an eidetica session: searchable across sessions
        hits = m.search("sunny 24C Lisbon weather", user="alice", min_score=0.0)
        assert any("24C" in h.text for h in hits)
        # pop_item / clear_session behave as SQLiteSession's
        assert await ours.pop_item() == await sqlite.pop_item()
        assert await ours.get_items() == await sqlite.get_items()
        if mode == "local":
            events = [e.type for e in m.log.read_stream(m.runtime.session(m.tenant, "conv-1", "alice").stream)]
            assert events[-1] == "MessageRetracted" and events.count("MessageAppended") == len(items)  # an event, not a rewrite
        await ours.add_items([{"role": "user", "content": "one more"}])
        await sqlite.add_items([{"role": "user", "content": "one more"}])
        assert await ours.get_items() == await sqlite.get_items()
        await ours.clear_session()
        await sqlite.clear_session()
        assert await ours.get_items() == await sqlite.get_items() == []
        assert await ours.pop_item() is None and await sqlite.pop_item() is None
        await ours.add_items([{"role": "user", "content": "after the clear"}])
        assert await ours.get_items() == [{"role": "user", "content": "after the clear"}]
    if mode == "local":  # reopened: the session is a fold of the log
        with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64)) as m:
            assert await EideticaSession("conv-1", m, user="alice").get_items() == [{"role": "user", "content": "after the clear"}]
    sqlite.close()


def test_popped_item_is_gone_from_search_and_from_disk_after_compact(tmp_path: Path) -> None:
    async def run() -> None:
        with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
            s = EideticaSession("c", m, user="u")
            await s.add_items([{"role": "user", "content": "keep the walrus"}, {"role": "user", "content": "oops my pin is 99417"}])
            assert (await s.pop_item()) == {"role": "user", "content": "oops my pin is 99417"}
            assert not [h for h in m.search("pin 99417", user="u", min_score=0.0) if "99417" in h.text]
            m.rebuild()
            assert not [h for h in m.search("pin 99417", user="u", min_score=0.0) if "99417" in h.text]
            m.compact()
            raw = b"".join(p.read_bytes() for p in (tmp_path / "s" / "log").rglob("*") if p.is_file())
            assert b"99417" not in raw and b"walrus" in raw
            assert await s.get_items() == [{"role": "user", "content": "keep the walrus"}]

    asyncio.run(run())
