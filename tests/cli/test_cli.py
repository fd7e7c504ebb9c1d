"""The `eidetica` command line: the real console script in subprocesses for what only a
process shows (help, exit codes and tracebacks, the demo), and the same entry point run
in-process for the rest (each subprocess pays ~4 s importing lancedb)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run, spawn


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "store"


def test_help_explains_every_command() -> None:
    out = spawn("--help")
    assert out.returncode == 0
    for cmd in ("demo", "remember", "recall", "list", "forget", "sessions", "history", "export", "import",
                "clear", "rebuild", "compact", "reembed", "stats", "tail", "snapshot"):
        assert cmd in out.stdout, cmd


def test_remember_recall_list_forget(store) -> None:
    out = run("remember", "Ada is allergic to peanuts", "--category", "health", "--user", "ada", store=store)
    assert out.returncode == 0, out.stderr
    fid = out.stdout.strip()
    assert fid.startswith("fact-")
    out = run("recall", "peanuts", "--user", "ada", "--json", store=store)
    hits = json.loads(out.stdout)
    assert hits[0]["id"] == fid and hits[0]["category"] == "health"
    out = run("recall", "peanuts", "--user", "ada", store=store)
    assert "allergic" in out.stdout and "score" in out.stdout
    out = run("list", "--user", "ada", "--json", store=store)
    assert [h["text"] for h in json.loads(out.stdout)] == ["Ada is allergic to peanuts"]
    assert run("forget", fid, "--user", "ada", store=store).returncode == 0
    assert json.loads(run("list", "--user", "ada", "--json", store=store).stdout) == []


def test_errors_are_one_line_without_traceback(store) -> None:
    run("remember", "x", store=store)
    out = spawn("forget", "fact-nope", store=store)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr and "not found" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = spawn("--debug", "forget", "fact-nope", store=store)
    assert "Traceback" in out.stderr
    bad = spawn("recall", "x", "--top-k", "0", store=store)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_store_with_other_model_is_refused_clearly(store) -> None:
    run("remember", "x", store=store)
    out = run("recall", "x", store=store, env={"EIDETICA_MODEL": "hash-32"})
    assert out.returncode != 0 and "reembed" in out.stderr and "Traceback" not in out.stderr


def test_sessions_history_stats_and_tail(store) -> None:
    code = (
        "import eidetica, sys\n"
        "from eidetica.providers import HashEmbedder\n"
        f"with eidetica.open({str(store)!r}, embedder=HashEmbedder(dim=64)) as m:\n"
        "    s = m.session('s1', user='ada')\n"
        "    s.append('user', 'first message')\n"
        "    s.append('assistant', 'second message')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    out = run("sessions", store=store)
    assert "s1" in out.stdout and "ada" in out.stdout
    out = run("history", "s1", store=store)
    assert "first message" in out.stdout and "second message" in out.stdout
    assert run("history", "nope", store=store).returncode != 0
    stats = json.loads(run("stats", "--json", store=store).stdout)
    assert stats["events"] > 0 and stats["sessions"] == 1
    out = run("tail", "--from-start", "--seconds", "1", store=store)
    assert "MessageAppended" in out.stdout


def test_clear_needs_confirmation(store) -> None:
    run("remember", "keep me", store=store)
    out = run("clear", store=store)  # no terminal: refuses without --force
    assert out.returncode != 0 and "--force" in out.stderr
    assert len(json.loads(run("list", "--json", store=store).stdout)) == 1
    assert run("clear", "--memories-only", "--force", store=store).returncode == 0
    assert json.loads(run("list", "--json", store=store).stdout) == []


def test_export_import_round_trip(tmp_path, store) -> None:
    for text in ("Ada lives in Berlin", "Ada works as a platform engineer", "Ada runs half marathons"):
        run("remember", text, "--user", "ada", store=store)
    for fmt in ("jsonl", "parquet"):
        dump = tmp_path / f"dump.{fmt}"
        assert run("export", "-o", str(dump), store=store).returncode == 0
        fresh = tmp_path / f"fresh-{fmt}"
        out = run("import", str(dump), store=fresh)
        assert out.returncode == 0, out.stderr
        n = int(run("export", "-o", str(tmp_path / "n.jsonl"), store=store).stdout.split()[1])
        assert f"{n} events written, 0 skipped" in out.stdout.replace("\n", "")
        again = run("import", str(dump), store=fresh)  # a second time: nothing written, and it says so
        assert "0 events written, " + f"{n} skipped (already in the store)" in again.stdout.replace("\n", "")
        assert "already names another event" not in again.stdout
        if fmt == "jsonl":  # #43: one event changed under its id is skipped and named, the rest written
            rows = [json.loads(line) for line in dump.read_text().splitlines()]
            fact = next(r for r in rows if r["type"] == "FactAsserted")
            fact["event"]["content"] = "Ada lives in Paris"
            (tmp_path / "changed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            out = run("import", str(tmp_path / "changed.jsonl"), store=fresh)
            assert out.returncode == 0, out.stderr
            text = out.stdout.replace("\n", "")
            assert "1 skipped because their id already names another event" in text and fact["event_id"] in text
        a = json.loads(run("recall", "where does Ada live", "--user", "ada", "--json", store=store).stdout)
        b = json.loads(run("recall", "where does Ada live", "--user", "ada", "--json", store=fresh).stdout)
        assert [(h["id"], h["text"], h["score"]) for h in a] == [(h["id"], h["text"], h["score"]) for h in b]


def test_rebuild_after_deleting_the_index(store) -> None:
    run("remember", "Grace is vegetarian", "--user", "grace", store=store)
    before = json.loads(run("recall", "vegetarian", "--user", "grace", "--json", store=store).stdout)
    shutil.rmtree(store / "index")
    out = run("rebuild", store=store)
    assert out.returncode == 0, out.stderr
    after = json.loads(run("recall", "vegetarian", "--user", "grace", "--json", store=store).stdout)
    assert [h["id"] for h in after] == [h["id"] for h in before]


def test_compact_erases_forgotten_text(store) -> None:
    marker = "ZEBRA-MARKER-93817"
    out = run("remember", f"the secret is {marker}", "--user", "ada", store=store)
    fid = out.stdout.strip()
    run("remember", "keep this fact", "--user", "ada", store=store)
    run("forget", fid, "--user", "ada", store=store)
    assert run("compact", store=store).returncode == 0
    assert json.loads(run("recall", "secret", "--user", "ada", "--json", store=store).stdout)[0]["text"] == "keep this fact"
    for root, _, files in os.walk(store):
        for f in files:
            assert marker.encode() not in Path(root, f).read_bytes(), f


def test_reembed_switches_the_model(store) -> None:
    run("remember", "Linus cycles to work", "--user", "linus", store=store)
    out = run("reembed", "--model", "hash-32", "--from", "hash-64", store=store)
    assert out.returncode == 0, out.stderr
    hits = json.loads(run("recall", "cycles", "--user", "linus", "--json", store=store, env={"EIDETICA_MODEL": "hash-32"}).stdout)
    assert hits[0]["text"] == "Linus cycles to work"
    assert run("recall", "x", store=store).returncode != 0  # the old model is refused now


def test_demo_runs_and_reruns(tmp_path) -> None:
    for _ in range(2):
        out = spawn("demo", "--path", str(tmp_path / "demo"))
        assert out.returncode == 0, out.stderr
        assert "Rolling session summary" in out.stdout
        assert "store statistics" in out.stdout
        # the first screen: current facts (Grace's new diet, not the superseded one) and a block that answers
        first = out.stdout.split("Rolling session summary")[0]
        assert "pescatarian now" in first and "I'm vegetarian" not in first
        assert "## Relevant Memory" in first


# -- #21 items 11 and 12 -------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ("clear", "--force"), ("recall", "x"), ("list",), ("forget", "fact-x"), ("sessions",), ("history", "s"),
    ("export",), ("rebuild",), ("compact",), ("stats",), ("reembed", "--model", "hash-32"), ("tail", "--seconds", "0.1"),
])
def test_operator_commands_on_a_path_without_a_store_create_nothing(tmp_path, monkeypatch, args) -> None:
    monkeypatch.chdir(tmp_path)
    nope = tmp_path / "nope"
    out = run(*args, "--path", str(nope))
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert f"no eidetica store at {nope}" in out.stderr.replace("\n", "")
    assert list(tmp_path.iterdir()) == []  # no store, no export file


def test_export_without_output_writes_a_dated_file_here(tmp_path, store, monkeypatch) -> None:
    import datetime as dt

    run("remember", "Ada lives in Berlin", "--user", "ada", store=store)
    monkeypatch.chdir(tmp_path)
    out = run("export", "--tenant", "acme", store=store)
    assert out.returncode == 0, out.stderr
    want = tmp_path / f"memories-acme-{dt.date.today().isoformat()}.jsonl"
    assert want.exists()
    assert str(want) in out.stdout.replace("\n", "")


def test_note_and_update_note(store) -> None:
    nid = run("note", "flight lands 10:40", "--user", "ada", store=store).stdout.strip()
    assert nid.startswith("note-")
    out = run("update-note", nid, "flight lands 12:15", "--user", "ada", store=store)
    assert out.returncode == 0 and nid in out.stdout
    assert run("update-note", "note-nope", "x", "--user", "ada", store=store).returncode == 1
    linked = run("note", "wire money Friday", "--user", "ada", "--session", "s1", store=store).stdout.strip()
    assert json.loads(run("revert", "s1", "--user", "ada", store=store).stdout)["notes"] == [linked]


def test_snapshot_and_stats_show_its_age_and_tail(store) -> None:
    run("remember", "Ada likes tea", "--user", "ada", store=store)
    before = json.loads(run("stats", "--json", store=store).stdout)["snapshot"]
    assert before["age_s"] is None and before["tail_events"] > 0  # no snapshot yet: a start replays everything
    out = run("snapshot", store=store)
    assert out.returncode == 0 and "snapshot written" in out.stdout, out.stderr
    after = json.loads(run("stats", "--json", store=store).stdout)["snapshot"]
    assert after["age_s"] is not None and after["tail_events"] == 0
    table = run("stats", store=store).stdout
    assert "snapshot age" in table and "snapshot tail" in table


# -- #36 item 1: keys follow the store ---------------------------------------------------------
@pytest.mark.parametrize("args", [("list",), ("create", "--tenant", "acme"), ("revoke", "abc")])
def test_keys_commands_refuse_a_path_without_a_store(tmp_path, monkeypatch, args) -> None:
    monkeypatch.chdir(tmp_path)
    nope = tmp_path / "nonexistent"
    out = run("keys", *args, "--path", str(nope))
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert f"no eidetica store at {nope}" in out.stderr and "--path" in out.stderr
    out = run("keys", *args)  # neither --path nor $EIDETICA_PATH: ./eidetica-data is not made up
    assert out.returncode == 1 and "no eidetica store at eidetica-data" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_keys_follow_the_store_named_by_path_or_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    assert run("remember", "x", store=store).returncode == 0
    out = run("keys", "create", "--tenant", "acme", "--name", "ci", store=store)  # $EIDETICA_PATH only
    assert out.returncode == 0, out.stderr
    kid = out.stdout.strip().splitlines()[-1].split("_")[1]
    assert (store / "keys.json").is_file() and not (tmp_path / "eidetica-data").exists()
    assert kid in run("keys", "list", "--path", str(store)).stdout
    assert run("keys", "revoke", kid, store=store).returncode == 0
    fresh = tmp_path / "fresh"  # keys before the server's first start: --init makes the directory
    assert run("keys", "create", "--tenant", "acme", "--path", str(fresh)).returncode == 1
    assert run("keys", "create", "--tenant", "acme", "--init", "--path", str(fresh)).returncode == 0
    assert "acme" in run("keys", "list", "--path", str(fresh)).stdout


# -- #36 item 7: reading beside a running server ------------------------------------------------
@pytest.mark.slow
def test_read_commands_and_open_read_only_beside_a_running_server(tmp_path) -> None:
    import eidetica
    from eidetica.errors import InvalidInput
    from eidetica.providers import HashEmbedder
    from tests.support.served import Served

    store = tmp_path / "store"
    server = Served(store).start()
    try:
        m = eidetica.connect(server.url)
        m.session("trip", user="ada").append("user", "I moved to Lisbon in spring")
        fid = m.remember("Ada lives in Lisbon", user="ada")
        locked = run("stats", store=store)
        assert locked.returncode == 1 and "--read-only" in locked.stderr.replace("\n", "")
        out = run("stats", "--read-only", "--json", store=store)
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        assert st["sessions"] == 1 and st["events"] == m.stats()["events"]
        assert "trip" in run("sessions", "--read-only", store=store).stdout
        assert "Lisbon" in run("history", "trip", "--read-only", store=store).stdout
        hits = json.loads(run("recall", "where does Ada live", "--user", "ada", "--read-only", "--json", store=store).stdout)
        assert fid in [h["id"] for h in hits]
        with eidetica.open(store, embedder=HashEmbedder(dim=64), read_only=True) as ro:
            assert ro.read_only and [s.session_id for s in ro.list_sessions()] == ["trip"]
            with pytest.raises(InvalidInput) as e:
                ro.remember("a write through a reader", user="ada")
            assert e.value.field == "log"
        m.remember("the server still writes", user="ada")  # the reader took no lock
        with pytest.raises(InvalidInput):
            eidetica.open(tmp_path / "nothing-here", embedder=HashEmbedder(dim=64), read_only=True)
        assert not (tmp_path / "nothing-here").exists()
        m.close()
    finally:
        server.stop()
