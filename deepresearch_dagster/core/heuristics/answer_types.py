"""What kind of answer a question part asks for, and whether a sentence has one.

A classic question-answering cue: "When was X built" is answered by a date, "How large is X" by a
measurement, "What did X cost" and "How is X funded" by money, "Who designed X" by a person's name,
"What caused X" by a cause. Sharing words with the part is not enough to answer it: "Further
reading: The Great Stink of London (1999)" shares three words with "What caused the Great Stink"
and answers nothing. The report ranks the findings that carry the asked-for kind first.
"""

from __future__ import annotations

import re

# "How large / tall / long … is X": the words sources state the answer in.
MEASURES = {
    "large": "size length capacity",
    "big": "size",
    "tall": "height",
    "high": "height",
    "long": "length duration",
    "deep": "depth",
    "wide": "width",
    "heavy": "weight",
    "old": "age",
    "fast": "speed",
    "far": "distance",
    "often": "frequency",
}
HOW_MEASURE = re.compile(rf"\bhow\s+({'|'.join(MEASURES)})\b", re.IGNORECASE)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*"
_UNIT = (
    r"(?:km|kilomet(?:re|er)s?|m|met(?:re|er)s?|cm|mm|mi|miles?|ft|feet|foot|in(?:ches)?|yards?|acres?|"
    r"hectares?|ha|sq|square|cubic|litres?|liters?|gallons?|tonnes?|tons?|kg|kilograms?|lb|pounds?|"
    r"mw|gw|kw|kwh|mwh|gwh|twh|storeys?|stories|floors?|lanes?|seats?|beds?|%|per\s?cent|percent|"
    # "how long / often / old": durations and rates
    r"seconds?|minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?|times)"
)
# Each kind: what in a question part asks for it, and what in a sentence supplies it.
_KINDS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "date": (
        re.compile(r"\b(?:when|what\s+year|which\s+year|what\s+date|since\s+when|how\s+long\s+ago)\b", re.I),
        re.compile(rf"\b(?:1[5-9]\d\d|20\d\d)s?\b|\b{_MONTH}\b", re.I),
    ),
    "measure": (
        re.compile(rf"{HOW_MEASURE.pattern}|\b(?:size|length)\b", re.I),
        re.compile(rf"\d[\d,.]*\s*(?:-\s*)?{_UNIT}\b", re.I),
    ),
    "money": (
        re.compile(
            r"\b(?:cost|costs|costing|price|prices|priced|fund|funds|funded|funding|finance|finances|financed|"
            r"financing|paid|pay|pays|paying|budget|spend|spent|how\s+much)\b",
            re.I,
        ),
        re.compile(r"[£$€¥]\s?\d|\d[\d,.]*\s*(?:million|billion|bn|m)?\s*(?:pounds|dollars|euros|usd|gbp|eur)\b", re.I),
    ),
    "count": (
        re.compile(r"\bhow\s+many\b", re.I),
        re.compile(r"\b\d[\d,.]*\b"),
    ),
    "person": (
        re.compile(r"^\s*(?:and\s+)?who(?:m|se)?\b", re.I),
        re.compile(
            r"\b(?:Sir|Dr|Mr|Mrs|Ms|Prof|Lord|Lady)\.?\s+[A-Z]|\b(?:[A-Z]\.\s+)+[A-Z][a-z]+|"
            r"\b(?:engineer|architect|designer|founder|physician|scientist|inventor|chemist|mayor|minister|"
            r"president|chancellor|director|chief\s+executive|superintendent|commissioner|inspector|officer|"
            r"general|colonel|captain|professor|chair|chairman|chairwoman)\s+(?:[A-Z][a-z]+\s+)*[A-Z][a-z]+|"
            # "led by the chief engineer Margaret Oduya", "designed by Joseph Bazalgette"
            r"\b(?:led|headed|chaired|directed|designed|founded|managed|run|built|commanded)\s+by\s+"
            r"(?:the\s+)?(?:[a-z]+\s+){0,3}[A-Z][a-z]+\s+[A-Z][a-z]+"
        ),
    ),
    "cause": (
        re.compile(r"\b(?:why|cause|causes|caused|causing|reason|reasons|led\s+to|what\s+triggered)\b", re.I),
        re.compile(
            r"\b(?:because|due\s+to|caused\s+by|causes?\s+of|causes|owing\s+to|as\s+a\s+result|resulted|"
            r"results?\s+from|led\s+to|leads\s+to|triggered|blamed|responsible\s+for|driven\s+by|"
            r"reasons?\s+(?:for|was|is|were))\b",
            re.I,
        ),
    ),
}


def asked_kinds(part: str) -> set[str]:
    """The kinds of answer ``part`` asks for ("When was X built, and what did it cost" → date, money)."""
    return {kind for kind, (asks, _) in _KINDS.items() if asks.search(part)}


def supplies(sentence: str, kinds: set[str]) -> int:
    """How many of ``kinds`` the sentence supplies."""
    return sum(1 for kind in kinds if _KINDS[kind][1].search(sentence))
