"""Every committed user message is extracted exactly once, also when the process died between the
append's commit and its extraction (the open resumes it)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.errors import ProviderError
from eidetica.events import ExtractionCompleted
from eidetica.events.streams import facts_stream
from eidetica.providers import HashEmbedder, OfflineLLM
from tests.support import SUPPORT

CHILD = str(SUPPORT / "_crash_extract_child.py")


def _pending(m: eidetica.Memory) -> list[tuple[str, str, int]]:
    m.gate.sync()  # read your writes: the state folds what was committed
    return sorted((t, x.session_id, x.sequence) for t, x in m.state.pending_extractions())


def _completions(m: eidetica.Memory, user: str) -> list[tuple[str, list[int]]]:
    recs = m.log.read_stream(facts_stream(m.tenant, user))
    return [(e.session_id, list(e.sequences)) for e in (r.decode() for r in recs) if isinstance(e, ExtractionCompleted)]


@pytest.mark.crash
def test_a_message_committed_just_before_a_sigkill_is_extracted_once_on_the_next_open(tmp_path) -> None:
    path = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, CHILD, str(path), "I live in Lisbon."], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "COMMITTED"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with eidetica.open(path, embedder=HashEmbedder(dim=64)) as m:
        assert [f.text for f in m.list_memories(user="ana")] == ["I live in Lisbon."]
        assert _completions(m, "ana") == [("s1", [0])]
        events = m.log.head(0)
    with eidetica.open(path, embedder=HashEmbedder(dim=64)) as m:  # nothing left to resume
        assert _completions(m, "ana") == [("s1", [0])]
        assert [f.text for f in m.list_memories(user="ana")] == ["I live in Lisbon."]
        assert m.log.head(0) == events


class FailingLLM(OfflineLLM):
    """Extraction fails (a provider down): the messages stay pending."""

    def extract_facts(self, text: str):  # noqa: ANN201 - the port's signature
        raise ProviderError("provider down")


def test_messages_whose_extraction_failed_are_extracted_at_the_next_open_and_by_sweep(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=FailingLLM()) as m:
        s = m.session("a", user="u")
        s.append("user", "I work as a nurse.")
        s.append("assistant", "Noted.")
        s.append("user", "I like tea.")
        m.session("b", user="v").append("user", "I have a dog named Rex.")
        s.pop()  # retracted before any extraction: never extracted
        assert _pending(m) == [("default", "a", 0), ("default", "b", 0)]
        assert m.stats()["extraction_failures"] >= 3 and not m.list_memories(user="u")
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        assert [f.text for f in m.list_memories(user="u")] == ["I work as a nurse."]
        assert [f.text for f in m.list_memories(user="v")] == ["I have a dog named Rex."]
        assert _completions(m, "u") == [("a", [0])]
        assert _pending(m) == []
        assert m.sweep()["extracted"] == 0


def test_a_store_written_without_auto_extract_is_not_extracted_by_a_later_open(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), config=MemoryConfig(auto_extract=False)) as m:
        m.session("a", user="u").append("user", "I work as a nurse.")
        assert _pending(m) == []
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:  # a CLI's default config
        assert m.list_memories(user="u") == [] and _completions(m, "u") == []


def test_pending_extractions_survive_a_state_snapshot_and_equal_a_replay(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=FailingLLM()) as m:
        for i in range(3):
            m.session(f"s{i}", user="u").append("user", f"I live in city {i}.")
        m.gate.sync()
        assert m.views.state.write_snapshot()
        m.session("s0", user="u").append("user", "I like tea.")
        before = _pending(m)
    opened = []
    for replay in (False, True):
        if replay:
            for d in (tmp_path / "s" / "snapshots").iterdir():
                if d.name.startswith("state"):
                    shutil.rmtree(d)
        with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=FailingLLM()) as m:
            assert (m.views.state.snapshot_created is None) == replay  # from the snapshot + tail, or the whole log
            opened.append(_pending(m))
    assert before == opened[0] == opened[1] == [("default", "s0", 0), ("default", "s0", 1), ("default", "s1", 0),
                                                ("default", "s2", 0)]
