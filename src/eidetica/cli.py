"""The ``eidetica`` command: the demo, and operator commands over a store."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import EideticaError

app = typer.Typer(
    help="eidetica: long-term memory for LLM agents.\n\nEvery command works on a store directory: "
    "--path, or $EIDETICA_PATH, default ./eidetica-data. Add --debug before the command for tracebacks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err = Console(stderr=True)

PATH = typer.Option(Path("eidetica-data"), "--path", "-p", envvar="EIDETICA_PATH", help="store directory")
TENANT = typer.Option("default", "--tenant", "-t", envvar="EIDETICA_TENANT", help="tenant to act for")
USER = typer.Option("default", "--user", "-u", help="user the memories belong to")
MODEL = typer.Option(
    None, "--model", envvar="EIDETICA_MODEL",
    help="embedder: 'minilm' (default, offline) or 'hash-<dim>' (tests only); must match the store",
)


def make_embedder(model: str | None) -> Any:
    """The embedder named on the command line."""
    from .providers import HashEmbedder, default_embedder

    if model in (None, "", "minilm", "default", "sentence-transformers/all-MiniLM-L6-v2"):
        return default_embedder()
    if model.startswith("hash-"):
        return HashEmbedder(dim=int(model.split("-", 1)[1]))
    raise typer.BadParameter(f"unknown model {model!r}: use 'minilm' or 'hash-<dim>'", param_hint="--model")


def _require_store(path: Path) -> None:
    """Exit 1 with one line when ``path`` holds no store: an operator command must not create one by accident."""
    if not (path / "log").is_dir():
        err.print(f"[red]error:[/] no eidetica store at {escape(str(path))}: name the store with --path "
                  "(or $EIDETICA_PATH)", soft_wrap=True)
        raise typer.Exit(1)


AS_OF = typer.Option(None, "--as-of", help="answer as the store was then: an ISO time with its zone, or a log offset")


@contextmanager
def _at(m: Any, as_of: str | None) -> Iterator[Any]:
    """The store, or the store as it was at ``as_of`` (read-only)."""
    if as_of is None:
        yield m
        return
    from ._store.asof import parse_moment

    with m.as_of(parse_moment(as_of)) as past:
        yield past


READ_ONLY = typer.Option(
    False, "--read-only", help="read beside a running server (it holds the store): the store as of now, nothing written",
)


def _open(path: Path, tenant: str, model: str | None, *, create: bool = False, read_only: bool = False) -> Any:
    from . import memory

    if not create:
        _require_store(path)
    return memory.open(path, tenant=tenant, embedder=make_embedder(model), read_only=read_only)


@app.command()
def demo(
    path: Path = typer.Option(Path("eidetica-demo"), "--path", "-p", help="where the demo store goes"),
    model: str | None = MODEL,
) -> None:
    """Ingest a small realistic sample through the public API and show what memory gives back."""
    from .demo import run_demo

    run_demo(path, make_embedder(model), console)


@app.command()
def remember(
    content: str,
    category: str = typer.Option("general", "--category", "-c"),
    user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Store a fact about a user (creates the store when there is none)."""
    with _open(path, tenant, model, create=True) as m:
        console.print(m.remember(content, category, user=user))


def _hits_table(hits: list[Any], title: str) -> Table:
    table = Table(title=title)
    for col in ("score", "category", "time", "text", "id"):
        table.add_column(col)
    for h in hits:
        table.add_row(f"{h.score:.2f}", escape(h.category or h.kind), f"{h.time:%Y-%m-%d %H:%M}", escape(h.text), h.id)
    return table


def _hits_json(hits: list[Any]) -> str:
    import msgspec

    return msgspec.json.encode([msgspec.to_builtins(h) for h in hits]).decode()


@app.command()
def recall(
    query: str,
    top_k: int = typer.Option(5, "--top-k", "-k", min=1, max=10_000),
    category: str | None = typer.Option(None, "--category", "-c"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL, read_only: bool = READ_ONLY,
    as_of: str | None = AS_OF,
) -> None:
    """The user's facts most relevant to QUERY."""
    with _open(path, tenant, model, read_only=read_only) as live, _at(live, as_of) as m:
        hits = m.recall(query, top_k, user=user, category=category)
    console.print_json(_hits_json(hits)) if as_json else console.print(_hits_table(hits, f"recall: {query}"))


@app.command("list")
def list_(
    category: str | None = typer.Option(None, "--category", "-c"),
    limit: int = typer.Option(20, "--limit", "-n", min=1),
    as_json: bool = typer.Option(False, "--json"),
    user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL, read_only: bool = READ_ONLY,
    as_of: str | None = AS_OF,
) -> None:
    """The user's active facts, strongest first."""
    with _open(path, tenant, model, read_only=read_only) as live, _at(live, as_of) as m:
        hits = m.list_memories(user=user, category=category, limit=limit)
    console.print_json(_hits_json(hits)) if as_json else console.print(_hits_table(hits, f"memories of {user}"))


@app.command()
def forget(
    fact_id: str, user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL
) -> None:
    """Forget one fact (run `compact` to erase it from disk)."""
    with _open(path, tenant, model) as m:
        m.forget(fact_id, user=user)
    console.print(f"forgot {fact_id}")


@app.command()
def why(fact_id: str, user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL) -> None:
    """Where a fact came from and how it changed (JSON): sources, extractor, reinforcements, supersession, deletion."""
    with _open(path, tenant, model) as m:
        console.print_json(json.dumps(m.explain(fact_id, user=user)))


@app.command()
def reextract(
    llm: str | None = typer.Option(None, "--llm", help="'offline' (the default rules) or a model of an "
                                      "OpenAI-compatible endpoint ($OPENAI_BASE_URL, $OPENAI_API_KEY)"),
    user: str | None = typer.Option(None, "--user", "-u", help="one user (default: every user)"),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Run the extractor again over the stored user messages and bring the facts in line (resumable)."""
    from .providers import OfflineLLM, OpenAILLM

    chosen = None if llm is None else OfflineLLM() if llm == "offline" else OpenAILLM(llm)
    with _open(path, tenant, model) as m:
        console.print_json(json.dumps(m.reextract(user=user, llm=chosen)))


@app.command()
def revert(
    session_id: str,
    since: str | None = typer.Option(None, "--since", help="only messages from this ISO time on (with a zone)"),
    messages: bool = typer.Option(False, "--messages", help="take the messages back too"),
    user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Retract every fact and note a session wrote (as events; `why` shows a fact's); reverting twice changes nothing."""
    from datetime import datetime

    when = datetime.fromisoformat(since) if since else None
    with _open(path, tenant, model) as m:
        console.print_json(json.dumps(m.revert(user=user, session_id=session_id, since=when, messages=messages)))


@app.command()
def note(
    text: str, user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
    session: str | None = typer.Option(None, "--session", help="the session it is written during (its revert deletes it)"),
) -> None:
    """Store a note about a user; prints its id (creates the store when there is none)."""
    with _open(path, tenant, model, create=True) as m:
        console.print(m.store_note(text, user=user, session_id=session))


@app.command("update-note")
def update_note(
    note_id: str, text: str, user: str = USER, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Replace a note's text, keeping its id."""
    with _open(path, tenant, model) as m:
        m.update_note(note_id, text, user=user)
    console.print(f"updated {note_id}")


@app.command()
def sessions(
    user: str | None = typer.Option(None, "--user", "-u"), path: Path = PATH, tenant: str = TENANT,
    model: str | None = MODEL, read_only: bool = READ_ONLY,
) -> None:
    """Sessions, most recently updated first."""
    with _open(path, tenant, model, read_only=read_only) as m:
        rows = m.list_sessions(user=user)
    table = Table(title="sessions")
    for col in ("session", "user", "messages", "last update"):
        table.add_column(col)
    for s in rows:
        table.add_row(escape(s.session_id), escape(s.user_id), str(s.message_count), f"{s.last_time:%Y-%m-%d %H:%M}")
    console.print(table)


@app.command()
def history(
    session: str,
    limit: int | None = typer.Option(None, "--limit", "-n", min=1),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL, read_only: bool = READ_ONLY,
    as_of: str | None = AS_OF,
) -> None:
    """The stored messages of SESSION."""
    with _open(path, tenant, model, read_only=read_only) as live, _at(live, as_of) as m:
        info = next((s for s in m.list_sessions() if s.session_id == session), None)
        if info is None:
            from .errors import NotFound

            raise NotFound("session", session)
        msgs = m.session(session, user=info.user_id).history(limit)
    for msg in msgs:
        console.print(f"[dim]{msg.sequence:>4} {msg.time:%Y-%m-%d %H:%M}[/] [bold]{msg.role}[/]: {escape(msg.content)}")


@app.command()
def export(
    output: Path | None = typer.Option(
        None, "--output", "-o", help="JSONL file, or .parquet (default: memories-<tenant>-<date>.jsonl here)"
    ),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL, read_only: bool = READ_ONLY,
) -> None:
    """Export the tenant's events (JSONL by default, Parquet for a .parquet name)."""
    import datetime as dt

    with _open(path, tenant, model, read_only=read_only) as m:
        if output is None:
            output = Path(f"memories-{tenant}-{dt.date.today().isoformat()}.jsonl")
        n = m.export(output)
    console.print(f"exported {n} events to {escape(str(output.resolve()))}")


@app.command("import")
def import_(file: Path, path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL) -> None:
    """Import events written by `export` into the tenant (what the store holds already is skipped; creates the store)."""
    with _open(path, tenant, model, create=True) as m:
        n = m.import_(file)
    console.print(f"imported {escape(str(file))} into tenant {tenant!r}: {n['written']} events written, "
                  f"{n['skipped']} skipped (already in the store)")
    if n["conflicts"]:  # ids the tenant holds for other events: skipped, named so they can be looked at
        console.print(f"{len(n['conflicts'])} skipped because their id already names another event: "
                      + ", ".join(n["conflicts"][:20]) + (" ..." if len(n["conflicts"]) > 20 else ""))


@app.command()
def clear(
    sessions_only: bool = typer.Option(False, "--sessions-only"),
    memories_only: bool = typer.Option(False, "--memories-only"),
    force: bool = typer.Option(False, "--force", help="do not ask"),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Forget all sessions and/or memories of the tenant (asks first on a terminal)."""
    if sessions_only and memories_only:
        raise typer.BadParameter("choose at most one of --sessions-only and --memories-only")
    _require_store(path)
    what = "sessions" if sessions_only else "memories" if memories_only else "sessions and memories"
    if not force:
        if not sys.stdin.isatty():
            err.print(f"[red]error:[/] refusing to clear {what} without --force (no terminal to ask)")
            raise typer.Exit(2)
        if not typer.confirm(f"Forget all {what} of tenant {tenant!r} in {path}?"):
            err.print("cancelled")
            raise typer.Exit(1)
    with _open(path, tenant, model) as m:
        m.clear(sessions=not memories_only, memories=not sessions_only)
    console.print(f"cleared {what}")


@app.command()
def rebuild(
    projection: str | None = typer.Option(None, "--projection", help="one projection by name (default: all)"),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Drop the projections and replay the log into them, with progress."""
    from rich.progress import Progress

    with _open(path, tenant, model) as m, Progress(console=console) as bar:
        task = bar.add_task("replaying", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        t = time.perf_counter()
        n = m.projector.rebuild(projection, progress)
    console.print(f"rebuilt from {n} events in {time.perf_counter() - t:.1f} s")


@app.command()
def compact(path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL) -> None:
    """Rewrite the log and indices without forgotten data."""
    with _open(path, tenant, model) as m:
        report = m.compact()
    console.print(report)


@app.command()
def reembed(
    model: str = typer.Option(..., "--model", help="the new embedder (see --model of other commands)"),
    old: str | None = typer.Option(None, "--from", help="the store's current embedder (default minilm)"),
    path: Path = PATH, tenant: str = TENANT,
) -> None:
    """Re-embed every stored text with a new model and switch the store to it."""
    from rich.progress import Progress

    with _open(path, tenant, old) as m, Progress(console=console) as bar:
        task = bar.add_task("re-embedding", total=None)
        n = m.reembed(make_embedder(model), lambda d, t: bar.update(task, completed=d, total=t))
    console.print(f"re-embedded {n} chunks with {model}")


def _open_fleet(path: Path, tenant: str, model: str | None, address: str) -> Any:
    """Join a store served by a Ray fleet as one more reader (its existing view replicas, none added)."""
    from . import memory
    from ._ray import join_cluster, replica_layout

    _require_store(path)
    join_cluster(address)  # before replica_layout: it lists the cluster's named actors
    return memory.open(path, tenant=tenant, embedder=make_embedder(model), runtime="ray",
                       views_replicas=replica_layout(path))


@app.command()
def usage(
    as_json: bool = typer.Option(False, "--json"), user: str | None = typer.Option(None, "--user"),
    since: dt.datetime | None = typer.Option(None, "--since", help="from this UTC time on"),
    until: dt.datetime | None = typer.Option(None, "--until", help="before this UTC time"),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL, read_only: bool = READ_ONLY,
) -> None:
    """What the LLM cost: calls and tokens of the tenant's ledger, by model, purpose, user and day."""
    utc = [None if t is None else t.replace(tzinfo=t.tzinfo or dt.timezone.utc) for t in (since, until)]
    with _open(path, tenant, model, read_only=read_only) as m:
        u = m.usage(user=user, since=utc[0], until=utc[1])
    if as_json:
        console.print_json(json.dumps(u))
        return
    table = Table(title=f"LLM usage of tenant {tenant!r}: {u['calls']:,} calls, {u['input_tokens']:,} input and "
                        f"{u['output_tokens']:,} output tokens, {u['fallbacks']:,} offline fallbacks")
    for col in ("day", "user", "model", "purpose", "calls", "input tokens", "output tokens", "fallbacks"):
        table.add_column(col, justify="right" if " " in col or col in ("calls", "fallbacks") else "left")
    for r in u["by"]:
        table.add_row(r["day"], r["user"], r["model"], r["purpose"], f"{r['calls']:,}", f"{r['input_tokens']:,}",
                      f"{r['output_tokens']:,}", f"{r['fallbacks']:,}")
    console.print(table)


@app.command()
def stats(
    as_json: bool = typer.Option(False, "--json"), path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
    address: str | None = typer.Option(
        None, "--address", help="a store run by a Ray fleet: the cluster's address ('auto' on a node of it)"),
    read_only: bool = READ_ONLY,
) -> None:
    """Events, streams, log bytes, index rows and per-projection lag (per view replica on Ray)."""
    with (_open_fleet(path, tenant, model, address) if address else _open(path, tenant, model, read_only=read_only)) as m:
        s = m.stats()
    if as_json:
        console.print_json(json.dumps(s, default=str))
        return
    table = Table(title=f"eidetica store {path}")
    table.add_column("what")
    table.add_column("value", justify="right")
    snap = s.pop("snapshot", None) or {}
    replicas = s.pop("replicas", None)
    for k, v in s.items():
        table.add_row(k, json.dumps(v, default=str) if isinstance(v, dict) else f"{v:,}" if isinstance(v, int) else str(v))
    age = snap.get("age_s")
    table.add_row("snapshot age", "none (a start replays the whole log)" if age is None else f"{age:,.1f} s")
    table.add_row("snapshot tail", f"{snap.get('tail_events', 0):,} events")
    console.print(table)
    if replicas is not None:
        rt = Table(title="view replicas")
        for col in ("replica", "node", "applied (next offset per partition)", "lag", "served", "started"):
            rt.add_column(col)
        for r in replicas:
            st = r.get("started") or {}
            rt.add_row(r["replica"], (r.get("node") or "down")[:12], json.dumps(r.get("applied", {})),
                       "?" if r.get("lag") is None else f"{r['lag']:,}", str(r.get("served")),
                       f"{st.get('how', '')} {st.get('seconds', '')} s" if st else "")
        console.print(rt)


@app.command()
def snapshot(path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL) -> None:
    """Write a snapshot of the in-memory state now (a start then replays only what follows it)."""
    t = time.perf_counter()
    with _open(path, tenant, model) as m:
        where = m.snapshot()
    console.print(f"snapshot written to {where} in {time.perf_counter() - t:.1f} s" if where else "nothing to snapshot: the store is empty")


@app.command()
def tail(
    follow_seconds: float = typer.Option(0.0, "--seconds", help="stop after this long (0: until Ctrl-C)"),
    from_start: bool = typer.Option(False, "--from-start", help="print the whole log first"),
    path: Path = PATH, tenant: str = TENANT,
) -> None:
    """Follow events as they are appended (read-only: works next to a running writer)."""
    import threading

    from .events import ArrowLog

    _require_store(path)
    log = ArrowLog(path / "log", readonly=True)
    stop = threading.Event()
    if follow_seconds:
        threading.Timer(follow_seconds, stop.set).start()
    start = 0 if from_start else log.head()
    log.close()
    pos = start
    try:
        while not stop.is_set():
            log = ArrowLog(path / "log", readonly=True)  # a read-only snapshot; reopen to see new commits
            for ev in log.read(pos):
                if ev.tenant in (tenant, ""):
                    console.print(f"[dim]{ev.offset:>8} {ev.time:%H:%M:%S}[/] {escape(ev.stream)} [bold]{ev.type}[/]")
                pos = ev.offset + 1
            log.close()
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass


# -- serving: HTTP API + MCP ------------------------------------------------------------
@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (non-loopback needs API keys)"),
    port: int = typer.Option(8765, "--port", min=0, max=65535),
    runtime: str = typer.Option("local", "--runtime", help="local | ray"),
    address: str | None = typer.Option(None, "--address", help="Ray address (with --runtime ray)"),
    max_import_mb: int = typer.Option(512, "--max-import-mb", min=1, help="largest POST /v1/import body (MiB)"),
    path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL,
) -> None:
    """Serve the store over HTTP (JSON API, /docs, /mcp); clients use eidetica.connect(url, api_key=...)."""
    from . import memory
    from ._server import KeyStore, bind, check_bind
    from ._server import serve as run_server

    # both before open: a refused address or a busy port must not create (or lock) the store
    check_bind(host, KeyStore(path))
    sock = bind(host, port)
    kw = {"address": address} if runtime == "ray" and address else {}
    with sock, memory.open(path, tenant=tenant, embedder=make_embedder(model), runtime=runtime, **kw) as m:
        run_server(m, host=host, port=port, sock=sock, max_import_bytes=max_import_mb * 1024 * 1024)


@app.command()
def mcp(path: Path = PATH, tenant: str = TENANT, model: str | None = MODEL) -> None:
    """Serve the store as MCP tools over stdio (for desktop and coding agents; creates the store when there is none)."""
    from ._server import serve_mcp_stdio

    # like `serve`, a memory server starts on an empty path: its clients fill the store
    with _open(path, tenant, model, create=True) as m:
        serve_mcp_stdio(m)


keys_app = typer.Typer(help="API keys of `eidetica serve`: each key acts in one tenant.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


def _key_store(path: Path, *, init: bool = False) -> Any:
    """The keys of the store at ``path``; exit 1 when there is none there (unless ``init``), creating nothing.

    A key written beside no store would protect nothing: the server serving another path never sees it.
    """
    from ._server import KEYS_FILE, KeyStore

    if not init and not ((path / "log").is_dir() or (path / KEYS_FILE).is_file()):
        err.print(f"[red]error:[/] no eidetica store at {escape(str(path))}: name the store `eidetica serve` serves "
                  "with --path (or $EIDETICA_PATH); to make keys before its first start, add --init", soft_wrap=True)
        raise typer.Exit(1)
    return KeyStore(path)


@keys_app.command("create")
def keys_create(
    tenant: str = typer.Option(..., "--tenant", "-t", help="the tenant the key acts in"),
    name: str = typer.Option("", "--name", help="a label (who or what uses the key)"),
    init: bool = typer.Option(False, "--init", help="create the store directory when there is none yet"),
    operator: bool = typer.Option(False, "--operator", help="may also read store-wide /metrics from anywhere"),
    path: Path = PATH,
) -> None:
    """Create a key; it is shown once, alone on the last line (only a salted hash is stored)."""
    key_id, key = _key_store(path, init=init).create(tenant, name, operator=operator)
    kind = "operator key" if operator else "key"
    err.print(f"{kind} {key_id} for tenant {tenant!r} created in {escape(str(path))}; store it now, it is not shown again:",
              soft_wrap=True)
    print(key, flush=True)


@keys_app.command("list")
def keys_list(path: Path = PATH) -> None:
    """Key ids, tenants, names and creation times (never the keys)."""
    table = Table(title=f"API keys of {path}")
    for col in ("id", "tenant", "name", "created", "operator"):
        table.add_column(col)
    for k in _key_store(path).list():
        table.add_row(k["id"], escape(k["tenant"]), escape(k["name"]), k["created"], "yes" if k["operator"] else "")
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: str, path: Path = PATH) -> None:
    """Revoke a key by its id (a running server refuses it from its next request)."""
    _key_store(path).revoke(key_id)
    console.print(f"revoked {key_id}")


def main() -> None:
    """Console-script entry point: one clear line and a non-zero exit on errors, unless --debug."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app(standalone_mode=True)
    except EideticaError as e:
        if debug:
            raise
        hint = ""
        if type(e).__name__ == "StoreLocked":
            hint = "; the read commands (stats, sessions, history, list, recall, export) read beside it with --read-only"
        err.print(f"[red]error:[/] {escape(str(e) + hint)}", soft_wrap=True)  # one line, however narrow the terminal
        raise SystemExit(1) from None
    except (OSError, ValueError) as e:
        if debug:
            raise
        err.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)  # one line, however narrow the terminal
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
