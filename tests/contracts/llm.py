"""The LLM port's conformance suite: every LLM implementation subclasses it.

The assertions are ones any competent extractor/summariser meets (a clearly stated fact is
found, small talk gives nothing, budgets hold), so a real model behind ``OpenAILLM`` passes
them as well as the offline heuristics do.
"""

from __future__ import annotations

import pickle

import pytest

from eidetica.errors import InvalidInput
from eidetica.providers import LLM, ExtractedFact, count_tokens

CONVERSATION = [
    ("user", "Hi there!"),
    ("assistant", "Hello! How can I help you today?"),
    ("user", "I live in Lyon and I work as a pediatric nurse. I have two kids, Léa and Tom."),
    ("assistant", "Nice to meet you. Lyon is lovely in spring. What can I do for you?"),
    ("user", "My favourite food is ramen. Can you suggest ramen places near Bellecour?"),
    ("assistant", "Sure: Ramen Ya at 12 rue Mercière is popular, and Kinoya is close to the square."),
    ("user", "ok thanks"),
]


class LLMConformance:
    """Behaviour every LLM port implementation must show. Subclasses provide ``make_llm``."""

    def make_llm(self) -> LLM:
        raise NotImplementedError

    @pytest.fixture
    def llm(self) -> LLM:
        return self.make_llm()

    def test_model_id(self, llm: LLM) -> None:
        assert isinstance(llm.model_id, str) and llm.model_id

    def test_pickles_for_other_processes(self, llm: LLM) -> None:
        copy = pickle.loads(pickle.dumps(llm))
        assert copy.model_id == llm.model_id
        assert copy.extract_facts("I live in Lyon.") == llm.extract_facts("I live in Lyon.")

    # --- extraction -----------------------------------------------------------------------------
    def test_extracts_a_clear_fact(self, llm: LLM) -> None:
        facts = llm.extract_facts("By the way, I live in Lyon.")
        assert facts and all(isinstance(f, ExtractedFact) for f in facts)
        assert any("lyon" in f.content.lower() for f in facts)
        assert all(isinstance(f.category, str) and f.category for f in facts)

    def test_extracts_several_facts(self, llm: LLM) -> None:
        facts = llm.extract_facts("I'm allergic to peanuts and I work as a pediatric nurse.")
        text = " ".join(f.content.lower() for f in facts)
        assert "peanut" in text and "nurse" in text

    @pytest.mark.parametrize("text", ["ok", "thanks!", "hi", "Can you help me with my code?", "", "   "])
    def test_trivial_messages_give_no_facts(self, llm: LLM, text: str) -> None:
        assert llm.extract_facts(text) == []

    def test_unicode_message(self, llm: LLM) -> None:
        facts = llm.extract_facts("I live in Zürich 🇨🇭 and my favourite dish is crème brûlée.")
        assert isinstance(facts, list)
        assert any("zürich" in f.content.lower() for f in facts)

    def test_extract_rejects_non_string(self, llm: LLM) -> None:
        with pytest.raises(InvalidInput):
            llm.extract_facts(None)  # type: ignore[arg-type]

    def test_facts_are_frozen_values(self, llm: LLM) -> None:
        facts = llm.extract_facts("My name is Sam.")
        assert facts
        with pytest.raises(AttributeError):
            facts[0].content = "changed"  # type: ignore[misc]
        assert facts[0] == ExtractedFact(content=facts[0].content, category=facts[0].category, attribute=facts[0].attribute)

    # --- summaries ------------------------------------------------------------------------------
    @pytest.mark.parametrize("target", [8, 20, 40, 120])
    def test_summary_respects_target_tokens(self, llm: LLM, target: int) -> None:
        out = llm.summarize(CONVERSATION, target_tokens=target)
        assert isinstance(out, str)
        assert count_tokens(out) <= target

    def test_summary_keeps_the_key_facts_when_there_is_room(self, llm: LLM) -> None:
        out = llm.summarize(CONVERSATION, target_tokens=120).lower()
        assert "lyon" in out
        assert "nurse" in out
        assert "ramen" in out

    def test_summary_builds_on_the_previous_summary(self, llm: LLM) -> None:
        out = llm.summarize(CONVERSATION, target_tokens=150, previous_summary="The user is called Samira.")
        assert "samira" in out.lower()
        assert "lyon" in out.lower()

    def test_summary_of_nothing_new_keeps_previous(self, llm: LLM) -> None:
        out = llm.summarize([], target_tokens=50, previous_summary="The user is called Samira.")
        assert "samira" in out.lower()

    def test_summary_validates_arguments(self, llm: LLM) -> None:
        with pytest.raises(InvalidInput) as e:
            llm.summarize(CONVERSATION, target_tokens=0)
        assert e.value.field == "target_tokens"
        with pytest.raises(InvalidInput):
            llm.summarize([("user",)], target_tokens=10)  # type: ignore[list-item]
        with pytest.raises(InvalidInput):
            llm.summarize("user: hi", target_tokens=10)  # type: ignore[arg-type]

    # --- contradictions -------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("old", "new", "expected"),
        [
            ("I live in Paris.", "I live in Berlin now.", True),
            ("I live in Paris.", "I like cheese.", False),
            ("I'm allergic to peanuts.", "I'm not allergic to peanuts.", True),
            ("I like coffee.", "I like tea.", False),
            ("My favourite colour is blue.", "My favourite colour is green.", True),
            ("I work at Google.", "I work at Google.", False),
        ],
    )
    def test_contradicts(self, llm: LLM, old: str, new: str, expected: bool) -> None:
        assert llm.contradicts(old, new) is expected
