"""The documentation's examples return what it shows: every ```python block of README.md and of
docs/ is taken from its page at test time (a changed page changes the test) and run, and what its
comments say it prints or returns is checked. A block that no test here claims (by a marker
passed to ``_block``) fails ``test_every_python_block_is_run``.

A block is run statement by statement as written; each expression statement's value is kept by
its line (``_run`` returns them), as a reader would see them in a REPL. The only edits are
named substitutions (a path, a URL, a model's endpoint) that ``_run`` checks are still there.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import datetime as dt
import inspect
import io
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import eidetica
from eidetica.providers import OpenAILLM

# the repository: the nearest directory above holding pyproject.toml (the test may move down the tree)
REPO = next(d for d in Path(__file__).resolve().parents if (d / "pyproject.toml").exists())
README = REPO / "README.md"


def _pages() -> list[Path]:
    """The README and every page of docs/."""
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def _fenced(lang: str) -> list[str]:
    """Every ```<lang> block of the pages, dedented (a block inside a list item is indented)."""
    return [textwrap.dedent(b) for page in _pages()
            for b in re.findall(rf"^[ ]*```{lang}\n(.*?)^[ ]*```", page.read_text(encoding="utf-8"), re.S | re.M)]


def _blocks() -> list[str]:
    return _fenced("python")


def _block(marker: str) -> str:
    """The one block of the README or docs/ holding ``marker``."""
    found = [b for b in _blocks() if marker in b]
    assert len(found) == 1, f"{len(found)} blocks of README.md and docs/ hold {marker!r}"
    return found[0]


def _claimed() -> set[str]:
    """The markers this file's tests pass to ``_block``: the blocks they run."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_block"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


def test_every_python_block_is_run() -> None:
    """Each python block of the README and docs/ is run by a test here (a new block needs its test)."""
    blocks, markers = _blocks(), _claimed()
    assert len(blocks) >= 10 and len(markers) >= 10
    unclaimed = [b.splitlines()[0] for b in blocks if not any(k in b for k in markers)]
    assert unclaimed == [], "python blocks no test runs (first lines shown)"
    for k in markers:  # and each marker names exactly one block, so a claim cannot go stale
        _block(k)


class _Keep(ast.NodeTransformer):
    """Every expression statement ``e`` becomes ``__shown__(line, e)``: its value is kept, as a REPL shows it."""

    def visit_Expr(self, node: ast.Expr) -> ast.Expr:
        call = ast.Call(ast.Name("__shown__", ast.Load()), [ast.Constant(node.lineno), node.value], [])
        return ast.copy_location(ast.Expr(call), node)


def _run(block: str, ns: dict[str, Any], *subs: tuple[str, str]) -> dict[str, Any]:
    """Run a README block in ``ns`` (top-level ``await`` allowed); returns {line without comment: value}."""
    for old, new in subs:
        assert old in block, f"the README block no longer says {old!r}"
        block = block.replace(old, new)
    lines = block.splitlines()
    shown: dict[str, Any] = {}
    ns["__shown__"] = lambda n, v: shown.__setitem__(lines[n - 1].split("  #")[0].strip(), v)
    tree = ast.fix_missing_locations(_Keep().visit(ast.parse(block)))
    code = compile(tree, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, ns)  # noqa: S307 - the README's own code
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(result)
    return shown


def _at(shown: dict[str, Any], fragment: str) -> Any:
    """The value of the one shown line holding ``fragment``."""
    keys = [k for k in shown if fragment in k]
    assert len(keys) == 1, f"{keys} for {fragment!r}"
    return shown[keys[0]]


def test_use_it_block_runs_and_answers(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block opens "memory-store" relative to here
    block = _block('with eidetica.open("memory-store")')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shown = _run(block, ns := {"__name__": "readme"})
    # "what can Ada eat?": the README shows her message, then the health fact distilled from it
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[Message | ") and lines[0].endswith("I moved to Berlin and I'm allergic to shellfish.")
    assert lines[1].startswith("[Health | ") and lines[1].endswith("I'm allergic to shellfish.")
    # '"## Relevant Memory": her profile first'
    assert ns["system_prompt"].startswith("## Relevant Memory\n\n### Profile\n")
    # "her facts + her other sessions": chat-42 is her only session, so her fact and no message
    assert [h.kind for h in _at(shown, 'm.search("Berlin"')] == ["fact"]
    with eidetica.open(tmp_path / "memory-store") as m:
        m.remember("Ada is vegetarian", user="ada")
        block = m.context("plan Ada's dinner", user="ada")
        # the system-prompt block carries her diet and her allergy, as the README says
        assert block.startswith("## Relevant Memory") and "vegetarian" in block and "shellfish" in block
        # search covers facts: what she asked to be remembered is found by a paraphrase
        assert any(h.text == "Ada is vegetarian" for h in m.search("what does Ada eat", user="ada"))
        # something never discussed: nothing from search, the profile alone in the block
        assert m.search("What did Caroline research?", user="ada") == []
        assert "past conversations" not in m.context("What did Caroline research?", user="ada")
        assert m.search("Berlin", user="ada")  # her own words: "I moved to Berlin"


@pytest.mark.slow
def test_connect_block_runs_against_a_served_store(tmp_path) -> None:
    from eidetica._server import KeyStore
    from tests.support.served import Served

    # `eidetica serve` as the README runs it: the default offline model (a paraphrase needs it)
    server = Served(tmp_path / "store", cli=True, model=None).start()
    try:
        _, key = KeyStore(server.store).create("readme")
        ns: dict[str, Any] = {"eidetica": eidetica, "KEY": key}
        shown = _run(_block("eidetica.connect("), ns, ('"http://127.0.0.1:8765"', repr(server.url)))
        # "where does Ada live?" answered from her words
        assert any("Berlin" in h.text for h in _at(shown, "m.recall("))
        ns["m"].close()
        # the curl block: remember a fact, then a paraphrase finds it ("what does Ada eat")
        curl = next(b for b in _fenced("bash") if "/v1/search" in b).replace("\\\n", " ")
        answers = []
        for route, body in re.findall(r"curl -s http://127\.0\.0\.1:8765(/v1/\S+) .*?-d '(.*?)'", curl):
            r = httpx.post(server.url + route, content=body, headers={"Authorization": f"Bearer {key}",
                                                                      "Content-Type": "application/json"})
            assert r.status_code < 300, r.text
            answers.append(r.json())
        assert len(answers) == 2 and any(h["text"] == "Ada is vegetarian" for h in answers[1])
        # the async block over connect_async, in a tenant of its own (its chat-42 starts empty)
        _, key = KeyStore(server.store).create("readme-async")
        first = ('eidetica.AsyncMemory(eidetica.open("memory-store"))',
                 f"await eidetica.connect_async({server.url!r}, api_key={key!r})")
        _check_async_block(_run(_block("eidetica.AsyncMemory("), {"eidetica": eidetica}, first))
    finally:
        server.stop()


def _ada(path: Path) -> tuple[Any, Any, dt.datetime]:
    """A store where session s-42 (summarised) states four facts of Ada, one of them said again in s-7;
    returns the store, s-42's handle and a time between the two sessions."""
    m = eidetica.open(path, config=eidetica.MemoryConfig(window=6, token_budget=160, retain_recent=4))
    s = m.session("s-42", user="ada")
    for role, text in [("user", "Hi there."), ("assistant", "Hello!"), ("user", "I moved to Berlin last year."),
                       ("user", "I'm allergic to shellfish."), ("assistant", "Noted."),
                       ("user", "I work at Siemens as an engineer."), ("assistant", "Great."),
                       ("user", "I'm vegetarian."), ("assistant", "OK."), ("user", "Thanks.")]:
        s.append(role, text)
    assert s.summarize() and "shellfish" in s.summary()
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.01)
    m.session("s-7", user="ada").append("user", "I'm vegetarian.")
    return m, s, between


def test_audit_and_rewind_blocks(tmp_path) -> None:
    m, s, between = _ada(tmp_path / "store")
    facts = {f.text: f.id for f in m.list_memories(user="ada")}
    ns: dict[str, Any] = {"m": m, "s": s, "fid": facts["I'm vegetarian."],
                          "datetime": dt.datetime, "timezone": dt.timezone}

    shown = _run(_block("m.explain(fid"), ns)
    # "asserted, reinforced, ...": said in s-42, said again in s-7
    assert [e for e, _ in _at(shown, 'for h in life["history"]')] == ["asserted", "reinforced"]
    assert _at(shown, '["sources"][0]["text"]') == "I'm vegetarian."  # "the message the fact came from"

    shown = _run(_block("s.forget_message(3)"), ns)
    # message 3 ("I'm allergic to shellfish.") took its fact and its part of s-42's summary with it
    gone = _at(shown, "s.forget_message(3)")
    assert gone["facts"] == [facts["I'm allergic to shellfish."]] and gone["summaries"] == ["s-42"]
    assert ns["receipt"]["verified"]
    assert "shellfish" not in (s.summary() or "")

    shown = _run(_block("m.revert("), ns)
    # s-42's facts go; "I'm vegetarian." stays, s-7 said it too; the messages stay
    out = _at(shown, "m.revert(")
    comment = _block("m.revert(").split("#", 1)[1]
    assert set(out) == set(re.findall(r'"(\w+)":', comment))  # the keys the README shows, no more
    assert out["session_id"] == "s-42" and out["messages_removed"] == 0 and out["restored"] == []
    assert sorted(out["facts"]) == sorted([facts["I moved to Berlin last year."], facts["I work at Siemens as an engineer."]])
    assert [f.text for f in m.list_memories(user="ada")] == ["I'm vegetarian."]
    assert _run(_block("m.revert("), ns)["m.revert(user=\"ada\", session_id=\"s-42\")"]["facts"] == []  # twice: nothing

    # "what memory held on July 1st": this store did not exist yet
    assert _at(_run(_block("m.as_of("), ns), "then.list_memories") == []
    # and between the two sessions: s-42's facts as they were (reverted later), but not the erased one:
    # compact took it out of the log itself
    then = _at(_run(_block("m.as_of("), ns, ("datetime(2026, 7, 1, tzinfo=timezone.utc)", f"datetime.fromisoformat({between.isoformat()!r})")),
               "then.list_memories")
    assert sorted(f.text for f in then) == sorted(set(facts) - {"I'm allergic to shellfish."})
    m.close()


def test_reextract_block_with_an_openai_compatible_model(tmp_path, fake_openai, monkeypatch) -> None:  # noqa: F811
    # the block names only the model: the OpenAI client takes the endpoint from the environment
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    m, _, _ = _ada(tmp_path / "store")
    ns = {"m": m, "OpenAILLM": OpenAILLM}
    first = _at(_run(_block("m.reextract("), ns), "m.reextract(")
    assert set(first) == {"asserted", "kept", "retracted"} and first["asserted"] + first["kept"] == 4
    assert fake_openai.calls("/chat/completions")  # the model was asked
    again = _at(_run(_block("m.reextract("), ns), "m.reextract(")
    assert again == {"asserted": 0, "kept": 4, "retracted": 0}  # a second run changes nothing
    m.close()


def test_agent_frameworks_block_langgraph_store_and_agents_session(tmp_path, fake_openai) -> None:  # noqa: F811
    pytest.importorskip("langgraph")
    agents = pytest.importorskip("agents")
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph
    from openai import AsyncOpenAI

    from eidetica.integrations.langgraph import EideticaStore

    class Said(TypedDict):
        user: str
        text: str
        kind: str

    def keep(state: Said) -> dict[str, Any]:
        """The graph's node writes what the user said to the store the graph was compiled with."""
        get_store().put(("memories", state["user"]), "said-1", {"text": state["text"], "kind": state["kind"]})
        return {}

    builder = StateGraph(Said)
    builder.add_node("keep", keep)
    builder.add_edge(START, "keep")
    builder.add_edge("keep", END)
    # the Runner's model is a chat model served by the scripted OpenAI-compatible server (it answers "OK")
    agent = agents.Agent(name="helper", instructions="Be brief.", model=agents.OpenAIChatCompletionsModel(
        model="gpt-4o-mini", openai_client=AsyncOpenAI(base_url=fake_openai.base_url, api_key="sk-test")))
    with eidetica.open(tmp_path / "store") as m:
        before = EideticaStore(m, user=lambda ns: ns[1])  # what Ada's namespace held before the block runs
        before.put(("memories", "ada"), "diet", {"text": "Ada is vegetarian", "kind": "food"})
        before.put(("memories", "ada"), "hobby", {"text": "Ada eats up every crime novel she finds", "kind": "hobby"})
        ns: dict[str, Any] = {"m": m, "builder": builder, "agent": agent, "Runner": agents.Runner}
        agents.set_tracing_disabled(True)  # the block passes no RunConfig; nothing may leave for OpenAI's tracing
        try:
            shown = _run(_block("EideticaStore(m"), ns)
        finally:
            agents.set_tracing_disabled(False)
        # the search keeps the "food" items only, her diet first
        assert [i.value["text"] for i in _at(shown, "store.search(")] == ["Ada is vegetarian"]
        # a compiled graph writes through the store: ("memories", "<user>"), owned by that user
        ns["graph"].invoke({"user": "ada", "text": "Ada eats no meat, only vegetables", "kind": "food"})
        hits = ns["store"].search(("memories", "ada"), query="what does Ada eat?", filter={"kind": "food"})
        assert sorted(i.key for i in hits) == ["diet", "said-1"]
        assert ns["store"].get(("memories", "ada"), "said-1").value["kind"] == "food"
        assert any(st.startswith("items:") and st.endswith(":ada") for st in m.log.streams())  # user=ns[1]
        # the Agents SDK's run: its answer, and both turns kept as the eidetica session conv-1 of Ada
        assert _at(shown, "await Runner.run(").final_output == "OK"
        assert fake_openai.calls("/chat/completions")
        kept = m.session("conv-1", user="ada").history()
        assert [(x.role, x.content) for x in kept] == [("user", "hi"), ("assistant", "OK")]


def _check_async_block(shown: dict[str, Any]) -> None:
    assert _at(shown, "await s.length()") == 2
    assert _at(shown, "await m.recall(")[0].text == "I moved to Berlin"  # her own words answer first


def test_async_block_embedded(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block opens "memory-store" relative to here
    _check_async_block(_run(_block("eidetica.AsyncMemory("), {"eidetica": eidetica}))


@pytest.mark.slow
@pytest.mark.ray
def test_ray_block_on_a_local_cluster(tmp_path, ray_session) -> None:
    # address="auto" joins the running Ray: here the test session's own cluster, already joined
    from eidetica._ray import shutdown_store

    path = tmp_path / "store"
    ns: dict[str, Any] = {"eidetica": eidetica}
    _run(_block('runtime="ray"'), ns, ('"/shared/store"', repr(str(path))))
    m, s = ns["m"], ns["s"]
    try:
        # "batch appends across the Ray boundary": buffered appends return -1 until the batch is sent
        assert s.append("user", "I moved to Berlin and I'm allergic to shellfish.") == -1
        s.append("assistant", "Noted!")
        s.flush()
        assert [x.content for x in s.read()] == ["I moved to Berlin and I'm allergic to shellfish.", "Noted!"]
        assert m.recall("what can Ada eat?", user="ada")[0].text.endswith("I'm allergic to shellfish.")
    finally:
        m.close()
        shutdown_store(path)


def test_now_block_resolves_ten_days_ago_against_the_given_moment(tmp_path) -> None:
    """docs/search.md's ``now=`` block: "10 days ago" counts from the moment given, and the block dates its lines."""
    with eidetica.open(tmp_path / "store") as m:  # the default embedder: the block keeps what is relevant
        s = m.session("shop", user="ada")
        s.append("user", "I bought a red bicycle helmet today.", time=dt.datetime(2023, 3, 15, 9, tzinfo=dt.timezone.utc))
        s.append("user", "I bought a blue kettle today.", time=dt.datetime(2023, 1, 2, 9, tzinfo=dt.timezone.utc))
        block = _at(_run(_block('m.context("What did I buy 10 days ago?"'), {"m": m}), "m.context(")
    assert "helmet" in block and "2023-03-15" in block
    assert "Asked on 2023-03-25" in block


def test_search_options_block_builds_refuses_and_searches_as_keywords_do(tmp_path) -> None:
    """docs/search.md's ``SearchOptions`` block: one value for the ranking options, the same hits as its keywords."""
    from eidetica.providers import HashEmbedder

    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64)) as m:
        m.remember("Grace is pescatarian", "diet", user="grace")
        m.session("trip", user="grace").append("user", "What should I eat in Kyoto? Grace eats fish, not meat.")
        shown = _run(_block("eidetica.SearchOptions(min_score=0.5"), {"eidetica": eidetica, "m": m})
    assert _at(shown, "strict.min_score") == (0.5, ("fact", "note"))
    assert _at(shown, "SearchOptions().min_score") == 0.3
    assert _at(shown, "options=strict") is True
    assert _at(shown, "e.field") == "min_score"
