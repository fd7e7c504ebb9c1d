"""The README's examples return what the README shows (the embedded "Use it" block, run as written)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

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
