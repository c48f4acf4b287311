"""Lexical helpers shared by the offline heuristics: topic words, caps, sentence case."""

from __future__ import annotations

import re

from ..text import STOPWORDS, content_terms

# Words that describe the task rather than the topic; matching them says nothing about relevance.
INSTRUCTION_WORDS = set(
    content_terms(
        "search corpus read relevant documents document extract concrete facts figures dates named "
        "examples find answer question sub-question key terms what how why which who main "
        "identify investigate background overview step research plan evidence tool tools query"
    )
)
QUESTION_LEAD = re.compile(
    r"^(?:(?:what|how|why|which|who|whom|when|where|whether)(?:\s+(?:are|is|was|were|do|does|did|"
    r"can|could|should|will|would|has|have|had))?|does|do|did|is|are|was|were|can|could|should|"
    r"will|would|explain|describe|compare|tell me about|give me)\b[\s,]*",
    re.IGNORECASE,
)
LIST_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")
EMPHASIS = re.compile(r"\*\*|__|`")
CLAUSE_SPLIT = re.compile(
    r"\s*(?:[;?]\s*|,?\s+and\s+(?=(?:how|what|why|which|who|when|where|whether|does|do|is|are|can)\b))",
    re.IGNORECASE,
)
DEFINITIONAL = re.compile(r"^(who|what)\s+(is|was|are|were)\s+[^,;]{2,60}\??$", re.IGNORECASE)


def cap_words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n])


HYPHENATED = re.compile(r"[A-Za-z0-9]+(?:[-'’][A-Za-z0-9]+)*")
# Words that name an aspect of a topic rather than the topic itself.
ASPECT_WORDS = set(
    content_terms(
        "main key major primary biggest challenges challenge problems issues benefits advantages "
        "disadvantages effects impact impacts causes role history current state status latest"
    )
)


def topic_terms(text: str, drop_aspects: bool = False) -> list[str]:
    """Distinct topic words of ``text`` (hyphenated words kept whole), without task words."""
    skip = INSTRUCTION_WORDS | (ASPECT_WORDS if drop_aspects else set())
    seen: dict[str, str] = {}
    for w in HYPHENATED.findall(text):
        low = w.lower()
        terms = content_terms(low.replace("-", " "))
        if terms and not set(terms) <= skip and low not in seen and low not in STOPWORDS:
            seen[low] = low
    return list(seen.values())


def sentence_case(text: str) -> str:
    text = text.strip(" ,.?;:")
    return text[:1].upper() + text[1:]
