"""Offline conflict detection between two statements, and what a fact sets (split out of ``_offline``, issue 41).

``statements_conflict`` (``OfflineLLM.contradicts``) recognises single-valued slots (where
one lives, works, job, age, name, marital status, "my X is ..."), an added or removed
negation of the same statement, opposite preferences about the same thing, and the same
statement frame with changed numbers or dates ("booked for 8 April" -> "booked for 10 May"). It misses
conflicts that need world knowledge ("I'm vegetarian" vs "I had steak") or paraphrase.
``fact_attribute`` names the single-valued attribute a statement sets ("" when none).
"""

from __future__ import annotations

import re

__all__ = ["statements_conflict", "fact_attribute"]

_I = re.IGNORECASE

_PROFESSIONS = frozenset(
    """engineer developer programmer designer nurse doctor physician teacher lawyer attorney student
    professor scientist researcher manager accountant writer author artist chef cook baker pilot
    architect consultant analyst dentist pharmacist musician photographer journalist farmer
    electrician plumber mechanic firefighter officer surgeon therapist librarian driver founder ceo
    cto cfo freelancer contractor intern retiree retired veterinarian vet paramedic carpenter
    editor translator economist statistician mathematician physicist chemist biologist tutor
    nanny caregiver cashier waiter waitress bartender barista salesperson entrepreneur investor
    banker trader clerk secretary recruiter marketer administrator sysadmin devops""".split()
)


def _normalise_quotes(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")


_CONTRACTIONS = [
    (r"\bi'm\b", "i am"),
    (r"\bim\b", "i am"),
    (r"\bi've\b", "i have"),
    (r"\bdon't\b", "do not"),
    (r"\bdoesn't\b", "does not"),
    (r"\bdidn't\b", "did not"),
    (r"\bcan't\b", "cannot"),
    (r"\bisn't\b", "is not"),
    (r"\baren't\b", "are not"),
    (r"\bwon't\b", "will not"),
    (r"\bhaven't\b", "have not"),
    (r"\bmy name's\b", "my name is"),
]
_NEGATIONS = frozenset({"not", "no", "never", "nor", "neither"})
_NEGATION_FILLERS = frozenset({"longer", "anymore"})
_AUX_AFTER_NEG = frozenset({"do", "does", "did"})
_CLAUSE_END = re.compile(r"\s*(?:[,;:(]|\s(?:and|but|since|because|for|with|where|which|who|now|anymore|any more)\b).*$")

_SLOTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bi (?:currently |now |still )?(?:live|reside|am living|am based|am staying) (?:in|at) (?P<v>.+)"), "residence"),
    (re.compile(r"\bi (?:have |just |recently )*(?:moved|relocated) to (?P<v>.+)"), "residence"),
    (re.compile(r"\bmy (?:home|address|city|hometown) is (?:in )?(?P<v>.+)"), "residence"),
    (re.compile(r"\bi (?:currently |now |still )?work (?:at|for) (?P<v>.+)"), "employer"),
    (re.compile(r"\bmy (?:employer|company) is (?P<v>.+)"), "employer"),
    (re.compile(r"\bi (?:currently |now |still )?work as (?:an? )?(?P<v>.+)"), "job"),
    (re.compile(r"\bmy (?:job|profession|occupation) is (?:an? )?(?P<v>.+)"), "job"),
    (re.compile(r"\bi am (?P<v>\d{1,3})(?: years?)?(?: old)?\b"), "age"),
    (re.compile(r"\b(?:my name is|call me|i am called) (?P<v>.+)"), "name"),
    (re.compile(r"\bi am (?:now |happily )?(?P<v>married|single|divorced|engaged|widowed|separated)\b"), "marital"),
    (re.compile(r"\bmy (?P<k>(?:[\w-]+ ){0,3}?[\w-]+) (?:is|are) (?P<v>.+)"), "my"),
]
_JOB_SLOT = re.compile(r"\bi am (?:an? )(?P<v>[\w-]+(?: [\w-]+)?)")
_LIKE = re.compile(r"\bi (?P<neg>(?:do not |no longer |never |cannot |can not )?)(?:really |absolutely |still |also )*(?P<verb>like|love|enjoy|adore|prefer|hate|dislike|detest|loathe|despise|stand) (?P<v>.+)")
_POSITIVE = frozenset({"like", "love", "enjoy", "adore", "prefer"})


def _norm(text: str) -> str:
    t = _normalise_quotes(text).lower().strip()
    for pat, rep in _CONTRACTIONS:
        t = re.sub(pat, rep, t)
    t = re.sub(r"[^\w\s',]", " ", t)
    t = re.sub(r"\s*,\s*", ", ", t)
    return " ".join(t.split())


def _value(v: str) -> str:
    v = _CLAUSE_END.sub("", v).strip()
    v = re.sub(r"^(?:the|a|an|in|at)\s+", "", v)
    return v.strip(" .!?")


def _same_value(a: str, b: str) -> bool:
    # "paris" and "paris france" name the same place: one value refining the other is no conflict.
    wa, wb = a.split(), b.split()
    n = min(len(wa), len(wb))
    return n > 0 and wa[:n] == wb[:n]


def _slot_of(s: str) -> tuple[str, str] | None:
    for pat, slot in _SLOTS:
        m = pat.search(s)
        if m:
            key = slot if slot != "my" else "my " + m.group("k")
            return key, _value(m.group("v"))
    m = _JOB_SLOT.search(s)
    if m and set(m.group("v").split()) & _PROFESSIONS:
        return "job", _value(m.group("v"))
    return None


def _strip_negation(s: str) -> tuple[str, bool]:
    words = s.split()
    negated = False
    out: list[str] = []
    for i, w in enumerate(words):
        if w in _NEGATIONS:
            negated = not negated
            continue
        if w in _NEGATION_FILLERS:
            continue  # "no longer", "not ... anymore": one negation, not two
        if w in _AUX_AFTER_NEG and i + 1 < len(words) and words[i + 1] in _NEGATIONS:
            continue
        out.append(w)
    return " ".join(out), negated


def _preference(s: str) -> tuple[bool, str] | None:
    m = _LIKE.search(s)
    if not m:
        return None
    verb = m.group("verb")
    positive = verb in _POSITIVE
    if verb == "stand":
        if not m.group("neg"):
            return None
        positive = False
    elif m.group("neg"):
        positive = not positive
    return positive, _value(m.group("v"))


def statements_conflict(old: str, new: str) -> bool:
    """Heuristic: do two first-person statements disagree on a single-valued fact or a polarity?"""
    a, b = _norm(old), _norm(new)
    if not a or not b or a == b:
        return False
    a_core, a_neg = _strip_negation(a)
    b_core, b_neg = _strip_negation(b)
    if a_core == b_core and a_neg != b_neg:
        return True
    pa, pb = _preference(a), _preference(b)
    if pa and pb and pa[1] == pb[1] and pa[0] != pb[0]:
        return True
    sa, sb = _slot_of(a_core), _slot_of(b_core)
    if sa and sb and sa[0] == sb[0]:
        same = _same_value(sa[1], sb[1])
        if a_neg != b_neg and same:
            return True
        return not a_neg and not b_neg and bool(sa[1]) and bool(sb[1]) and not same
    return _changed_values(a_core, b_core)


_VALUE = re.compile(
    r"\d+(?:[.:]\d+)?|january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
)
_WORD = re.compile(r"[a-z']+|\d+(?:[.:]\d+)?")


def _changed_values(a: str, b: str) -> bool:
    """Same statement frame, different numbers or dates: an update ("booked for 8 April" -> "10 May")."""
    va, vb = set(_VALUE.findall(a)), set(_VALUE.findall(b))
    if not va or not vb or va == vb:
        return False
    wa = {w for w in _WORD.findall(a) if w not in va}
    wb = {w for w in _WORD.findall(b) if w not in vb}
    union = wa | wb
    return bool(union) and len(wa & wb) / len(union) >= 0.6


# --- attributes: single-valued things about the user (a newer value supersedes the older fact) -------

_EDITORS = (r"(?:vim|neovim|nvim|emacs|vs ?code|visual studio code|vscode|sublime(?: text)?|intellij(?: idea)?|pycharm|"
            r"webstorm|atom|notepad\+\+|nano|helix|zed|xcode|android studio|eclipse|cursor|jetbrains)")
_DIETS = r"(?:vegetarian|vegan|pescatarian|pescetarian|flexitarian|carnivore|omnivore|plant[- ]based|keto|paleo)"
_CHANGE = r"(?:(?:now|also|still|just|recently|finally|currently|actually) )*"
# (attribute, pattern) on the normalised text (lower case, "i am", "do not"), first match wins: the
# order puts the narrower statements ("work as") before the broader ("work at")
_ATTRIBUTES: list[tuple[str, re.Pattern[str]]] = [(a, re.compile(p)) for a, p in [
    ("diet", rf"\bi am {_CHANGE}(?:(?:no longer|not|a|an|fully|strictly|mostly|mainly|basically) )*{_DIETS}\b"),
    ("diet", rf"\bi (?:have )?(?:went|go|gone|turned|became|become|switched to|am going|am turning) {_DIETS}\b"),
    ("diet", rf"\bi {_CHANGE}(?:do not|never|no longer|stopped|quit|gave up|started|began|am starting to|started to|"
             r"went back to|am back to) (?:eat|eating) (?:meat|fish|seafood|animal products|red meat|chicken|pork|beef)\b"),
    ("diet", r"\b(?:my diet is|i (?:am on|follow|started|switched to) (?:a |the )?[\w-]+ diet)\b"),
    ("partner", r"\bmy (?:wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|spouse)(?:'s name)? is\b"),
    ("partner", r"\bi am (?:now |happily |still )?(?:dating|seeing|engaged to|married to|going out with)\b"),
    ("partner", r"\bi (?:just |recently )?(?:married|got married|got engaged|started dating|broke up with|split up with|"
                r"divorced|got divorced|separated from)\b"),
    ("partner", r"\bi am (?:now |happily |still |newly )?(?:married|engaged|single|divorced|widowed|separated|"
                r"in a relationship)\b"),
    ("job", r"\bi (?:currently |now |still )?work as\b|\bmy (?:job|profession|occupation|role|job title|title) is\b"),
    ("job", r"\bi (?:just |recently )?(?:became (?:a|an)|got promoted to|was promoted to|am training to be|retrained as)\b"),
    ("job", r"\bi am (?:now |currently |still )?(?:retired|unemployed|self[- ]employed|between jobs|a freelancer)\b"),
    ("job", r"\bi (?:just |recently )?(?:retired|quit my job|lost my job|got laid off|was laid off|left my job)\b"),
    ("employer", r"\bi (?:currently |now |still )?work (?:at|for|in)\b|\bmy (?:employer|company) is\b"),
    ("employer", r"\bi (?:just |recently |finally )?(?:joined|started (?:working )?at|got (?:a job|hired|an offer) (?:at|with)|"
                 r"was hired (?:at|by)|accepted (?:a job|an offer) (?:at|from)|started (?:a |my )?(?:new )?job (?:at|with))\b"),
    ("employer", r"\bi am (?:now |currently )?(?:employed|working) (?:at|by|for)\b"),
    ("residence", r"\bi (?:currently |now |still )?(?:live|am living|reside|am based|am staying|have lived|"
                  r"have been living) (?:in|at|on|near|outside|out of|just outside|close to)\b"),
    ("residence", r"\b(?:i|we) (?:have |just |recently |finally |also )*(?:moved|relocated) (?:back|away|abroad|here|there|house|"
                  r"out|in with|(?:from|to|in|into|across) )"),
    ("residence", r"\bmy (?:home|address|current city|city) is\b|\bi (?:just |recently )?(?:bought|rent|am renting|own) (?:a |an |my )?"
                  r"(?:house|flat|apartment|condo|place|home) in\b"),
    ("origin", r"\bi am (?:originally )?from\b|\bi was born (?:in|and raised in)\b|\bi grew up in\b|\bmy hometown is\b"),
    ("editor", rf"\bi (?:(?:mostly|mainly|now|still|currently|also|just|only) )*(?:use|code in|write code in|program in|"
               rf"switched to|moved to|am using|started using|live in|prefer) (?:the )?{_EDITORS}\b"),
    ("editor", r"\bmy (?:main |favou?rite |preferred |go-to |daily )?(?:editor|ide|code editor) is\b"),
    ("os", r"\bi (?:(?:mostly|mainly|now|still|currently) )*(?:use|run|am on|switched to|moved to|daily drive) "
           r"(?:linux|ubuntu|arch|fedora|debian|windows|macos|mac os|a mac|chromeos)\b"),
    ("car", r"\bi (?:now |still |currently )?drive (?:a|an)\b|\bmy car is\b|\bi (?:just )?(?:bought|got) (?:a |an )?(?:new |used )?car\b"),
    ("age", r"\bi am (?:now )?\d{1,3}(?: years?)?(?: old)?\b|\bi (?:just )?turned \d{1,3}\b|\bmy age is\b"),
    ("name", r"\bmy name is\b|\bcall me\b|\bi am called\b|\b(?:people|everyone|friends) call me\b"),
    ("school", r"\bi (?:now )?(?:study|am studying|am enrolled|am a student|major|am majoring) (?:at|in)\b"),
    ("commute", r"\bi (?:now |usually |mostly |always |often )?(?:commute|bike|cycle|walk|drive|take the (?:bus|train|subway|tube|metro)) "
                r"to (?:work|the office)\b"),
    ("wake time", r"\bi (?:usually |now |always )?(?:wake up|get up) (?:at|around)\b"),
    ("smoking", r"\bi (?:quit|stopped|started|gave up) smoking\b|\bi (?:do not|no longer|never) smoke\b|"
                r"\bi am (?:a |no longer a |not a |a non-?)smoker\b|\bi smoke\b"),
    ("alcohol", r"\bi (?:quit|stopped|gave up) (?:drinking|alcohol)\b|\bi (?:do not|no longer|never) drink(?: alcohol)?\b|"
                r"\bi am (?:sober|teetotal|a teetotaler|a non-?drinker)\b"),
    ("pregnancy", r"\bi am (?:\w+ (?:weeks|months) )?pregnant\b"),
]]
_FAVOURITE = re.compile(r"\bmy (?:favou?rite|preferred) (?P<x>[a-z][\w ]{0,30}?) (?:is|are)\b")
_JOB_IS = re.compile(r"\bi am (?:now |currently |still )?(?:a|an) (?P<x>(?:[\w-]+ ){0,2}[\w-]+)")
# a third-person statement about the user (``remember("Ada is vegetarian")``) in the first person
_THIRD = {"is": "am", "was": "was", "has": "have", "lives": "live", "works": "work", "eats": "eat", "uses": "use",
          "drives": "drive", "studies": "study", "moved": "moved", "joined": "joined", "became": "became",
          "quit": "quit", "started": "started", "prefers": "prefer", "follows": "follow", "grew": "grew",
          "smokes": "smoke", "drinks": "drink", "married": "married", "retired": "retired", "turned": "turned"}
_NOT_NAMES = frozenset("he she they it this that there we you the a an my our his her their what who".split())


def fact_attribute(text: str) -> str:
    """The single-valued attribute of the user a statement sets ("diet", "residence", "employer", "job",
    "partner", "editor", "favorite <x>", ...), "" when none: two facts with one attribute cannot both be current."""
    t = _norm(text)
    words = t.split()
    if len(words) > 1 and words[0] not in _NOT_NAMES and text[:1].isupper() and words[0] != "i":
        if words[0].endswith("'s"):  # "Ada's husband is Tom"
            t = "my " + " ".join(words[1:])
        elif words[1] in _THIRD:  # "Ada is vegetarian", "Maria moved to Toronto"
            t = " ".join(["i", _THIRD[words[1]], *words[2:]])
    for attribute, pat in _ATTRIBUTES:
        if pat.search(t):
            return attribute
    m = _FAVOURITE.search(t)
    if m:
        return "favorite " + m.group("x").strip()
    m = _JOB_IS.search(t)
    if m and set(m.group("x").split()) & _PROFESSIONS:
        return "job"
    return ""
