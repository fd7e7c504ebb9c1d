"""The ``eidetica`` command."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import track
from rich.table import Table

from .errors import EideticaError
from .events import ArrowLog, MessageAppended, NewEvent, SessionStarted

app = typer.Typer(
    help="eidetica: long-term memory for LLM agents. Every command works on a store directory "
    "(--path, or $EIDETICA_PATH, default ./eidetica-data).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """eidetica: long-term memory for LLM agents."""

PathOpt = typer.Option(None, "--path", envvar="EIDETICA_PATH", help="store directory")


def _store(path: Path | None) -> Path:
    return Path(path) if path else Path("eidetica-data")


@app.command()
def demo(
    path: Path = typer.Option(Path("eidetica-demo"), "--path", help="where the demo store goes"),
    events: int = typer.Option(20_000, help="how many sample messages to append"),
) -> None:
    """Append sample conversations through the durable log, then replay and verify them."""
    log_dir = path / "log"
    if log_dir.exists():
        shutil.rmtree(log_dir)  # the demo is re-runnable: start from a clean log each time
    users = ["ada", "grace", "linus"]
    lines = [
        "I moved to Lisbon last spring and work as a data engineer.",
        "Remind me to call my sister on Sunday.",
        "My favourite food is ramen, but I'm allergic to shellfish.",
        "Can you summarise what we discussed about the trip to Kyoto?",
        "I switched from Python 3.10 to 3.11 for the new project.",
    ]
    t0 = time.perf_counter()
    with ArrowLog(log_dir) as log:
        per_batch = 500
        for b in track(range(events // per_batch), description="appending", console=console):
            user = users[b % len(users)]
            session = f"{user}-{b // len(users)}"
            stream = f"session:demo:{session}"
            evs = [NewEvent.of(SessionStarted(session_id=session, user_id=user), tenant="demo")]
            evs += [
                NewEvent.of(
                    MessageAppended(
                        session_id=session,
                        user_id=user,
                        role="user" if i % 2 == 0 else "assistant",
                        content=lines[(b + i) % len(lines)],
                        sequence=i,
                    ),
                    tenant="demo",
                )
                for i in range(per_batch - 1)
            ]
            log.append(stream, evs)
        appended = log.head()
    t_append = time.perf_counter() - t0
    t1 = time.perf_counter()
    with ArrowLog(log_dir, readonly=True) as log:
        counts: dict[str, int] = {}
        n = 0
        for batch in log.read_batches():
            for ev in batch.column("type").to_pylist():
                counts[ev] = counts.get(ev, 0) + 1
                n += 1
        sample = log.read_stream(f"session:demo:{users[0]}-0")[:3]
        size = log.disk_bytes()
        segments = len(log.segments())
    t_replay = time.perf_counter() - t1
    table = Table(title=f"eidetica log at {log_dir}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("events appended (fsync'd)", f"{appended:,} in {t_append:.2f} s ({appended / t_append:,.0f}/s)")
    table.add_row("events replayed", f"{n:,} in {t_replay:.2f} s ({n / t_replay:,.0f}/s)")
    for k, v in sorted(counts.items()):
        table.add_row(f"  {k}", f"{v:,}")
    table.add_row("segments / bytes on disk", f"{segments} / {size:,}")
    console.print(table)
    for ev in sample:
        console.print(f"[dim]{ev.offset:>6}[/] {ev.stream} v{ev.version} {ev.type}: {ev.decode()}")
    if n != appended:
        raise typer.Exit(1)


def main() -> None:
    """Console-script entry point: clear one-line errors unless --debug."""
    import sys

    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        app()
    except EideticaError as e:
        if debug:
            raise
        console.print(f"[red]error:[/] {e}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
