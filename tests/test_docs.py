"""The docs cover what the code has (as datasette checks its docs): every public name, CLI command,
HTTP route, MCP tool and ``MemoryConfig`` field is named in ``docs/``, and ``docs/architecture.md``
has a line for every package and module under ``src/eidetica``. A feature added without its
documentation fails here, naming what is missing.

"Named" means inside code (a `span` or a fenced block) of a reference page: the words of prose
("open", "search") do not count. The benchmark history (``docs/benchmarks/``) is not reference.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

import eidetica
from eidetica.providers import HashEmbedder

# the repository: the nearest directory above holding pyproject.toml (the test may move down the tree)
REPO = next(d for d in Path(__file__).resolve().parents if (d / "pyproject.toml").exists())
DOCS = REPO / "docs"
SRC = REPO / "src" / "eidetica"
ARCHITECTURE = DOCS / "architecture.md"


def _pages() -> list[Path]:
    """The reference pages: every page of docs/ but the benchmark history."""
    return [p for p in sorted(DOCS.rglob("*.md")) if "benchmarks" not in p.relative_to(DOCS).parts]


def _code(text: str) -> str:
    """The text of every fenced block and code span of a markdown page, one per line."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", prose)
    return "\n".join(blocks + spans)


def _reference_code() -> str:
    return "\n".join(_code(p.read_text(encoding="utf-8")) for p in _pages())


def _missing(names: list[str], code: str, pattern: str = r"(?<![\w.]){}(?!\w)") -> list[str]:
    return [n for n in names if not re.search(pattern.format(re.escape(n)), code)]


def test_reference_pages_exist_and_are_in_the_site_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(DOCS).as_posix() for p in sorted(DOCS.rglob("*.md"))]
    for page in ("api.md", "search.md", "audit.md", "server.md", "ray.md", "cli.md", "operations.md",
                 "architecture.md", "integrations.md", "development.md", "benchmarks/index.md"):
        assert page in pages
    assert [p for p in pages if p not in nav] == []  # a page outside nav is a page nobody finds


def test_docs_name_every_public_name() -> None:
    assert _missing(list(eidetica.__all__), _reference_code()) == []


def test_docs_name_every_memory_config_field() -> None:
    fields = [f.name for f in msgspec.structs.fields(eidetica.MemoryConfig)]
    assert len(fields) > 20
    assert _missing(fields, _reference_code()) == []


@pytest.mark.parametrize("cls, var", [(eidetica.Memory, "m"), (eidetica.SessionHandle, "s")])
def test_docs_name_every_public_method(cls: type, var: str) -> None:
    names = [n for n in dir(cls) if not n.startswith("_")]
    assert "recall" in names or "append" in names
    assert _missing(names, _reference_code(), rf"{var}\.{{}}(?!\w)") == []


def _commands() -> list[str]:
    """Every command of the `eidetica` CLI, subcommands as "group sub"."""
    import typer.main

    from eidetica.cli import app

    out: list[str] = []

    def walk(cmd: Any, prefix: str) -> None:
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            out.append(prefix + name)
            walk(sub, prefix + name + " ")

    walk(typer.main.get_command(app), "")
    return out


def test_docs_name_every_cli_command() -> None:
    commands = _commands()
    assert {"demo", "serve", "keys create"} <= set(commands)
    code = _reference_code()
    top = [c for c in commands if " " not in c]
    sub = [c for c in commands if " " in c]
    # a top-level command as it is typed ("eidetica why"); a subcommand by its group and name
    assert _missing(top, code, r"eidetica {}(?![\w-])") == []
    assert _missing(sub, code, r"(?<![\w-]){}(?![\w-])") == []


def _walk(routes: list[Any], prefix: str = "") -> list[Any]:
    """(prefix, route) of every route, descending into included routers (FastAPI >= 0.165 keeps an
    included router whole, older ones copy its routes into the app)."""
    out: list[Any] = []
    for r in routes:
        inner = getattr(r, "original_router", None)
        if inner is not None:
            context = getattr(r, "include_context", None)
            out += _walk(inner.routes, prefix + (getattr(context, "prefix", "") or "") + (inner.prefix or ""))
        else:
            out.append((prefix, r))
    return out


def _routes(tmp_path: Path) -> list[str]:
    """"METHOD /path" of every route of the server's FastAPI app (HEAD and mounts aside)."""
    from fastapi.routing import APIRoute

    from eidetica._server import create_app

    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=32)) as m:
        app = create_app(m)
        return sorted({f"{method} {prefix}{r.path}" for prefix, r in _walk(app.routes) if isinstance(r, APIRoute)
                       for method in r.methods if method != "HEAD"})


def test_docs_name_every_http_route(tmp_path) -> None:
    routes = _routes(tmp_path)
    assert "POST /v1/search" in routes and len(routes) > 50
    assert _missing(routes, _reference_code(), r"{}(?![\w/{{])") == []


async def _mcp_tools(m: Any) -> list[str]:
    """The names of the MCP tools the server offers over ``m``."""
    from mcp import Client

    from eidetica._server.mcp import build_mcp

    async with Client(build_mcp(lambda scope: m)) as c:
        return sorted(t.name for t in (await c.list_tools()).tools)


def test_docs_name_every_mcp_tool(tmp_path) -> None:
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=32)) as m:
        tools = asyncio.run(_mcp_tools(m))
    assert "recall" in tools and len(tools) >= 10
    assert _missing(tools, _reference_code()) == []


def _tree(root: Path = SRC) -> list[str]:
    """Every package ("pkg/") and module ("pkg/mod.py") under src/eidetica, relative to it."""
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        out.append(rel)
        if p.name == "__init__.py" and p.parent != root:
            out.append(p.parent.relative_to(root).as_posix() + "/")
    return sorted(set(out))


def test_architecture_names_every_package_and_module() -> None:
    """A new module without its line in docs/architecture.md fails here."""
    tree = _tree()
    assert "memory.py" in tree and "events/" in tree
    assert _missing(tree, _code(ARCHITECTURE.read_text(encoding="utf-8")), r"(?<![\w/]){}(?![\w/])") == []


def test_architecture_names_no_module_that_does_not_exist() -> None:
    """And a module moved or deleted takes its line with it: every path of the layout tables exists."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    layout = text[text.index("## Layout"):text.index("## Events")]
    named = set(re.findall(r"^\| `([\w/]+(?:\.py|/))` \|", layout, re.M))
    assert len(named) > 50
    assert sorted(named - set(_tree())) == []


def test_benchmarks_lead_holds_the_figures_the_plots_draw(tmp_path) -> None:
    """BENCHMARKS.md's table and docs/bench/front.json (what scripts/plots.py draws) say the same."""
    import subprocess
    import sys

    lead = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8").split("## History")[0]
    fig = json.loads((DOCS / "bench" / "front.json").read_text(encoding="utf-8"))
    figures = [f"{row[m]:.3f}".rstrip("0") for row in fig["agent"]["rows"] for m in fig["agent"]["metrics"]]
    figures += [f"{r['eidetica']:g}" for r in fig["speed"]["rows"]]
    figures += [f"{r['value']:.1f}" for r in fig["peers"]["rows"]]
    assert [f for f in figures if f not in lead] == []
    for png in ("front_agent.png", "front_budget.png", "front_speed.png"):
        assert f"docs/bench/{png}" in lead and (DOCS / "bench" / png).exists()
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "plots.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    plots = json.loads(out.splitlines()[-1])["plots"]
    assert sorted(plots) == ["front_agent.png", "front_budget.png", "front_speed.png"]
    assert all((tmp_path / p).stat().st_size > 10_000 for p in plots)


@pytest.mark.parametrize("page", ["README.md", "BENCHMARKS.md"])
def test_front_pages_stay_short_and_link_what_exists(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    assert len(text) <= 15_000  # a front page; the reference lives in docs/
    if page == "README.md":  # .ci/run relies on the README's test command
        assert "make test" in text and "make demo" in text
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if "://" not in t]
    assert links and [t for t in links if not (REPO / t).exists()] == []
