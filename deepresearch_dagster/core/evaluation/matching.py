"""Does a gold string occur in a text? One normalization for every figure of an evaluation.

Case, Unicode forms, quotes and dashes, whitespace and thousands separators are normalized
(``1,320`` = ``1320`` = ``1 320``); a match must not start or end inside a word or a number, so
the gold ``1`` is not found in ``1990`` nor ``Ur`` in ``Uruk``. Punctuation is otherwise kept:
``U.S.`` and ``US`` stay different, as a reader would see them.

Gold lists carry aliases that ordinary prose is full of: a country code ``NO`` beside ``Norway``
is also the word "no". An alias that is a function word cannot identify an answer and is left
out (unless it is the only answer); a short alias written in capitals is a code and matches
only in capitals.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from ..text import STOPWORDS

_QUOTES = str.maketrans({"‘": "'", "’": "'", "‚": "'", "“": '"', "”": '"', "„": '"', "–": "-", "—": "-", "−": "-"})
# A group separator between digits: comma, thin/no-break space, space, apostrophe (Swiss style).
_THOUSANDS = re.compile(r"(?<=\d)[,\u202f\u00a0 '](?=\d{3}(?!\d))")
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    text = _SPACE.sub(" ", text)
    # Twice: "1,234,567" has overlapping separators the first pass leaves every other one of.
    return _THOUSANDS.sub("", _THOUSANDS.sub("", text)).strip()


def _is_code(gold: str) -> bool:
    return len(gold) <= 3 and gold.isalpha() and gold.isupper()


@lru_cache(maxsize=4096)
def _pattern(gold: str) -> re.Pattern[str] | None:
    needle = normalize(gold)
    if not needle:
        return None
    left = r"(?<!\w)" if needle[0].isalnum() else ""
    right = r"(?!\w)" if needle[-1].isalnum() else ""
    return re.compile(left + re.escape(needle) + right)


class Haystack:
    """A text to look gold strings up in: as written (for codes) and normalized."""

    def __init__(self, text: str) -> None:
        self.original = text
        self.normalized = normalize(text)


def contains(hay: Haystack, gold: str) -> bool:
    if _is_code(gold.strip()):
        return bool(re.search(rf"(?<!\w){re.escape(gold.strip())}(?!\w)", hay.original))
    pattern = _pattern(gold)
    return bool(pattern and pattern.search(hay.normalized))


def usable(golds: list[str]) -> list[str]:
    """The aliases that can identify an answer (see the module's note)."""
    kept = [g for g in golds if normalize(g) not in STOPWORDS or _is_code(g.strip())]
    return kept or golds


def first_in(hay: Haystack | str, golds: list[str]) -> str | None:
    """The first gold alias found (shown with the score, so a reader can check it)."""
    hay = hay if isinstance(hay, Haystack) else Haystack(hay)
    return next((g for g in usable(golds) if contains(hay, g)), None)


def any_in(hay: Haystack | str, golds: list[str]) -> bool:
    return first_in(hay, golds) is not None
