"""Whether a statement's figures and names occur in the tool output it was drawn from.

A model compressing a tool output may paraphrase, but every figure (a number with its unit or
currency where it has one; a full date) and every name it writes must be in the output. A figure
is compared by value: thousands separators ("1,400", "1 400", "1'400"), trailing zeros, leading
zeros and the space before a unit ("160Wh/kg") do not matter, nor does the spelling of a unit or
scale ("%" and "per cent", "m" and "million", "bn" and "billion"); a unit or currency must agree
with one occurrence of the value in the output that has one (a bare occurrence, as in a table
column, agrees with any). A name is a run of capitalized words, not stopwords, after a sentence's
first word (which is capitalized whatever it is); its words, compared as stemmed lowercase terms
(accents folded), must all occur in the output, within one sentence or its neighbours when the
name has several (an all-capitals word may be the initials of a name there: "UK" for "United
Kingdom"). Nothing here knows a word list of names: "Revenue" opening a sentence is no name,
"Environment Agency" inside one is.

A sentence taken verbatim from the output is always supported (tests/core/test_compression_grounding.py
proves it on random texts): both sides are read by the same rules, and the output side only ever
adds readings.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..heuristics.answer_types import UNIT
from ..text import FULL_DATE, NUMBER, STOPWORDS, content_terms, split_sentences

# A digit group separator a fold to NFKD would turn into a space: joined first ("1 400" with a thin space).
_GROUPED = re.compile(r"(?<=\d)[\u00a0\u202f\u2009\u2007'’](?=\d{3}(?!\d))")
_SCALE = r"(?:thousand|million|billion|trillion|mn|mln|bn|tn|k|b)"
_RATIO = r"[A-Za-z]{1,4}/[A-Za-z]{1,4}"  # "Wh/kg", "km/h"
_FIGURE = re.compile(
    rf"(?:(?P<symbol>[£$€¥₹])\s?|\b(?P<code>usd|gbp|eur|jpy|chf)\s?)?(?P<number>{NUMBER.pattern})"
    rf"(?:\s?(?!in(?![a-z]))(?P<unit>{_RATIO}|{UNIT}|{_SCALE})(?![A-Za-z]))?",  # "160 in 2023": no inches
    re.IGNORECASE,
)
_CURRENCY = {"£": "gbp", "$": "usd", "€": "eur", "¥": "jpy", "₹": "inr"}
_SAME_UNIT = {
    "percent": "%",
    "million": "m",
    "mn": "m",
    "mln": "m",
    "metre": "m",
    "meter": "m",
    "billion": "bn",
    "b": "bn",
    "thousand": "k",
    "trillion": "tn",
    "kilometre": "km",
    "kilometer": "km",
    "foot": "ft",
    "feet": "ft",
    "tonne": "t",
    "ton": "t",
    "hour": "h",
    "hr": "h",
    "hrs": "h",
    "min": "minute",
}
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\.\d{3}){2,}")
# Sources spell small counts out ("three sites"); a statement may write the digit.
_SMALL_NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()
_ISO_DATE = re.compile(r"\b((?:1[5-9]|20)\d\d)-(\d\d?)-(\d\d?)\b")
_LIST_MARK = re.compile(r"^\s*(?:[-*•·]|\d+[.)])\s+")
_ENDS_SENTENCE = re.compile(r"[.!?][\"'”’)\]]*$")
_ENDS_RUN = re.compile(r"[,;:.!?)\]\"”]$")
_EDGES = "\"'“”‘’()[]{}<>,;:.!?*_`"
_LETTER_AFTER_DIGIT = re.compile(r"(?<=\d)(?=[A-Za-z])")
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")  # accents

Figure = tuple[str, str | None, str | None]  # value, unit, currency


def fold(text: str) -> str:
    """Compatibility-decomposed text without accents; digit groups joined ("1 400" → "1400")."""
    text = _GROUPED.sub("", text)
    return text if text.isascii() else _COMBINING.sub("", unicodedata.normalize("NFKD", text))


def _value(written: str) -> str:
    """A number's value as written without its style: "1,400" and "1400.0" are "1400"."""
    if _THOUSANDS.fullmatch(written):
        written = written.replace(",", "") if "," in written else written.replace(".", "")
    head, dot, tail = written.partition(".")
    if not dot or "," in written or "." in tail:
        return written.lstrip("0") or "0"
    tail = tail.rstrip("0")
    head = head.lstrip("0") or "0"
    return f"{head}.{tail}" if tail else head


def _unit(written: str | None) -> str | None:
    if written is None:
        return None
    unit = re.sub(r"\s+", "", written.lower())
    if len(unit) > 3 and unit.endswith("s"):
        unit = unit[:-1]
    return _SAME_UNIT.get(unit, unit)


def figures(text: str) -> dict[Figure, str]:
    """Every figure of ``text`` as (value, unit, currency), unit and currency None when absent,
    with its first writing ("$1.2bn" is ("1.2", "bn", "usd"))."""
    out: dict[Figure, str] = {}
    for m in _FIGURE.finditer(fold(text)):
        currency = _CURRENCY.get(m["symbol"] or "") or (m["code"] or "").lower() or None
        out.setdefault((_value(m["number"]), _unit(m["unit"]), currency), m[0].strip())
    return out


def full_dates(text: str) -> set[str]:
    """Day-month-year dates as "21 nov 2022", however written ("November 21, 2022", "2022-11-21")."""
    text = fold(text)
    out = {f"{int(m[1] or m[5])} {(m[2] or m[4])[:3].lower()} {m[3] or m[6]}" for m in FULL_DATE.finditer(text)}
    for year, month, day in _ISO_DATE.findall(text):
        if 1 <= int(month) <= 12:
            out.add(f"{int(day)} {_MONTHS[int(month) - 1]} {year}")
    return out


def _undated(text: str) -> str:
    """``text`` without its full dates, whose numbers are checked as a date."""
    return _ISO_DATE.sub(" ", FULL_DATE.sub(" ", fold(text)))


def names(text: str) -> list[str]:
    """The runs of capitalized words that do not open a sentence, stopwords left out
    ("The Environment Agency said" → ["Environment Agency"])."""
    runs: list[str] = []
    run: list[str] = []
    opening = True
    for token in _LIST_MARK.sub("", fold(text)).split():
        word = token.strip(_EDGES)
        if word and word[0].isupper() and not opening and word.lower() not in STOPWORDS:
            run.append(word)
        elif run:
            runs.append(" ".join(run))
            run = []
        if run and _ENDS_RUN.search(token):
            runs.append(" ".join(run))
            run = []
        opening = bool(_ENDS_SENTENCE.search(token))
    if run:
        runs.append(" ".join(run))
    return runs


def _terms(text: str) -> list[str]:
    return content_terms(_LETTER_AFTER_DIGIT.sub(" ", fold(text)))


def _initials(sentence: str) -> set[str]:
    """What a statement may abbreviate a name of the output to: the initials of each run of
    capitalized words in it, stopwords between them counted or not ("United Kingdom" → "uk",
    "Bank of England" → "boe" and "be")."""
    out: set[str] = set()
    run: list[str] = []
    for token in [*fold(sentence).split(), "."]:
        word = token.strip(_EDGES)
        if word[:1].isupper() or (run and word.isalpha() and word.lower() in STOPWORDS):
            run.append(word)
            if not _ENDS_RUN.search(token):
                continue
        for start in range(len(run)):
            for part in (run[start:end] for end in range(start + 2, min(len(run), start + 6) + 1)):
                if part[0][:1].isupper() and part[-1][:1].isupper():  # names of up to six words
                    out |= {"".join(w[0] for w in part if w[:1].isupper()), "".join(w[0] for w in part)}
        run = []
    return {t for written in out for t in _terms(written)}


def _strings(data: Any) -> Iterable[str]:
    """A listing's text: every string and number in it, and how many items each list holds."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, bool) or data is None:
        return
    elif isinstance(data, int | float):
        yield str(data)
    elif isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
    elif isinstance(data, list):
        yield str(len(data))
        for value in data:
            yield from _strings(value)


class Evidence:
    """What a tool output states, indexed for :meth:`missing`: the figures it gives (each with the
    units and currencies it appears with), its full dates, and its terms with the sentences they
    occur in. ``context`` (the step and source titles) may supply names, never figures."""

    def __init__(self, blocks: Iterable[str], context: Iterable[str] = ()) -> None:
        self.figures: dict[str, set[tuple[str | None, str | None]]] = defaultdict(set)
        self.dates: set[str] = set()
        self.where: dict[str, set[int]] = defaultdict(set)  # term → its sentences i, as i and i + 1
        sentences: list[str] = []
        for block in blocks:
            block = html.unescape(block)
            self._index_figures(block)
            sentences += split_sentences(block)
        sentences += [c for c in context if c]
        for i, sentence in enumerate(sentences):
            for term in [*_terms(sentence), *_initials(sentence)]:
                self.where[term].update((i, i + 1))

    @classmethod
    def of_output(cls, raw: str, kind: str, context: Iterable[str] = ()) -> Evidence:
        """A document or page is its text; a listing (JSON) is the text of its titles, snippets, …"""
        if kind != "text":
            try:
                return cls(list(_strings(json.loads(raw))), context)
            except ValueError:
                pass
        return cls([raw], context)

    def _index_figures(self, block: str) -> None:
        # Both readings of "1 400" (one number, or two), with and without its dates: as the statement reads.
        spaced = block.translate(str.maketrans("\u00a0\u202f\u2009\u2007", "    "))
        for text in {block, spaced, _undated(block), _undated(spaced)}:
            for value, unit, currency in figures(text):
                self.figures[value].add((unit, currency))
                if "," in value:  # "2021,2022" holds 2021 and 2022
                    for part in value.split(","):
                        self.figures[_value(part)].add((None, None))
            self.dates |= full_dates(text)
        for word in re.findall(r"[a-z]+", block.lower()):
            if word in _SMALL_NUMBERS:
                self.figures[str(_SMALL_NUMBERS.index(word))].add((None, None))

    def _has_figure(self, value: str, unit: str | None, currency: str | None) -> bool:
        return any(
            (unit is None or u is None or u == unit) and (currency is None or c is None or c == currency)
            for u, c in self.figures.get(value, ())
        )

    def _has_name(self, name: str) -> bool:
        terms = _terms(name)
        if not all(t in self.where for t in terms):
            return False
        return not terms or bool(set.intersection(*(self.where[t] for t in terms)))

    def missing(self, statement: str) -> list[str]:
        """The figures, dates and names of ``statement`` the output does not give (empty: supported)."""
        out = [written for figure, written in figures(_undated(statement)).items() if not self._has_figure(*figure)]
        out += sorted(full_dates(statement) - self.dates)
        out += [name for name in names(statement) if not self._has_name(name)]
        return list(dict.fromkeys(out))

    def unknown_share(self, text: str) -> float:
        """Share of ``text``'s content terms the output (or its context) never uses."""
        terms = set(_terms(text))
        return len([t for t in terms if t not in self.where]) / len(terms) if terms else 0.0
