"""Offline fallbacks for the LLM port: regex fact extraction and extractive summaries.

``HeuristicExtractor`` keeps first-person statements that are usually durable: "I am a
nurse", "I'm 34", "I'm allergic to peanuts", "I'm from Lyon", "I work at/as ...", "I live in
...", "my X is Y", "I like / love / enjoy / prefer / hate ...", "I have a dog / two kids /
diabetes", "I was born in ...", "I speak ...", "I don't eat ...", "I usually ...", moves
("I moved from Madrid to Toronto", "we relocated to ..."), tools ("I use / code in / switched
to ..."), habits ("... every morning", "twice a week", "I never ..."), relations ("my sister
Anna lives ..."), work ("I run a bakery", "I teach ...", "I just joined ..."), plans ("I'm
planning / saving up / hoping ...", "I plan to ...", "my goal is ..."), health ("diagnosed
with", "I take X daily", "I see a therapist") and any first-person statement of an attribute
(``fact_attribute``). Each clause of a message is tested on its own, so "I live in Paris and I
work as a nurse" gives two facts. The fact is the user's own clause, cleaned up (fillers such as
"btw" removed), in the first person. Measured by ``scripts/eval_extractor.py`` (BENCHMARKS.md).

``fact_attribute`` names the single-valued attribute of the user a statement sets (diet,
residence, origin, employer, job, partner, editor, os, car, age, name, school, commute, wake
time, smoking, alcohol, pregnancy, "favorite <x>"): the curator lets a newer fact of one
attribute supersede the older one, whatever the wording.

What it misses, by design or by limitation:

- facts not phrased in the first person ("Anna is my sister", "the kids and I ..."), and facts
  implied rather than stated ("walking Rex before work" does not yield "has a dog called Rex");
- anything in a question or subordinate clause ("since I live in Paris, what ...?"), facts
  spread over two sentences, pronouns that need the conversation ("I love it");
- past or changing states unless phrased as one of the patterns ("I used to live in Rome",
  "I quit my job" are dropped);
- hedges, sarcasm, hypotheticals and negation nuance: "I'm not sure I like jazz" is dropped,
  "I like jazz, not really" is kept as liking jazz;
- transient states that look durable ("I'm a wreck this week" is kept as an identity fact);
- non-English text.

``ExtractiveSummarizer`` never writes new text: it keeps the previous summary first and adds
the highest-scoring sentences (distinctive words, numbers, names, first-person facts) in
their original order, prefixed with the speaker's role, until ``target_tokens`` is reached.
It cannot merge, paraphrase or resolve references, drops everything that scored low when the
budget is small, and cannot notice that a new message corrects the previous summary.

``statements_conflict`` (``OfflineLLM.contradicts``) recognises single-valued slots (where
one lives, works, job, age, name, marital status, "my X is ..."), an added or removed
negation of the same statement, opposite preferences about the same thing, and the same
statement frame with changed numbers or dates ("booked for 8 April" -> "booked for 10 May"). It misses
conflicts that need world knowledge ("I'm vegetarian" vs "I had steak") or paraphrase.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ._conflicts import _PROFESSIONS, _normalise_quotes, fact_attribute, statements_conflict
from ._llm import (
    LLM,
    ExtractedFact,
    check_messages,
    check_target_tokens,
    check_text,
    count_tokens,
    truncate_to_tokens,
)

__all__ = ["HeuristicExtractor", "ExtractiveSummarizer", "OfflineLLM", "statements_conflict", "fact_attribute"]

_I = re.IGNORECASE

# --- clause splitting ----------------------------------------------------------------------------

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE_SPLIT = re.compile(
    r"\s*;\s*|,?\s+(?:and|but|also|plus|so)\s+(?=(?:i|i'm|i've|i'd|my)\b)|,\s+(?=(?:i|i'm|i've|my)\s)", _I
)
_FILLER = re.compile(
    r"^(?:(?:well|so|oh|ok|okay|also|btw|by the way|actually|anyway|anyways|fyi|just so you know|"
    r"for the record|for context|as you know|hey|hi|hello|and|but|yes|yeah|yep|no|nope|um|uh|"
    r"honestly|basically|plus|just|oh and|fun fact|(?:big|good|great|some|quick|small) news|(?:quick |small )?update|"
    r"news|guess what|so yeah)\b[\s,:!.-]*)+",
    _I,
)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences at ., ! or ? followed by space, and at line breaks."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


# A transcript line's speaker label ("Caroline: I'm a teacher."): a capitalised name of at most
# three words, then a colon. Removed before extraction, so the first-person patterns see the clause.
_SPEAKER_LABEL = re.compile(r"^\s*[A-Z][\w'.-]{0,30}(?: [A-Z][\w'.-]{0,30}){0,2}:\s+")


def strip_speaker_label(text: str) -> str:
    """Text without a leading "Name: " speaker label (unchanged when it has none)."""
    return _SPEAKER_LABEL.sub("", text, count=1)


def _clauses(text: str) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    for sent in split_sentences(strip_speaker_label(_normalise_quotes(text))):
        question = sent.rstrip().endswith("?")
        for clause in _CLAUSE_SPLIT.split(sent):
            clause = _FILLER.sub("", clause.strip()).strip()
            if clause:
                out.append((clause, question))
    return out


# --- the patterns ------------------------------------------------------------------------------

_AM = r"i(?:'m|\s+am|m)\s+(?:(?:also|still|now|currently|actually|really|definitely)\s+)?(?:not\s+)?"
_ADVERBS = r"(?:(?:really|absolutely|also|just|kind of|kinda|truly|totally|actually|genuinely|still|do(?:n't| not)|never|no longer)\s+)*"
_PRONOUN_OBJECT = re.compile(
    r"^(?:it|this|that|these|those|you|them|him|her|what|how|your|yours|the idea|the way you|when you|if you)\b", _I
)
_BAD_HAVE_OBJECTS = frozenset(
    """question questions problem problems issue issues idea ideas doubt doubts suggestion request
    quick follow feeling hunch lot bit few little couple moment minute second meeting appointment
    call interview exam test deadline flight bug error concern favor favour look chance point
    headache cold""".split()
)
_BAD_MY_SUBJECTS = frozenset(
    """question problem issue point guess bad pleasure turn answer concern apologies apology mistake
    fault idea suggestion request code output error message internet connection computer laptop
    phone screen head day morning evening night week weekend meeting understanding thought
    thoughts opinion take hope worry fear goal task prompt query test result results plan
    browser app account password""".split()
)
_HEALTH = r"(?:diabetes|type [12] diabetes|asthma|adhd|autism|celiac(?: disease)?|coeliac(?: disease)?|epilepsy|arthritis|migraines|hypertension|high blood pressure|anxiety|depression|dyslexia|allergies|an? (?:[\w-]+ ){1,3}(?:allergy|intolerance)|a (?:heart|kidney|thyroid) condition|ibs|crohn\'s(?: disease)?|lupus|cancer)"
# what one eats or avoids by choice, faith or habit: the profile's "diet" (allergies and intolerances are "health")
_DIETS = r"(?:vegetarian|vegan|pescatarian|flexitarian|plant[- ]based|kosher|halal|keto|paleo|raw vegan|fruitarian)"
_FOODS = (r"(?:(?:red |processed )?meat|pork|beef|chicken|fish|seafood|shellfish|dairy|milk|cheese|eggs?|gluten|wheat|"
          r"sugar|carbs|bread|alcohol|booze|coffee|caffeine|soda|junk food|fast food|animal products)")
_DIET_PATTERNS: list[re.Pattern[str]] = [
    re.compile(rf"^(?:i(?:'m| am|m)|we(?:'re| are))\s+(?:(?:also|still|now|mostly|mainly|strictly|a strict|a lifelong|"
               rf"lifelong|strict|fully|100%)\s+)*(?:a\s+)?(?:strict\s+)?{_DIETS}\b", _I),
    re.compile(rf"^(?:i|we)(?:'ve| have)\s+been\s+(?:(?:a|mostly|strictly|fully)\s+)?{_DIETS}\b", _I),
    re.compile(rf"^i\s+(?:went|became|turned|switched to being|went back to being|have gone|'ve gone)\s+(?:a\s+)?(?:fully\s+)?{_DIETS}\b", _I),
    re.compile(r"^(?:i|we)\s+(?:(?:also|still|strictly|only|always)\s+)*(?:keep|eat|follow|observe|stick to)\s+(?:a\s+)?"
               r"(?:strict\s+)?(?:kosher|halal)\b", _I),
    re.compile(r"^(?:i|we)(?:'m| am|'re| are)?\s+(?:(?:also|still|now|currently|strictly)\s+)*(?:on|follow|following|eat|"
               r"eating|do|doing|stick to|try to follow)\s+(?:a|an)\s+(?:[\w-]+\s+){0,2}diet\b", _I),
    re.compile(r"^(?:i|we)\s+(?:(?:also|still|just|mostly|really)\s+)*(?:do(?:n't| not)|never|no longer|rarely|won't)\s+"
               r"(?:eat|drink|touch)\b", _I),
    re.compile(rf"^i\s+(?:(?:also|still|strictly|always)\s+)*(?:avoid|gave up|give up|cut out|quit|stopped eating|stopped "
               rf"drinking|quit eating|quit drinking|cut back on|cut down on)\s+(?:(?:all|most|eating|drinking)\s+)*{_FOODS}\b", _I),
    re.compile(r"^i\s+(?:only|mostly|mainly|exclusively)\s+eat\b|^i(?:'ve| have)\s+(?:eaten|been eating)\s+(?:only|no)\b", _I),
    re.compile(r"^(?:i(?:'m| am|m)\s+)?(?:doing|practi[cs]ing|trying)\s+intermittent fasting\b|^i\s+(?:fast|do intermittent fasting)\b", _I),
    re.compile(rf"^{_AM}trying to (?:eat|drink|cut|avoid)\s+(?:less|more|no|fewer|out|down)\b", _I),
]
_NUMBER_WORD = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d+|my own|several|some)"

# (compiled pattern, category, optional validator on the match) in priority order.
_PATTERNS: list[tuple[re.Pattern[str], str, str | None]] = [
    (re.compile(rf"^{_AM}(?:(?:very|severely|deathly|highly|mildly|quite|so)\s+)?allergic\b", _I), "health", None),
    (
        re.compile(
            rf"^{_AM}(?:(?:lactose|gluten|fructose|histamine)[\s-]+intolerant|(?:\w+\s+)?(?:intolerant|sensitive|hypersensitive) to\s+\w|diabetic|celiac|coeliac|pregnant|deaf|blind|colou?r[- ]?blind|asthmatic|epileptic|dyslexic|autistic|disabled|in a wheelchair)\b",
            _I,
        ),
        "health",
        None,
    ),
    (re.compile(rf"^{_AM}(?:a\s+)?(?:teetotal(?:er)?|non-?drinker)\b", _I), "diet", None),
    (re.compile(rf"^{_AM}(?:a\s+)?(?:non-?smoker|smoker)\b", _I), "health", None),
    (re.compile(rf"^{_AM}(?:(?:originally|born and raised)\s+)?(?:from|based (?:in|out of)|living in|located in|staying in|moving to|relocating to)\s+\S", _I), "location", None),
    (re.compile(rf"^{_AM}\d{{1,3}}(?:\s+(?:years?|yrs?)(?:\s+old)?)?(?:\s*[.!,]|\s*$|\s+and\b)", _I), "personal", None),
    (re.compile(rf"^{_AM}(?:happily\s+)?(?:married|engaged|single|divorced|widowed|separated|in a relationship|dating)\b", _I), "relationship", None),
    (re.compile(rf"^{_AM}(?:(?:a\s+)?(?:big|huge|great|massive)\s+)?(?:a\s+)?fan of\s+\S", _I), "preference", None),
    (re.compile(rf"^{_AM}(?:called|named)\s+\S", _I), "identity", None),
    (re.compile(rf"^{_AM}(?:studying|learning|training (?:for|as)|a student)\b", _I), "personal", None),
    (re.compile(rf"^{_AM}(?:working (?:on|at|as|for|in|with|from)|retired|unemployed|self[- ]employed)\b", _I), "work", None),
    (re.compile(rf"^{_AM}(?:a|an)\s+([\w-]+)(?:\s+([\w-]+))?", _I), "identity", "article"),
    (re.compile(r"^i\s+(?:currently\s+|now\s+|still\s+|also\s+|mostly\s+|mainly\s+)?work(?:s)?\b(?!\s+(?:on|with)\s+(?:it|this|that)\b)", _I), "work", None),
    (re.compile(r"^(?:i|we)(?:'ve| have)?\s*(?:(?:currently|now|still|also|just|recently|finally)\s+)*(?:live|lived|reside|moved|relocated|grew up)\s+(?:in|at|on|near|with|to|by|from|back|here|there|abroad|outside|across|close to|just outside)\b", _I), "location", None),
    (re.compile(r"^i\s+(?:was born|got married|graduated)\b", _I), "personal", None),
    (re.compile(r"^(?:my name is|my name's|call me|people call me|everyone calls me)\s+\S", _I), "identity", None),
    (re.compile(r"^my\s+((?:[\w-]+(?:'s)?\s+){0,3}?[\w-]+(?:'s)?)\s+(?:is|are|was born|'s)\s+\S", _I), "my", "my"),
    (re.compile(rf"^i\s+{_ADVERBS}(?:like|love|enjoy|adore|prefer|hate|dislike|detest|loathe|despise|can't stand|cannot stand)\s+(\S+)", _I), "preference", "object"),
    (re.compile(rf"^i(?:'ve got|'ve|\s+(?:have got|have|got))\s+{_HEALTH}\b", _I), "health", None),
    (re.compile(rf"^i(?:'ve got|\s+(?:(?:also|still|now)\s+)?(?:have got|have|own|drive|ride|keep))\s+{_NUMBER_WORD}\s+([\w-]+)", _I), "possession", "have"),
    (re.compile(r"^i(?:'ve got|\s+(?:(?:also|still|now)\s+)?have)\s+(?:kids|children|pets|cats|dogs|siblings|grandchildren|twins|a family)\b", _I), "relationship", None),
    (re.compile(r"^i\s+(?:do(?:n't| not)|never)\s+(?:have|own)\s+(?:a|an|any)\s+[\w-]+", _I), "possession", None),
    (re.compile(r"^i\s+(?:do(?:n't| not)|never|can't|cannot|no longer)\s+smoke\b", _I), "health", None),
    (re.compile(r"^i\s+(?:can't|cannot|can not)\s+(?:have|tolerate|digest|process)\s+(?!it\b|this\b|that\b|them\b)\w", _I), "health", None),
    (re.compile(r"^i(?:'m| am)\s+on\s+(?:blood thinners|insulin|antidepressants|medication|meds|chemo(?:therapy)?|dialysis|"
                r"statins|beta[- ]blockers|steroids|immunosuppressants)\b", _I), "health", None),
    (re.compile(rf"^i(?:'ve| have)\s+had\s+{_HEALTH}\b", _I), "health", None),
    (re.compile(r"^i\s+(?:(?:also|fluently|only)\s+)?speak\s+[A-Z\w]", _I), "identity", None),
    (re.compile(r"^i\s+(?:usually|always|often|normally|typically|generally|mostly)\s+(?!(?:ask|wonder|forget|get confused)\b)\w+", _I), "preference", None),
    (re.compile(r"^i(?:'ve| have)\s+been\s+(?:a|an|vegetarian|vegan|married|living|working|diagnosed)\b", _I), "personal", None),
    (re.compile(rf"^{_AM}(?:gluten|dairy|sugar|nut|meat|alcohol)[- ]free\b", _I), "health", None),
    (re.compile(r"^i\s+(?:was|got|have been|'ve been)\s+diagnosed\s+with\b|^i(?:'m| am)\s+recovering\s+from\b", _I), "health", None),
    (re.compile(r"^i\s+(?:take|am on|'m on)\s+[\w-]+\s+(?:every|daily|for|twice|once|each)\b", _I), "health", None),
    (re.compile(r"^i\s+(?:see|visit)\s+(?:a|my)\s+(?:therapist|physio\w*|psychiatrist|counsell?or|dermatologist|chiropractor)\b", _I), "health", None),
    (re.compile(r"^i\s+(?:often\s+|sometimes\s+)?(?:get|suffer from|struggle with|live with)\s+(?:migraines|headaches|panic attacks|"
                r"anxiety|depression|insomnia|back pain|seizures|eczema|hay fever|chronic [\w-]+)\b", _I), "health", None),
    (re.compile(r"^my\s+(?:(?:little|big|older|younger|twin|best|oldest|youngest|step|half|late)[- ]?)*(?:wife|husband|partner|"
                r"boyfriend|girlfriend|son|daughter|kids?|children|mother|mom|mum|father|dad|brother|sister|parents|"
                r"grand(?:ma|pa|mother|father|parents)|aunt|uncle|cousin|friend|nephew|niece|roommate|flatmate)\b\s+\S", _I),
     "relationship", None),
    (re.compile(r"^i\s+(?:run|own|co-?own|manage|founded|started)\s+(?:a|an|my|our|the)\s+(?:[\w-]+\s+){0,3}?(?:business|"
                r"company|shop|store|bakery|restaurant|cafe|startup|firm|practice|studio|agency|farm|team|clinic|bar|salon)\b", _I),
     "work", None),
    (re.compile(r"^i\s+(?:teach|lecture|tutor)\s+\w+", _I), "work", None),
    (re.compile(r"^(?:i|we)(?:'m| am|'re| are)\s+(?:(?:also|still|now|really)\s+)?(?:planning|hoping|aiming|saving up|saving|"
                r"thinking (?:of|about)|getting married|going to (?!(?:bed|sleep|try|check|ask|look|go|be|the|a|an|my|your|our|this|that|grab|get|head|call|text|have|eat|watch|do|make|need|say|tell|send|leave|stop|give|keep|let|put|pick|fix|read|write|think|see|wait|need)\b)\w+)\b", _I), "plan", None),
    (re.compile(r"^(?:i|we)\s+(?:plan|intend|hope|aim)\s+to\s+\w+|^my\s+(?:goal|plan|dream|resolution)\s+(?:is|this year is)\b", _I),
     "plan", None),
    (re.compile(r"^i\s+(?:(?:mostly|mainly|now|still|also|always|only|usually)\s+)*(?:use|rely on|code in|program in|write in|"
                r"track\s+(?:my\s+)?\w+\s+(?:with|in|on|using)|do\s+my\s+\w+\s+(?:in|on|with))\s+(?!it\b|this\b|that\b|them\b)\S", _I),
     "tool", None),
    (re.compile(r"^i\s+never\s+(?!said|thought|asked|knew|meant|got|saw|heard|understood|realized|realised)\w+", _I), "habit", None),
    (re.compile(r"^i\s+(?!need|have to|will|'ll|would|should|must|can|could|think|guess|hope)(?!\w+\s+(?:it|this|that|them|these|those)\b)(?:\w+\s+){0,5}?(?:every\s+(?:day|morning|"
                r"evening|night|week|weekend|weekday|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|daily|weekly|"
                r"(?:once|twice|\w+ times)\s+a\s+(?:day|week|month)|\w+\s+a\s+day|on weekends|each\s+(?:day|morning|week))\b", _I),
     "habit", None),
]

_MY_CATEGORIES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:name|nickname|pronouns)\b", _I), "identity"),
    (re.compile(r"\b(?:favou?rite|preferred)\b", _I), "preference"),
    (re.compile(r"\b(?:wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|spouse|son|daughter|kids?|child|children|mother|mom|mum|father|dad|brother|sister|sibling|parents?|family|grandm\w*|grandf\w*|aunt|uncle|cousin|friend|best friend)\b", _I), "relationship"),
    (re.compile(r"\b(?:dog|cat|pet|puppy|kitten|horse|car|bike|house|apartment|flat)\b", _I), "possession"),
    (re.compile(r"\b(?:address|home|city|town|hometown|country|neighbou?rhood|street)\b", _I), "location"),
    (re.compile(r"\b(?:job|employer|company|boss|title|role|office|team|salary|profession|work|manager|career)\b", _I), "work"),
    (re.compile(r"\b(?:diet)\b", _I), "diet"),
    (re.compile(r"\b(?:allergy|allergies|blood|doctor|medication|condition|health)\b", _I), "health"),
]


def _category_for_article(m: re.Match[str]) -> str | None:
    first = m.group(1).lower()
    second = (m.group(2) or "").lower()
    if first in {"bit", "little", "lot", "tad", "quick", "question", "moment", "second", "minute", "fan", "mess", "big", "huge"}:
        return None
    if first in _PROFESSIONS or second in _PROFESSIONS or first.endswith(("engineer", "developer", "scientist")):
        return "work"
    return "identity"


def _category_for_my(m: re.Match[str]) -> str | None:
    subject = m.group(1).lower().replace("'s", "")
    words = subject.split()
    if not words or words[-1] in _BAD_MY_SUBJECTS or words[0] in _BAD_MY_SUBJECTS:
        return None
    if len(words) > 1 and words[-1] in {"name", "nickname"}:
        # "my dog's name is Rex" is about the dog: classify by the owner noun, not by "name".
        subject = " ".join(words[:-1])
    for pat, cat in _MY_CATEGORIES:
        if pat.search(subject):
            return cat
    return "personal"


def _category_for_object(m: re.Match[str], text: str) -> str | None:
    rest = text[m.start(1) :]
    if _PRONOUN_OBJECT.match(rest):
        return None
    return "preference"


def _category_for_have(m: re.Match[str]) -> str | None:
    noun = m.group(1).lower()
    if noun in _BAD_HAVE_OBJECTS or noun in {"of", "few", "couple", "lot"}:
        return None
    if re.fullmatch(r"(?:kids?|children|child|sons?|daughters?|brothers?|sisters?|siblings?|wife|husband|partner|boyfriend|girlfriend|grandchildren|twins)", noun):
        return "relationship"
    return "possession"


_FIRST_PERSON = re.compile(r"^(?:i|i'm|i've|im|we|we're|we've|my)\b", _I)
_ATTRIBUTE_CATEGORY = {
    "diet": "diet", "residence": "location", "origin": "location", "employer": "work", "job": "work",
    "partner": "relationship", "editor": "preference", "os": "preference", "car": "possession", "age": "personal",
    "name": "identity", "school": "personal", "commute": "personal", "wake": "personal", "smoking": "health",
    "alcohol": "health", "pregnancy": "health", "favorite": "preference",
}


def _tidy(clause: str) -> str:
    text = re.sub(r"\s+", " ", clause).strip().rstrip(",;:-–— ")
    text = re.sub(r"[.!?…]+$", "", text).strip()
    if not text:
        return ""
    if text[:2].lower() in {"i ", "i'"}:
        text = "I" + text[1:]
    elif text[:2].lower() == "im" and (len(text) == 2 or text[2] == " "):
        text = "I'm" + text[2:]
    else:
        text = text[0].upper() + text[1:]
    return text + "."


class HeuristicExtractor:
    """Regex extraction of durable first-person facts; see the module docstring for what it misses."""

    def classify(self, clause: str) -> str | None:
        """Category of a single clause if it states a durable first-person fact, else None."""
        if any(p.match(clause) for p in _DIET_PATTERNS):  # before the generic ones ("I've been ...": personal)
            return "diet"
        for pat, category, check in _PATTERNS:
            m = pat.match(clause)
            if m is None:
                continue
            if check is None:
                return category
            if check == "article":
                cat = _category_for_article(m)
            elif check == "my":
                cat = _category_for_my(m)
            elif check == "object":
                cat = _category_for_object(m, clause)
            else:
                cat = _category_for_have(m)
            if cat is not None:
                return cat
        # a first-person statement of one of the user's attributes ("I just joined Finch", "I switched to
        # VS Code", "we moved to Oslo") is a fact even where no pattern above has its wording
        if _FIRST_PERSON.match(clause):
            attribute = fact_attribute(clause)
            if attribute:
                return _ATTRIBUTE_CATEGORY.get(attribute.split()[0], "personal")
        return None

    def extract(self, text: str) -> list[ExtractedFact]:
        """Durable facts in one message, in order, without duplicates."""
        facts: list[ExtractedFact] = []
        seen: set[str] = set()
        for clause, question in _clauses(text):
            if question or len(clause) > 300:
                continue
            category = self.classify(clause)
            if category is None:
                continue
            content = _tidy(clause)
            key = content.lower()
            if content and key not in seen:
                seen.add(key)
                facts.append(ExtractedFact(content=content, category=category, attribute=fact_attribute(content)))
        return facts


# --- extractive summaries ----------------------------------------------------------------------

_STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
    or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves ok okay thanks thank yes yeah yep no nope hi hello hey sure great cool
    just really also please well oh got get like know think see right now one would could will""".split()
)
_WORDS = re.compile(r"[\w']+")


def _content_words(sentence: str) -> list[str]:
    return [w for w in (x.lower().strip("'") for x in _WORDS.findall(sentence)) if len(w) > 1 and w not in _STOPWORDS]


class ExtractiveSummarizer:
    """Keeps the previous summary, then the most informative sentences in order, within a token budget."""

    def __init__(self, extractor: HeuristicExtractor | None = None) -> None:
        self._extractor = extractor or HeuristicExtractor()

    def summarize(
        self, messages: Sequence[tuple[str, str]], *, target_tokens: int, previous_summary: str = ""
    ) -> str:
        """Extractive summary of ``messages`` after ``previous_summary``; ``count_tokens`` <= target."""
        budget = check_target_tokens(target_tokens)
        msgs = check_messages(messages)
        previous = " ".join(check_text("previous_summary", previous_summary).split())

        # Candidates: (message index, sentence index, role, sentence, content words).
        cands: list[tuple[int, int, str, str, list[str]]] = []
        for mi, (role, content) in enumerate(msgs):
            for si, sent in enumerate(split_sentences(content)):
                sent = " ".join(sent.split())
                words = _content_words(sent)
                if words:
                    cands.append((mi, si, role, sent, words))

        head = previous
        if count_tokens(previous) > budget:
            # The previous summary alone is over budget: compress it with the same scoring.
            head = self._select_from_text(previous, budget)
        remaining = budget - count_tokens(head) - (1 if head else 0)
        seen_words = set(_content_words(head))

        df = Counter(w for c in cands for w in set(c[4]))
        n_docs = max(len(cands), 1)
        scored: list[tuple[float, int]] = []
        for i, (mi, _si, role, sent, words) in enumerate(cands):
            distinct = set(words)
            score = sum(math.log(1.0 + n_docs / df[w]) for w in distinct) / math.sqrt(len(distinct))
            score += 0.3 * len(distinct) ** 0.5
            if any(ch.isdigit() for ch in sent):
                score += 0.5
            if re.search(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+", sent):
                score += 0.5
            if role == "user":
                # What users say about themselves is what long-term memory exists for.
                score += 1.0
                if self._extractor.classify(_FILLER.sub("", _normalise_quotes(sent)).strip()):
                    score += 10.0
            if sent.endswith("?"):
                score -= 0.5
            # Later messages win ties: they are more likely to hold the current state.
            score += 0.01 * mi / max(len(msgs), 1)
            scored.append((score, i))
        scored.sort(reverse=True)

        chosen: list[int] = []
        open_messages: set[int] = set()
        for _score, i in scored:
            mi, _si, role, sent, words = cands[i]
            distinct = set(words)
            if distinct and len(distinct & seen_words) / len(distinct) > 0.8:
                continue  # says nothing new
            cost = count_tokens(sent) + 1
            if mi not in open_messages:
                cost += count_tokens(_role_label(role)) + 1
            if cost > remaining:
                continue
            remaining -= cost
            chosen.append(i)
            open_messages.add(mi)
            seen_words |= distinct

        parts = [head] if head else []
        chosen.sort()
        current = -1
        for i in chosen:
            mi, _si, role, sent, _w = cands[i]
            if mi != current:
                parts.append(f"{_role_label(role)} {sent}")
                current = mi
            else:
                parts[-1] += " " + sent
        return truncate_to_tokens(" ".join(parts), budget)

    def _select_from_text(self, text: str, budget: int) -> str:
        sents = [" ".join(s.split()) for s in split_sentences(text)]
        ranked = sorted(range(len(sents)), key=lambda i: (-len(set(_content_words(sents[i]))), i))
        keep: list[int] = []
        used = 0
        for i in ranked:
            cost = count_tokens(sents[i]) + 1
            if used + cost <= budget:
                keep.append(i)
                used += cost
        out = " ".join(sents[i] for i in sorted(keep))
        return out if out else truncate_to_tokens(text, budget)


def _role_label(role: str) -> str:
    return (role.strip() or "unknown").capitalize() + ":"


# --- contradictions ----------------------------------------------------------------------------

class OfflineLLM(LLM):
    """No network: HeuristicExtractor, ExtractiveSummarizer and heuristic contradiction checks."""

    def __init__(self) -> None:
        self.model_id = "offline-heuristic"
        self.extractor = HeuristicExtractor()
        self.summarizer = ExtractiveSummarizer(self.extractor)

    def extract_facts(self, text: str) -> list[ExtractedFact]:
        """Durable first-person facts in one user message (regex heuristics)."""
        return self.extractor.extract(check_text("text", text))

    def summarize(
        self, messages: Sequence[tuple[str, str]], *, target_tokens: int, previous_summary: str = ""
    ) -> str:
        """Extractive summary, previous summary first, within ``target_tokens``."""
        return self.summarizer.summarize(messages, target_tokens=target_tokens, previous_summary=previous_summary)

    def contradicts(self, old: str, new: str) -> bool:
        """Heuristic conflict check on single-valued slots, negations and preferences."""
        return statements_conflict(check_text("old", old), check_text("new", new))
