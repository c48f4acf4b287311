"""What kind of answer a question part asks for, and whether a sentence has one.

"When was X built" is answered by a date, "What did X cost" by money, "Who designed X" by a name. Sharing words is not
enough: "Further reading: The Great Stink of London (1999)" shares three words with "What caused the Great Stink" and
answers nothing. The report ranks the findings that carry the asked-for kind first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..text import MONTH, STOPWORDS, YEAR, content_terms
from .terms import ASPECT_WORDS, names, topic_words

# What an answer to a kind of sub-question talks about, whatever its topic (*challenges*: problems, costs, failures).
# Generic English, not a topic's vocabulary: a weak extra query for the compressor, reporter and critic, never evidence.
_LEXICONS = [
    (
        re.compile(r"challeng|problem|obstacle|barrier|hurdle|difficult|issue|risk|limitation|drawback|weakness", re.I),
        "challenge problem obstacle barrier hurdle difficult difficulty issue limit limitation risk cost costly "
        "expensive degrade degradation failure fail crack bottleneck slow delay slip unsolved tradeoff "
        "struggle lack scarce shortage toxic unstable instability resistance remain hard",
    ),
    (
        re.compile(r"address|solv|solution|tackl|respond|overcom|mitigat|approach|strateg|doing about|handl", re.I),
        "address solve solution approach strategy develop pilot line plant invest investment partner partnership "
        "target plan announce build scale production produce manufacture mass aim launch license acquire "
        "collaborate program programme adopt introduce reduce improve mitigate commercialize deploy",
    ),
    (
        re.compile(r"\bcause|\bwhy\b|reason|driver", re.I),
        "cause because reason due lead result factor contribute explain origin blame attribute prompt driven",
    ),
]
_ASPECTS = [(trigger, frozenset(content_terms(words))) for trigger, words in _LEXICONS]


def aspect_terms(text: str) -> set[str]:
    """Generic answer words for the kinds of sub-question ``text`` asks (empty when none)."""
    return set().union(*(terms for trigger, terms in _ASPECTS if trigger.search(text)))


# What a question's words ask for, in the words sources state it ("How tall is X" → "X's height is …"): searched with
# the question's content (``stated_as``). Dates, names, counts and money are stated as values ("1858"), not words:
# the answer type scores them (``supplies``), and no query word would find them.
STATED_AS = dict(
    pair.split(":")
    for pair in "how large:size length capacity,how big:size,how tall:height,how high:height,how long:length "
    "duration,how deep:depth,how wide:width,how heavy:weight,how old:age,how fast:speed,how far:distance,"
    "how often:frequency,why:causes".split(",")
)
_ASKED_AS = re.compile(r"\b(?:" + "|".join(k.replace(" ", r"\s+") for k in STATED_AS) + r")\b", re.IGNORECASE)
MEASURES = [k.split()[1] for k in STATED_AS if k.startswith("how ")]
# "large" in "How large is X", "much" in "How much heat": how a question asks, not what it asks about.
MEASURE_WORDS = set(content_terms(" ".join(MEASURES) + " much many"))
HOW_MEASURE = re.compile(rf"\bhow\s+({'|'.join(MEASURES)})\b", re.IGNORECASE)


def stated_as(text: str) -> list[str]:
    """The words sources state what ``text`` asks for in (``STATED_AS``), in its order."""
    return [w for m in _ASKED_AS.finditer(text) for w in STATED_AS[" ".join(m.group(0).lower().split())].split()]


# Units spelled out ("seven months": a number in words before them counts too), then their abbreviations.
_WORDED_UNIT = (
    r"(?:kilomet(?:re|er)s?|met(?:re|er)s?|miles?|feet|foot|inch(?:es)?|yards?|acres?|hectares?|square|cubic|"
    r"litres?|liters?|gallons?|tonnes?|tons?|kilograms?|pounds?|storeys?|stories|floors?|lanes?|seats?|beds?|"
    r"per\s?cent|percent|seconds?|minutes?|hours?|days?|weeks?|months?|years?|decades?|times)"
)
UNIT = rf"(?:km|m|cm|mm|mi|ft|in|sq|ha|kg|lb|mw|gw|kw|kwh|mwh|gwh|twh|%|mins?|hrs?|{_WORDED_UNIT})"
NUMBER_WORD = (
    r"(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|eighteen|twenty|thirty|forty|"
    r"fifty|sixty|hundred|thousand|dozen|several|a\s+few)"
)
_AUX_WORD = r"(?:did|does|do|is|was|were|are|will|would|has|have|had|can|could|should)"
_NOT_QUANTITY = rf"(?:{_AUX_WORD}|money|cash|funding|funds)"
_NUMBER = re.compile(r"\b\d[\d,.]*\b")
_YEAR_ONLY = re.compile(rf"{YEAR}s?")


def counts(sentence: str) -> bool:
    """A number that counts: not a year, money, a label or a name's number ("Route 41"); numbers in words count too."""
    if re.search(rf"\b{NUMBER_WORD}\b", sentence, re.IGNORECASE):
        return True
    for m in _NUMBER.finditer(sentence):
        if _YEAR_ONLY.fullmatch(m.group(0).rstrip(".,")) or sentence[m.start() - 1 : m.start()] in ("£", "$", "€", "¥"):
            continue
        before = sentence[: m.start()].split()
        prev = before[-1].strip("(.,:;\"'") if before else ""
        # A capitalized word labels the number after it ("Route 41"), unless it is a function word ("About 40 people").
        if prev[:1].isupper() and (len(before) > 1 or prev.lower() not in STOPWORDS):
            continue
        return True
    return False


# Each kind: what in a question part asks for it, and what in a sentence supplies it.
_KINDS: dict[str, tuple[re.Pattern[str], re.Pattern[str] | Callable[[str], bool]]] = {
    "date": (
        re.compile(r"\b(?:when|(?:what|which)\s+(?:year|date|time)|since\s+when|how\s+long\s+ago)\b", re.I),
        # a year from 1000, a month or a time of day ("3 a.m."); not a quantity ("1897 MW")
        re.compile(rf"\b(?:1\d|20)\d\ds?\b(?!\s*{UNIT}\b)|\b{MONTH}\b|\b\d{{1,2}}(?::\d\d)?\s*[ap]\.?m\b", re.I),
    ),
    "measure": (
        # "How much heat did it deliver": a quantity of something; "how much did it cost" is money.
        re.compile(rf"{HOW_MEASURE.pattern}|\b(?:size|length)\b|\bhow\s+much\s+(?!{_NOT_QUANTITY}\b)[a-z]+", re.I),
        # "2,150 km", a column's unit then its value ("MWh: 18950"), a number in words then a worded unit ("two years")
        re.compile(
            rf"\d[\d,.]*\s*(?:-\s*)?{UNIT}\b|\b{UNIT}\)?:\s*\d|\b(?:one|{NUMBER_WORD})[\s-]+{_WORDED_UNIT}\b", re.I
        ),
    ),
    "money": (
        re.compile(
            r"\b(?:cost|costs|costing|price|prices|priced|fund|funds|funded|funding|finance|finances|financed|"
            rf"financing|paid|pay|pays|paying|budget|spend|spent|how\s+much\s+(?:{_AUX_WORD}|money|cash))\b",
            re.I,
        ),
        re.compile(r"[£$€¥]\s?\d|\d[\d,.]*\s*(?:million|billion|bn|m)?\s*(?:pounds|dollars|euros|usd|gbp|eur)\b", re.I),
    ),
    "count": (re.compile(r"\bhow\s+many\b", re.I), counts),
    # "Who won the contract": a person's or organisation's name ("which company …" asks a name too: see ``answers``).
    "person": (
        re.compile(r"^\s*(?:and\s+)?who(?:m|se)?\b", re.I),
        # … supplied by a name of two words or more: "Dr Helen Okafor", "Nordhaven Dredging BV".
        lambda sentence: any(" " in name for name in names(sentence)),
    ),
    "cause": (
        re.compile(r"\b(?:why|cause|causes|caused|causing|reason|reasons|led\s+to|what\s+triggered)\b", re.I),
        re.compile(
            r"\b(?:because|due\s+to|caused\s+by|causes?\s+of|causes|owing\s+to|as\s+a\s+result|resulted|"
            r"results?\s+from|led\s+to|leads\s+to|triggered|blamed|responsible\s+for|driven\s+by|"
            r"reasons?\s+(?:for|was|is|were|why)|attributed\s+to|stemm(?:ed|ing)\s+from|prompted|in\s+response\s+to|"
            # "Why was X replaced / closed / built": the state that forced it, or the aim it served.
            r"deficient|deteriorat\w*|unsafe|corro(?:sion|ded)|inadequate|insufficient|obsolete|outdated|"
            r"over\s+capacity|beyond\s+its\s+design|design\s+capacity|shortages?|contaminat\w*|"
            r"in\s+order\s+to|so\s+that|aim(?:ed|s)?\s+to|intended\s+to)\b",
            re.I,
        ),
    ),
}


def asked_kinds(part: str) -> set[str]:
    """The kinds of answer ``part`` asks for ("When was X built, and what did it cost" → date, money)."""
    return {kind for kind, (asks, _) in _KINDS.items() if asks.search(part)}


def supplies(sentence: str, kinds: set[str]) -> int:
    """How many of ``kinds`` the sentence supplies."""
    answer = [_KINDS[kind][1] for kind in kinds]
    return sum(1 for a in answer if (a.search(sentence) if isinstance(a, re.Pattern) else a(sentence)))


# "who …", "in what city …", "which rapper …", "… founded by who?": a name answers it.
_ASKS_NAME = re.compile(r"\b(?:who|whom|whose|where|(?:what|which)(?:\s+(?!are\b|were\b)[a-z]+|\s*$))", re.I)


def specific(part: str) -> bool:
    """Whether a part asks for one specific answer (a name, a place, a date, a number), not an account ("Why …")."""
    return bool(asked_kinds(part) - {"cause"}) or bool(_ASKS_NAME.search(part))


def answers(sentence: str, part: str) -> bool:
    """Whether ``sentence`` holds what ``part`` asks for: its kind (a date, a figure, money), or a name
    ``part`` does not already give when it asks who, where, or what or which thing."""
    kinds = asked_kinds(part)
    if supplies(sentence, kinds - {"person", "cause"}):
        return True
    # "What year …", "what time …" ask for their kind, not for a name.
    if "person" in kinds or (not kinds - {"cause"} and _ASKS_NAME.search(part)):
        own = set(content_terms(part))
        return any(not set(content_terms(n)) <= own for n in names(sentence))
    return False


def answered(part: str, sentences: Iterable[str]) -> str | None:
    """The first of ``sentences`` that answers ``part``, or None: the one reading of "answered" the report and the
    critic share. A specific part (a date, a figure, a name) needs two of its topic words (its one) and that kind of
    answer (``answers``); an account ("what are the main challenges") a word of its aspect, else of its topic."""
    own = topic_words(part) - ASPECT_WORDS - MEASURE_WORDS
    exact = specific(part)
    about = own if exact else aspect_terms(part) or own
    need = min(2 if exact else 1, len(about))
    fits = (s for s in sentences if len(about & set(content_terms(s))) >= need and (not exact or answers(s, part)))
    return next(fits, None)
