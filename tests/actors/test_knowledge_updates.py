"""Knowledge updates: a new value of one attribute of the user supersedes the old fact whatever the
wording (offline: attributes; with an LLM: it decides add / update / delete / none over the most related facts)."""

from __future__ import annotations

import json

import pytest

import eidetica
from eidetica.actors.curator import RELATED_FACTS
from eidetica.providers import HashEmbedder, OpenAILLM
from eidetica.providers._offline import fact_attribute
from tests.support.openai_server import FakeOpenAI


@pytest.fixture
def mem_options() -> dict:
    return {"embedder": HashEmbedder(dim=64), "clock": None}  # the wall clock


def current(m: eidetica.Memory, user: str) -> list[str]:
    return sorted(h.text for h in m.list_memories(user=user, limit=100))


def history(m: eidetica.Memory, user: str) -> dict[str, str]:
    return {f.content: f.status for f in m.state.facts(m.tenant, user, include_inactive=True)}


@pytest.mark.parametrize("old, new, attribute", [
    ("I'm vegetarian.", "I'm also starting to eat fish again, so I'm pescatarian now", "diet"),
    ("I live in Madrid.", "I moved from Madrid to Toronto.", "residence"),
    ("I work at Google.", "I just joined a small startup called Finch.", "employer"),
    ("I work as a nurse.", "I'm a software engineer.", "job"),
    ("My girlfriend is Eva.", "I'm single again.", "partner"),
    ("I use vim for everything.", "I switched to VS Code last month.", "editor"),
    ("My favorite band is Muse.", "My favourite band is Radiohead these days.", "favorite band"),
])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_a_new_value_of_an_attribute_supersedes_the_old_fact_offline(mem, old, new, attribute) -> None:
    s = mem.session("s", user="u")
    s.append("user", old)
    s.append("user", "I have a dog called Rex.")  # another attribute (none): untouched
    (first,) = [h.text for h in mem.list_memories(user="u") if "Rex" not in h.text]
    s.append("user", new)
    now = current(mem, "u")
    assert first not in now and len(now) == 2 and "I have a dog called Rex." in now
    assert {fact_attribute(t) for t in now} == {attribute, ""}
    assert history(mem, "u")[first] == "superseded"  # kept as history, never shown as current
    assert all(first != h.text for h in mem.recall(first, user="u", top_k=10) if h.kind == "fact")


def test_a_restatement_reinforces_and_a_different_attribute_adds(mem) -> None:
    a = mem.remember("I'm vegetarian.", user="u")
    assert mem.remember("I'm vegetarian.", user="u") == a  # the same value: reinforced
    b = mem.remember("I live in Lisbon.", user="u")
    assert b != a and current(mem, "u") == ["I live in Lisbon.", "I'm vegetarian."]
    mem.remember("Ada is vegan now.", user="u")  # the user named in the third person (remember)
    assert current(mem, "u") == ["Ada is vegan now.", "I live in Lisbon."]


def test_attributes_survive_a_restart_from_the_curator_snapshot(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.remember("I live in Oslo.", user="u")
        m.runtime.curator(m.tenant, "u").save_snapshot(force=True)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.remember("We moved to Bergen in May.", user="u")
        assert current(m, "u") == ["We moved to Bergen in May."]


def _decisions(server: FakeOpenAI) -> list[str]:
    """The user messages of the decision requests the model saw."""
    out = []
    for r in server.calls("/chat/completions"):
        msgs = r.body["messages"]
        if "EXISTING:" in msgs[-1]["content"]:
            out.append(msgs[-1]["content"])
    return out


@pytest.fixture
def llm_mem(tmp_path, fake_openai):  # noqa: F811 - the fixture
    llm = OpenAILLM("gpt-test", base_url=fake_openai.base_url, max_retries=0)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=llm) as m:
        yield m, fake_openai


def test_the_llm_updates_a_fact_it_was_shown_whatever_the_similarity(llm_mem) -> None:
    m, server = llm_mem
    veg = m.remember("I'm vegetarian.", user="grace")  # nothing related yet: no decision asked
    assert _decisions(server) == []
    server.script_chat(json.dumps({"facts": [{"content": "I eat fish again.", "category": "health"}]}),
                       json.dumps({"event": "UPDATE", "id": "0", "text": "I'm pescatarian now."}))
    m.session("s", user="grace").append("user", "Fish is back on my plate these days!")
    assert _decisions(server) == ["EXISTING:\n0: I'm vegetarian.\nNEW: I eat fish again."]
    assert current(m, "grace") == ["I'm pescatarian now."]
    assert history(m, "grace")["I'm vegetarian."] == "superseded"
    assert m.state.fact(m.tenant, veg).superseded_by == m.list_memories(user="grace")[0].id
    assert [h.text for h in m.recall("what does grace eat", user="grace") if h.kind == "fact"] == ["I'm pescatarian now."]


def test_the_llm_sees_the_top_k_related_facts_and_can_delete_or_keep(llm_mem) -> None:
    m, server = llm_mem
    hobbies = ["I play chess on Sundays.", "I knit scarves.", "I collect old maps.", "I climb at a gym.",
               "I bake sourdough bread.", "I sing in a choir.", "I restore bicycles.", "I grow tomatoes."]
    for text in hobbies:
        m.remember(text, user="u")
    assert len(current(m, "u")) == len(hobbies) == RELATED_FACTS + 3
    server.reset()
    server.script_chat(json.dumps({"event": "DELETE", "id": "0"}))
    m.remember("I gave up one of my hobbies.", user="u")
    (seen,) = _decisions(server)
    listed = [line for line in seen.splitlines() if line[:1].isdigit()]
    assert len(listed) == RELATED_FACTS  # the few most related, however low their similarity
    deleted = listed[0].split(": ", 1)[1]
    assert deleted not in current(m, "u") and history(m, "u")[deleted] == "superseded"
    assert len(current(m, "u")) == RELATED_FACTS + 2  # DELETE adds nothing
    before = {h.id: h for h in m.list_memories(user="u", limit=100)}
    server.script_chat(json.dumps({"event": "NONE", "id": "1"}))
    kept = m.remember("Yet another way to say a hobby fact.", user="u")
    assert kept in before and len(current(m, "u")) == RELATED_FACTS + 2  # reinforced, nothing new


def test_a_malformed_decision_is_a_provider_error_and_writes_nothing(llm_mem) -> None:
    m, server = llm_mem
    m.remember("I live in Oslo.", user="u")
    server.script_chat(json.dumps({"event": "UPDATE", "id": "7"}))
    with pytest.raises(eidetica.errors.ProviderError):
        m.remember("I live in Bergen.", user="u")
    assert current(m, "u") == ["I live in Oslo."]


def test_the_read_model_carries_the_attribute(mem) -> None:
    fid = mem.remember("I live in Oslo.", user="u")
    mem.gate.sync()
    assert mem.state.fact(mem.tenant, fid).attribute == "residence"
