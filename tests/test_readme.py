"""The README's examples return what the README shows (the embedded "Use it" block, run as written)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

import eidetica

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_use_it_block_runs_and_answers(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the block opens "memory-store" relative to here
    block = next(b for b in _blocks() if 'eidetica.open("memory-store")' in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    # "what can Ada eat?": the README shows her message, then the health fact distilled from it
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[Message | ") and lines[0].endswith("I moved to Berlin and I'm allergic to shellfish.")
    assert lines[1].startswith("[Health | ") and lines[1].endswith("I'm allergic to shellfish.")
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
        block = next(b for b in _blocks() if "eidetica.connect(" in b)
        ns: dict = {"eidetica": eidetica, "KEY": key}
        # the block's last line is an expression: keep its value
        *body, last = block.replace('"http://127.0.0.1:8765"', repr(server.url)).rstrip().splitlines()
        exec(compile("\n".join(body) + f"\nhits = {last.split('#')[0].strip()}\n", "README.md", "exec"), ns)  # noqa: S102
        assert any("Berlin" in h.text for h in ns["hits"])  # "where does Ada live?" answered from her words
        ns["m"].close()
    finally:
        server.stop()
