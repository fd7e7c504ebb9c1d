"""LLM port: conformance (offline and OpenAI-compatible), the heuristic extractor, summaries, tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eidetica.errors import InvalidInput
from eidetica.providers import (
    LLM,
    ExtractedFact,
    ExtractiveSummarizer,
    HeuristicExtractor,
    OfflineLLM,
    OpenAILLM,
    count_tokens,
    default_embedder,
)
from tests.contracts.llm import LLMConformance
from tests.support.openai_server import FakeOpenAI


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI() as s:
        yield s


class TestOfflineLLMConformance(LLMConformance):
    def make_llm(self) -> LLM:
        return OfflineLLM()


class TestOpenAILLMConformance(LLMConformance):
    @pytest.fixture(autouse=True)
    def _server(self, server: FakeOpenAI) -> None:
        self.server = server

    def make_llm(self) -> LLM:
        return OpenAILLM("fake-chat", base_url=self.server.base_url, backoff=0.01)


# --- the heuristic extractor: table-driven ------------------------------------------------------

MUST_EXTRACT = [
    # (message, expected fact contents in order, category of the first)
    ("I live in Paris.", ["I live in Paris."], "location"),
    ("btw I'm allergic to peanuts!!", ["I'm allergic to peanuts."], "health"),
    ("I am severely allergic to penicillin", ["I am severely allergic to penicillin."], "health"),
    ("I'm a software engineer at Google", ["I'm a software engineer at Google."], "work"),
    ("I work as a pediatric nurse.", ["I work as a pediatric nurse."], "work"),
    ("I work at Acme Corp", ["I work at Acme Corp."], "work"),
    ("My name is Sam", ["My name is Sam."], "identity"),
    ("Call me Sam.", ["Call me Sam."], "identity"),
    ("I'm 34 years old", ["I'm 34 years old."], "personal"),
    ("im vegan", ["I'm vegan."], "diet"),
    ("I'm from Lyon", ["I'm from Lyon."], "location"),
    ("I'm originally from Lyon but I live in Oslo", ["I'm originally from Lyon.", "I live in Oslo."], "location"),
    ("My favourite colour is blue.", ["My favourite colour is blue."], "preference"),
    ("my wife's name is Anna", ["My wife's name is Anna."], "relationship"),
    ("My dog's name is Rex.", ["My dog's name is Rex."], "possession"),
    ("I love hiking in the Alps", ["I love hiking in the Alps."], "preference"),
    ("I like jazz", ["I like jazz."], "preference"),
    ("I really enjoy cooking Thai food", ["I really enjoy cooking Thai food."], "preference"),
    ("I hate cilantro", ["I hate cilantro."], "preference"),
    ("I don't like horror movies", ["I don't like horror movies."], "preference"),
    ("I prefer tea over coffee", ["I prefer tea over coffee."], "preference"),
    ("I can't stand loud music", ["I can't stand loud music."], "preference"),
    ("I'm a big fan of jazz", ["I'm a big fan of jazz."], "preference"),
    ("I have a dog named Rex", ["I have a dog named Rex."], "possession"),
    ("I've got a cat", ["I've got a cat."], "possession"),
    ("I have two kids", ["I have two kids."], "relationship"),
    ("I have diabetes", ["I have diabetes."], "health"),
    ("I'm married", ["I'm married."], "relationship"),
    ("I speak French and German", ["I speak French and German."], "identity"),
    ("I don't eat pork", ["I don't eat pork."], "diet"),  # #43: what one eats or avoids is diet (profile)
    ("I usually wake up at 6", ["I usually wake up at 6."], "preference"),
    ("I moved to Berlin last year", ["I moved to Berlin last year."], "location"),
    ("I was born in 1990", ["I was born in 1990."], "personal"),
    ("I'm learning Japanese", ["I'm learning Japanese."], "personal"),
    ("I don't have a car", ["I don't have a car."], "possession"),
    ("I’m allergic to cats", ["I'm allergic to cats."], "health"),  # typographic apostrophe
    (
        "Hi! I live in Paris and I work as a nurse. Also, my favourite food is ramen. Thanks!",
        ["I live in Paris.", "I work as a nurse.", "My favourite food is ramen."],
        "location",
    ),
    ("I am allergic to penicillin; my wife's name is Anna", ["I am allergic to penicillin.", "My wife's name is Anna."], "health"),
    ("I live in Paris. I live in Paris.", ["I live in Paris."], "location"),
]

MUST_NOT_EXTRACT = [
    "ok",
    "thanks",
    "thanks!",
    "hi",
    "hello there",
    "bye",
    "",
    "lol",
    "Can you help me?",
    "What's the weather like in Paris?",
    "Do I live in Paris?",
    "I'm tired",
    "I'm going to the store",
    "I'm not sure",
    "I'm sorry",
    "I'm looking for a restaurant",
    "I'm a bit confused",
    "I love it",
    "I like that idea",
    "I love you",
    "I have a question",
    "I have a meeting at 3",
    "I have to go",
    "I'd like a summary",
    "I would like to book a table",
    "my question is about python",
    "My computer is slow today",
    "I used to live in Rome",
    "I think so",
    "I see",
    "I agree",
    "Please summarise this article",
    "You live in Paris",
    "He works at Google",
]


@pytest.mark.parametrize(("text", "contents", "category"), MUST_EXTRACT)
def test_extractor_finds(text: str, contents: list[str], category: str) -> None:
    facts = HeuristicExtractor().extract(text)
    assert [f.content for f in facts] == contents
    assert facts[0].category == category


@pytest.mark.parametrize("text", MUST_NOT_EXTRACT)
def test_extractor_ignores(text: str) -> None:
    assert HeuristicExtractor().extract(text) == []


def test_extracted_facts_are_msgspec_structs() -> None:
    import msgspec

    fact = OfflineLLM().extract_facts("I live in Paris")[0]
    assert msgspec.json.decode(msgspec.json.encode(fact), type=ExtractedFact) == fact
    assert ExtractedFact("x").category == "general"


# --- contradictions ---------------------------------------------------------------------------------

CONFLICTS = [
    ("I live in Paris", "I live in Berlin", True),
    ("I live in Paris", "I moved to Berlin", True),
    ("I live in Paris", "I no longer live in Paris", True),
    ("I live in Paris", "I don't live in Paris anymore", True),
    ("I live in Paris", "I live in Paris, France", False),
    ("I live in Paris.", "i live in paris", False),
    ("I live in Paris", "I like cheese", False),
    ("I'm allergic to peanuts", "I'm not allergic to peanuts", True),
    ("I like coffee", "I like tea", False),
    ("I like coffee", "I hate coffee", True),
    ("I like coffee", "I don't like coffee", True),
    ("I love jazz", "I can't stand jazz", True),
    ("My favourite colour is blue", "My favourite colour is green", True),
    ("I'm 34", "I am 35 years old", True),
    ("I work at Google", "I work at Meta now", True),
    ("I'm a teacher", "I work as a nurse", True),
    ("I have a dog", "I have a cat", False),
    ("I have a car", "I don't have a car", True),
    ("My name is Sam", "Call me Samuel", True),
    ("I'm married", "I'm divorced", True),
    ("I speak French", "I speak German", False),
    ("", "I live in Paris", False),
]


@pytest.mark.parametrize(("old", "new", "expected"), CONFLICTS)
def test_offline_contradictions(old: str, new: str, expected: bool) -> None:
    assert OfflineLLM().contradicts(old, new) is expected


# --- the extractive summariser ----------------------------------------------------------------------

CHAT = [
    ("user", "hi"),
    ("assistant", "Hello! How can I help?"),
    ("user", "I live in Paris and I work as a nurse. I have two kids, Léa and Tom."),
    ("assistant", "Nice. Paris is lovely in spring. Do you want restaurant tips?"),
    ("user", "ok thanks"),
    ("user", "My favourite food is ramen. Can you find ramen shops near the Louvre?"),
    ("assistant", "Sure: Kodawari Ramen at 29 rue Mazarine is popular."),
]


def test_summary_prefers_user_facts_and_keeps_order() -> None:
    out = ExtractiveSummarizer().summarize(CHAT, target_tokens=40)
    assert count_tokens(out) <= 40
    assert "I live in Paris" in out and "My favourite food is ramen" in out
    assert out.index("Paris") < out.index("ramen")
    assert "ok thanks" not in out and "hi" not in out.split()


def test_summary_previous_first_and_compressed_when_over_budget() -> None:
    s = ExtractiveSummarizer()
    out = s.summarize(CHAT, target_tokens=60, previous_summary="The user is called Sam.")
    assert out.startswith("The user is called Sam.")
    long_previous = " ".join(f"Fact number {i} about the user is important." for i in range(50))
    out = s.summarize(CHAT, target_tokens=30, previous_summary=long_previous)
    assert 0 < count_tokens(out) <= 30


def test_summary_labels_roles() -> None:
    out = ExtractiveSummarizer().summarize(CHAT, target_tokens=200)
    assert "User: I live in Paris" in out
    assert "Assistant:" in out


def test_summary_of_small_talk_is_empty() -> None:
    assert OfflineLLM().summarize([("user", "ok"), ("assistant", "thanks"), ("user", "hi")], target_tokens=50) == ""


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.text(max_size=300)), max_size=8),
    previous=st.text(max_size=200),
    target=st.integers(min_value=1, max_value=120),
)
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_summary_never_exceeds_the_budget(messages: list[tuple[str, str]], previous: str, target: int) -> None:
    out = OfflineLLM().summarize(messages, target_tokens=target, previous_summary=previous)
    assert count_tokens(out) <= target


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=500))
def test_extractor_never_crashes(text: str) -> None:
    for fact in OfflineLLM().extract_facts(text):
        assert fact.content and fact.category


def test_offline_argument_validation() -> None:
    llm = OfflineLLM()
    with pytest.raises(InvalidInput):
        llm.contradicts(None, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        llm.summarize([("user", "hi")], target_tokens=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        llm.summarize([("user", "hi")], target_tokens=5, previous_summary=None)  # type: ignore[arg-type]


# --- count_tokens ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   ", 0),
        ("hello", 1),
        ("hello, world!", 4),
        ("I live in Paris.", 5),
        ("1234567", 3),
        ("東京に住んでいます", 9),
        ("internationalization", 3),
    ],
)
def test_count_tokens_rule(text: str, expected: int) -> None:
    assert count_tokens(text) == expected


def test_count_tokens_tracks_a_real_tokenizer_on_prose() -> None:
    prose = (
        "Long-term memory lets an agent recall what a user said weeks ago: their name, where they live, "
        "what they like and what they are allergic to. The store keeps every message as an event, so an "
        "index can always be rebuilt from the log, and deleting a user's data means compacting the log "
        "and rebuilding the indices, then checking that nothing remains on disk."
    )
    real = len(default_embedder().tokenize([prose])[0]) - 2  # minus [CLS] and [SEP]
    assert real < 250  # below the tokenizer's truncation
    est = count_tokens(prose)
    assert 0.75 * real <= est <= 1.15 * real
