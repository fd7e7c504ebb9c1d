"""The README's examples return what the README shows: every ```python block of README.md is
taken from the file at test time (a changed README changes the test) and run, and what its
comments say it prints or returns is checked.

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

import pytest

import eidetica
from tests.openai_server import fake_openai  # noqa: F401 - a fixture

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)]


def _block(marker: str) -> str:
    """The one README block holding ``marker``."""
    found = [b for b in _blocks() if marker in b]
    assert len(found) == 1, f"{len(found)} README blocks hold {marker!r}"
    return found[0]


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
    block = _block('eidetica.open("memory-store")')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shown = _run(block, {"__name__": "readme"})
    # "what can Ada eat?": the README shows her message, then the health fact distilled from it
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[Message | ") and lines[0].endswith("I moved to Berlin and I'm allergic to shellfish.")
    assert lines[1].startswith("[Health | ") and lines[1].endswith("I'm allergic to shellfish.")
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
    from tests.served import Served

    server = Served(tmp_path / "store").start()
    try:
        _, key = KeyStore(server.store).create("readme")
        ns: dict[str, Any] = {"eidetica": eidetica, "KEY": key}
        shown = _run(_block("eidetica.connect("), ns, ('"http://127.0.0.1:8765"', repr(server.url)))
        # "where does Ada live?" answered from her words
        assert any("Berlin" in h.text for h in _at(shown, "m.recall("))
        ns["m"].close()
    finally:
        server.stop()
