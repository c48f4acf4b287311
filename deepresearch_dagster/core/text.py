"""Text helpers shared by every role: tokenization, sentences, the token estimate."""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
# One token per word-ish run and one per other non-space character: the single local
# estimate used for raw and injected text alike, so the reduction ratio is comparable.
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves what's how's which may might must shall
    within without across among per via vs versus etc e.g i.e""".split()
)


def estimate_tokens(text: str) -> int:
    """Local token estimate: words plus punctuation marks (close to BPE counts for English)."""
    return len(_TOKEN.findall(text))


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def content_terms(text: str) -> list[str]:
    """Lowercased, crudely stemmed words without stopwords, for lexical scoring."""
    return [stem(w.lower()) for w in words(text) if w.lower() not in STOPWORDS and len(w) > 1]


def stem(word: str) -> str:
    for suffix in (
        "ations",
        "ation",
        "ities",
        "ness",
        "ments",
        "ment",
        "ings",
        "ing",
        "ies",
        "ied",
        "es",
        "ed",
        "ly",
        "s",
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return word


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences; the same rule counts sentences in compression output."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return []
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


def normalize_for_match(text: str) -> str:
    """Whitespace- and case-insensitive form used when matching quotes against raw text."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def has_forbidden_control_chars(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in "\n\t\r" for ch in text)
