"""What an answer to a kind of sub-question talks about, whatever its topic.

A step that asks for *challenges* is answered by sentences about problems, costs and failures; one
that asks how they are *addressed* by sentences about plans, pilot lines and targets. The words are
generic English, not a topic's vocabulary; the compressor, the reporter and the critic use them
as a weak extra query (never as evidence on their own).
"""

from __future__ import annotations

import re

from ..text import content_terms

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
_TERMS = [(trigger, frozenset(content_terms(words))) for trigger, words in _LEXICONS]


def aspect_terms(text: str) -> set[str]:
    """Generic answer words for the kinds of sub-question ``text`` asks (empty when none)."""
    out: set[str] = set()
    for trigger, terms in _TERMS:
        if trigger.search(text):
            out |= terms
    return out
