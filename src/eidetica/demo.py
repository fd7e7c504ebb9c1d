"""`eidetica demo`: a small realistic sample, ingested through the public API and shown back."""

from __future__ import annotations

import datetime as dt
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress
from rich.table import Table

from .actors import MemoryConfig

__all__ = ["run_demo", "load_sample"]

# A small budget so the sample's longer sessions roll into summaries, as long ones would.
DEMO_CONFIG = MemoryConfig(window=6, token_budget=160, retain_recent=4)


def load_sample() -> dict[str, Any]:
    """The demo conversations shipped inside the package."""
    return json.loads(resources.files("eidetica").joinpath("data/demo.json").read_text(encoding="utf-8"))


def _ingest(m: Any, sample: dict[str, Any], console: Console) -> tuple[int, int]:
    """Store the sample's sessions, facts, notes and schedules that are not stored yet: (ingested, total) messages."""
    total = sum(len(s["messages"]) for u in sample["users"].values() for s in u["sessions"])
    ingested = 0
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("ingesting conversations", total=total)
        for user, data in sample["users"].items():
            for sess in data["sessions"]:
                handle = m.session(sess["id"], user=user)
                start = dt.datetime.fromisoformat(sess["date"])
                if len(handle) < len(sess["messages"]):  # re-runs skip what is stored
                    handle.extend([
                        {"role": role, "content": text, "time": start + dt.timedelta(minutes=2 * i),
                         "metadata": {"turn": f"{sess['id']}#{i}"}}
                        for i, (role, text) in enumerate(sess["messages"])
                    ][len(handle):])
                    ingested += len(sess["messages"])
                bar.advance(task, len(sess["messages"]))
            # every fact ever stored (superseded ones too): a re-run must not replay old values
            known = {f.content for f in m.state.facts(sample["tenant"], user, include_inactive=True)}
            for content, category in data["facts"]:
                if content not in known:
                    m.remember(content, category, user=user)
            if not any(True for _ in m.state.notes(sample["tenant"], user)):
                for note in data["notes"]:
                    m.store_note(note, user=user)
        if m.schedules.count() == 0:
            for user, name, cadence, expr in sample["schedules"]:
                try:
                    m.schedules.create(name, cadence, expr, user=user)
                except Exception:  # noqa: BLE001 - a one-shot in the past on a later run
                    m.schedules.create(name, "interval", 86400, user=user)
    return ingested, total


def _history(m: Any, sample: dict[str, Any]) -> Table | str:
    """The facts that changed (reinforced or superseded) with their events, as a table."""
    hist = Table(title="facts that changed: reinforced or superseded, with their history")
    hist.add_column("fact")
    hist.add_column("status")
    hist.add_column("history")
    for user in sample["users"]:
        for f in m.state.facts(sample["tenant"], user, include_inactive=True):
            if f.status == "superseded" or len(m.state.fact_history(sample["tenant"], f.fact_id)) > 1:
                events = m.state.fact_history(sample["tenant"], f.fact_id)
                hist.add_row(escape(f"{user}: {f.content}"), f.status,
                             escape("\n".join(f"{when:%Y-%m-%d} {kind} {detail}" for when, kind, detail in events)))
    return hist if hist.row_count else "[dim]no fact changed in this sample[/]"


def run_demo(path: Path, embedder: Any, console: Console) -> dict[str, float]:
    """Ingest the sample into ``path`` (skipping what is already there) and print what memory returns."""
    from . import memory

    sample = load_sample()
    timings: dict[str, float] = {}
    t = time.perf_counter()
    m = memory.open(path, tenant=sample["tenant"], embedder=embedder, config=DEMO_CONFIG)
    timings["open store"] = time.perf_counter() - t
    try:
        t = time.perf_counter()
        ingested, total = _ingest(m, sample, console)
        timings["ingest"] = time.perf_counter() - t
        console.print(f"[bold]Ingested[/] {ingested} messages ({total - ingested} already stored) "
                      f"for {len(sample['users'])} users in {timings['ingest']:.1f} s\n")

        # first: what memory holds now (superseded values are history, not shown) and a block that answers
        t = time.perf_counter()
        now = Table(title="current facts per user (a newer value of the same attribute supersedes the old one)")
        now.add_column("user")
        now.add_column("facts, strongest first")
        for user in sample["users"]:
            now.add_row(user, escape("\n".join(h.text for h in m.list_memories(user=user, limit=12))) or "-")
        timings["current facts"] = time.perf_counter() - t
        console.print(now)
        t = time.perf_counter()
        ctx = m.context("What does Grace eat?", user="grace", max_tokens=300)
        timings["context"] = time.perf_counter() - t
        console.print(Panel(escape(ctx), title='context("What does Grace eat?", user="grace"): for a system prompt',
                            expand=False))

        t = time.perf_counter()
        s = m.session("ada-2026-10-02", user="ada")
        read = s.read()
        timings["session read"] = time.perf_counter() - t
        body = "\n".join(f"[bold]{msg.role}[/]: {escape(msg.content)}" for msg in read)
        console.print(Panel(body, title="session ada-2026-10-02: read() = rolling summary + recent turns", expand=False))

        t = time.perf_counter()
        table = Table(title="recall: facts for a question (top 3)")
        table.add_column("user")
        table.add_column("question")
        table.add_column("hits")
        for user, question in sample["questions"]:
            hits = m.recall(question, top_k=3, user=user)
            table.add_row(user, escape(question), escape("\n".join(str(h) for h in hits)) or "-")
        timings[f"recall x{len(sample['questions'])}"] = time.perf_counter() - t
        console.print(table)

        t = time.perf_counter()
        ctx = m.context("planning Ada's week and meals", user="ada", max_tokens=300)
        timings["context (ada)"] = time.perf_counter() - t
        console.print(Panel(escape(ctx), title="context(): ready for a system prompt", expand=False))

        t = time.perf_counter()
        changed = _history(m, sample)
        timings["fact history"] = time.perf_counter() - t
        console.print(changed)

        due = m.schedules.due(dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
        console.print("[bold]Schedules due by 2026-12-01:[/] " + escape(", ".join(f"{x.name} ({x.user_id})" for x in due)))

        t = time.perf_counter()
        stats = m.stats()
        timings["stats"] = time.perf_counter() - t
        st = Table(title="store statistics")
        st.add_column("what")
        st.add_column("value", justify="right")
        for k in ("events", "streams", "log_bytes", "sessions", "summaries_committed", "embedder"):
            st.add_row(k, f"{stats[k]:,}" if isinstance(stats[k], int) else str(stats[k]))
        for k, v in stats["index"].items():
            st.add_row(f"index {k}", f"{v:,}" if isinstance(v, int) else str(v))
        st.add_row("projection lag", json.dumps(stats["lag"]))
        console.print(st)
    finally:
        m.close()
    tt = Table(title="time per step")
    tt.add_column("step")
    tt.add_column("seconds", justify="right")
    for k, v in timings.items():
        tt.add_row(k, f"{v:.3f}")
    console.print(tt)
    return timings
