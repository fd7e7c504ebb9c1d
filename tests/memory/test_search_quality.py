"""What ``Memory.search`` / ``recall`` / ``context`` do with no options (issue #24)."""

from __future__ import annotations

import datetime as dt
import io

import pytest

import eidetica
from eidetica.projections._ranking import FACT_MIN_SCORE, MIN_SCORE, speaker_label, time_windows
from eidetica.providers import HashEmbedder

T0 = dt.datetime(2024, 1, 10, 9, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def minilm():
    from eidetica.providers import default_embedder

    return default_embedder()


def test_speaker_label_and_time_windows_parse_the_text() -> None:
    assert speaker_label("Melanie: I ran a charity race") == "Melanie"
    assert speaker_label("Mary Ann: hi there") == "Mary Ann"
    assert speaker_label("I said: hi") is None and speaker_label("no label here") is None
    assert time_windows("What did Nate win in the beginning of November 2022?") == (
        ((2022, 11, 0, 0, 8),), "What did Nate win ?")
    assert time_windows("Who did Maria meet on May 3, 2023?")[0] == ((2023, 5, 3, 0, 8),)
    assert time_windows("May I ask what Ana paints?") == ((), "May I ask what Ana paints?")


@pytest.mark.parametrize("style", ["name", "label"])
def test_speakers_from_metadata_or_from_a_label_in_the_text(tmp_path, style) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        s = m.session("chat", user="u")
        for who, text in (("Ben", "I paint, I paint every day, painting is my life"),
                          ("Ana", "I paint portraits sometimes"), ("Ana", "the weather is grey"),
                          ("Ben", "see you soon")):
            if style == "name":
                s.append("user", text, metadata={"name": who})
            else:
                s.append("user", f"{who}: {text}")
        assert m.participant_names("u") == {"Ana", "Ben"}
        hits = m.search("What does Ana paint?", user="u", min_score=0.0, speaker_weight=0.5)
        assert hits[0].text.endswith("I paint portraits sometimes")


def test_a_lone_label_is_not_taken_for_a_person(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.session("chat", user="u").append("user", "Note: buy milk")
        assert m.participant_names("u") == frozenset()


def test_a_date_in_the_question_finds_messages_of_that_time(tmp_path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        for sid, when, dish in (("a", T0, "a lentil curry"), ("b", T0 + dt.timedelta(days=60), "a mushroom risotto")):
            m.session(sid, user="u").extend([{"role": "user", "content": f"I cooked {dish} for dinner", "time": when}])
        q = "What did I cook for dinner in March 2024?"
        assert m.search(q, user="u", min_score=0.0)[0].text == "I cooked a mushroom risotto for dinner"
        assert m.search(q.replace("March", "January"), user="u", min_score=0.0)[0].text.endswith("lentil curry for dinner")


def test_scores_are_calibrated_a_never_said_topic_returns_nothing(tmp_path, minilm) -> None:
    with eidetica.open(tmp_path / "s", embedder=minilm) as m:
        s = m.session("chat", user="ada")
        for text in ("I moved to Berlin last spring.", "I'm allergic to hazelnuts, so no praline for me.",
                     "I use Emacs for everything, even email.", "I've been vegetarian since 2019."):
            s.append("user", text)
        m.remember("Ada's team ships on Thursdays", category="work", user="ada")
        said = m.search("Which editor does Ada use?", user="ada")
        assert said and said[0].text.startswith("I use Emacs") and said[0].score >= MIN_SCORE
        # not min-max per query: the best hit of an unrelated question is not 1.0, it is dropped
        assert m.search("What is the boiling point of mercury?", user="ada") == []
        assert m.search("What is the boiling point of mercury?", user="ada", min_score=0.0)[0].score < MIN_SCORE
        # a topic never discussed: the profile alone (her standing facts), nothing else
        faucet = m.context("How do I fix a leaking faucet?", user="ada")
        assert "### Profile\n- Ada's team ships on Thursdays (work)" in faucet
        assert "### Facts" not in faucet and "past conversations" not in faucet
        assert "Thursdays" in m.context("When does Ada's team ship?", user="ada")
        # the user's own name: what she said in the first person, not whatever names her
        assert m.recall("Where does Ada live?", user="ada")[0].text == "I moved to Berlin last spring."


@pytest.mark.slow
def test_the_demo_questions_get_the_right_answer_first(tmp_path, minilm) -> None:
    from rich.console import Console

    from eidetica import demo

    demo.run_demo(tmp_path / "demo", minilm, Console(file=io.StringIO()))
    want = ["Berlin", "shellfish", "VS Code", "10 to 14 May", "tarian", "u16 fix"]
    with eidetica.open(tmp_path / "demo", tenant="demo", embedder=minilm, config=demo.DEMO_CONFIG) as m:
        for (user, question), answer in zip(demo.load_sample()["questions"], want):
            # facts and messages on one scale: the answer leads, or follows the turn it answers
            # ("remind me to call the ryokan" / "the ryokan is now booked for 10 to 14 May")
            hits = m.recall(question, top_k=3, user=user)
            top = next((h for h in hits[:2] if answer in h.text), None)
            assert top is not None, (question, [h.text for h in hits])
            assert top.score >= FACT_MIN_SCORE


def test_named_words_are_the_names_a_question_capitalises() -> None:
    from eidetica.projections._names import named_words

    assert named_words("What did Caroline research?") == ["Caroline"]
    assert named_words("What is Jon's LGBTQ dance studio in Boston called? Did I say?") == ["Jon", "LGBTQ", "Boston"]
    assert named_words("When did Melanie paint in July on a Sunday?") == ["Melanie"]  # months, weekdays: not names


def test_a_question_naming_what_no_document_holds_returns_nothing(tmp_path, minilm) -> None:
    with eidetica.open(tmp_path / "s", embedder=minilm) as m:
        s = m.session("chat", user="ada")
        s.append("user", "I went hiking in the Alps with Bruno", metadata={"name": "Ada"})
        s.append("user", "Bruno loved the hiking trip", metadata={"name": "Sam"})
        q = "What did Caroline say about hiking?"  # the same topic, about someone this memory never held
        assert m.search(q, user="ada") == []
        hits = m.search(q, user="ada", min_score=0.0)  # ranking everything (recall@k) still ranks
        assert hits and hits[0].score >= MIN_SCORE  # the topic alone would have passed the score cut
        assert "past conversations" not in m.context(q, user="ada")
        # a name it holds, or a participant's (known from metadata["name"], not the text), still answers
        assert m.search("What did Bruno say about hiking?", user="ada")
        assert m.search("What did Sam say about hiking?", user="ada")
        assert "past conversations" in m.context("What did Sam say about hiking?", user="ada")
