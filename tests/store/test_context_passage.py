"""The block's assembly helpers: the passage of a long turn, snippets spread over sessions."""

from __future__ import annotations

from eidetica._store.context import _diversify, _passage
from eidetica.projections._tantivy import query_terms

TURN = ("I'm looking for some recipes. I have lots of veggies at home! By the way, I finally fixed the kitchen "
        "shelves last weekend, and it is amazing how much space I have. Can you suggest stir fries? Pasta is fine too.")


def test_a_long_turn_shows_the_sentences_holding_the_query_terms() -> None:
    terms = frozenset(query_terms("How many kitchen items did I replace or fix?"))
    got = _passage(TURN, terms, 120)
    assert got == "... By the way, I finally fixed the kitchen shelves last weekend, and it is amazing how much space I have. ..."
    assert _passage(TURN, terms, 0) == TURN and _passage(TURN, terms, 10_000) == TURN  # off, or it fits
    assert _passage(TURN, frozenset(), 120) == TURN  # no term to look for: the turn as it is
    # no sentence holds a term: the first run of sentences that fits
    assert _passage(TURN, frozenset(query_terms("zebra")), 60).startswith("I'm looking for some recipes.")


def test_one_sentence_past_the_limit_is_kept_whole_up_to_twice_it_and_cut_at_a_word_beyond() -> None:
    # a whole sentence is what a reader (and the evidence check) needs; a list or table without a
    # full stop is still cut, so one turn cannot take the budget
    sentence = "I finally fixed the kitchen shelves last weekend and it is amazing how much space I have now."
    turn = "Hello there. " + sentence + " Thanks!"
    got = _passage(turn, frozenset(query_terms("kitchen shelves")), 60)
    assert got == "... " + sentence + " ..."
    long = "word " * 100
    got = _passage(long.strip(), frozenset(query_terms("word")), 50)
    assert len(got) <= 104 and got.endswith(" ...") and not got.startswith("...")


def test_snippets_of_one_session_give_way_to_other_sessions() -> None:
    snips = [{"session_id": s, "score": x} for s, x in (("a", 0.9), ("a", 0.85), ("a", 0.8), ("b", 0.7), ("c", 0.5))]
    assert [s["session_id"] for s in _diversify(snips, 1.0)] == ["a", "a", "a", "b", "c"]
    # 0.85 * 0.7 = 0.595 < 0.7: b's best comes before a's second; 0.8 * 0.49 = 0.392 < c's 0.5
    assert [(s["session_id"], s["score"]) for s in _diversify(snips, 0.7)] == [
        ("a", 0.9), ("b", 0.7), ("a", 0.85), ("c", 0.5), ("a", 0.8)]
