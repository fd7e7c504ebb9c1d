"""Imports point one way, up to down:

    cli, integrations, _server, _remote, _ray (the top: anything below or beside)
    memory (the facade)
    _store (the facade's services: they never import it)
    actors
    projections
    events, providers
    _util (NumPy's BLAS thread control, the metrics port, validation into InvalidInput)
    errors (the floor)

Every import is counted, the lazy ones inside functions included (a lazy upward import is still an
upward edge, and it was how the one cycle we had hid).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "eidetica"

# rank of each layer; a module may import its own layer or a lower rank only
RANKS = {"errors": -1, "_util": 0, "events": 1, "providers": 1, "projections": 2, "actors": 3, "_store": 4, "memory": 5}
TOP = 6  # the Ray host, the server, the client, the cli, integrations, the package's __init__, ...
TOP_FLOOR_MODULES = 8  # modules directly in src/eidetica (packages hold the rest)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path = SRC) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ours that ``name`` imports (anywhere in its body)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from pkg import sub" imports the submodule when there is one
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # "eidetica.events.types.X" -> "eidetica.events.types"
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "eidetica"


def _rank(module: str) -> int:
    return RANKS.get(_layer(module), TOP)


def _graph(root: Path = SRC) -> dict[str, set[str]]:
    mods = _modules(root)
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Edges that point up the layers, or sideways between two different lower layers."""
    bad = []
    for src, targets in graph.items():
        for dst in targets:
            same = _layer(src) == _layer(dst)
            if same or _rank(src) == TOP:
                continue  # a layer's own modules, or the top importing anything below or beside it
            if _rank(dst) >= _rank(src):
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles between modules (a package's ``__init__`` importing its own modules is not one)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def edges(n: str) -> list[str]:
        # a module importing its own package's __init__ (or an ancestor's) is not an edge the
        # other way round: the __init__ re-exports, it does not depend
        return sorted(d for d in graph[n] if not n.startswith(d + "."))

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in edges(n):
            if state.get(d) == 1:
                found.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def test_no_upward_import() -> None:
    assert upward_edges(_graph()) == []


def test_no_import_cycle() -> None:
    assert cycles(_graph()) == []


def test_the_top_floor_holds_few_modules() -> None:
    """The top of src/eidetica holds the entry points; the services live in packages (issue 41)."""
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= TOP_FLOOR_MODULES, top


def test_the_facade_and_its_services_sit_below_the_hosts() -> None:
    """``memory`` never imports the Ray host, the server or the client; ``_store`` never imports ``memory``."""
    graph = _graph()
    assert _rank("eidetica._store.erasure") < _rank("eidetica.memory") < _rank("eidetica._ray.open")
    above = {d for s, ds in graph.items() if _layer(s) in ("memory", "_store") for d in ds if _rank(d) == TOP}
    assert above == set()


def test_events_import_only_errors() -> None:
    graph = _graph()
    outside = {d for s, ds in graph.items() if _layer(s) == "events" for d in ds if _layer(d) not in ("events", "errors", "_util")}
    assert outside == set()


def test_the_walker_sees_lazy_upward_imports_and_cycles(tmp_path) -> None:
    """The checks fail on the shapes they guard against (a lazy import inside a function included)."""
    pkg = tmp_path / "eidetica"
    for sub in ("events", "actors"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "memory.py").write_text("from .actors.runtime import R\n")
    (pkg / "actors" / "runtime.py").write_text("def f():\n    from ..memory import Memory\n")
    (pkg / "events" / "types.py").write_text("from ..actors import runtime\n")
    graph = _graph(pkg)
    assert upward_edges(graph) == ["eidetica.actors.runtime -> eidetica.memory", "eidetica.events.types -> eidetica.actors.runtime"]
    assert ["eidetica.actors.runtime", "eidetica.memory", "eidetica.actors.runtime"] in cycles(graph)



def test_the_events_docstring_maps_every_event_type() -> None:
    """The event type -> stream -> writer -> folds table names every type there is."""
    import re

    import eidetica.events as events
    from eidetica.events.types import EVENT_TYPES

    rows = set(re.findall(r"^([A-Z]\w+) {2,}", events.__doc__ or "", re.M))
    assert rows == {t.__name__ for t in EVENT_TYPES}
